//! The tables real libraries create, governed as their users would: foreign keys acting as
//! declared (cascades with holds on the dependent rows, SET NULL, RESTRICT counted), row-level
//! security refused rather than silently narrowing a policy, tables without a primary key,
//! and options given where they have no effect refused.
//!
//! Production roles: tables by the superuser, rows by `app`, every `retention.*` call by
//! `admin` (a member of `retention_admin` with SELECT and DELETE on the tables).

use pg_retention_integration::{expect_error, scalar, Cluster};
use postgres::Client;

fn text(db: &mut Client, sql: &str) -> String {
    db.query_one(sql, &[])
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .get(0)
}

fn set_up(c: &Cluster, ddl: &str) -> (Client, Client) {
    c.execute("postgres", ddl);
    c.grant_app_and_admin("postgres");
    c.app_and_admin("postgres")
}

/// A job queue: jobs (finished or running) and their events, which reference them ON DELETE
/// CASCADE, as job libraries declare them. 20 jobs per queue in 3 queues; each job has 3
/// events; jobs with id % 5 = 0 are still running.
const JOBS: &str = "
    CREATE TABLE jobs (id bigint PRIMARY KEY, queue text NOT NULL, state text NOT NULL,
                       finished_at timestamptz);
    CREATE TABLE job_events (id bigserial PRIMARY KEY,
                             job_id bigint NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
                             at timestamptz NOT NULL, kind text NOT NULL);";

fn fill_jobs(app: &mut Client) {
    app.batch_execute(
        "INSERT INTO jobs
         SELECT g, 'q' || (g % 3), CASE WHEN g % 5 = 0 THEN 'running' ELSE 'done' END,
                CASE WHEN g % 5 = 0 THEN NULL ELSE now() - make_interval(hours => g) END
           FROM generate_series(1, 60) g;
         INSERT INTO job_events (job_id, at, kind)
         SELECT j, now() - make_interval(hours => j), k
           FROM generate_series(1, 60) j, unnest(ARRAY['queued', 'started', 'finished']) k;",
    )
    .unwrap();
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
fn row_level_security_that_would_hide_rows_is_refused() {
    let c = Cluster::start(&[]);
    let (mut app, mut admin) = set_up(
        &c,
        "CREATE TABLE history (id int PRIMARY KEY, owner_name text NOT NULL, at timestamptz NOT NULL);
         ALTER TABLE history ENABLE ROW LEVEL SECURITY;
         CREATE POLICY own_rows ON history USING (owner_name = current_user);",
    );
    // The owner (the superuser here) sees every row; app writes through a permissive policy.
    c.execute(
        "postgres",
        "CREATE POLICY app_writes ON history TO app USING (true) WITH CHECK (true)",
    );
    app.batch_execute(
        "INSERT INTO history SELECT g, 'u' || g % 4, now() - interval '10 days' FROM generate_series(1, 20) g",
    )
    .unwrap();
    let add = "SELECT retention.add_policy(name => 'history', relation => 'history', kind => 'age',
                      age_column => 'at', older_than => '1 day')";
    let (state, message) = expect_error(&mut admin, add);
    assert_eq!(state, "42501");
    assert!(message.contains("row-level security"), "{message}");

    // With BYPASSRLS the policy governs every row.
    c.execute("postgres", "ALTER ROLE admin BYPASSRLS");
    let mut admin = c.admin("postgres");
    admin.batch_execute(add).unwrap();
    assert_eq!(
        scalar(
            &mut admin,
            "SELECT would_delete FROM retention.preview('history')"
        ),
        20
    );
    // Losing it later makes the run fail closed, ledgered, instead of narrowing silently.
    c.execute("postgres", "ALTER ROLE admin NOBYPASSRLS");
    let mut admin = c.admin("postgres");
    let (state, _) = expect_error(&mut admin, "CALL retention.run()");
    assert_eq!(state, "RT601", "the run reports the failed policy");
    // Counted by the table's owner: admin's own reads are filtered now.
    assert_eq!(
        scalar(&mut c.connect("postgres"), "SELECT count(*) FROM history"),
        20
    );
    assert!(text(
        &mut admin,
        "SELECT detail->>'error' FROM retention.ledger WHERE method = 'error' ORDER BY id DESC LIMIT 1"
    )
    .contains("row-level security"));
}

#[test]
fn tables_without_a_primary_key_are_swept_exactly() {
    let c = Cluster::start(&[]);
    // pgbench's history table, as pgbench creates it, and a keyless audit copy.
    let (mut app, mut admin) = set_up(
        &c,
        "CREATE TABLE pgbench_history (tid int, bid int, aid int, delta int, mtime timestamp, filler char(22));",
    );
    app.batch_execute(
        "INSERT INTO pgbench_history (tid, bid, aid, delta, mtime)
         SELECT g % 10, 1, g, g % 7, now() - make_interval(mins => g) FROM generate_series(1, 3000) g;
         -- Duplicates: rows with no distinguishing column at all.
         INSERT INTO pgbench_history (tid, bid, aid, delta, mtime)
         SELECT 1, 1, 1, 1, now() - interval '3 days' FROM generate_series(1, 50);",
    )
    .unwrap();
    admin
        .batch_execute(
            "SELECT retention.add_policy(name => 'history', relation => 'pgbench_history',
                    kind => 'age', age_column => 'mtime', older_than => '1 day', batch_size => 250)",
        )
        .unwrap();
    let expected: i64 = scalar(
        &mut admin,
        "SELECT count(*) FROM pgbench_history WHERE mtime < now() - interval '1 day'",
    );
    assert_eq!(
        scalar(
            &mut admin,
            "SELECT would_delete FROM retention.preview('history')"
        ),
        expected
    );
    admin.batch_execute("CALL retention.run()").unwrap();
    assert_eq!(
        scalar(&mut admin, "SELECT count(*) FROM pgbench_history"),
        3050 - expected
    );
    assert_eq!(
        scalar(
            &mut admin,
            "SELECT sum(rows_deleted)::bigint FROM retention.ledger WHERE policy = 'history'"
        ),
        expected
    );
    // keep_latest ranks keyless rows too (ties by their place); it governs the table alone.
    admin
        .batch_execute("SELECT retention.drop_policy('history')")
        .unwrap();
    admin
        .batch_execute(
            "SELECT retention.add_policy(name => 'per_teller', relation => 'pgbench_history',
                    kind => 'keep_latest', group_by => ARRAY['tid'], order_by => 'mtime', keep => 10)",
        )
        .unwrap();
    admin
        .batch_execute("CALL retention.run('per_teller')")
        .unwrap();
    assert_eq!(
        scalar(
            &mut admin,
            "SELECT max(n) FROM (SELECT count(*) n FROM pgbench_history GROUP BY tid) x"
        ),
        10
    );
    // An archive policy needs a key: its batches are key ranges.
    let (state, _) = expect_error(
        &mut admin,
        "SELECT retention.add_policy(name => 'a', relation => 'pgbench_history', kind => 'age',
                age_column => 'mtime', older_than => '1 day', terminal => 'true',
                action => 'archive_then_delete')",
    );
    assert_eq!(state, "42P10");
}

#[test]
fn options_that_would_have_no_effect_are_refused() {
    let c = Cluster::start(&[]);
    let (_app, mut admin) = set_up(
        &c,
        "CREATE TABLE v (id int PRIMARY KEY, doc int NOT NULL, at timestamptz NOT NULL);",
    );
    for (options, what) in [
        (
            "kind => 'versions', group_by => ARRAY['doc'], order_by => 'at', keep => 5, min_keep => 2",
            "min_keep",
        ),
        (
            "kind => 'keep_latest', group_by => ARRAY['doc'], order_by => 'at', keep => 5, age_column => 'at', older_than => '7 days'",
            "older_than",
        ),
        (
            "kind => 'age', age_column => 'at', older_than => '7 days', keep => 3",
            "keep",
        ),
        (
            "kind => 'age', age_column => 'at', older_than => '7 days', group_by => ARRAY['doc']",
            "group_by",
        ),
        (
            "kind => 'versions', group_by => ARRAY['doc'], order_by => 'at', keep => 5, window_floor => '1 day'",
            "window_floor",
        ),
    ] {
        let (state, message) = expect_error(
            &mut admin,
            &format!("SELECT retention.add_policy(name => 'p', relation => 'v', {options})"),
        );
        assert_eq!(state, "22023", "{options}: {message}");
        assert!(
            message.starts_with(what),
            "{options}: the refusal names {what}: {message}"
        );
    }
    // The combination a user means by "older than 7 days, but keep the newest 5" is one
    // versions policy, which is accepted.
    admin
        .batch_execute(
            "SELECT retention.add_policy(name => 'p', relation => 'v', kind => 'versions',
                    group_by => ARRAY['doc'], order_by => 'at', keep => 2147483647, min_keep => 5,
                    age_column => 'at', older_than => '7 days')",
        )
        .unwrap();
}

#[test]
fn a_librarys_own_delete_trigger_runs_with_the_search_path_the_policy_names() {
    let c = Cluster::start(&[]);
    c.grant_app_and_admin("postgres");
    // A library's schema: its jobs table, and a DELETE trigger (the library's) that names its
    // log table without a schema, as the library's migrations wrote it.
    c.execute(
        "postgres",
        "CREATE SCHEMA lib;
         CREATE TABLE lib.jobs (id int PRIMARY KEY, finished_at timestamptz NOT NULL);
         CREATE TABLE lib.job_log (job_id int, gone_at timestamptz DEFAULT now());
         CREATE FUNCTION lib.log_delete() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             INSERT INTO job_log (job_id) VALUES (OLD.id);
             RETURN OLD;
         END $$;
         CREATE TRIGGER log_delete BEFORE DELETE ON lib.jobs FOR EACH ROW EXECUTE FUNCTION lib.log_delete();
         CREATE SCHEMA app_owned AUTHORIZATION app;",
    );
    c.execute(
        "postgres",
        "GRANT USAGE ON SCHEMA lib TO app, admin;
         GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA lib TO app;
         GRANT SELECT, DELETE ON lib.jobs TO admin; GRANT INSERT ON lib.job_log TO admin;",
    );
    let (mut app, mut admin) = c.app_and_admin("postgres");
    app.batch_execute(
        "INSERT INTO lib.jobs SELECT g, now() - make_interval(days => g) FROM generate_series(1, 20) g",
    )
    .unwrap();
    admin
        .batch_execute(
            "SELECT retention.add_policy(name => 'jobs', relation => 'lib.jobs', kind => 'age',
                    age_column => 'finished_at', older_than => '10 days 12 hours')",
        )
        .unwrap();
    // Under the pinned search_path the trigger finds no job_log: the run fails, typed and
    // ledgered, naming the trigger.
    let (state, _) = expect_error(&mut admin, "CALL retention.run()");
    assert_eq!(state, "RT601");
    let error = text(
        &mut admin,
        "SELECT detail->>'sqlstate' || ' ' || (detail->>'error') FROM retention.ledger
          WHERE method = 'error' ORDER BY id DESC LIMIT 1",
    );
    assert!(
        error.starts_with("42P01") && error.contains("log_delete"),
        "{error}"
    );
    assert_eq!(scalar(&mut admin, "SELECT count(*) FROM lib.jobs"), 20);
    // A schema someone else than the table's owner owns is refused.
    let (state, _) = expect_error(
        &mut admin,
        "SELECT retention.alter_policy('jobs', search_path => ARRAY['app_owned'])",
    );
    assert_eq!(state, "42501");
    let (state, _) = expect_error(
        &mut admin,
        "SELECT retention.alter_policy('jobs', search_path => ARRAY['lib', 'pg_catalog'])",
    );
    assert_eq!(state, "22023");
    // The library's schema: the trigger runs as its authors intended.
    admin
        .batch_execute("SELECT retention.alter_policy('jobs', search_path => ARRAY['lib'])")
        .unwrap();
    admin.batch_execute("CALL retention.run()").unwrap();
    assert_eq!(scalar(&mut admin, "SELECT count(*) FROM lib.jobs"), 10);
    assert_eq!(
        scalar(
            &mut c.connect("postgres"),
            "SELECT count(*) FROM lib.job_log"
        ),
        10
    );
    assert_eq!(
        text(
            &mut admin,
            "SELECT array_to_string(search_path, ',') FROM retention.policies WHERE name = 'jobs'"
        ),
        "lib"
    );
}

#[test]
fn policies_on_one_table_compose_and_preview_totals_the_table() {
    let c = Cluster::start(&[]);
    let (mut app, mut admin) = set_up(
        &c,
        "CREATE TABLE job_runs (id int PRIMARY KEY, job text NOT NULL, state text NOT NULL,
                                finished_at timestamptz NOT NULL);",
    );
    // A weekly job (40 runs, all older than 7 days) and an hourly one (200 runs, 1 an hour).
    app.batch_execute(
        "INSERT INTO job_runs SELECT g, 'weekly', 'done', now() - make_interval(days => 7 * g) FROM generate_series(1, 40) g;
         INSERT INTO job_runs SELECT 1000 + g, 'hourly', 'done', now() - make_interval(hours => g) FROM generate_series(1, 200) g;",
    )
    .unwrap();
    admin
        .batch_execute(
            "SELECT retention.add_policy(name => 'old_runs', relation => 'job_runs', kind => 'age',
                    age_column => 'finished_at', older_than => '7 days', terminal => $$state = 'done'$$)",
        )
        .unwrap();
    // "Keep the newest 10 runs per job" beside it would be a union that deletes what it keeps.
    let (state, message) = expect_error(
        &mut admin,
        "SELECT retention.add_policy(name => 'newest', relation => 'job_runs', kind => 'keep_latest',
                group_by => ARRAY['job'], order_by => 'finished_at', keep => 10)",
    );
    assert_eq!(state, "22023");
    assert!(
        message.contains("would delete rows another keeps"),
        "{message}"
    );
    // Said in one policy: older than 7 days and past the newest 10 of its job.
    admin
        .batch_execute(
            "SELECT retention.drop_policy('old_runs');
             SELECT retention.add_policy(name => 'runs', relation => 'job_runs', kind => 'versions',
                    group_by => ARRAY['job'], order_by => 'finished_at', keep => 2147483647,
                    min_keep => 10, age_column => 'finished_at', older_than => '7 days')",
        )
        .unwrap();
    let would: i64 = scalar(
        &mut admin,
        "SELECT would_delete FROM retention.preview('runs')",
    );
    admin.batch_execute("CALL retention.run()").unwrap();
    assert_eq!(
        scalar(
            &mut admin,
            "SELECT count(*) FROM job_runs WHERE job = 'weekly'"
        ),
        10,
        "the weekly job keeps its newest 10 runs"
    );
    assert_eq!(
        scalar(
            &mut admin,
            "SELECT count(*) FROM job_runs WHERE job = 'hourly'"
        ),
        167,
        "hourly runs go once older than 7 days (the 33 runs of 168..200 hours ago)"
    );
    assert_eq!(would, 30 + 33, "preview said what the run deleted");

    // Two age policies on one table (tenants' windows that overlap) delete their union, and
    // preview's table total is what the run deletes, while the per-policy figures overlap.
    c.execute(
        "postgres",
        "CREATE TABLE outbox (id int PRIMARY KEY, tenant int NOT NULL, at timestamptz NOT NULL)",
    );
    c.grant_app_and_admin("postgres");
    app.batch_execute(
        "INSERT INTO outbox SELECT g, g % 4, now() - make_interval(days => g % 60) FROM generate_series(1, 400) g",
    )
    .unwrap();
    admin
        .batch_execute(
            "SELECT retention.add_policy(name => 'outbox_all', relation => 'outbox', kind => 'age',
                    age_column => 'at', older_than => '30 days');
             SELECT retention.add_policy(name => 'outbox_t1', relation => 'outbox', kind => 'age',
                    age_column => 'at', older_than => '10 days', scope => 'tenant = 1');",
        )
        .unwrap();
    let (sum, total): (i64, i64) = {
        let row = admin
            .query_one(
                "SELECT sum(would_delete)::bigint, max(table_would_delete) FROM retention.preview()
                  WHERE policy LIKE 'outbox%'",
                &[],
            )
            .unwrap();
        (row.get(0), row.get(1))
    };
    let before = scalar(&mut admin, "SELECT count(*) FROM outbox");
    admin.batch_execute("CALL retention.run()").unwrap();
    let deleted = before - scalar(&mut admin, "SELECT count(*) FROM outbox");
    assert_eq!(total, deleted, "the table total is what the run deleted");
    assert!(
        sum > deleted,
        "the per-policy figures overlap: {sum} > {deleted}"
    );
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
fn a_finish_time_that_lives_in_another_table_or_an_expression_is_a_clock() {
    let c = Cluster::start(&[]);
    let (mut app, mut admin) = set_up(&c, JOBS);
    // Jobs know their state, not when they finished: their events do. 60 jobs, job j's events
    // j days old; jobs with j % 5 = 0 are still running.
    fill_jobs(&mut app);
    app.batch_execute(
        "UPDATE job_events SET at = now() - make_interval(days => job_id::int) - make_interval(mins => id::int)",
    )
    .unwrap();
    admin
        .batch_execute(
            "SELECT retention.add_policy(name => 'jobs', relation => 'jobs', kind => 'age',
                    age_table => 'job_events', age_table_column => 'at', older_than => '30 days',
                    terminal => $$state = 'done'$$)",
        )
        .unwrap();
    let expected = scalar(
        &mut admin,
        "SELECT count(*) FROM jobs j WHERE state = 'done'
            AND (SELECT max(at) FROM job_events e WHERE e.job_id = j.id) < now() - interval '30 days'",
    );
    assert!(expected > 0);
    assert_eq!(
        scalar(
            &mut admin,
            "SELECT would_delete FROM retention.preview('jobs')"
        ),
        expected
    );
    admin.batch_execute("CALL retention.run()").unwrap();
    assert_eq!(
        scalar(&mut admin, "SELECT count(*) FROM jobs"),
        60 - expected
    );
    assert_eq!(
        scalar(
            &mut admin,
            "SELECT count(*) FROM jobs WHERE state = 'running'"
        ),
        12,
        "running jobs stay whatever their events' age"
    );
    assert_eq!(
        scalar(&mut admin, "SELECT count(*) FROM job_events"),
        3 * (60 - expected),
        "finished jobs went with their events, through the cascade"
    );
    // The clock must be a time read through the table's one key to it.
    let (state, _) = expect_error(
        &mut admin,
        "SELECT retention.add_policy(name => 'x', relation => 'jobs', kind => 'age',
                age_table => 'job_events', age_table_column => 'kind', older_than => '1 day')",
    );
    assert_eq!(state, "42804");

    // An expression over the row.
    c.execute(
        "postgres",
        "CREATE TABLE runs (id int PRIMARY KEY, finished_at timestamptz, updated_at timestamptz NOT NULL)",
    );
    c.grant_app_and_admin("postgres");
    app.batch_execute(
        "INSERT INTO runs SELECT g, CASE WHEN g % 2 = 0 THEN now() - make_interval(days => g) END,
                                 now() - make_interval(days => 2 * g) FROM generate_series(1, 40) g",
    )
    .unwrap();
    admin
        .batch_execute(
            "SELECT retention.add_policy(name => 'runs', relation => 'runs', kind => 'age',
                    age_expression => 'coalesce(finished_at, updated_at)', older_than => '20 days')",
        )
        .unwrap();
    let expected = scalar(
        &mut admin,
        "SELECT count(*) FROM runs WHERE coalesce(finished_at, updated_at) < now() - interval '20 days'",
    );
    admin.batch_execute("CALL retention.run('runs')").unwrap();
    assert_eq!(
        scalar(&mut admin, "SELECT count(*) FROM runs"),
        40 - expected
    );
    for (expression, state) in [
        ("finished_at IS NULL", "RT101"),
        ("(SELECT max(at) FROM job_events)", "RT101"),
        ("coalesce(finished_at, clock_timestamp())", "RT101"),
    ] {
        let (found, message) = expect_error(
            &mut admin,
            &format!(
                "SELECT retention.add_policy(name => 'bad', relation => 'runs', kind => 'age',
                        age_expression => $${expression}$$, older_than => '1 day')"
            ),
        );
        assert_eq!(found, state, "{expression}: {message}");
    }
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
