//! When and as whom the worker sweeps: after `wake()`, one pruner at a time against a manual
//! run, a naptime changed by SIGHUP, and a full cycle as a non-superuser role.

use super::*;

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
