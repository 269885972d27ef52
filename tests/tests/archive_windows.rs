//! The policy set of the reference designs beside archive-then-delete at once: `archive` (the
//! rows are archived after `older_than` and kept, each archived once) and the two-window form
//! (`archive_then_delete` with `delete_after`: archived after the first window, deleted after the
//! second, only as the version their verified archive holds). The real archiver on the file
//! store, as `archiver`; the policies are `admin`'s (a member of retention_admin, not a
//! superuser: its claims read the kept rows' keys through row-level security), the rows `app`'s.

use pg_retention_integration::archiver::{text, Archiver};
use pg_retention_integration::{expect_error, scalar, Cluster};
use postgres::Client;
use std::path::PathBuf;

fn file_store() -> (PathBuf, String) {
    let dir = pg_retention_integration::temp_dir("pg-retention-windows");
    let url = format!("file://{}", dir.display());
    (dir, url)
}

/// `audit_log` with `n` closed rows, row `g` closed `days(g)` days ago.
fn audit_log(c: &Cluster, n: i64, days: &str) -> (Client, Client, Client) {
    c.execute(
        "postgres",
        "CREATE TABLE audit_log (id bigint PRIMARY KEY, state text NOT NULL, closed_at timestamptz,
                                 actor text, amount numeric(12,2), body jsonb)",
    );
    c.grant_app_and_admin("postgres");
    let (mut app, admin) = c.app_and_admin("postgres");
    app.batch_execute(&format!(
        "INSERT INTO audit_log
         SELECT g, 'closed', now() - make_interval(days => ({days})::int, hours => 1), 'user' || g % 17,
                g * 1.5, jsonb_build_object('g', g, 'note', repeat('x', 40))
           FROM generate_series(1, {n}) g"
    ))
    .unwrap();
    (c.connect("postgres"), app, admin)
}

/// The value of metric family `name` for policy `policy` (-1 when it has no sample).
fn metric(db: &mut Client, name: &str, policy: &str) -> i64 {
    scalar(
        db,
        &format!(
            "SELECT coalesce((SELECT m.value::bigint FROM retention.metrics() m
                               WHERE m.name = '{name}' AND m.labels->>'policy' = '{policy}'), -1)"
        ),
    )
}

fn preview(admin: &mut Client, policy: &str) -> (i64, i64) {
    let row = admin
        .query_one(
            "SELECT would_archive, would_delete FROM retention.preview($1)",
            &[&policy],
        )
        .unwrap();
    (row.get(0), row.get(1))
}

/// Every archived row, restored from every slice: how many rows, and how many ids appear in
/// more than one slice.
fn restored(c: &Cluster, a: &Archiver, db: &mut Client) -> (i64, i64, String) {
    let all = a
        .clone()
        .with_database_url(&c.restorer_url("postgres"))
        .restore_all();
    let rows = scalar(db, &format!("SELECT count(*) FROM ({all}) r"));
    let twice = scalar(
        db,
        &format!(
            "SELECT count(*) FROM (SELECT id FROM ({all}) r GROUP BY id HAVING count(*) > 1) d"
        ),
    );
    (rows, twice, all)
}

#[test]
fn an_archive_policy_archives_each_row_once_and_keeps_it() {
    let c = Cluster::start(&[]);
    // Two rows in three are 40 days old, the third 10 days: archived and young rows interleave
    // in key order.
    let (mut db, mut app, mut admin) =
        audit_log(&c, 3000, "CASE WHEN g % 3 = 0 THEN 10 ELSE 40 END");
    admin
        .batch_execute(
            "SELECT retention.add_policy(name => 'audit', relation => 'audit_log', kind => 'age',
                    age_column => 'closed_at', older_than => '30 days', terminal => $$state = 'closed'$$,
                    action => 'archive')",
        )
        .unwrap();
    assert_eq!(preview(&mut admin, "audit"), (2000, 0));
    let (dir, url) = file_store();
    let a = Archiver::new(&c.archiver_url("postgres"), &url);
    let o = a.run(&["once", "--batch-rows", "700"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        scalar(&mut db, "SELECT count(*) FROM audit_log"),
        3000,
        "nothing deleted"
    );
    assert_eq!(
        scalar(
            &mut db,
            "SELECT coalesce(sum(rows), 0)::bigint FROM retention.archives"
        ),
        2000
    );
    assert_eq!(
        scalar(
            &mut db,
            "SELECT coalesce(sum(deleted), 0)::bigint FROM retention.archives"
        ),
        0
    );
    assert_eq!(
        scalar(
            &mut db,
            "SELECT coalesce(sum(rows), 0)::bigint FROM retention.ledger WHERE method = 'archive'"
        ),
        2000
    );
    assert_eq!(
        scalar(
            &mut db,
            "SELECT count(*) FROM retention.batches WHERE state = 'archived'"
        ),
        scalar(&mut db, "SELECT count(*) FROM retention.archives")
    );
    assert_eq!(
        preview(&mut admin, "audit"),
        (0, 0),
        "nothing left to archive"
    );
    // Again: nothing new is archived.
    let archives = scalar(&mut db, "SELECT count(*) FROM retention.archives");
    let o = a.run(&["once", "--batch-rows", "700"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        scalar(&mut db, "SELECT count(*) FROM retention.archives"),
        archives
    );
    // A hundred young rows among the archived ones come of age (their keys lie inside the
    // archived batches' ranges, behind where claims stand), and a new old row arrives.
    app.batch_execute(
        "UPDATE audit_log SET closed_at = now() - interval '45 days' WHERE id % 3 = 0 AND id <= 300;
         INSERT INTO audit_log VALUES (5000, 'closed', now() - interval '50 days', 'late', 1, '{}')",
    )
    .unwrap();
    assert_eq!(preview(&mut admin, "audit"), (101, 0));
    let o = a.run(&["once", "--batch-rows", "700"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        scalar(
            &mut db,
            "SELECT coalesce(sum(rows), 0)::bigint FROM retention.archives"
        ),
        2101
    );
    assert_eq!(scalar(&mut db, "SELECT count(*) FROM audit_log"), 3001);
    assert_eq!(
        metric(&mut db, "pg_retention_policy_archived_kept_rows", "audit"),
        2101
    );
    assert_eq!(
        metric(&mut db, "pg_retention_policy_rows_archived_total", "audit"),
        2101
    );
    assert_eq!(
        metric(&mut db, "pg_retention_policy_rows_deleted_total", "audit"),
        0
    );
    // Every archived row is in exactly one slice, and the slices hold the rows as they are.
    let (rows, twice, all) = restored(&c, &a, &mut db);
    assert_eq!((rows, twice), (2101, 0), "each row archived once");
    assert_eq!(
        scalar(
            &mut db,
            &format!(
                "SELECT count(*) FROM ((SELECT * FROM audit_log WHERE closed_at < now() - interval '30 days')
                                        EXCEPT ALL ({all})) d"
            )
        ),
        0
    );
    // An archived row stays fixed: the guard refuses to change it.
    let (code, _) = expect_error(&mut app, "UPDATE audit_log SET actor = 'x' WHERE id = 1");
    assert_eq!(code, "RT501");
    // Its kept rows would be archived again by a policy that deletes at once: refused.
    let (code, _) = expect_error(
        &mut admin,
        "SELECT retention.alter_policy('audit', action => 'archive_then_delete')",
    );
    assert_eq!(code, "55000");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn two_windows_archive_after_the_first_and_delete_after_the_second() {
    let c = Cluster::start(&[]);
    // 600 rows 40 days old, 400 rows 15 days old, 200 rows 2 days old.
    let (mut db, mut app, mut admin) = audit_log(
        &c,
        1200,
        "CASE WHEN g <= 600 THEN 40 WHEN g <= 1000 THEN 15 ELSE 2 END",
    );
    db.batch_execute(
        "CREATE TABLE expected AS SELECT * FROM audit_log WHERE closed_at < now() - interval '7 days'",
    )
    .unwrap();
    admin
        .batch_execute(
            "SELECT retention.add_policy(name => 'audit', relation => 'audit_log', kind => 'age',
                    age_column => 'closed_at', older_than => '7 days', delete_after => '30 days',
                    terminal => $$state = 'closed'$$, action => 'archive_then_delete')",
        )
        .unwrap();
    assert_eq!(
        preview(&mut admin, "audit"),
        (1000, 0),
        "nothing is deleted before it is archived"
    );
    let (dir, url) = file_store();
    let a = Archiver::new(&c.archiver_url("postgres"), &url);
    let o = a.run(&["once", "--batch-rows", "300"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        scalar(
            &mut db,
            "SELECT coalesce(sum(rows), 0)::bigint FROM retention.archives"
        ),
        1000,
        "archived after the first window"
    );
    // The archiver's next pass deletes what is past the second window.
    let o = a.run(&["once", "--batch-rows", "300"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        scalar(&mut db, "SELECT count(*) FROM audit_log WHERE id <= 600"),
        0,
        "deleted after the second"
    );
    assert_eq!(
        scalar(&mut db, "SELECT count(*) FROM audit_log WHERE id > 600"),
        600
    );
    assert_eq!(
        scalar(
            &mut db,
            "SELECT coalesce(sum(rows), 0)::bigint FROM retention.ledger WHERE method = 'prune'"
        ),
        600
    );
    assert_eq!(
        scalar(&mut db, "SELECT count(*) FROM retention.archived_rows"),
        400
    );
    assert_eq!(
        metric(&mut db, "pg_retention_policy_archived_kept_rows", "audit"),
        400
    );
    assert_eq!(
        metric(&mut db, "pg_retention_policy_rows_deleted_total", "audit"),
        600
    );
    assert_eq!(
        metric(&mut db, "pg_retention_policy_rows_archived_total", "audit"),
        1000
    );
    assert_eq!(preview(&mut admin, "audit"), (0, 0));
    // The second window shortened to 10 days: the 15-day-old rows are due, but 50 are held.
    admin
        .batch_execute(
            "SELECT retention.alter_policy('audit', delete_after => '10 days');
             SELECT retention.place_hold('audit_log', 'id BETWEEN 601 AND 650', 'litigation', 'counsel')",
        )
        .unwrap();
    assert_eq!(preview(&mut admin, "audit"), (0, 350));
    assert_eq!(
        scalar(&mut admin, "SELECT retention.prune_archived('audit')"),
        350
    );
    assert_eq!(
        scalar(
            &mut db,
            "SELECT count(*) FROM audit_log WHERE id BETWEEN 601 AND 1000"
        ),
        50
    );
    assert_eq!(
        scalar(&mut db, "SELECT count(*) FROM retention.archived_rows"),
        50
    );
    // Held rows wait in their batch, still archived, and go once the hold is lifted.
    let hold: i64 = admin
        .query_one("SELECT max(id) FROM retention.holds", &[])
        .unwrap()
        .get(0);
    admin
        .batch_execute(&format!(
            "SELECT retention.lift_hold({hold}, 'counsel', 'settled')"
        ))
        .unwrap();
    assert_eq!(
        scalar(&mut admin, "SELECT retention.prune_archived('audit')"),
        50
    );
    assert_eq!(scalar(&mut db, "SELECT count(*) FROM audit_log"), 200);
    assert_eq!(
        scalar(&mut db, "SELECT count(*) FROM retention.archived_rows"),
        0
    );
    assert_eq!(
        scalar(
            &mut db,
            "SELECT count(*) FROM retention.batches WHERE state = 'archived'"
        ),
        0
    );
    assert_eq!(
        scalar(
            &mut db,
            "SELECT coalesce(sum(rows), 0)::bigint FROM retention.ledger WHERE method = 'prune'"
        ),
        1000
    );
    // Every row deleted is in a verified archive, once.
    let (rows, twice, all) = restored(&c, &a, &mut db);
    assert_eq!((rows, twice), (1000, 0));
    for (left, right) in [
        ("SELECT * FROM expected", all.as_str()),
        (all.as_str(), "SELECT * FROM expected"),
    ] {
        assert_eq!(
            scalar(
                &mut db,
                &format!("SELECT count(*) FROM (({left}) EXCEPT ALL ({right})) d")
            ),
            0
        );
    }
    let _ = app.batch_execute("SELECT 1");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn the_windows_are_refused_where_they_cannot_hold() {
    let c = Cluster::start(&[]);
    c.execute(
        "postgres",
        "CREATE TABLE keyed (id bigint PRIMARY KEY, state text, closed_at timestamptz);
         CREATE TABLE keyless (state text, closed_at timestamptz);",
    );
    c.grant_app_and_admin("postgres");
    let mut admin = c.admin("postgres");
    for (sql, code) in [
        // A kept row is known by its key.
        (
            "SELECT retention.add_policy('k', 'keyless', 'age', age_column => 'closed_at', older_than => '1 day',
                    terminal => 'true', action => 'archive')",
            "22023",
        ),
        (
            "SELECT retention.add_policy('k', 'keyless', 'age', age_column => 'closed_at', older_than => '1 day',
                    terminal => 'true', action => 'archive_then_delete', delete_after => '2 days')",
            "22023",
        ),
        // The second window is not shorter than the first.
        (
            "SELECT retention.add_policy('k', 'keyed', 'age', age_column => 'closed_at', older_than => '10 days',
                    terminal => 'true', action => 'archive_then_delete', delete_after => '2 days')",
            "22023",
        ),
        // Only an archive_then_delete policy has one.
        (
            "SELECT retention.add_policy('k', 'keyed', 'age', age_column => 'closed_at', older_than => '1 day',
                    delete_after => '2 days')",
            "22023",
        ),
        (
            "SELECT retention.add_policy('k', 'keyed', 'age', age_column => 'closed_at', older_than => '1 day',
                    terminal => 'true', action => 'archive', delete_after => '2 days')",
            "22023",
        ),
        // An archive policy needs its terminal predicate.
        (
            "SELECT retention.add_policy('k', 'keyed', 'age', age_column => 'closed_at', older_than => '1 day',
                    action => 'archive')",
            "22023",
        ),
        ("SELECT retention.prune_archived('nope')", "42704"),
    ] {
        let (got, message) = expect_error(&mut admin, sql);
        assert_eq!(got, code, "{sql}: {message}");
    }
    // A policy without a second window has nothing to delete later.
    admin
        .batch_execute(
            "SELECT retention.add_policy('k', 'keyed', 'age', age_column => 'closed_at', older_than => '1 day',
                    terminal => 'true', action => 'archive')",
        )
        .unwrap();
    assert_eq!(
        scalar(&mut admin, "SELECT retention.prune_archived('k')"),
        0
    );
    let (code, _) = expect_error(&mut admin, "SELECT retention.prune_archived('k', 0)");
    assert_eq!(code, "22023");
}
