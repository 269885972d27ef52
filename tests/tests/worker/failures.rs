//! Signals, crashes and failures the worker survives: SIGTERM mid-sweep, a killed database
//! worker, a policy whose table was dropped, a database that does not exist, and a run whose
//! close fails.

use super::*;

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
