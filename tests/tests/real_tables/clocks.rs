//! Clocks and terminal tests read from an expression over the row or from a related table
//! through its foreign key.

use super::*;

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
