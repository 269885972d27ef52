//! A cluster without a running worker: disabled (it does nothing, and health says so), not
//! preloaded (`CALL retention.run()` still sweeps), or pg_cron alone running the sweeps.

use super::*;

#[test]
fn disabled_worker_does_nothing() {
    let c = Cluster::start(&[
        "pg_retention.databases = 'postgres'",
        "pg_retention.naptime = '1s'",
    ]);
    let mut db = outbox(&c, "outbox", 1000);
    let before = expired(&mut db, "outbox");
    let woke: bool = db.query_one("SELECT retention.wake()", &[]).unwrap().get(0);
    assert!(!woke);
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(expired(&mut db, "outbox"), before);
    assert_eq!(
        scalar(
            &mut monitor(&c),
            "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_retention worker'"
        ),
        0
    );
    assert_eq!(
        scalar(
            &mut db,
            "SELECT count(*) FROM retention.ledger WHERE method = 'prune'"
        ),
        0
    );
}

#[test]
fn health_flags_disabled_worker_backlog_and_never_ran() {
    let c = Cluster::start(&["pg_retention.naptime = '1h'"]);
    let mut db = outbox(&c, "outbox", 2000);
    // Superuser kept: it backdates the policy in the catalog (no role may write it), so that
    // two naptimes have passed without a run.
    c.execute(
        "postgres",
        "UPDATE retention.policy_ids SET created_at = now() - interval '3 hours'",
    );
    let (healthy, reasons): (bool, Vec<String>) = db
        .query_one("SELECT healthy, reasons FROM retention.health()", &[])
        .map(|r| (r.get(0), r.get(1)))
        .unwrap();
    assert!(!healthy);
    assert!(
        reasons.iter().any(|r| r.contains("worker disabled")),
        "{reasons:?}"
    );
    assert!(
        reasons.iter().any(|r| r.contains("backlog past window")),
        "{reasons:?}"
    );
    assert!(
        reasons.iter().any(|r| r.contains("never ran")),
        "{reasons:?}"
    );
    db.batch_execute("CALL retention.run()").unwrap();
    let reasons: Vec<String> = db
        .query_one("SELECT reasons FROM retention.health()", &[])
        .unwrap()
        .get(0);
    assert_eq!(
        reasons,
        vec!["worker disabled (pg_retention.enabled = off)".to_string()]
    );
}

#[test]
fn without_preload_health_reports_no_worker_and_run_still_sweeps() {
    // A managed host: the extension created without shared_preload_libraries.
    let c = Cluster::start(&["shared_preload_libraries = ''"]);
    let mut db = outbox(&c, "outbox", 400);
    let expired_before = expired(&mut db, "outbox");
    assert!(expired_before > 0);
    // A new session, where nothing has loaded the library yet: health() reports, not errors.
    let mut fresh = c.admin("postgres");
    let (healthy, reasons): (bool, Vec<String>) = fresh
        .query_one("SELECT healthy, reasons FROM retention.health()", &[])
        .map(|r| (r.get(0), r.get(1)))
        .unwrap();
    assert!(!healthy);
    assert!(
        reasons.iter().any(|r| r.contains("worker not preloaded")),
        "{reasons:?}"
    );
    fresh.batch_execute("CALL retention.run()").unwrap();
    assert_eq!(expired(&mut fresh, "outbox"), 0);
}

/// The managed-host recipe of docs/configuration.md: only pg_cron is preloaded, and pg_cron
/// runs `CALL retention.run()`. pg_cron 1.4 (Debian's) schedules by the minute, so the test
/// registers the documented schedule and, to see it run within a minute, the same command
/// every minute. `admin` schedules the jobs, so they run as `admin`.
#[test]
fn pg_cron_alone_preloaded_runs_the_sweeps_on_schedule() {
    let c = Cluster::start_bare(&[
        "shared_preload_libraries = 'pg_cron'",
        "cron.database_name = 'postgres'",
        "cron.use_background_workers = on",
    ]);
    c.execute(
        "postgres",
        "CREATE EXTENSION pg_cron; CREATE EXTENSION pg_retention",
    );
    let mut db = outbox(&c, "outbox", 400);
    // Set-up by the superuser: pg_cron's schema is its owner's until granted (pg_cron's way of
    // letting a role schedule jobs).
    c.execute("postgres", "GRANT USAGE ON SCHEMA cron TO admin");
    assert!(expired(&mut db, "outbox") > 0);
    let recipe: i64 = db
        .query_one(
            "SELECT cron.schedule('retention', '*/5 * * * *', 'CALL retention.run()')",
            &[],
        )
        .unwrap()
        .get(0);
    assert!(recipe > 0);
    db.batch_execute("SELECT cron.schedule('retention-now', '* * * * *', 'CALL retention.run()')")
        .unwrap();
    let ran = c.wait_until(std::time::Duration::from_secs(90), || {
        scalar(
            &mut db,
            "SELECT count(*) FROM cron.job_run_details d JOIN cron.job j USING (jobid)
              WHERE j.jobname = 'retention-now' AND d.status = 'succeeded'",
        ) > 0
    });
    let details: Vec<String> = db
        .query(
            "SELECT status || ': ' || coalesce(return_message, '') FROM cron.job_run_details",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(
        ran,
        "pg_cron ran CALL retention.run() within 90 s: {details:?}\n{}",
        c.log()
    );
    assert_eq!(expired(&mut db, "outbox"), 0, "the scheduled run swept");
    assert!(
        scalar(
            &mut db,
            "SELECT count(*) FROM retention.ledger WHERE method = 'run' AND actor = 'admin'"
        ) > 0,
        "and ledgered its run, as admin"
    );
}
