//! The tables real libraries create, governed as their users would: row-level security refused
//! rather than silently narrowing a policy, tables without a primary key, options without
//! effect refused, a library's own DELETE trigger and the search_path its policy names, several
//! policies on one table, clocks from an expression or a related table. Foreign keys:
//! tests/tests/foreign_keys.rs; the libraries themselves: scripts/libraries.
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

    // The documented opt-in governs only the rows admin sees, and preview and health say so.
    app.batch_execute(
        "INSERT INTO history SELECT g, 'admin', now() - interval '10 days' FROM generate_series(101, 105) g",
    )
    .unwrap();
    admin
        .batch_execute(
            "SELECT retention.add_policy(name => 'mine', relation => 'history', kind => 'age',
                    age_column => 'at', older_than => '1 day', visible_rows_only => true)",
        )
        .unwrap();
    assert_eq!(
        text(
            &mut admin,
            "SELECT would_delete || ' of ' || eligible || ', hidden ' || hidden_rows FROM retention.preview('mine')"
        ),
        "5 of 5, hidden 20"
    );
    assert!(text(
        &mut admin,
        "SELECT array_to_string(notes, '; ') FROM retention.health() WHERE policy = 'mine'"
    )
    .contains("visible_rows_only"));
    admin.batch_execute("CALL retention.run('mine')").unwrap();
    assert_eq!(
        scalar(&mut c.connect("postgres"), "SELECT count(*) FROM history"),
        20,
        "the rows admin cannot see stay"
    );
    admin
        .batch_execute("SELECT retention.drop_policy('mine')")
        .unwrap();

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
    // An archive policy governs it too: its batches name rows by place
    // (tests/tests/archiver.rs archives and restores such a table).
    admin
        .batch_execute("SELECT retention.drop_policy('per_teller')")
        .unwrap();
    admin
        .batch_execute(
            "SELECT retention.add_policy(name => 'a', relation => 'pgbench_history', kind => 'age',
                    age_column => 'mtime', older_than => '1 day', terminal => 'true',
                    action => 'archive_then_delete')",
        )
        .unwrap();
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

/// A queue whose jobs know neither their state nor their finish time: both live in the events
/// table. "Finished jobs whose newest event is older than 30 days" is a clock and a terminal
/// test read through the events' foreign key; finished jobs go with their events (the cascade),
/// running ones stay whatever their age. Preview names the index the tests probe.
#[test]
fn a_terminal_test_over_referencing_rows_decides_which_jobs_are_finished() {
    let c = Cluster::start(&[]);
    let (mut app, mut admin) = set_up(
        &c,
        "CREATE TABLE q_jobs (id bigint PRIMARY KEY, queue text NOT NULL,
                              created timestamptz NOT NULL DEFAULT now());
         CREATE TABLE q_events (id bigserial PRIMARY KEY,
                                job_id bigint NOT NULL REFERENCES q_jobs (id) ON DELETE CASCADE,
                                at timestamptz NOT NULL, kind text NOT NULL);",
    );
    // 60 jobs, job j's events j days old; jobs with j % 5 = 0 are still running (no 'finished').
    app.batch_execute(
        "INSERT INTO q_jobs SELECT g, 'q' || g % 3 FROM generate_series(1, 60) g;
         INSERT INTO q_events (job_id, at, kind)
         SELECT j, now() - make_interval(days => j) + make_interval(mins => o::int), k
           FROM generate_series(1, 60) j, unnest(ARRAY['queued', 'started', 'finished']) WITH ORDINALITY x(k, o)
          WHERE k <> 'finished' OR j % 5 <> 0;",
    )
    .unwrap();
    admin
        .batch_execute(
            "SELECT retention.add_policy(name => 'q', relation => 'q_jobs', kind => 'age',
                    age_table => 'q_events', age_table_column => 'at', older_than => '30 days',
                    terminal_table => 'q_events', terminal_table_where => $$kind = 'finished'$$)",
        )
        .unwrap();
    let finished_old = "SELECT count(*) FROM q_jobs j
        WHERE EXISTS (SELECT 1 FROM q_events e WHERE e.job_id = j.id AND e.kind = 'finished')
          AND (SELECT max(at) FROM q_events e WHERE e.job_id = j.id) < now() - interval '30 days'";
    let expected = scalar(&mut admin, finished_old);
    assert_eq!(expected, 24, "jobs 31..60 but the running ones");
    assert_eq!(
        text(&mut admin, "SELECT index_hint FROM retention.preview('q')"),
        "CREATE INDEX ON public.q_events (\"job_id\")"
    );
    c.execute("postgres", "CREATE INDEX ON q_events (job_id)");
    assert_eq!(
        scalar(
            &mut admin,
            "SELECT count(*) FROM retention.preview('q') WHERE index_hint IS NULL"
        ),
        1
    );
    // not_exists turns the test around: the old running jobs would be the terminal ones.
    admin
        .batch_execute("SELECT retention.alter_policy('q', terminal_table_test => 'not_exists')")
        .unwrap();
    assert_eq!(
        scalar(
            &mut admin,
            "SELECT would_delete FROM retention.preview('q')"
        ),
        6
    );
    admin
        .batch_execute("SELECT retention.alter_policy('q', terminal_table_test => 'exists')")
        .unwrap();
    assert_eq!(
        scalar(
            &mut admin,
            "SELECT would_delete FROM retention.preview('q')"
        ),
        expected
    );
    admin.batch_execute("CALL retention.run('q')").unwrap();
    assert_eq!(
        scalar(&mut admin, "SELECT count(*) FROM q_jobs"),
        60 - expected
    );
    assert_eq!(scalar(&mut admin, finished_old), 0);
    assert_eq!(
        scalar(
            &mut admin,
            "SELECT count(*) FROM q_jobs j WHERE j.id % 5 = 0"
        ),
        12,
        "running jobs stay whatever their events' age"
    );
    assert_eq!(
        scalar(
            &mut admin,
            "SELECT count(*) FROM q_events e WHERE NOT EXISTS (SELECT 1 FROM q_jobs j WHERE j.id = e.job_id)"
        ),
        0
    );
    assert_eq!(
        scalar(&mut admin, "SELECT count(*) FROM q_events"),
        3 * (60 - expected) - 12,
        "finished jobs went with their events, through the cascade"
    );
    assert_eq!(
        scalar(
            &mut admin,
            "SELECT coalesce(sum(rows_deleted), 0)::bigint FROM retention.ledger WHERE policy = 'q'"
        ),
        expected
    );
    assert_eq!(
        scalar(
            &mut admin,
            "SELECT sum((d->>'deleted')::bigint)::bigint FROM retention.ledger l,
                    jsonb_array_elements(l.detail->'dependents') d
              WHERE l.policy = 'q' AND l.method = 'prune' AND d->>'table' = 'public.q_events'"
        ),
        expected * 3,
        "the ledger counts the events the jobs' deletes cascaded to"
    );

    for (options, state) in [
        (
            "terminal_table => 'q_events', terminal_table_where => 'no_such_column'",
            "RT101",
        ),
        (
            "terminal_table => 'q_events', terminal_table_where => '(SELECT true)'",
            "RT101",
        ),
        ("terminal_table_where => $$kind = 'finished'$$", "22023"),
        (
            "terminal_table => 'q_events', terminal_table_test => 'sometimes'",
            "22023",
        ),
        ("terminal_table => 'q_jobs'", "22023"),
    ] {
        let (found, message) = expect_error(
            &mut admin,
            &format!(
                "SELECT retention.add_policy(name => 'bad', relation => 'q_jobs', kind => 'age',
                        age_table => 'q_events', age_table_column => 'at', older_than => '1 day', {options})"
            ),
        );
        assert_eq!(found, state, "{options}: {message}");
    }
    // An archive policy's terminal rows are frozen by a check on the table itself.
    admin
        .batch_execute("SELECT retention.drop_policy('q')")
        .unwrap();
    let (found, message) = expect_error(
        &mut admin,
        "SELECT retention.add_policy(name => 'bad', relation => 'q_jobs', kind => 'age',
                age_column => 'created', older_than => '1 day', terminal => 'true',
                action => 'archive_then_delete', terminal_table => 'q_events')",
    );
    assert_eq!(found, "22023", "{message}");
    assert!(message.contains("terminal_table"), "{message}");
}
