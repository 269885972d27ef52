//! retention.metrics(): every family, with its help and type and closed label sets, read by a
//! pg_monitor member and no one else, showing a stall until the policy runs.

use super::*;

#[test]
fn metrics_are_for_pg_monitor_and_show_a_stall_until_the_policy_runs() {
    let c = Cluster::start(&[]);
    let mut admin = scene(&c);
    let mut mon = monitor(&c);
    let sample = |db: &mut Client, name: &str, policy: &str| -> Option<f64> {
        db.query_opt(
            "SELECT value FROM retention.metrics() WHERE name = $1 AND labels->>'policy' = $2",
            &[&name, &policy],
        )
        .unwrap()
        .map(|r| r.get(0))
    };
    let names: Vec<String> = mon
        .query(
            "SELECT DISTINCT name FROM retention.metrics() ORDER BY 1",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    for family in [
        "pg_retention_policy_rows_deleted_total",
        "pg_retention_policy_rows_archived_total",
        "pg_retention_policy_bytes_archived_total",
        "pg_retention_policy_hold_skips_total",
        "pg_retention_policy_cap_hits_total",
        "pg_retention_policy_errors_total",
        "pg_retention_policy_backlog_rows",
        "pg_retention_policy_oldest_eligible_age_seconds",
        "pg_retention_policy_window_seconds",
        "pg_retention_worker_up",
        "pg_retention_build_info",
    ] {
        assert!(names.iter().any(|n| n == family), "{family} in {names:?}");
    }
    // Every row has its family's help and type; labels are closed sets.
    assert_eq!(
        scalar(
            &mut mon,
            "SELECT count(*) FROM retention.metrics() WHERE help IS NULL OR type NOT IN ('counter', 'gauge')
                OR EXISTS (SELECT 1 FROM jsonb_object_keys(labels) k WHERE k NOT IN ('policy', 'reason', 'database', 'version'))"
        ),
        0
    );
    assert_eq!(
        scalar(
            &mut mon,
            "SELECT count(*) FROM retention.metrics() WHERE name = 'pg_retention_policy_errors_total' AND labels->>'policy' = 'outbox'"
        ),
        7,
        "one series per reason"
    );
    // outbox never ran: its oldest deletable row is 40 days old against a 30-day window.
    let age = sample(
        &mut mon,
        "pg_retention_policy_oldest_eligible_age_seconds",
        "outbox",
    )
    .unwrap();
    assert!((40.0 * 86400.0 - age).abs() < 120.0, "{age}");
    assert_eq!(
        sample(&mut mon, "pg_retention_policy_window_seconds", "outbox"),
        Some(30.0 * 86400.0)
    );
    assert_eq!(
        sample(
            &mut mon,
            "pg_retention_policy_last_success_timestamp_seconds",
            "outbox"
        ),
        None
    );
    // The archive policy's backlog is its deletable rows now.
    assert_eq!(
        sample(&mut mon, "pg_retention_policy_backlog_rows", "audit"),
        Some(300.0)
    );
    // events stopped at its cap with 200 deletable rows 10 days old left; once they are gone,
    // its oldest rows are held: none is deletable.
    let age = sample(
        &mut mon,
        "pg_retention_policy_oldest_eligible_age_seconds",
        "events",
    )
    .unwrap();
    assert!((10.0 * 86400.0 - age).abs() < 120.0, "{age}");
    admin.batch_execute("CALL retention.run('events')").unwrap();
    assert_eq!(
        sample(
            &mut mon,
            "pg_retention_policy_oldest_eligible_age_seconds",
            "events"
        ),
        Some(0.0)
    );
    admin.batch_execute("CALL retention.run('outbox')").unwrap();
    assert_eq!(
        sample(
            &mut mon,
            "pg_retention_policy_oldest_eligible_age_seconds",
            "outbox"
        ),
        Some(0.0)
    );
    assert!(sample(
        &mut mon,
        "pg_retention_policy_last_success_timestamp_seconds",
        "outbox"
    )
    .is_some());
    assert_eq!(
        sample(&mut mon, "pg_retention_policy_rows_deleted_total", "outbox"),
        Some(50.0)
    );
    // Not for everyone (the role made by the superuser, as every role).
    c.execute("postgres", "CREATE ROLE nobody LOGIN");
    let (state, _) = expect_error(
        &mut c.connect_as("postgres", "nobody"),
        "SELECT * FROM retention.metrics()",
    );
    assert_eq!(state, "42501");
}
