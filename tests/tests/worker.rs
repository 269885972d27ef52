//! The background worker against a real cluster with the library preloaded: scheduling,
//! single pruner, signals, crashes, caps and health.
//!
//! Production roles throughout: tables, indexes, triggers and functions are made by the
//! superuser in set-up, application rows are written by `app` (table privileges only), and
//! policies, `retention.wake()`, `CALL retention.run()`, `retention.health()` and every read of
//! the retention views are `admin`'s (a member of `retention_admin`, not a superuser), who also
//! reads the governed tables for the assertions. What only a monitoring role may see —
//! `pg_stat_activity` and `pg_stat_replication` rows of other roles' backends (the worker's) —
//! is read by `mon`, a LOGIN member of `pg_monitor` (docs/observability.md). The worker runs as
//! the default `pg_retention.role` (the bootstrap superuser), except in
//! `the_worker_sweeps_a_full_cycle_as_a_non_superuser_role`, which is about that role; a run it
//! drives runs each policy as the policy's owner, `admin`. The superuser stays only where a
//! test needs it, commented: configuration and reloads, signalling the worker, DDL mid-test,
//! event triggers, backdating a catalog row, reading catalog tables no role is granted, pausing
//! a standby's replay.

use pg_retention_integration::{column, drops, no_event_trigger, on_drop_table, scalar, Cluster};
use postgres::Client;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(60);

/// A connection as `mon`: a LOGIN member of `pg_monitor` only, the role a monitoring agent
/// connects as (docs/observability.md), which sees every backend in `pg_stat_activity` and
/// `pg_stat_replication`. Made by the superuser on first use; idempotent.
fn monitor(c: &Cluster) -> Client {
    c.execute(
        "postgres",
        "DO $$ BEGIN
             CREATE ROLE mon LOGIN IN ROLE pg_monitor;
         EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
         END $$",
    );
    c.connect_as("postgres", "mon")
}

fn worker_cluster(extra: &[&str]) -> Cluster {
    let mut settings = vec![
        "pg_retention.enabled = on",
        "pg_retention.databases = 'postgres'",
        "pg_retention.naptime = '1h'",
        "pg_retention.jitter = 0",
    ];
    settings.extend_from_slice(extra);
    Cluster::start(&settings)
}

/// Waits for the first visit to the database to complete its cycle and end (read by `admin`
/// from `retention.workers`).
fn first_visit(c: &Cluster) {
    let up = c.wait_until(WAIT, || {
        let mut db = c.admin("postgres");
        scalar(
            &mut db,
            "SELECT count(*) FROM retention.workers WHERE NOT running AND state = 'idle' AND last_cycle_end IS NOT NULL",
        ) == 1
    });
    assert!(up, "no visit completed a cycle; server log:\n{}", c.log());
}

/// The pid of the worker visiting the database now, waiting for one (read by `admin`).
fn visiting_pid(c: &Cluster) -> i32 {
    let mut pid = 0;
    let found = c.wait_until(WAIT, || {
        let mut db = c.admin("postgres");
        match db.query_opt("SELECT pid FROM retention.workers WHERE running", &[]) {
            Ok(Some(row)) => {
                pid = row.get(0);
                true
            }
            _ => false,
        }
    });
    assert!(found, "no worker is visiting; server log:\n{}", c.log());
    pid
}

/// The launcher's pid (read by `mon`: another role's backend).
fn launcher_pid(c: &Cluster) -> i32 {
    monitor(c)
        .query_one(
            "SELECT pid FROM pg_stat_activity WHERE backend_type = 'pg_retention launcher'",
            &[],
        )
        .unwrap()
        .get(0)
}

fn cycles_ended(db: &mut Client) -> String {
    db.query_one(
        "SELECT coalesce(max(last_cycle_end), '-infinity')::text FROM retention.workers",
        &[],
    )
    .unwrap()
    .get(0)
}

/// Asks for a visit and waits for the cycle it runs to end and the visit with it (as `admin`).
fn wake_and_wait(c: &Cluster) {
    let mut db = c.admin("postgres");
    let before = cycles_ended(&mut db);
    let woke: bool = db.query_one("SELECT retention.wake()", &[]).unwrap().get(0);
    assert!(woke, "wake() did not reach the launcher");
    let done = c.wait_until(WAIT, || {
        let mut db = c.admin("postgres");
        cycles_ended(&mut db) > before
            && scalar(
                &mut db,
                "SELECT count(*) FROM retention.workers WHERE state = 'idle' AND NOT running",
            ) == 1
    });
    assert!(done, "no cycle ended after wake(); log:\n{}", c.log());
}

/// `table` of `n` rows spread over 60 days (about half past the 30-day window), made by the
/// superuser and granted, its rows written by `app`, its policy `admin`'s; returns a
/// connection as `admin`.
fn outbox(c: &Cluster, table: &str, n: i64) -> Client {
    c.execute(
        "postgres",
        &format!(
            "CREATE TABLE {table} (id bigserial PRIMARY KEY, created_at timestamptz NOT NULL);"
        ),
    );
    c.grant_app_and_admin("postgres");
    c.app("postgres")
        .batch_execute(&format!(
            "INSERT INTO {table} (created_at)
             SELECT now() - (g::float8 / {n}) * interval '60 days' FROM generate_series(1, {n}) g;"
        ))
        .unwrap();
    let mut admin = c.admin("postgres");
    admin
        .batch_execute(&format!(
            "SELECT retention.add_policy(name => '{table}', relation => '{table}', kind => 'age',
                    age_column => 'created_at', older_than => '30 days', batch_size => 50);"
        ))
        .unwrap();
    admin
}

fn expired(db: &mut Client, table: &str) -> i64 {
    scalar(
        db,
        &format!("SELECT count(*) FROM {table} WHERE created_at < now() - interval '30 days'"),
    )
}

/// Makes every deletion from `table` take `ms` milliseconds: a trigger made by the superuser
/// (DDL on its table; it fires as the policy's owner).
fn slow_deletes(c: &Cluster, table: &str, ms: u32) {
    c.execute(
        "postgres",
        &format!(
            "CREATE FUNCTION slow_{table}() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN PERFORM pg_sleep({ms} / 1000.0); RETURN OLD; END $$;
             CREATE TRIGGER slow AFTER DELETE ON {table} FOR EACH ROW EXECUTE FUNCTION slow_{table}();"
        ),
    );
}

#[test]
fn worker_deletes_expired_rows_after_wake_without_a_manual_call() {
    let c = worker_cluster(&[]);
    first_visit(&c);
    let mut db = outbox(&c, "outbox", 1000);
    assert!(expired(&mut db, "outbox") > 0);
    wake_and_wait(&c);
    assert_eq!(expired(&mut db, "outbox"), 0);
    assert_eq!(
        scalar(
            &mut db,
            "SELECT count(*) FROM retention.ledger WHERE method = 'run' AND actor = 'worker'"
        ),
        1
    );
    // A visit is a process of its own that ends with the visit; the launcher stays.
    let mut mon = monitor(&c);
    assert_eq!(
        scalar(
            &mut mon,
            "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_retention worker'"
        ),
        0
    );
    assert_eq!(
        scalar(
            &mut mon,
            "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_retention launcher'"
        ),
        1
    );
}

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
fn a_manual_run_holding_the_lock_makes_the_worker_skip_and_the_reverse() {
    let c = worker_cluster(&[]);
    first_visit(&c);
    let mut db = outbox(&c, "q", 400);
    let before = expired(&mut db, "q");
    assert!(before > 0);
    // A manual pruner (another admin session) holds the policy's lock: the worker skips it.
    let mut other = c.admin("postgres");
    other
        .batch_execute("SELECT pg_advisory_lock(retention._lock_key(id)) FROM retention.policies")
        .unwrap();
    wake_and_wait(&c);
    assert_eq!(expired(&mut db, "q"), before, "no double prune");
    assert_eq!(scalar(&mut db, "SELECT count(*) FROM retention.ledger WHERE method = 'skip_locked' AND actor = 'worker'"), 1);
    assert_eq!(
        scalar(&mut db, "SELECT skipped_locked FROM retention.stats"),
        1
    );
    other
        .batch_execute("SELECT pg_advisory_unlock_all()")
        .unwrap();
    // The worker is sweeping (slowly): a manual run skips the policy instead of waiting.
    slow_deletes(&c, "q", 10);
    db.batch_execute("SELECT retention.wake()").unwrap();
    assert!(c.wait_until(WAIT, || scalar(
        &mut c.admin("postgres"),
        "SELECT count(*) FROM retention.ledger WHERE method = 'prune'"
    ) > 0));
    let (app, current): (String, Option<String>) = db
        .query_one(
            "SELECT a.application_name, w.current_policy FROM retention.workers w JOIN pg_stat_activity a ON a.pid = w.pid",
            &[],
        )
        .map(|r| (r.get(0), r.get(1)))
        .unwrap();
    assert_eq!(app, "pg_retention: sweeping q");
    assert_eq!(current.as_deref(), Some("q"));
    db.batch_execute("CALL retention.run('q')").unwrap();
    assert_eq!(scalar(&mut db, "SELECT count(*) FROM retention.ledger WHERE method = 'skip_locked' AND actor = 'admin'"), 1);
}

#[test]
fn sigterm_mid_sweep_leaves_only_whole_batches_and_a_consistent_ledger() {
    let c = worker_cluster(&[]);
    first_visit(&c);
    let mut db = outbox(&c, "q", 2000);
    slow_deletes(&c, "q", 4);
    let total = scalar(&mut db, "SELECT count(*) FROM q");
    db.batch_execute("SELECT retention.wake()").unwrap();
    assert!(c.wait_until(WAIT, || scalar(
        &mut c.admin("postgres"),
        "SELECT count(*) FROM retention.ledger WHERE method = 'prune'"
    ) >= 2));
    let pid = visiting_pid(&c);
    // Superuser kept: the worker runs as the bootstrap superuser here, whom only a superuser
    // may signal.
    c.execute("postgres", &format!("SELECT pg_terminate_backend({pid})"));
    assert!(c.wait_until(WAIT, || {
        scalar(
            &mut c.admin("postgres"),
            &format!("SELECT count(*) FROM pg_stat_activity WHERE pid = {pid}"),
        ) == 0
    }));
    let deleted = total - scalar(&mut db, "SELECT count(*) FROM q");
    let ledgered = scalar(
        &mut db,
        "SELECT coalesce(sum(rows), 0)::bigint FROM retention.ledger WHERE method = 'prune'",
    );
    assert_eq!(deleted, ledgered, "the ledger matches the table exactly");
    assert_eq!(
        scalar(
            &mut db,
            "SELECT count(*) FROM retention.ledger WHERE method = 'prune' AND rows <> 50"
        ),
        0,
        "whole batches only"
    );
    assert!(
        expired(&mut db, "q") > 0,
        "the sweep stopped before the end"
    );
    let outcome: String = db
        .query_one(
            "SELECT detail->>'outcome' FROM retention.ledger WHERE method = 'run'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(outcome, "stopped");
}

#[test]
fn sighup_changes_naptime_without_a_restart() {
    let c = worker_cluster(&[]);
    first_visit(&c);
    let launcher = launcher_pid(&c);
    let mut db = c.admin("postgres");
    let first = cycles_ended(&mut db);
    let far: bool = db
        .query_one(
            "SELECT next_wake > now() + interval '50 minutes' FROM retention.workers",
            &[],
        )
        .unwrap()
        .get(0);
    assert!(far, "with naptime 1h the next wake is an hour away");
    // Superuser kept: the configuration file and pg_reload_conf() are the cluster's.
    c.append_conf(&["pg_retention.naptime = '2s'"]);
    c.reload();
    let cycled = c.wait_until(Duration::from_secs(20), || {
        cycles_ended(&mut c.admin("postgres")) > first
    });
    assert!(cycled, "a new naptime applies without wake() or restart");
    assert_eq!(launcher_pid(&c), launcher, "the same launcher");
}

#[test]
fn a_killed_database_worker_is_restarted_and_the_next_cycle_completes() {
    // Commits must survive the crash for the successor to see how its predecessor ended.
    let c = worker_cluster(&["synchronous_commit = on"]);
    first_visit(&c);
    // A visit killed mid-sweep: its state says it was sweeping when it died.
    outbox(&c, "slow", 2000);
    slow_deletes(&c, "slow", 4);
    c.admin("postgres")
        .batch_execute("SELECT retention.wake()")
        .unwrap();
    assert!(c.wait_until(WAIT, || scalar(
        &mut c.admin("postgres"),
        "SELECT count(*) FROM retention.ledger WHERE method = 'prune'"
    ) >= 1));
    let pid = visiting_pid(&c);
    let status = std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    // Postgres resets all backends after a crash; the launcher comes back and its next visit
    // (the first is due after the database's jitter offset, 0 here) notices the crash and
    // completes the cycle.
    assert!(c.wait_until(Duration::from_secs(120), || {
        let Ok(mut db) = Client::connect(&c.url_as("postgres", "admin"), postgres::NoTls) else {
            return false;
        };
        db.query_opt(
            "SELECT pid FROM retention.workers WHERE NOT running AND state = 'idle' AND pid <> $1",
            &[&pid],
        )
        .ok()
        .flatten()
        .is_some()
    }));
    let mut db = c.admin("postgres");
    assert_eq!(
        scalar(
            &mut db,
            "SELECT count(*) FROM retention.ledger WHERE method = 'worker_crash'"
        ),
        1
    );
    let mut db = outbox(&c, "outbox", 500);
    wake_and_wait(&c);
    assert_eq!(expired(&mut db, "outbox"), 0);
}

#[test]
fn a_policy_whose_table_was_dropped_is_unhealthy_and_does_not_stop_the_others() {
    let c = worker_cluster(&[]);
    first_visit(&c);
    outbox(&c, "a_gone", 100);
    let mut db = outbox(&c, "b_kept", 500);
    // Superuser kept: DDL mid-test, by the table's owner.
    c.execute("postgres", "DROP TABLE a_gone");
    wake_and_wait(&c);
    assert_eq!(expired(&mut db, "b_kept"), 0);
    let rows: Vec<(String, bool, Vec<String>)> = db
        .query(
            "SELECT policy, healthy, reasons FROM retention.health() ORDER BY policy",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(rows[0].0, "a_gone");
    assert!(!rows[0].1);
    assert!(
        rows[0]
            .2
            .iter()
            .any(|r| r.contains("last run failed") && r.contains("no longer exists")),
        "{:?}",
        rows[0]
    );
    assert_eq!(rows[1], ("b_kept".to_string(), true, vec![]));
}

#[test]
fn the_cycle_cap_stops_the_cycle_and_is_flagged() {
    let c = worker_cluster(&["pg_retention.max_rows_per_cycle = 150"]);
    first_visit(&c);
    outbox(&c, "a_first", 1000);
    let mut db = outbox(&c, "b_second", 1000);
    let before_b = expired(&mut db, "b_second");
    wake_and_wait(&c);
    assert_eq!(
        scalar(
            &mut db,
            "SELECT coalesce(sum(rows), 0)::bigint FROM retention.ledger WHERE method = 'prune'"
        ),
        150
    );
    assert_eq!(
        expired(&mut db, "b_second"),
        before_b,
        "the second policy waits for the next cycle"
    );
    assert_eq!(scalar(&mut db, "SELECT count(*) FROM retention.ledger WHERE method = 'cycle_cap' AND policy = 'b_second'"), 1);
    let reasons: Vec<Vec<String>> = column(
        &mut db,
        "SELECT reasons FROM retention.health() ORDER BY policy",
    );
    assert!(
        reasons[0].iter().any(|r| r.contains("run cap hit")),
        "{reasons:?}"
    );
    assert!(
        reasons[1].iter().any(|r| r.contains("cycle cap hit")),
        "{reasons:?}"
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
fn a_bad_database_name_does_not_stop_the_launcher_or_other_databases() {
    // A naptime of 2 s, so the missing database's visits come round again within the test.
    let c = worker_cluster(&[
        "pg_retention.databases = 'no_such_db, postgres'",
        "pg_retention.naptime = '2s'",
    ]);
    first_visit(&c);
    let mut db = outbox(&c, "outbox", 500);
    wake_and_wait(&c);
    assert_eq!(expired(&mut db, "outbox"), 0);
    assert!(
        c.log().contains("no_such_db"),
        "the failing database is logged"
    );
    // The postmaster logs every background worker exit; the launcher has none.
    assert!(
        !c.log()
            .contains("background worker \"pg_retention launcher\""),
        "the launcher exited:\n{}",
        c.log()
    );
    let retried = c.wait_until(WAIT, || {
        c.log()
            .matches("database \"no_such_db\" does not exist")
            .count()
            >= 2
    });
    assert!(
        retried,
        "the launcher visits the failing database again:\n{}",
        c.log()
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

#[test]
fn a_sweep_waits_while_a_streaming_replica_lags_and_finishes_when_it_catches_up() {
    let c = worker_cluster(&[
        "pg_retention.naptime = '1s'",
        "pg_retention.max_replica_lag = '300ms'",
    ]);
    let standby = c.standby();
    let mut mon = monitor(&c);
    // Superuser kept: pausing and resuming a standby's replay is a superuser's.
    let mut replica = standby.connect("postgres");
    let lagging = c.wait_until(WAIT, || {
        scalar(
            &mut mon,
            "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'",
        ) == 1
    });
    assert!(
        lagging,
        "the standby did not connect; log:\n{}",
        standby.log()
    );
    // Replay stops; the rows written next are the lag.
    replica
        .batch_execute("SELECT pg_wal_replay_pause()")
        .unwrap();
    c.execute(
        "postgres",
        "CREATE TABLE feed (id bigserial PRIMARY KEY, at timestamptz NOT NULL);",
    );
    c.grant_app_and_admin("postgres");
    c.app("postgres")
        .batch_execute(
            "INSERT INTO feed (at) SELECT now() - interval '40 days' FROM generate_series(1, 20000);",
        )
        .unwrap();
    let lag_seen = c.wait_until(WAIT, || {
        scalar(
            &mut mon,
            "SELECT count(*) FROM pg_stat_replication WHERE replay_lag > interval '1 second'",
        ) == 1
    });
    assert!(lag_seen, "the replica's replay lag never showed");
    let mut db = c.admin("postgres");
    db.batch_execute(
        "SELECT retention.add_policy(name => 'feed', relation => 'feed', kind => 'age', age_column => 'at',
                older_than => '30 days', batch_size => 1000)",
    )
    .unwrap();
    let paused = c.wait_until(WAIT, || {
        scalar(
            &mut db,
            "SELECT count(*) FROM retention.workers WHERE state = 'paused' AND pause_reason = 'replica_lag'
                AND current_policy = 'feed'",
        ) == 1
    });
    assert!(paused, "the sweep did not pause; log:\n{}", c.log());
    let left = scalar(&mut db, "SELECT count(*) FROM feed");
    assert!(left > 0, "paused before the end");
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(
        scalar(&mut db, "SELECT count(*) FROM feed"),
        left,
        "nothing deleted while paused"
    );
    // Paused longer than the grace (two naptimes): unhealthy, and says why.
    let reasons: Vec<String> = db
        .query_one(
            "SELECT reasons FROM retention.health() WHERE policy = 'feed'",
            &[],
        )
        .unwrap()
        .get(0);
    assert!(
        reasons
            .iter()
            .any(|r| r.contains("sweep paused") && r.contains("replica_lag")),
        "{reasons:?}"
    );
    // Replay resumes: the sweep goes on and finishes, and the pause is ledgered.
    replica
        .batch_execute("SELECT pg_wal_replay_resume()")
        .unwrap();
    let finished = c.wait_until(WAIT, || scalar(&mut db, "SELECT count(*) FROM feed") == 0);
    assert!(finished, "the sweep did not finish after replay resumed");
    let paused_for: f64 = db
        .query_one(
            "SELECT coalesce(max((detail->>'seconds')::float8), 0) FROM retention.ledger
              WHERE method = 'pause' AND policy = 'feed' AND detail->>'reason' = 'replica_lag'",
            &[],
        )
        .unwrap()
        .get(0);
    assert!(
        paused_for >= 2.5,
        "the pause was ledgered with its length: {paused_for}"
    );
    assert!(
        scalar(
            &mut db,
            "SELECT pauses_total FROM retention.stats WHERE policy = 'feed'"
        ) >= 1
    );
}

#[test]
fn a_worker_run_whose_close_fails_lets_go_of_the_leaves_it_detached_and_the_next_run_settles_them()
{
    let c = worker_cluster(&[]);
    first_visit(&c);
    // Two leaves wholly past the cutoff and one wholly after it (too young to sweep): the run's
    // one step detaches the two and ends the run, and its close (the next transaction) drops
    // them. Made by the superuser and handed to `admin`: a leaf is dropped whole only by a
    // policy owner who could drop it (docs/security.md), that is, a member of its owner.
    c.execute(
        "postgres",
        "CREATE TABLE archive_log (id bigint NOT NULL, at timestamptz NOT NULL, PRIMARY KEY (id, at))
             PARTITION BY RANGE (at);
         CREATE TABLE archive_log_jan PARTITION OF archive_log FOR VALUES FROM ('2020-01-01') TO ('2020-02-01');
         CREATE TABLE archive_log_feb PARTITION OF archive_log FOR VALUES FROM ('2020-02-01') TO ('2020-03-01');
         DO $$ BEGIN
             EXECUTE format('CREATE TABLE archive_log_now PARTITION OF archive_log
                               FOR VALUES FROM (%L) TO (%L)', now() - interval '1 day', 'infinity');
         END $$;",
    );
    c.grant_app_and_admin("postgres");
    c.execute(
        "postgres",
        "ALTER TABLE archive_log OWNER TO admin; ALTER TABLE archive_log_jan OWNER TO admin;
         ALTER TABLE archive_log_feb OWNER TO admin; ALTER TABLE archive_log_now OWNER TO admin;",
    );
    c.app("postgres")
        .batch_execute(
            "INSERT INTO archive_log SELECT g, '2020-01-01'::timestamptz + g * interval '1 hour'
               FROM generate_series(1, 1000) g;
             INSERT INTO archive_log SELECT g, now() FROM generate_series(1001, 1010) g;",
        )
        .unwrap();
    let mut db = c.admin("postgres");
    db.batch_execute(
        "SELECT retention.add_policy(name => 'archive_log', relation => 'archive_log', kind => 'age',
                                     age_column => 'at', older_than => '30 days');",
    )
    .unwrap();
    // The close's drops fail. Superuser kept: event triggers are a superuser's; it also reads
    // retention.retiring_leaves below (a catalog table no role is granted).
    let mut su = c.connect("postgres");
    on_drop_table(
        &mut su,
        "RAISE EXCEPTION 'no drops today' USING ERRCODE = '55000';",
    );
    let jan = scalar(&mut db, "SELECT count(*) FROM ONLY archive_log_jan");
    let feb = scalar(&mut db, "SELECT count(*) FROM ONLY archive_log_feb");
    wake_and_wait(&c);
    let ledger: Vec<String> = column(
        &mut db,
        "SELECT method || ' ' || rows || ' ' || detail::text FROM retention.ledger ORDER BY id",
    );
    assert!(
        c.log()
            .contains("could not close the run of policy archive_log"),
        "the close failed; ledger: {ledger:#?}\nlog:\n{}",
        c.log()
    );
    assert_eq!(
        scalar(&mut su, "SELECT count(*) FROM retention.retiring_leaves"),
        2,
        "both leaves were detached and are still recorded"
    );
    // The worker, idle until its next cycle an hour away, holds neither: another session
    // locks them at once.
    db.batch_execute(
        "SET lock_timeout = '2s';
         BEGIN;
         LOCK TABLE archive_log_jan, archive_log_feb IN ACCESS EXCLUSIVE MODE;
         COMMIT;
         RESET lock_timeout;",
    )
    .unwrap();
    // The next run, in another session, attaches them again and retires them.
    no_event_trigger(&mut su);
    db.batch_execute("CALL retention.run('archive_log')")
        .unwrap();
    assert_eq!(
        drops(&mut db),
        vec![
            ("public.archive_log_feb".to_owned(), feb),
            ("public.archive_log_jan".to_owned(), jan),
        ]
    );
    assert_eq!(jan + feb, 1000);
    assert_eq!(scalar(&mut db, "SELECT count(*) FROM archive_log"), 10);
    assert_eq!(
        scalar(&mut su, "SELECT count(*) FROM retention.retiring_leaves"),
        0
    );
}

/// The worker connects as a non-superuser (`pg_retention.role`, a member of `retention_worker`)
/// and sweeps a full cycle: the policy, registered by a non-superuser admin, runs as that
/// admin; the ledger names the worker; the role may do nothing else.
#[test]
fn the_worker_sweeps_a_full_cycle_as_a_non_superuser_role() {
    let c = Cluster::start(&[
        "pg_retention.databases = 'postgres'",
        "pg_retention.naptime = '1h'",
        "pg_retention.jitter = 0",
    ]);
    // Set-up by the superuser: the worker's role (a LOGIN only in retention_worker).
    c.execute(
        "postgres",
        "CREATE ROLE sweeper LOGIN IN ROLE retention_worker;",
    );
    let mut db = outbox(&c, "outbox", 1000);
    assert!(expired(&mut db, "outbox") > 0);
    // Superuser kept: the configuration file and pg_reload_conf() are the cluster's.
    // Deletes slow enough that the visit is seen under way.
    slow_deletes(&c, "outbox", 4);
    c.append_conf(&["pg_retention.enabled = on", "pg_retention.role = 'sweeper'"]);
    c.reload();
    let mut user = String::new();
    let seen = c.wait_until(WAIT, || {
        match monitor(&c).query_opt(
            "SELECT usename::text FROM pg_stat_activity WHERE backend_type = 'pg_retention worker'",
            &[],
        ) {
            Ok(Some(row)) => {
                user = row.get(0);
                true
            }
            _ => false,
        }
    });
    assert!(seen, "no visit seen; log:\n{}", c.log());
    assert_eq!(user, "sweeper");
    let swept = c.wait_until(WAIT, || {
        let mut db = c.admin("postgres");
        expired(&mut db, "outbox") == 0
    });
    assert!(swept, "the worker did not sweep; log:\n{}", c.log());
    assert_eq!(
        column::<String>(
            &mut db,
            "SELECT DISTINCT actor FROM retention.ledger WHERE method IN ('run', 'prune')"
        ),
        ["worker"]
    );
    let mut sweeper = c.connect_as("postgres", "sweeper");
    for sql in [
        "SELECT retention.add_policy(name => 'x', relation => 'outbox', kind => 'age',
                age_column => 'created_at', older_than => '1 day')",
        "SELECT count(*) FROM retention.ledger_entries",
        "SELECT retention._ledger_append('run', 'worker', '{}', NULL)",
    ] {
        let err = sweeper.batch_execute(sql).unwrap_err();
        assert_eq!(
            pg_retention_integration::sqlstate(&err),
            "42501",
            "{sql}: {err}"
        );
    }
}
