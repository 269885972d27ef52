//! Erasure outranks holds and reaches the archives: `retention.erase` deletes the matching rows
//! whatever holds say and ledgers the collision; every archive of the table gets a supersession
//! that the real archiver (`once`) carries out: the slice rewritten without the erased rows,
//! read back and verified, recorded, and only then the original objects deleted. A crash at
//! each of those steps leaves a state the next pass completes, with nothing lost.
//!
//! Production roles throughout: tables are made by the superuser in set-up, application rows
//! are written by `app` (table privileges only), policies and holds are `admin`'s (a member of
//! `retention_admin`, not a superuser, who also reads the tables and views for the assertions),
//! erasures are made by `dpo` (a LOGIN member of `retention_eraser` with SELECT and DELETE on
//! the tables it erases from), the archiver binary runs as `archiver` (only in
//! `retention_archiver`) and `restore` as `restorer` (who also reads and drops the tables it
//! restored). The superuser stays only where a test needs it, commented: granting mid-test as
//! the tables' owner, reading `retention.supersessions` (a catalog table no role is granted).

use pg_retention_integration::archiver::{text, Archiver};
use pg_retention_integration::{expect_error, scalar, Cluster};
use postgres::Client;
use std::path::{Path, PathBuf};

/// 300 closed audit rows of ten subjects (subject = id % 10), 40 to 60 days old, archived by
/// `once` (as `archiver`) in three batches of 100 to a file store; then 20 recent rows (ids
/// 301-320) that no policy touches yet. The table is the superuser's, the rows `app`'s, the
/// policy `admin`'s. A login role `dpo` may erase (retention_eraser, SELECT and DELETE on the
/// table). Returns a connection as `admin`, the archiver and the store.
fn archived(c: &Cluster) -> (Client, Archiver, PathBuf) {
    let dir = pg_retention_integration::temp_dir("pg-retention-erasure");
    let a = Archiver::new(
        &c.archiver_url("postgres"),
        &format!("file://{}", dir.display()),
    );
    c.execute(
        "postgres",
        "CREATE TABLE audit (id bigint PRIMARY KEY, subject int NOT NULL, status text NOT NULL,
                             closed_at timestamptz, note text);
         CREATE ROLE dpo LOGIN;
         GRANT retention_eraser TO dpo;
         GRANT SELECT, DELETE ON audit TO dpo;",
    );
    c.grant_app_and_admin("postgres");
    let (mut app, mut db) = c.app_and_admin("postgres");
    app.batch_execute(
        "INSERT INTO audit SELECT g, g % 10, 'closed', now() - make_interval(days => 40 + g % 20), 'n' || g
           FROM generate_series(1, 300) g;",
    )
    .unwrap();
    db.batch_execute(
        "SELECT retention.add_policy(name => 'audit', relation => 'audit', kind => 'age', age_column => 'closed_at',
                older_than => '30 days', terminal => $$status = 'closed'$$, action => 'archive_then_delete');",
    )
    .unwrap();
    let o = a.run(&["once", "--batch-rows", "100"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        scalar(&mut db, "SELECT count(*) FROM retention.archives"),
        3
    );
    assert_eq!(scalar(&mut db, "SELECT count(*) FROM audit"), 0);
    app.batch_execute(
        "INSERT INTO audit SELECT g, g % 10, 'open', now(), 'n' || g FROM generate_series(301, 320) g",
    )
    .unwrap();
    (db, a, dir)
}

/// The original slice keys of the archives, in id order.
fn original_keys(db: &mut Client) -> Vec<String> {
    db.query(
        "SELECT original_key FROM retention.archives ORDER BY id",
        &[],
    )
    .unwrap()
    .iter()
    .map(|r| r.get(0))
    .collect()
}

fn manifest_path(store: &Path, slice_key: &str) -> PathBuf {
    store.join(slice_key.replace(".slice", ".manifest.json"))
}

/// The rows of every slice the store holds now (restored by `restorer`, who reads and then drops
/// the tables it made), by subject.
fn archived_subjects(c: &Cluster, a: &Archiver) -> Vec<(i32, i64)> {
    let url = c.restorer_url("postgres");
    let union = a.clone().with_database_url(&url).restore_all();
    let mut db = Client::connect(&url, postgres::NoTls)
        .unwrap_or_else(|e| panic!("connect as restorer: {e}"));
    let rows = db
        .query(
            &format!("SELECT subject, count(*) FROM ({union}) r GROUP BY 1 ORDER BY 1"),
            &[],
        )
        .unwrap();
    let out = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    for i in 0..a.slice_keys().len() {
        db.batch_execute(&format!("DROP TABLE restored_{i}"))
            .unwrap();
    }
    out
}

#[test]
fn erasure_outranks_a_hold_and_supersedes_every_archive_that_held_the_rows() {
    let c = Cluster::start(&[]);
    let (mut db, a, store) = archived(&c);
    let originals = original_keys(&mut db);
    let original_manifests: Vec<Vec<u8>> = originals
        .iter()
        .map(|k| std::fs::read(manifest_path(&store, k)).unwrap())
        .collect();
    let hold = scalar(
        &mut db,
        "SELECT retention.place_hold('audit', 'subject = 7', 'litigation L-1', 'legal')",
    );

    // retention_admin may not erase, even with SELECT and DELETE on the table: the role is
    // its own.
    let (state, _) = expect_error(
        &mut db,
        "SELECT retention.erase('audit', 'subject = 7', 'DSR-7', 'admin')",
    );
    assert_eq!(state, "42501", "retention_admin is not an eraser");

    let mut dpo = c.connect_as("postgres", "dpo");
    let erased: i64 = dpo
        .query_one(
            "SELECT retention.erase('audit', 'subject = 7', 'DSR-7', 'dpo desk')",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(erased, 2, "rows 307 and 317, held, are erased");
    assert_eq!(
        scalar(&mut db, "SELECT count(*) FROM audit WHERE subject = 7"),
        0
    );
    assert_eq!(scalar(&mut db, "SELECT count(*) FROM audit"), 18);
    // Both facts are ledgered: the erasure (naming the hold it overrode) and the collision.
    let row = db
        .query_one(
            "SELECT rows, hold_ids, actor, detail->>'request_ref' FROM retention.ledger WHERE method = 'erasure'",
            &[],
        )
        .unwrap();
    assert_eq!(row.get::<_, i64>(0), 2);
    assert_eq!(row.get::<_, Vec<i64>>(1), vec![hold]);
    assert_eq!(row.get::<_, String>(2), "dpo desk");
    assert_eq!(row.get::<_, String>(3), "DSR-7");
    let row = db
        .query_one(
            "SELECT rows, hold_ids, detail->>'request_ref' FROM retention.ledger WHERE method = 'hold_collision'",
            &[],
        )
        .unwrap();
    assert_eq!(row.get::<_, i64>(0), 2);
    assert_eq!(row.get::<_, Vec<i64>>(1), vec![hold]);
    assert_eq!(row.get::<_, String>(2), "DSR-7");
    // Every archive of the table waits for the archiver.
    let pending = dpo
        .query_one(
            "SELECT rows_erased, pending, archives_superseded, hold_collisions FROM retention.erasures WHERE request_ref = 'DSR-7'",
            &[],
        )
        .unwrap();
    assert_eq!(pending.get::<_, i64>(0), 2);
    assert_eq!(pending.get::<_, i64>(1), 3);
    assert_eq!(pending.get::<_, i64>(2), 0);
    assert_eq!(pending.get::<_, Vec<i64>>(3), vec![hold]);

    let o = a.run(&["once"]);
    assert!(o.status.success(), "{}", text(&o));
    let done = db
        .query_one(
            "SELECT pending, archives_superseded, archived_rows_erased FROM retention.erasures WHERE request_ref = 'DSR-7'",
            &[],
        )
        .unwrap();
    assert_eq!(
        (
            done.get::<_, i64>(0),
            done.get::<_, i64>(1),
            done.get::<_, i64>(2)
        ),
        (0, 3, 30)
    );
    // The erased subject is in no live slice; every other archived row still is.
    let subjects = archived_subjects(&c, &a);
    assert!(subjects.iter().all(|(s, _)| *s != 7), "{subjects:?}");
    assert_eq!(subjects.iter().map(|(_, n)| n).sum::<i64>(), 270);
    // The originals are gone; each rewrite names the manifest it supersedes.
    for (key, manifest) in originals.iter().zip(&original_manifests) {
        assert!(!store.join(key).exists(), "{key} is deleted");
        assert!(!manifest_path(&store, key).exists());
        let now: String = db
            .query_one(
                "SELECT object_key FROM retention.archives WHERE original_key = $1",
                &[key],
            )
            .unwrap()
            .get(0);
        assert_ne!(&now, key);
        let rewritten: serde_json::Value =
            serde_json::from_slice(&std::fs::read(manifest_path(&store, &now)).unwrap()).unwrap();
        assert_eq!(
            rewritten["supersedes"].as_str(),
            Some(blake3::hash(manifest).to_hex().as_str()),
            "supersedes is the BLAKE3 of the original manifest"
        );
        assert_eq!(rewritten["rows"], 90);
        // The original key is refused, typed, whatever is left in the store (restore is the
        // restorer's, inspect the archiver's).
        for (who, op) in [
            (
                a.clone().with_database_url(&c.restorer_url("postgres")),
                vec!["restore", key.as_str(), "--into", "public.back"],
            ),
            (a.clone(), vec!["inspect", key.as_str()]),
        ] {
            let o = who.run(&op);
            assert_eq!(o.status.code(), Some(5), "{}", text(&o));
            assert!(text(&o).contains("superseded by"), "{}", text(&o));
        }
    }
    let o = a.run(&["verify", "--all"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("3 verified, 0 failed"), "{}", text(&o));
    assert_eq!(
        scalar(
            &mut db,
            "SELECT sum(rows)::bigint FROM retention.ledger WHERE method = 'supersede' AND detail->>'request_ref' = 'DSR-7'"
        ),
        30
    );
    // A second pass has nothing to do.
    let o = a.run(&["once"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        scalar(
            &mut db,
            "SELECT count(*) FROM retention.ledger WHERE method = 'supersede'"
        ),
        3
    );
}

#[test]
fn a_crash_at_each_supersession_step_is_completed_by_the_next_pass_with_nothing_lost() {
    let c = Cluster::start(&[]);
    let (mut db, a, store) = archived(&c);
    let mut dpo = c.connect_as("postgres", "dpo");
    let steps = [
        "supersede-after-slice",
        "supersede-after-write",
        "supersede-after-record",
        "supersede-after-destroy",
    ];
    let mut expected: Vec<(i32, i64)> = (0..10).map(|s| (s, 30)).collect();
    for (subject, step) in steps.iter().enumerate() {
        let subject = subject as i32;
        dpo.execute(
            "SELECT retention.erase('audit', 'subject = ' || $1::int, 'DSR-' || $1::int, 'dpo')",
            &[&subject],
        )
        .unwrap();
        let before = original_keys(&mut db);
        let o = a
            .clone()
            .with_env("PG_RETENTION_ARCHIVER_FAULT", step)
            .run(&["once"]);
        assert!(!o.status.success(), "{step}: the fault fires\n{}", text(&o));
        // The supersession's state: retention.supersessions is a catalog table no role is
        // granted, so the superuser reads it.
        let (state, now): (String, String) = {
            let r = c
                .connect("postgres")
                .query_one(
                    "SELECT s.state, a.object_key FROM retention.supersessions s
                       JOIN retention.archives a ON a.id = s.archive_id
                      WHERE s.request_ref = $1 ORDER BY s.id LIMIT 1",
                    &[&format!("DSR-{subject}")],
                )
                .unwrap();
            (r.get(0), r.get(1))
        };
        // Before the rewrite is recorded the archive's object is the one before; after, the
        // rewrite, with the replaced objects still there until the supersession is done.
        match *step {
            "supersede-after-slice" | "supersede-after-write" => assert_eq!(state, "pending"),
            _ => assert_eq!(state, "rewritten", "{step}"),
        }
        assert!(
            store.join(&now).exists(),
            "{step}: the archive's object {now} exists"
        );
        let o = a.run(&["once"]);
        assert!(o.status.success(), "{step}: {}", text(&o));
        assert_eq!(
            scalar(
                &mut db,
                "SELECT coalesce(sum(pending), 0)::bigint FROM retention.erasures"
            ),
            0,
            "{step}"
        );
        expected.retain(|(s, _)| *s != subject);
        assert_eq!(archived_subjects(&c, &a), expected, "{step}: nothing lost");
        // Only the archives' objects now are in the store: the replaced ones are gone, and
        // the slices listed are exactly the index's.
        let mut listed = a.slice_keys();
        listed.sort();
        let mut indexed: Vec<String> = db
            .query("SELECT object_key FROM retention.archives ORDER BY 1", &[])
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        indexed.sort();
        assert_eq!(listed, indexed, "{step}");
        for key in &before {
            assert!(
                indexed.contains(key) || !store.join(key).exists(),
                "{step}: {key}"
            );
        }
        let o = a.run(&["verify", "--all"]);
        assert!(o.status.success(), "{step}: {}", text(&o));
    }
    assert_eq!(
        scalar(
            &mut db,
            "SELECT count(*) FROM retention.ledger WHERE method = 'supersede'"
        ),
        12,
        "four erasures, three archives each, each ledgered once"
    );
}

#[test]
fn a_corrupted_archive_leaves_its_supersession_pending_and_the_original_in_place() {
    let c = Cluster::start(&[]);
    let (mut db, a, store) = archived(&c);
    let first = original_keys(&mut db).remove(0);
    let path = store.join(&first);
    let mut bytes = std::fs::read(&path).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 1;
    std::fs::write(&path, &bytes).unwrap();
    c.connect_as("postgres", "dpo")
        .execute(
            "SELECT retention.erase('audit', 'subject = 3', 'DSR-3', 'dpo')",
            &[],
        )
        .unwrap();
    let o = a.run(&["once"]);
    assert_eq!(o.status.code(), Some(5), "{}", text(&o));
    assert!(text(&o).contains("verification failed"), "{}", text(&o));
    assert_eq!(
        scalar(
            &mut db,
            "SELECT pending FROM retention.erasures WHERE request_ref = 'DSR-3'"
        ),
        3,
        "the first failed, the others wait their turn"
    );
    assert_eq!(
        scalar(
            &mut db,
            "SELECT archives_superseded + archived_rows_erased FROM retention.erasures WHERE request_ref = 'DSR-3'"
        ),
        0,
        "nothing was superseded"
    );
    assert!(path.exists());
}

#[test]
fn erasure_is_refused_without_the_table_grants_blocked_by_references_and_reaches_every_partition() {
    let c = Cluster::start(&[]);
    c.execute(
        "postgres",
        "CREATE TABLE customers (id int PRIMARY KEY, email text);
         CREATE TABLE orders (id int PRIMARY KEY, customer int REFERENCES customers (id), total int);
         CREATE TABLE events (id bigint, subject int, at date NOT NULL, PRIMARY KEY (id, at))
             PARTITION BY RANGE (at);
         CREATE TABLE events_1 PARTITION OF events FOR VALUES FROM ('2026-01-01') TO ('2026-02-01');
         CREATE TABLE events_2 PARTITION OF events FOR VALUES FROM ('2026-02-01') TO ('2026-03-01');
         CREATE ROLE dpo LOGIN;
         GRANT retention_eraser TO dpo;
         GRANT SELECT ON customers TO dpo;
         GRANT SELECT, DELETE ON orders, events TO dpo;",
    );
    c.grant_app_and_admin("postgres");
    let (mut app, mut db) = c.app_and_admin("postgres");
    app.batch_execute(
        "INSERT INTO customers SELECT g, 'c' || g || '@example.com' FROM generate_series(1, 10) g;
         INSERT INTO orders SELECT g, g % 10 + 1, g FROM generate_series(1, 50) g;
         INSERT INTO events SELECT g, g % 5, date '2026-01-01' + g % 50 FROM generate_series(1, 100) g;",
    )
    .unwrap();
    let mut dpo = c.connect_as("postgres", "dpo");
    // The delete runs as the caller: no DELETE on customers, no erasure there.
    let (state, _) = expect_error(
        &mut dpo,
        "SELECT retention.erase('customers', 'id = 3', 'DSR-C3', 'dpo')",
    );
    assert_eq!(state, "42501");
    // The tables' owner (the superuser, who made them) grants it.
    c.execute("postgres", "GRANT DELETE ON customers TO dpo");
    // A customer with orders is still referenced: the erasure says so and erases nothing.
    let (state, message) = expect_error(
        &mut dpo,
        "SELECT retention.erase('customers', 'id = 3', 'DSR-C3', 'dpo')",
    );
    assert_eq!(state, "23503", "{message}");
    assert!(message.contains("orders"), "{message}");
    assert_eq!(
        scalar(&mut db, "SELECT count(*) FROM customers WHERE id = 3"),
        1
    );
    // The caller orders it: the orders first, then the customer.
    dpo.batch_execute(
        "SELECT retention.erase('orders', 'customer = 3', 'DSR-C3', 'dpo');
         SELECT retention.erase('customers', 'id = 3', 'DSR-C3', 'dpo');",
    )
    .unwrap();
    let tables: String = dpo
        .query_one(
            "SELECT tables::text FROM retention.erasures WHERE request_ref = 'DSR-C3'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&tables).unwrap(),
        serde_json::json!({"public.customers": 1, "public.orders": 5})
    );
    // A partitioned table is erased in every partition, in committed batches.
    let erased: i64 = dpo
        .query_one(
            "CALL retention.erase_in_batches('events', 'subject = 2', 'DSR-E2', 'dpo', 7)",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(erased, 20);
    assert_eq!(
        scalar(&mut db, "SELECT count(*) FROM events WHERE subject = 2"),
        0
    );
    assert_eq!(scalar(&mut db, "SELECT count(*) FROM events"), 80);
    assert_eq!(
        scalar(
            &mut db,
            "SELECT count(*) FROM retention.ledger WHERE method = 'erasure' AND detail->>'request_ref' = 'DSR-E2'"
        ),
        3,
        "batches of 7, 7 and 6 rows, each ledgered"
    );
    // Bad input is refused, typed.
    for (sql, expected) in [
        (
            "SELECT retention.erase('events', 'subject = 2', '', 'dpo')",
            "22023",
        ),
        (
            "SELECT retention.erase('events', 'no_such_column = 2', 'R', 'dpo')",
            "RT101",
        ),
        (
            "CALL retention.erase_in_batches('events', 'true', 'R', 'dpo', 0)",
            "22023",
        ),
    ] {
        let (state, message) = expect_error(&mut dpo, sql);
        assert_eq!(state, expected, "{sql}: {message}");
    }
}
