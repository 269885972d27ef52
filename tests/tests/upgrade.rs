//! In-place upgrade from the last release: 0.1.0 (commit 2b63bd8, built and installed beside the
//! current library by `scripts/past-release`) filled with policies, holds, sweeps, batches,
//! archives and ledger, then `ALTER EXTENSION pg_retention UPDATE`: every row is kept, every
//! function works, and the schema equals a fresh install's, compared in the catalog.

use pg_retention_integration::archiver::{text, Archiver};
use pg_retention_integration::cluster::SCRATCH;
use pg_retention_integration::{scalar, Cluster};
use postgres::Client;
use std::path::PathBuf;

const PAST: &str = "0.1.0";

/// The catalog facts of the extension in one database (tests/fixtures/catalog-snapshot.sql).
fn catalog(db: &mut Client) -> Vec<String> {
    db.query(include_str!("../fixtures/catalog-snapshot.sql"), &[])
        .expect("catalog snapshot")
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// Per catalog table, its row count and a digest of every row's columns as they were in the
/// past release (relations and roles as their oid, which the upgrade keeps).
fn contents(db: &mut Client, columns: &[(String, Vec<String>)]) -> Vec<(String, i64, String)> {
    columns
        .iter()
        .map(|(table, cols)| {
            let row: Vec<String> = cols
                .iter()
                .map(|c| format!("coalesce(t.{c}::text, '∅')"))
                .collect();
            let q = format!(
                "SELECT count(*), coalesce(md5(string_agg(r, E'\\n' ORDER BY r)), '') FROM
                   (SELECT concat_ws('|', {}) AS r FROM retention.{table} t) x",
                row.join(", ")
            );
            let r = db.query_one(&q, &[]).unwrap_or_else(|e| panic!("{q}: {e}"));
            (table.clone(), r.get(0), r.get(1))
        })
        .collect()
}

/// The catalog tables and their columns, with oid-like columns read as oids.
fn table_columns(db: &mut Client) -> Vec<(String, Vec<String>)> {
    let rows = db
        .query(
            "SELECT c.relname::text,
                    array_agg(CASE WHEN a.atttypid IN ('oid'::regtype, 'regclass'::regtype, 'regrole'::regtype)
                                   THEN quote_ident(a.attname) || '::oid' ELSE quote_ident(a.attname) END
                              ORDER BY a.attnum)
               FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid
              WHERE c.relnamespace = 'retention'::regnamespace AND c.relkind = 'r'
                AND a.attnum > 0 AND NOT a.attisdropped
              GROUP BY c.relname ORDER BY c.relname",
            &[],
        )
        .unwrap();
    rows.iter().map(|r| (r.get(0), r.get(1))).collect()
}

fn past_archiver() -> PathBuf {
    let p = PathBuf::from(SCRATCH)
        .join(format!("release-{PAST}"))
        .join("pg-retention-archiver");
    assert!(
        p.exists(),
        "{} is missing: run scripts/past-release (scripts/setup does)",
        p.display()
    );
    p
}

const FILL: &str = "
    CREATE TABLE outbox (id bigint PRIMARY KEY, tenant int NOT NULL, status text NOT NULL, created_at timestamptz NOT NULL);
    INSERT INTO outbox SELECT g, g % 10, 'sent', now() - make_interval(days => g % 60, hours => 12) FROM generate_series(1, 2000) g;
    CREATE TABLE audit (id bigint PRIMARY KEY, state text NOT NULL, closed_at timestamptz NOT NULL, note text);
    INSERT INTO audit SELECT g, 'closed', now() - make_interval(days => 31 + g % 30), 'note ' || g FROM generate_series(1, 1200) g;
    SELECT retention.add_policy(name => 'outbox', relation => 'outbox', kind => 'age', age_column => 'created_at',
           older_than => '30 days', terminal => $$status = 'sent'$$, batch_size => 100);
    SELECT retention.add_policy(name => 'audit', relation => 'audit', kind => 'age', age_column => 'closed_at',
           older_than => '30 days', terminal => $$state = 'closed'$$, action => 'archive_then_delete');
    SELECT retention.place_hold('outbox', 'tenant = 7', 'case 2026-1', 'legal@example.com');
    SELECT retention.place_hold('outbox', 'tenant = 8', 'case 2026-2', 'legal@example.com');
    SELECT retention.lift_hold(2, 'legal@example.com', 'closed');
";

/// Rows of `outbox` the policy may take, held or not.
const OUTBOX_EXPIRED: &str =
    "SELECT count(*) FROM outbox WHERE created_at < now() - interval '30 days'";

#[test]
fn an_upgraded_0_1_0_database_keeps_every_row_works_and_equals_a_fresh_install() {
    // Without preload: the past release's library and this one cannot both be loaded in one
    // backend (each defines the pg_retention.* settings).
    let c = Cluster::start_bare(&["shared_preload_libraries = ''"]);
    let dir = std::env::temp_dir().join(format!("pg-retention-upgrade-{}", c.port()));
    let store = format!("file://{}", dir.display());
    {
        let mut db = c.connect("postgres");
        db.batch_execute(&format!("CREATE EXTENSION pg_retention VERSION '{PAST}'"))
            .unwrap();
        db.batch_execute(FILL).unwrap();
        db.batch_execute("CALL retention.run('outbox')").unwrap();
        assert_eq!(
            scalar(&mut db, OUTBOX_EXPIRED),
            99,
            "tenant 7's expired rows are held"
        );
    }
    // The past archiver archives part of the audit table: batches, archives, ledger.
    let old = Archiver {
        program: Some(past_archiver()),
        ..Archiver::new(&c.url("postgres"), &store)
    };
    let o = old.run(&["once", "--batch-rows", "250", "--max-batches", "2"]);
    assert!(o.status.success(), "{}", text(&o));
    let mut db = c.connect("postgres");
    assert_eq!(scalar(&mut db, "SELECT count(*) FROM audit"), 700);
    let columns = table_columns(&mut db);
    let before = contents(&mut db, &columns);
    for (table, rows, _) in &before {
        if [
            "policy_ids",
            "policy_versions",
            "hold_records",
            "hold_lifts",
            "ledger_entries",
            "batches",
            "archive_records",
        ]
        .contains(&table.as_str())
        {
            assert!(*rows > 0, "the past release wrote no {table}");
        }
    }
    drop(db);

    // A fresh session: nothing of the past library is loaded in it.
    let mut db = c.connect("postgres");
    db.batch_execute("ALTER EXTENSION pg_retention UPDATE")
        .unwrap();
    let mut db = c.connect("postgres");
    let version: String = db
        .query_one(
            "SELECT extversion FROM pg_extension WHERE extname = 'pg_retention'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(version, env!("CARGO_PKG_VERSION"));
    assert_eq!(
        contents(&mut db, &columns),
        before,
        "every row kept, unchanged"
    );

    // Every function works on the upgraded data: the hold placed at 0.1.0 still protects,
    // sweeps, preview, holds, health, and the current archiver finishes the audit table and
    // verifies the past release's archives with its own.
    db.batch_execute(
        "INSERT INTO outbox SELECT g, g % 10, 'sent', now() - interval '45 days' FROM generate_series(3001, 3100) g",
    )
    .unwrap();
    assert_eq!(
        scalar(
            &mut db,
            "SELECT would_delete FROM retention.preview() WHERE policy = 'outbox'"
        ),
        90
    );
    db.batch_execute("CALL retention.run()").unwrap();
    assert_eq!(
        scalar(&mut db, OUTBOX_EXPIRED),
        109,
        "held rows of both eras stay"
    );
    assert_eq!(scalar(&mut db, "SELECT count(*) FROM outbox WHERE tenant <> 7 AND created_at < now() - interval '30 days'"), 0);
    db.batch_execute(
        "SELECT retention.place_hold('audit', 'id = 1200', 'case 2026-3', 'legal@example.com');
         SELECT retention.lift_hold(1, 'legal@example.com', 'case closed');
         SELECT * FROM retention.health();
         SELECT * FROM retention.stats;
         SELECT * FROM retention.tables;
         SELECT * FROM retention.workers;",
    )
    .unwrap();
    let new = Archiver::new(&c.url("postgres"), &store);
    let o = new.run(&["once"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        scalar(&mut db, "SELECT count(*) FROM audit"),
        1,
        "all but the held row archived"
    );
    let o = new.run(&["verify", "--all"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        scalar(&mut db, "SELECT count(*) FROM retention.archives"),
        scalar(
            &mut db,
            "SELECT count(*) FROM retention.batches WHERE state = 'pruned'"
        )
    );
    db.batch_execute("CALL retention.run()").unwrap();
    assert_eq!(
        scalar(&mut db, OUTBOX_EXPIRED),
        0,
        "the lifted hold lets its rows go"
    );

    // The upgraded schema equals a fresh install's.
    c.execute("postgres", "CREATE DATABASE fresh");
    c.execute("fresh", "CREATE EXTENSION pg_retention");
    let upgraded = catalog(&mut db);
    let fresh = catalog(&mut c.connect("fresh"));
    let only_upgraded: Vec<&String> = upgraded.iter().filter(|l| !fresh.contains(l)).collect();
    let only_fresh: Vec<&String> = fresh.iter().filter(|l| !upgraded.contains(l)).collect();
    assert!(
        only_upgraded.is_empty() && only_fresh.is_empty(),
        "upgraded and fresh schemas differ.\nonly after the upgrade:\n{}\n\nonly in a fresh install:\n{}",
        only_upgraded.iter().map(|s| s.as_str()).collect::<Vec<_>>().join("\n---\n"),
        only_fresh.iter().map(|s| s.as_str()).collect::<Vec<_>>().join("\n---\n"),
    );
    assert!(
        upgraded.len() > 100,
        "the snapshot sees the schema ({} facts)",
        upgraded.len()
    );
    let _ = std::fs::remove_dir_all(dir);
}
