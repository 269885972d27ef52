//! Foreign keys that reference a governed table act as they were declared: a cascade takes the
//! dependent rows with their parent unless one is held, SET NULL updates them, NO ACTION and
//! RESTRICT keep the row and are counted; deferrable keys (Django's) included, and a
//! referencing table whose row security would hide rows from the policy's owner refused
//! (engine/references.rs).
//!
//! Production roles: tables by the superuser, rows by `app`, every `retention.*` call by
//! `admin` (a member of `retention_admin` with SELECT and DELETE on the tables).

use pg_retention_integration::jobs::{fill_jobs, JOBS};
use pg_retention_integration::{expect_error, scalar, text, Cluster};
use postgres::Client;

fn set_up(c: &Cluster, ddl: &str) -> (Client, Client) {
    c.execute("postgres", ddl);
    c.grant_app_and_admin("postgres");
    c.app_and_admin("postgres")
}

#[test]
fn a_cascade_takes_dependent_rows_with_their_parent_unless_one_is_held() {
    let c = Cluster::start(&[]);
    let (mut app, mut admin) = set_up(&c, JOBS);
    fill_jobs(&mut app);
    // Keep the newest 5 finished jobs per queue (running jobs count in the ranking, never go).
    admin
        .batch_execute(
            "SELECT retention.add_policy(name => 'jobs', relation => 'jobs', kind => 'keep_latest',
                    group_by => ARRAY['queue'], order_by => 'id', keep => 5,
                    terminal => $$state = 'done'$$, batch_size => 7)",
        )
        .unwrap();
    // A hold on one event of job 3 (in q0, well past the newest 5) keeps job 3 and its events.
    admin
        .batch_execute(
            "SELECT retention.place_hold('job_events', $$job_id = 3 AND kind = 'started'$$,
                                         'case 1', 'legal')",
        )
        .unwrap();
    let eligible: i64 = scalar(
        &mut admin,
        "SELECT count(*) FROM (SELECT id, state, row_number() OVER (PARTITION BY queue ORDER BY id DESC) rn
                                 FROM jobs) r WHERE rn > 5 AND state = 'done'",
    );
    let preview: (i64, i64, i64) = {
        let row = admin
            .query_one(
                "SELECT eligible, would_delete, referenced FROM retention.preview('jobs')",
                &[],
            )
            .unwrap();
        (row.get(0), row.get(1), row.get(2))
    };
    assert_eq!(preview.0, eligible);
    assert_eq!(
        preview.2, 1,
        "job 3 is kept through its held event, as referenced"
    );
    assert_eq!(preview.1, eligible - 1);

    admin.batch_execute("CALL retention.run('jobs')").unwrap();
    let left: i64 = scalar(&mut admin, "SELECT count(*) FROM jobs");
    assert_eq!(
        left,
        60 - (eligible - 1),
        "the run deletes what preview said"
    );
    assert_eq!(
        scalar(&mut admin, "SELECT count(*) FROM jobs WHERE id = 3"),
        1
    );
    assert_eq!(
        scalar(
            &mut admin,
            "SELECT count(*) FROM job_events WHERE job_id = 3"
        ),
        3,
        "the held event and its siblings stay with their job"
    );
    assert_eq!(
        scalar(
            &mut admin,
            "SELECT count(*) FROM job_events e WHERE NOT EXISTS (SELECT 1 FROM jobs j WHERE j.id = e.job_id)"
        ),
        0
    );
    assert_eq!(
        scalar(&mut admin, "SELECT count(*) FROM job_events"),
        3 * left,
        "every deleted job's events went with it"
    );
    assert_eq!(
        scalar(
            &mut admin,
            "SELECT count(*) FROM jobs WHERE state = 'running'"
        ),
        12,
        "no running job goes"
    );
    // Every row that left is in the ledger: the jobs as rows, their events per step.
    assert_eq!(
        scalar(
            &mut admin,
            "SELECT sum(rows_deleted)::bigint FROM retention.ledger WHERE policy = 'jobs'"
        ),
        eligible - 1
    );
    assert_eq!(
        scalar(
            &mut admin,
            "SELECT sum((d->>'deleted')::bigint)::bigint FROM retention.ledger l,
                    jsonb_array_elements(l.detail->'dependents') d
              WHERE l.method = 'prune' AND d->>'table' = 'public.job_events'"
        ),
        3 * (eligible - 1)
    );
    assert_eq!(
        scalar(
            &mut admin,
            "SELECT rows FROM retention.ledger WHERE method = 'reference_skip'"
        ),
        1
    );
    assert_eq!(
        scalar(
            &mut admin,
            "SELECT reference_skips FROM retention.stats WHERE policy = 'jobs'"
        ),
        1
    );

    // Lifting the hold lets job 3 go with its events at the next run.
    admin
        .batch_execute(
            "SELECT retention.lift_hold((SELECT max(id) FROM retention.holds), 'legal', 'closed')",
        )
        .unwrap();
    admin.batch_execute("CALL retention.run('jobs')").unwrap();
    assert_eq!(
        scalar(
            &mut admin,
            "SELECT count(*) FROM job_events WHERE job_id = 3"
        ),
        0
    );
}

#[test]
fn set_null_keys_let_the_referenced_row_go_and_update_the_referencing_rows() {
    let c = Cluster::start(&[]);
    let (mut app, mut admin) = set_up(
        &c,
        "CREATE TABLE workers (id int PRIMARY KEY, seen_at timestamptz NOT NULL);
         CREATE TABLE tasks (id int PRIMARY KEY,
                             worker_id int REFERENCES workers (id) ON DELETE SET NULL);",
    );
    app.batch_execute(
        "INSERT INTO workers SELECT g, now() - make_interval(days => g) FROM generate_series(1, 10) g;
         INSERT INTO tasks SELECT g, 1 + g % 10 FROM generate_series(1, 40) g;",
    )
    .unwrap();
    admin
        .batch_execute(
            "SELECT retention.add_policy(name => 'workers', relation => 'workers', kind => 'age',
                    age_column => 'seen_at', older_than => '5 days 12 hours')",
        )
        .unwrap();
    assert_eq!(
        scalar(
            &mut admin,
            "SELECT would_delete FROM retention.preview('workers')"
        ),
        5
    );
    admin.batch_execute("CALL retention.run()").unwrap();
    assert_eq!(scalar(&mut admin, "SELECT count(*) FROM workers"), 5);
    assert_eq!(
        scalar(
            &mut admin,
            "SELECT count(*) FROM tasks WHERE worker_id IS NULL"
        ),
        20
    );
    assert_eq!(
        scalar(
            &mut admin,
            "SELECT sum((d->>'updated')::bigint)::bigint FROM retention.ledger l,
                    jsonb_array_elements(l.detail->'dependents') d WHERE d->>'table' = 'public.tasks'"
        ),
        20
    );
}

#[test]
fn restricting_keys_are_counted_and_a_wholly_kept_backlog_is_unhealthy() {
    let c = Cluster::start(&[]);
    let (mut app, mut admin) = set_up(
        &c,
        "CREATE TABLE runs (id int PRIMARY KEY, at timestamptz NOT NULL);
         CREATE TABLE run_logs (id int PRIMARY KEY, run_id int NOT NULL REFERENCES runs (id));",
    );
    app.batch_execute(
        "INSERT INTO runs SELECT g, now() - interval '40 days' FROM generate_series(1, 8) g;
         INSERT INTO run_logs SELECT g, g FROM generate_series(1, 8) g;",
    )
    .unwrap();
    admin
        .batch_execute(
            "SELECT retention.add_policy(name => 'runs', relation => 'runs', kind => 'age',
                    age_column => 'at', older_than => '30 days')",
        )
        .unwrap();
    let row = admin
        .query_one(
            "SELECT eligible, would_delete, referenced FROM retention.preview('runs')",
            &[],
        )
        .unwrap();
    assert_eq!(
        (
            row.get::<_, i64>(0),
            row.get::<_, i64>(1),
            row.get::<_, i64>(2)
        ),
        (8, 0, 8)
    );
    admin.batch_execute("CALL retention.run()").unwrap();
    assert_eq!(scalar(&mut admin, "SELECT count(*) FROM runs"), 8);
    assert_eq!(
        scalar(
            &mut admin,
            "SELECT reference_skips FROM retention.stats WHERE policy = 'runs'"
        ),
        8
    );
    let reasons: String = text(
        &mut admin,
        "SELECT array_to_string(reasons, '; ') FROM retention.health() WHERE policy = 'runs'",
    );
    assert!(
        reasons.contains("kept by rows that reference them"),
        "health says why nothing goes: {reasons}"
    );
    let metric: i64 = scalar(
        &mut admin,
        "SELECT value::bigint FROM retention.metrics() WHERE name = 'pg_retention_policy_reference_skips_total'",
    );
    assert_eq!(metric, 8);
    // Once the logs go, so do the runs.
    app.batch_execute("DELETE FROM run_logs").unwrap();
    admin.batch_execute("CALL retention.run()").unwrap();
    assert_eq!(scalar(&mut admin, "SELECT count(*) FROM runs"), 0);
}

#[test]
fn a_tree_of_rows_that_cascades_to_itself_keeps_a_held_branch() {
    let c = Cluster::start(&[]);
    let (mut app, mut admin) = set_up(
        &c,
        "CREATE TABLE comments (id int PRIMARY KEY,
                                parent_id int REFERENCES comments (id) ON DELETE CASCADE,
                                at timestamptz NOT NULL);",
    );
    // 1 (old) with replies 2 (old) and 3 (new); 4 (old, alone); 5 (old) with reply 6 (old).
    app.batch_execute(
        "INSERT INTO comments VALUES (1, NULL, now() - interval '60 days'), (4, NULL, now() - interval '60 days'),
                                     (5, NULL, now() - interval '60 days');
         INSERT INTO comments VALUES (2, 1, now() - interval '50 days'), (3, 1, now()),
                                     (6, 5, now() - interval '50 days');",
    )
    .unwrap();
    admin
        .batch_execute(
            "SELECT retention.add_policy(name => 'comments', relation => 'comments', kind => 'age',
                    age_column => 'at', older_than => '30 days');
             SELECT retention.place_hold('comments', 'id = 3', 'dispute', 'legal');",
        )
        .unwrap();
    // A cascade from a table to itself is a tree of unknown depth: with a hold on the table, a
    // row with replies is kept (its cascade could reach the held reply); rows without go.
    let would = scalar(
        &mut admin,
        "SELECT would_delete FROM retention.preview('comments')",
    );
    admin.batch_execute("CALL retention.run()").unwrap();
    let left: Vec<i32> = admin
        .query("SELECT id FROM comments ORDER BY id", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(
        left,
        vec![1, 3, 5],
        "2, 4 and 6 go; 1 keeps its held reply 3"
    );
    assert_eq!(would, 3);
    // Without replies, 5 goes at the next run; 1 stays while 3 is held.
    admin.batch_execute("CALL retention.run()").unwrap();
    assert_eq!(scalar(&mut admin, "SELECT count(*) FROM comments"), 2);
    // Without the hold, the old root goes and its new reply with it, as the key declares.
    admin
        .batch_execute(
            "SELECT retention.lift_hold((SELECT max(id) FROM retention.holds), 'legal', 'settled')",
        )
        .unwrap();
    admin.batch_execute("CALL retention.run()").unwrap();
    assert_eq!(scalar(&mut admin, "SELECT count(*) FROM comments"), 0);
}

#[test]
fn a_table_deferrable_keys_reference_is_swept_as_django_declares_them() {
    let c = Cluster::start(&[]);
    // Django declares every foreign key DEFERRABLE INITIALLY DEFERRED.
    let (mut app, mut admin) = set_up(
        &c,
        "CREATE TABLE invoices (id int PRIMARY KEY, at timestamptz NOT NULL);
         CREATE TABLE payments (id int PRIMARY KEY,
                                invoice_id int REFERENCES invoices DEFERRABLE INITIALLY DEFERRED);
         CREATE TABLE notes (id int PRIMARY KEY,
                             invoice_id int REFERENCES invoices ON DELETE CASCADE DEFERRABLE INITIALLY DEFERRED);",
    );
    app.batch_execute(
        "INSERT INTO invoices SELECT g, now() - interval '400 days' FROM generate_series(1, 20) g;
         INSERT INTO payments SELECT g, g FROM generate_series(1, 5) g;
         INSERT INTO notes SELECT g, g FROM generate_series(1, 20) g;",
    )
    .unwrap();
    admin
        .batch_execute(
            "SELECT retention.add_policy(name => 'invoices', relation => 'invoices', kind => 'age',
                    age_column => 'at', older_than => '365 days')",
        )
        .unwrap();
    assert_eq!(
        scalar(
            &mut admin,
            "SELECT would_delete FROM retention.preview('invoices')"
        ),
        15
    );
    admin.batch_execute("CALL retention.run()").unwrap();
    assert_eq!(scalar(&mut admin, "SELECT count(*) FROM invoices"), 5);
    assert_eq!(scalar(&mut admin, "SELECT count(*) FROM notes"), 5);
    assert_eq!(
        scalar(
            &mut admin,
            "SELECT count(*) FROM retention.ledger WHERE method = 'error'"
        ),
        0
    );
}

#[test]
fn row_level_security_on_a_referencing_table_or_a_clocks_table_is_refused() {
    let c = Cluster::start(&[]);
    let (mut app, mut admin) = set_up(
        &c,
        "CREATE TABLE orders (id int PRIMARY KEY, at timestamptz NOT NULL);
         CREATE TABLE order_events (id int PRIMARY KEY, order_id int NOT NULL REFERENCES orders ON DELETE CASCADE,
                                    at timestamptz NOT NULL, tenant text NOT NULL);
         ALTER TABLE order_events ENABLE ROW LEVEL SECURITY;
         CREATE POLICY own_rows ON order_events USING (tenant = current_user);",
    );
    c.execute(
        "postgres",
        "CREATE POLICY app_writes ON order_events TO app USING (true) WITH CHECK (true)",
    );
    app.batch_execute(
        "INSERT INTO orders SELECT g, now() - interval '90 days' FROM generate_series(1, 10) g;
         INSERT INTO order_events SELECT g, g, now(), 'someone' FROM generate_series(1, 10) g;",
    )
    .unwrap();
    // A clock read from rows the owner cannot all see would make orders look older than they
    // are: refused.
    let (state, message) = expect_error(
        &mut admin,
        "SELECT retention.add_policy(name => 'orders', relation => 'orders', kind => 'age',
                age_table => 'order_events', age_table_column => 'at', older_than => '30 days')",
    );
    assert_eq!(state, "42501", "{message}");
    // So is a sweep whose cascade guard could not see the referencing rows (a hold on one of
    // them must keep its order).
    admin
        .batch_execute(
            "SELECT retention.add_policy(name => 'orders', relation => 'orders', kind => 'age',
                    age_column => 'at', older_than => '30 days');
             SELECT retention.place_hold('order_events', 'id = 1', 'case', 'legal');",
        )
        .unwrap();
    let (state, message) = expect_error(&mut admin, "SELECT * FROM retention.preview('orders')");
    assert_eq!(state, "42501", "{message}");
    let (state, _) = expect_error(&mut admin, "CALL retention.run()");
    assert_eq!(state, "RT601");
    assert_eq!(
        scalar(
            &mut c.connect("postgres"),
            "SELECT count(*) FROM order_events"
        ),
        10
    );
}
