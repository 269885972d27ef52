//! The doctor in `retention.health()`: a table's rows, the rows its policy makes eligible and
//! those holds keep, counted as the sweep counts them; unhealthy past the policy's
//! `max_table_rows` budget (which never deletes anything) and while the policy is disabled.
//!
//! Production roles: tables by the superuser, rows by `app`, policies, holds and health by
//! `admin` (a member of `retention_admin`).

use pg_retention_integration::{expect_error, scalar, text, Cluster};

#[test]
fn health_counts_rows_and_is_unhealthy_past_the_budget_or_disabled() {
    let c = Cluster::start(&[]);
    c.execute(
        "postgres",
        "CREATE TABLE events (id int PRIMARY KEY, tenant int NOT NULL, at timestamptz NOT NULL)",
    );
    c.grant_app_and_admin("postgres");
    let (mut app, mut admin) = c.app_and_admin("postgres");
    // 100 rows, 60 of them 40 days old; tenant 1's old rows (15) held.
    app.batch_execute(
        "INSERT INTO events SELECT g, g % 4, now() - make_interval(days => CASE WHEN g <= 60 THEN 40 ELSE 1 END)
           FROM generate_series(1, 100) g",
    )
    .unwrap();
    admin
        .batch_execute(
            "SELECT retention.add_policy(name => 'events', relation => 'events', kind => 'age',
                    age_column => 'at', older_than => '30 days', max_table_rows => 80);
             SELECT retention.place_hold('events', 'tenant = 1', 'dispute', 'legal');",
        )
        .unwrap();
    let health = |admin: &mut postgres::Client| -> (bool, String, String) {
        let r = admin
            .query_one(
                "SELECT healthy, array_to_string(reasons, '; '),
                        total_rows || '/' || eligible_rows || '/' || blocked_rows
                   FROM retention.health() WHERE policy = 'events'",
                &[],
            )
            .unwrap();
        (r.get(0), r.get(1), r.get(2))
    };
    let (healthy, reasons, counts) = health(&mut admin);
    assert!(!healthy);
    assert_eq!(counts, "100/60/15");
    assert!(
        reasons.contains("100 rows in public.events, over its budget of max_table_rows = 80 (60 eligible, 15 of them blocked)"),
        "{reasons}"
    );
    // The same counts as preview's.
    assert_eq!(
        text(
            &mut admin,
            "SELECT eligible || '/' || held FROM retention.preview('events')"
        ),
        "60/15"
    );
    // The budget deletes nothing: the run deletes what the window says, no more.
    admin.batch_execute("CALL retention.run('events')").unwrap();
    assert_eq!(scalar(&mut admin, "SELECT count(*) FROM events"), 55);
    let (_, reasons, counts) = health(&mut admin);
    // (The test cluster's worker is off, which health() names as well.)
    assert!(!reasons.contains("budget"), "{reasons}");
    assert_eq!(counts, "55/15/15");

    admin
        .batch_execute("SELECT retention.disable_policy('events')")
        .unwrap();
    let (healthy, reasons, _) = health(&mut admin);
    assert!(!healthy);
    assert_eq!(reasons, "policy disabled");
    let (state, _) = expect_error(
        &mut admin,
        "SELECT retention.alter_policy('events', max_table_rows => 0)",
    );
    assert_eq!(state, "22023");
}

/// The keep-up signal: rows that left against rows that became deletable, per hour, and the
/// time to drain the backlog at this pace; a backlog that grows is falling behind.
#[test]
fn keep_up_says_when_retention_falls_behind_and_when_it_drains() {
    let c = Cluster::start(&[]);
    c.execute(
        "postgres",
        "CREATE TABLE feed (id bigserial PRIMARY KEY, at timestamptz NOT NULL)",
    );
    c.grant_app_and_admin("postgres");
    let (mut app, mut admin) = c.app_and_admin("postgres");
    let old = |app: &mut postgres::Client, n: i64| {
        app.batch_execute(&format!(
            "INSERT INTO feed (at) SELECT now() - interval '40 days' FROM generate_series(1, {n})"
        ))
        .unwrap();
    };
    old(&mut app, 500);
    admin
        .batch_execute(
            "SELECT retention.add_policy(name => 'feed', relation => 'feed', kind => 'age',
                    age_column => 'at', older_than => '30 days', max_rows_per_run => 100)",
        )
        .unwrap();
    admin.batch_execute("CALL retention.run('feed')").unwrap();
    old(&mut app, 300);
    admin.batch_execute("CALL retention.run('feed')").unwrap();
    let keep_up = |admin: &mut postgres::Client| -> String {
        text(
            admin,
            "SELECT rows_left || '/' || rows_became_eligible || '/' || backlog || '/' || backlog_before || '/'
                    || falling_behind || '/' || coalesce(drain_estimate::text, 'never')
               FROM retention.keep_up('1 hour') WHERE policy = 'feed'",
        )
    };
    // 200 left; 500 were deletable when the window's first run began, 300 became so since:
    // the backlog grew from 500 to 600.
    assert_eq!(keep_up(&mut admin), "200/300/600/500/true/never");
    admin
        .batch_execute("SELECT retention.alter_policy('feed', max_rows_per_run => 100000)")
        .unwrap();
    admin.batch_execute("CALL retention.run('feed')").unwrap();
    assert_eq!(keep_up(&mut admin), "800/300/0/500/false/00:00:00");
    let (state, _) = expect_error(&mut admin, "SELECT * FROM retention.keep_up('-1 hour')");
    assert_eq!(state, "22023");
}
