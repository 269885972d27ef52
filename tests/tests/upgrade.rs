//! Carrying a database over. In-place upgrade from the last release: 0.1.0 (commit 2b63bd8, built and installed beside the
//! current library by `scripts/past-release`) filled with policies, holds, sweeps, batches,
//! archives and ledger, then `ALTER EXTENSION pg_retention UPDATE`: every row is kept, every
//! function works, and the schema equals a fresh install's, compared in the catalog. Logical
//! dump and restore into a new database: policies find their tables again, holds protect,
//! ledger and archive index are intact and new ids do not collide.
//!
//! Production roles on the data path, in both releases (0.1.0 has `retention_admin` and
//! `retention_archiver` already): tables are made by the superuser in set-up, application rows
//! are written by `app` (table privileges only), policies, holds, previews, runs and the views
//! are `admin`'s (a member of `retention_admin`, not a superuser), and both archivers, the
//! past release's and this one's, run as `archiver` (only in `retention_archiver`). The
//! superuser stays where it is needed, commented: `CREATE EXTENSION`, `ALTER EXTENSION ...
//! UPDATE`, `pg_dump`/`pg_restore` and `CREATE DATABASE`, and reading the extension's catalog
//! tables (the row-by-row comparison across the upgrade, the running totals, the schema
//! compared with a fresh install's, `retention.batches`, the carried ids), which no role is
//! granted.

use pg_retention_integration::archiver::{text, Archiver};
use pg_retention_integration::cluster::SCRATCH;
use pg_retention_integration::{as_postgres, scalar, stop_server, succeed, Cluster};
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

/// The tables of [`FILL_ROWS`] and [`FILL_POLICIES`] (the superuser's set-up).
const FILL_TABLES: &str = "
    CREATE TABLE outbox (id bigint PRIMARY KEY, tenant int NOT NULL, status text NOT NULL, created_at timestamptz NOT NULL);
    CREATE TABLE audit (id bigint PRIMARY KEY, state text NOT NULL, closed_at timestamptz NOT NULL, note text);
";

/// Application rows (written by `app`).
const FILL_ROWS: &str = "
    INSERT INTO outbox SELECT g, g % 10, 'sent', now() - make_interval(days => g % 60, hours => 12) FROM generate_series(1, 2000) g;
    INSERT INTO audit SELECT g, 'closed', now() - make_interval(days => 31 + g % 30), 'note ' || g FROM generate_series(1, 1200) g;
";

/// Policies and holds (made by `admin`).
const FILL_POLICIES: &str = "
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
        // Creating the extension is the superuser's, and so are the tables (set-up).
        c.execute(
            "postgres",
            &format!("CREATE EXTENSION pg_retention VERSION '{PAST}'"),
        );
        c.execute("postgres", FILL_TABLES);
        c.grant_app_and_admin("postgres");
        let (mut app, mut admin) = c.app_and_admin("postgres");
        app.batch_execute(FILL_ROWS).unwrap();
        admin.batch_execute(FILL_POLICIES).unwrap();
        admin.batch_execute("CALL retention.run('outbox')").unwrap();
        assert_eq!(
            scalar(&mut admin, OUTBOX_EXPIRED),
            99,
            "tenant 7's expired rows are held"
        );
    }
    // The past archiver archives part of the audit table: batches, archives, ledger.
    let old = Archiver {
        program: Some(past_archiver()),
        ..Archiver::new(&c.archiver_url("postgres"), &store)
    };
    let o = old.run(&["once", "--batch-rows", "250", "--max-batches", "2"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        scalar(&mut c.admin("postgres"), "SELECT count(*) FROM audit"),
        700
    );
    // The extension's catalog tables, row by row: only the superuser reads them.
    let mut db = c.connect("postgres");
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

    // A fresh session: nothing of the past library is loaded in it. Updating the extension is
    // the superuser's; it also reads the catalog tables below.
    let mut db = c.connect("postgres");
    db.batch_execute("ALTER EXTENSION pg_retention UPDATE")
        .unwrap();
    let mut db = c.connect("postgres");
    // New sessions for the production roles too, after the update.
    let (mut app, mut admin) = c.app_and_admin("postgres");
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
    // The entries written before 0.5.0 are counted into its running totals (the tail of the
    // upgrade script), as the ledger adds them up.
    let figures = |db: &mut Client, sql: &str| -> Vec<(i64, i64, i64, i64, Option<String>)> {
        db.query(sql, &[])
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)))
            .collect()
    };
    let counted = figures(
        &mut db,
        "SELECT policy_id, rows_deleted, batches, hold_skips, last_run_at::text
           FROM retention.policy_counters ORDER BY 1",
    );
    assert!(
        !counted.is_empty(),
        "the past release's entries are counted"
    );
    assert_eq!(
        counted,
        figures(
            &mut db,
            "SELECT policy_id,
                    coalesce(sum(rows) FILTER (WHERE method IN ('prune', 'orphan_sweep', 'drop_partition')), 0)::bigint,
                    count(*) FILTER (WHERE method IN ('prune', 'orphan_sweep')),
                    coalesce(sum(rows) FILTER (WHERE method = 'hold_skip'), 0)::bigint,
                    max(at) FILTER (WHERE method = 'run')::text
               FROM retention.ledger_entries WHERE policy_id IS NOT NULL GROUP BY 1 ORDER BY 1",
        )
    );

    // Every function works on the upgraded data: the hold placed at 0.1.0 still protects,
    // sweeps, preview, holds, health, and the current archiver finishes the audit table and
    // verifies the past release's archives with its own.
    app.batch_execute(
        "INSERT INTO outbox SELECT g, g % 10, 'sent', now() - interval '45 days' FROM generate_series(3001, 3100) g",
    )
    .unwrap();
    assert_eq!(
        scalar(
            &mut admin,
            "SELECT would_delete FROM retention.preview() WHERE policy = 'outbox'"
        ),
        90
    );
    admin.batch_execute("CALL retention.run()").unwrap();
    assert_eq!(
        scalar(&mut admin, OUTBOX_EXPIRED),
        109,
        "held rows of both eras stay"
    );
    assert_eq!(scalar(&mut admin, "SELECT count(*) FROM outbox WHERE tenant <> 7 AND created_at < now() - interval '30 days'"), 0);
    admin
        .batch_execute(
            "SELECT retention.place_hold('audit', 'id = 1200', 'case 2026-3', 'legal@example.com');
         SELECT retention.lift_hold(1, 'legal@example.com', 'case closed');
         SELECT * FROM retention.health();
         SELECT * FROM retention.stats;
         SELECT * FROM retention.tables;
         SELECT * FROM retention.workers;",
        )
        .unwrap();
    let new = Archiver::new(&c.archiver_url("postgres"), &store);
    let o = new.run(&["once"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        scalar(&mut admin, "SELECT count(*) FROM audit"),
        1,
        "all but the held row archived"
    );
    let o = new.run(&["verify", "--all"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        scalar(&mut admin, "SELECT count(*) FROM retention.archives"),
        // retention.batches is a catalog table no role is granted: the superuser reads it.
        scalar(
            &mut db,
            "SELECT count(*) FROM retention.batches WHERE state = 'pruned'"
        )
    );
    admin.batch_execute("CALL retention.run()").unwrap();
    assert_eq!(
        scalar(&mut admin, OUTBOX_EXPIRED),
        0,
        "the lifted hold lets its rows go"
    );

    // The upgraded schema equals a fresh install's (the superuser's: a new database, a new
    // extension, the catalog compared).
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

/// Runs a PostgreSQL client program against the cluster, panicking with its output on failure.
fn client_program(name: &str, args: &[&str]) {
    succeed(std::process::Command::new(Cluster::program(name)).args(args));
}

/// The largest id of a catalog table.
fn max_id(db: &mut Client, table: &str) -> i64 {
    scalar(
        db,
        &format!("SELECT coalesce(max(id), 0) FROM retention.{table}"),
    )
}

/// What a database carried over (dump and restore, pg_upgrade) must still hold.
struct Carried {
    /// Expired outbox rows the hold protects.
    held: i64,
    /// Largest ids of policy_ids, hold_records, ledger_entries, archive_records.
    ids: Vec<i64>,
    /// Ledger entries.
    ledger: i64,
    /// The outbox table's oid.
    outbox_oid: i64,
}

const CARRIED_TABLES: [&str; 4] = [
    "policy_ids",
    "hold_records",
    "ledger_entries",
    "archive_records",
];

/// Two policies, a hold protecting rows, a sweep and one archived batch, then rows that expire
/// only now (after the carrying over the policies must find them). The tables are the
/// superuser's (set-up), the rows `app`'s, the policies, hold and sweep `admin`'s, the batch
/// archived by `archiver`.
fn fill_for_carrying(c: &Cluster, store: &str) -> Carried {
    c.execute(
        "postgres",
        "CREATE TABLE outbox (id bigint PRIMARY KEY, tenant int NOT NULL, status text NOT NULL, created_at timestamptz NOT NULL);
         CREATE TABLE audit (id bigint PRIMARY KEY, state text NOT NULL, closed_at timestamptz NOT NULL);",
    );
    c.grant_app_and_admin("postgres");
    let (mut app, mut admin) = c.app_and_admin("postgres");
    app.batch_execute(
        "INSERT INTO outbox SELECT g, g % 10, 'sent', now() - make_interval(days => g % 60, hours => 12) FROM generate_series(1, 2000) g;
         INSERT INTO audit SELECT g, 'closed', now() - interval '40 days' FROM generate_series(1, 600) g;",
    )
    .unwrap();
    admin
        .batch_execute(
            "SELECT retention.add_policy(name => 'outbox', relation => 'outbox', kind => 'age', age_column => 'created_at',
                older_than => '30 days', terminal => $$status = 'sent'$$);
         SELECT retention.add_policy(name => 'audit', relation => 'audit', kind => 'age', age_column => 'closed_at',
                older_than => '30 days', terminal => $$state = 'closed'$$, action => 'archive_then_delete');
         SELECT retention.place_hold('outbox', 'tenant = 7', 'case 2026-1', 'legal@example.com');",
        )
        .unwrap();
    admin.batch_execute("CALL retention.run('outbox')").unwrap();
    let o = Archiver::new(&c.archiver_url("postgres"), store).run(&[
        "once",
        "--batch-rows",
        "200",
        "--max-batches",
        "1",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    app.batch_execute(
        "INSERT INTO outbox SELECT g, g % 10, 'sent', now() - interval '45 days' FROM generate_series(3001, 3100) g",
    )
    .unwrap();
    let held = scalar(
        &mut admin,
        "SELECT count(*) FROM outbox WHERE tenant = 7 AND created_at < now() - interval '30 days'",
    );
    assert!(held > 0);
    // The largest ids of the catalog tables: only the superuser reads them.
    let mut su = c.connect("postgres");
    Carried {
        held,
        ids: CARRIED_TABLES.iter().map(|t| max_id(&mut su, t)).collect(),
        ledger: scalar(&mut admin, "SELECT count(*) FROM retention.ledger"),
        outbox_oid: scalar(&mut admin, "SELECT 'outbox'::regclass::oid::bigint"),
    }
}

/// A connection with `url`.
fn connect(url: &str) -> Client {
    Client::connect(url, postgres::NoTls).unwrap_or_else(|e| panic!("connect to {url}: {e}"))
}

/// In the carried-over database (`url_as(role)` connects to it as `role`; the roles came
/// along): the policies name its tables, ledger and archive index are intact, a run deletes
/// every expired row but the held ones, the archiver archives the rest and verifies the archive
/// made before, and new ids continue after the carried ones. `admin` runs, reads and registers,
/// `archiver` archives.
fn assert_carried(url_as: &dyn Fn(&str) -> String, store: &str, before: &Carried) {
    let mut dst = connect(&url_as("admin"));
    assert_eq!(
        scalar(&mut dst, "SELECT count(*) FROM retention.policies p WHERE p.relation IN ('outbox'::regclass, 'audit'::regclass)"),
        2,
        "the policies name the tables of this database"
    );
    assert_eq!(
        scalar(&mut dst, "SELECT count(*) FROM retention.ledger"),
        before.ledger,
        "the ledger is intact"
    );
    assert_eq!(
        scalar(&mut dst, "SELECT count(*) FROM retention.archives"),
        1,
        "the archive index is intact"
    );
    dst.batch_execute("CALL retention.run('outbox')").unwrap();
    assert_eq!(
        scalar(
            &mut dst,
            "SELECT count(*) FROM outbox WHERE created_at < now() - interval '30 days'"
        ),
        before.held,
        "only the held rows are left"
    );
    assert!(
        scalar(
            &mut dst,
            &format!("SELECT count(*) FROM retention.ledger WHERE method = 'prune' AND rows > 0 AND id > {}", before.ids[2])
        ) > 0,
        "the run is ledgered after the carried entries"
    );
    let a = Archiver::new(&url_as("archiver"), store);
    let o = a.run(&["once"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(scalar(&mut dst, "SELECT count(*) FROM audit"), 0);
    let o = a.run(&["verify", "--all"]);
    assert!(o.status.success(), "{}", text(&o));
    dst.batch_execute(
        "SELECT retention.place_hold('audit', 'id = 1', 'case 2026-2', 'legal@example.com');
         SELECT retention.add_policy(name => 'outbox2', relation => 'outbox', kind => 'age', age_column => 'created_at',
                older_than => '60 days');",
    )
    .unwrap();
    // The catalog tables' ids: only the superuser reads them.
    let mut su = connect(&url_as("postgres"));
    for (table, max) in CARRIED_TABLES.iter().zip(&before.ids) {
        // Without the sequences carried over these inserts would collide with carried ids.
        let new = scalar(
            &mut su,
            &format!("SELECT count(*) FROM retention.{table} WHERE id > {max}"),
        );
        assert!(new > 0, "{table}: new rows after the carried ones");
    }
}

#[test]
fn a_dump_restored_into_a_new_database_keeps_policies_holds_archives_and_ids() {
    let c = Cluster::start(&[]);
    let dir = std::env::temp_dir().join(format!("pg-retention-dump-{}", c.port()));
    let store = format!("file://{}", dir.display());
    let before = fill_for_carrying(&c, &store);
    let dump = dir.with_extension("dump");
    // Dumping and restoring a whole database (the extension with it) is the superuser's.
    client_program(
        "pg_dump",
        &[
            "-Fc",
            "-d",
            &c.url("postgres"),
            "-f",
            &dump.to_string_lossy(),
        ],
    );
    c.execute("postgres", "CREATE DATABASE restored");
    client_program(
        "pg_restore",
        &[
            "--exit-on-error",
            "-d",
            &c.url("restored"),
            &dump.to_string_lossy(),
        ],
    );
    assert_ne!(
        scalar(
            &mut c.admin("restored"),
            "SELECT 'outbox'::regclass::oid::bigint"
        ),
        before.outbox_oid,
        "the restored table has another oid, so the names were resolved again"
    );
    assert_carried(&|role| c.url_as("restored", role), &store, &before);
    let _ = std::fs::remove_dir_all(dir);
    let _ = std::fs::remove_file(dump);
}

/// Runs `program` as the postgres OS user in `dir`, panicking with its output on failure.
fn run_as_postgres(dir: &std::path::Path, program: &std::path::Path, args: &[&str]) {
    succeed(as_postgres(program).args(args).current_dir(dir));
}

/// Stops the upgraded server when the test ends, passed or not.
struct Upgraded<'a> {
    pg_ctl: PathBuf,
    data: &'a std::path::Path,
}

impl Drop for Upgraded<'_> {
    fn drop(&mut self) {
        stop_server(&self.pg_ctl, self.data);
    }
}

/// pg_upgrade from this suite's PostgreSQL 15 to 18 (both with pg_retention installed by
/// scripts/test): table and role oids are kept, so the catalog comes through as it is.
///
/// Ignored here: pg_upgrade from Debian's 15.20 to PyPI's 18.6 fails for any database, with or
/// without pg_retention (a one-column table suffices): 15.20 stores a `pg_attver` option on
/// every column and 18.6 refuses it ("unrecognized parameter"). Run it with `--ignored` where
/// the two builds agree.
#[test]
#[ignore = "Debian 15.20 -> PyPI 18.6 pg_upgrade fails for every database here (pg_attver column option)"]
fn pg_upgrade_from_15_to_18_keeps_policies_holds_archives_and_ids() {
    let new_bin = PathBuf::from(SCRATCH).join("pg18/bin");
    assert!(
        new_bin.join("pg_upgrade").exists(),
        "PostgreSQL 18 is missing: run scripts/setup"
    );
    let c = Cluster::start(&[]);
    let dir = c.socket_dir().to_path_buf();
    let store = format!("file://{}", dir.join("archive").display());
    let before = fill_for_carrying(&c, &store);
    c.stop();
    let old_bin = Cluster::program("postgres").parent().unwrap().to_path_buf();
    let new_data = dir.join("data18");
    run_as_postgres(
        &dir,
        &new_bin.join("initdb"),
        &[
            "-D",
            &new_data.to_string_lossy(),
            "-A",
            "trust",
            "-U",
            "postgres",
            "-E",
            "UTF8",
            "--no-sync",
            "--no-data-checksums",
        ],
    );
    let ports = pg_retention_integration::ports::free_ports(2);
    run_as_postgres(
        &dir,
        &new_bin.join("pg_upgrade"),
        &[
            "-b",
            &old_bin.to_string_lossy(),
            "-B",
            &new_bin.to_string_lossy(),
            "-d",
            &dir.join("data").to_string_lossy(),
            "-D",
            &new_data.to_string_lossy(),
            "-p",
            &ports[0].to_string(),
            "-P",
            &ports[1].to_string(),
            "-s",
            &dir.to_string_lossy(),
        ],
    );
    let conf = format!(
        "port = {}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{}'\nshared_preload_libraries = 'pg_retention'\n",
        ports[1],
        dir.display()
    );
    let conf_path = new_data.join("postgresql.conf");
    let mut text = std::fs::read_to_string(&conf_path).unwrap();
    text.push_str(&conf);
    std::fs::write(&conf_path, text).unwrap();
    run_as_postgres(
        &dir,
        &new_bin.join("pg_ctl"),
        &[
            "-D",
            &new_data.to_string_lossy(),
            "-l",
            &dir.join("server18.log").to_string_lossy(),
            "-w",
            "start",
        ],
    );
    let _running = Upgraded {
        pg_ctl: new_bin.join("pg_ctl"),
        data: &new_data,
    };
    let url_as = |role: &str| {
        format!(
            "host=127.0.0.1 port={} user={role} dbname=postgres",
            ports[1]
        )
    };
    // The server's version and a table's oid, checked by the superuser that ran pg_upgrade.
    let mut db = connect(&url_as("postgres"));
    let version: String = db.query_one("SHOW server_version_num", &[]).unwrap().get(0);
    assert!(version.starts_with("18"), "{version}");
    assert_eq!(
        scalar(&mut db, "SELECT 'outbox'::regclass::oid::bigint"),
        before.outbox_oid,
        "pg_upgrade keeps table oids"
    );
    assert_carried(&url_as, &store, &before);
}
