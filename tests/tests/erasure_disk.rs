//! Erasure reaches the disk: the row versions `retention.erase` deleted (the older versions of
//! the same rows, left by updates, and the rows its deletes cascaded to) stay in the table's pages, readable with `pg_dirtyread`,
//! until VACUUM removes them. The database worker checks each table an erasure deleted from,
//! waits while a transaction older than the erasure still sees the versions, vacuums the table
//! (as its owner) once it can, and records when none is left: `retention.erasures`'
//! `unreadable_at` and an `erasure_scrub` ledger entry per table.
//!
//! Production roles: the table is the superuser's (set-up), its rows `app`'s (table privileges
//! only), the erasure `dpo`'s (a LOGIN member of `retention_eraser` with SELECT and DELETE on
//! the table), `admin` (retention_admin) wakes the worker and reads the views, and the worker
//! connects as `sweeper`, a LOGIN member of `retention_worker` only. The superuser stays where
//! the test is about what only a superuser can see: the pages (`pg_dirtyread`, `pgstattuple` for
//! the TOAST table) and the catalog table `retention.erasure_scrubs`.

use pg_retention_integration::{column, scalar, Cluster};
use postgres::Client;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(90);

/// Versions of `people` rows of subject 7 (id % 10 = 7) in the pages, dead or alive (read by
/// the superuser with pg_dirtyread).
fn subject_versions(su: &mut Client) -> i64 {
    scalar(
        su,
        "SELECT count(*) FROM pg_dirtyread('people')
             AS t(id bigint, email text, note text, visits int) WHERE id % 10 = 7",
    )
}

/// Versions of `visits_log` rows of subject 7's people in the pages (the superuser's read).
fn subject_visits(su: &mut Client) -> i64 {
    scalar(
        su,
        "SELECT count(*) FROM pg_dirtyread('visits_log')
             AS t(id bigint, person_id bigint, ip text) WHERE person_id % 10 = 7",
    )
}

/// Dead TOAST chunks in the pages of `people`'s TOAST table (pgstattuple's count of versions
/// no snapshot sees as live; the superuser's read: pg_dirtyread does not read TOAST tables).
fn dead_toast_chunks(su: &mut Client) -> i64 {
    scalar(
        su,
        "SELECT dead_tuple_count FROM pgstattuple(
             (SELECT reltoastrelid FROM pg_class WHERE oid = 'people'::regclass)::regclass)",
    )
}

/// Whether this server has the page readers: Debian's pg_dirtyread and contrib's pgstattuple
/// (PyPI's PostgreSQL 18 has neither). Without them the test still proves the scrub's states,
/// the worker's VACUUM of each table (`pg_stat_user_tables.vacuum_count`) and the ledger; with
/// them, also what the pages hold.
fn page_readers(su: &mut Client) -> bool {
    scalar(
        su,
        "SELECT count(*) FROM pg_available_extensions WHERE name IN ('pg_dirtyread', 'pgstattuple')",
    ) == 2
}

/// How many times `table` was vacuumed other than by autovacuum (the superuser's read).
fn vacuums_of(su: &mut Client, table: &str) -> i64 {
    scalar(
        su,
        &format!("SELECT vacuum_count FROM pg_stat_user_tables WHERE relname = '{table}'"),
    )
}

/// The status of the scrub of `relation` (the superuser's read of a catalog table).
fn scrub(su: &mut Client, relation: &str) -> (String, i32, i32) {
    let row = su
        .query_one(
            "SELECT status, checks, vacuums FROM retention.erasure_scrubs WHERE relation_name = $1",
            &[&relation],
        )
        .unwrap();
    (row.get(0), row.get(1), row.get(2))
}

#[test]
fn an_erasure_reaches_the_pages_once_no_older_snapshot_sees_its_rows() {
    let c = Cluster::start(&[
        "pg_retention.databases = 'postgres'",
        "pg_retention.naptime = '1h'",
        "pg_retention.jitter = 0",
    ]);
    // Set-up by the superuser: the tables (autovacuum off, so the worker's VACUUM is the one
    // that removes the versions; notes stored out of line, uncompressed, in TOAST), the page
    // readers, the worker's and the eraser's roles.
    c.execute(
        "postgres",
        "CREATE TABLE people (id bigint PRIMARY KEY, email text NOT NULL, note text, visits int NOT NULL DEFAULT 0)
             WITH (autovacuum_enabled = off, toast.autovacuum_enabled = off);
         ALTER TABLE people ALTER note SET STORAGE EXTERNAL;
         CREATE INDEX people_email ON people (email);
         CREATE TABLE visits_log (id bigint PRIMARY KEY, person_id bigint NOT NULL REFERENCES people ON DELETE CASCADE,
                                  ip text NOT NULL) WITH (autovacuum_enabled = off);
         CREATE TABLE contacts (id bigint PRIMARY KEY, email text NOT NULL);
         CREATE ROLE sweeper LOGIN IN ROLE retention_worker;
         CREATE ROLE dpo LOGIN IN ROLE retention_eraser;
         GRANT SELECT, DELETE ON people, contacts TO dpo;",
    );
    c.grant_app_and_admin("postgres");
    let (mut app, mut admin) = c.app_and_admin("postgres");
    app.batch_execute(
        "INSERT INTO people
         SELECT g, 'user-' || g || '@example.com',
                (SELECT string_agg(md5(g::text || s::text), '') FROM generate_series(1, 80) s)
           FROM generate_series(1, 200) g;
         INSERT INTO visits_log SELECT g, g % 200 + 1, '10.0.0.' || g % 200 FROM generate_series(1, 400) g;
         INSERT INTO contacts SELECT g, 'user-' || g || '@example.com' FROM generate_series(1, 50) g;",
    )
    .unwrap();
    // A transaction older than the update and the erasure: it still sees the rows as they
    // were, so nothing may remove their versions while it runs (neither VACUUM nor the pruning
    // a read of a page does on the way).
    let mut old = c.admin("postgres");
    old.batch_execute(
        "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM people WHERE id % 10 = 7;",
    )
    .unwrap();
    app.batch_execute("UPDATE people SET visits = visits + 1 WHERE id % 10 = 7")
        .unwrap();
    let mut su = c.connect("postgres");
    let pages = page_readers(&mut su);
    if pages {
        su.batch_execute("CREATE EXTENSION pg_dirtyread; CREATE EXTENSION pgstattuple;")
            .unwrap();
        // 20 rows of subject 7, each in two versions (before and after the update); 40 visits.
        assert_eq!(subject_versions(&mut su), 40);
        assert_eq!(subject_visits(&mut su), 40);
    }

    let mut dpo = c.connect_as("postgres", "dpo");
    dpo.batch_execute(
        "SELECT retention.erase('people', 'id % 10 = 7', 'DSR-9', 'test');
         SELECT retention.erase('contacts', 'id % 10 = 7', 'DSR-9', 'test');",
    )
    .unwrap();
    assert_eq!(
        scalar(&mut admin, "SELECT count(*) FROM people WHERE id % 10 = 7"),
        0
    );
    // Gone from the tables (the visits by the key's cascade), not from their pages.
    assert_eq!(
        scalar(
            &mut admin,
            "SELECT count(*) FROM visits_log WHERE person_id % 10 = 7"
        ),
        0
    );
    if pages {
        assert_eq!(subject_versions(&mut su), 40);
        assert_eq!(subject_visits(&mut su), 40);
        assert!(dead_toast_chunks(&mut su) > 0);
    }
    assert_eq!(
        scalar(
            &mut admin,
            "SELECT scrubs_pending FROM retention.erasures WHERE request_ref = 'DSR-9'"
        ),
        3
    );
    // contacts is dropped before the worker looks: its files went with it.
    c.execute("postgres", "DROP TABLE contacts");

    // The worker, as sweeper: it waits for the older transaction.
    c.append_conf(&["pg_retention.enabled = on", "pg_retention.role = 'sweeper'"]);
    c.reload();
    admin.batch_execute("SELECT retention.wake()").unwrap();
    // One visit takes the erasures one after the other, each in transactions of its own.
    let waiting = c.wait_until(WAIT, || {
        scrub(&mut su, "public.people").0 == "waiting"
            && scrub(&mut su, "public.contacts").0 == "dropped"
    });
    assert!(
        waiting,
        "{:?}\n{}",
        scrub(&mut su, "public.people"),
        c.log()
    );
    assert_eq!(scrub(&mut su, "public.contacts").0, "dropped");
    if pages {
        assert_eq!(subject_versions(&mut su), 40);
    }
    assert_eq!(vacuums_of(&mut su, "people"), 0, "nothing vacuumed in vain");
    assert_eq!(
        scalar(
            &mut admin,
            "SELECT count(*) FROM retention.erasures WHERE request_ref = 'DSR-9' AND unreadable_at IS NULL AND scrubs_pending = 2"
        ),
        1
    );

    // Once it ends, the next visit vacuums the table and finds nothing erased left.
    old.batch_execute("COMMIT").unwrap();
    let done = c.wait_until(WAIT, || {
        let _ = admin.batch_execute("SELECT retention.wake()");
        scalar(
            &mut admin,
            "SELECT count(*) FROM retention.erasures WHERE request_ref = 'DSR-9' AND unreadable_at IS NOT NULL AND scrubs_pending = 0",
        ) == 1
    });
    assert!(done, "{:?}\n{}", scrub(&mut su, "public.people"), c.log());
    let (status, checks, vacuums) = scrub(&mut su, "public.people");
    assert_eq!(status, "unreadable");
    assert!(
        checks >= 3 && vacuums >= 1,
        "{checks} checks, {vacuums} vacuums"
    );
    // Neither the erased versions nor the older ones an update left, nor their TOAST chunks.
    if pages {
        assert_eq!(subject_versions(&mut su), 0);
        assert_eq!(subject_visits(&mut su), 0);
        assert_eq!(dead_toast_chunks(&mut su), 0);
    }
    assert_eq!(scrub(&mut su, "public.visits_log").0, "unreadable");
    // The worker's VACUUM, as the tables' owner (the worker's role may not).
    let vacuumed = c.wait_until(Duration::from_secs(10), || {
        vacuums_of(&mut su, "people") >= 1 && vacuums_of(&mut su, "visits_log") >= 1
    });
    assert!(vacuumed, "{}", c.log());
    assert_eq!(
        scalar(&mut admin, "SELECT count(*) FROM people"),
        180,
        "the other rows stay"
    );
    // One ledger entry per table, naming the request.
    assert_eq!(
        column::<String>(
            &mut admin,
            "SELECT relation || ' ' || (detail->>'status') FROM retention.ledger
              WHERE method = 'erasure_scrub' AND detail->>'request_ref' = 'DSR-9' ORDER BY relation"
        ),
        [
            "public.contacts dropped",
            "public.people unreadable",
            "public.visits_log unreadable"
        ]
    );
}
