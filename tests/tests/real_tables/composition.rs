//! Several policies on one table: a union that would delete what another keeps is refused, one
//! versions policy says it instead, and preview's table total is what the run deletes.

use super::*;

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
