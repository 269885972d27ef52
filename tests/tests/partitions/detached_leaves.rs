//! Detached leaves: a run that fails after detaching leaves attaches them again with every row,
//! and a leaf left detached by a killed run is attached again by the next run, or kept when it
//! changed.

use super::*;

/// The leaves of `events`, by name.
fn leaves(db: &mut Client) -> Vec<String> {
    db.query(
        "SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
          WHERE i.inhparent = 'events'::regclass ORDER BY 1",
        &[],
    )
    .unwrap()
    .iter()
    .map(|r| r.get(0))
    .collect()
}

/// (partition, reason) of every `drop_skipped` ledger record, by partition name.
fn skips(db: &mut Client) -> Vec<(String, String)> {
    db.query(
        "SELECT detail->>'partition', detail->>'reason' FROM retention.ledger
          WHERE method = 'drop_skipped' ORDER BY 1",
        &[],
    )
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1)))
    .collect()
}

#[test]
fn a_run_that_fails_after_detaching_leaves_attaches_them_again_with_every_row() {
    let c = Cluster::start(&[]);
    let (_, mut admin) = events(&c);
    policy(&mut admin, "");
    let before = leaves(&mut admin);
    let total = count(&mut admin, "SELECT count(*) FROM events");
    // The second transaction of a retirement, the drop, fails: an event trigger, which only a
    // superuser may make.
    let mut su = c.connect("postgres");
    on_drop_table(
        &mut su,
        "RAISE EXCEPTION 'no drops today' USING ERRCODE = '55000';",
    );
    let (code, msg) = expect_error(&mut admin, "CALL retention.run()");
    assert_eq!(code, "RT601", "the run says it failed: {msg}");
    assert_eq!(
        text(
            &mut admin,
            "SELECT detail->>'error' FROM retention.ledger WHERE method = 'error'"
        ),
        "no drops today",
        "the failed drop is the run's ledgered error"
    );
    assert!(
        drops(&mut admin).is_empty(),
        "nothing is ledgered as dropped"
    );
    assert_eq!(
        leaves(&mut admin),
        before,
        "every detached leaf is a leaf again"
    );
    assert_eq!(
        count(&mut admin, "SELECT count(*) FROM events"),
        total,
        "with every row"
    );
    let skipped = skips(&mut admin);
    assert!(!skipped.is_empty());
    for (leaf, reason) in &skipped {
        assert!(
            WHOLLY_EXPIRED
                .iter()
                .any(|l| *leaf == format!("public.{l}")),
            "{leaf}"
        );
        assert_eq!(
            reason, "the run failed before the leaf was dropped; attached again",
            "{leaf}"
        );
    }
    // retention.retiring_leaves is a catalog table no role is granted: the superuser reads it.
    assert_eq!(
        count(&mut su, "SELECT count(*) FROM retention.retiring_leaves"),
        0
    );
    // With drops allowed again (the superuser's event trigger gone), the next run retires them.
    no_event_trigger(&mut su);
    admin.batch_execute("CALL retention.run()").unwrap();
    assert_eq!(
        sorted(drops(&mut admin).into_iter().map(|d| d.0).collect()),
        public(&WHOLLY_EXPIRED)
    );
    assert_eq!(expired(&mut admin), 0);
}

#[test]
fn a_leaf_left_detached_by_a_killed_run_is_attached_again_by_the_next_run_or_kept_when_it_changed()
{
    let c = Cluster::start(&[]);
    let (mut app, mut admin) = events(&c);
    policy(&mut admin, "");
    let per_leaf = wholly_expired_rows(&mut admin);
    // The run's drop waits, and its session is killed there: between the transaction that
    // detached the leaves and the one that drops them. The wait is an event trigger, which only
    // a superuser may make; the run and the kill are `admin`'s (its own session).
    let mut su = c.connect("postgres");
    on_drop_table(&mut su, "PERFORM pg_sleep(60);");
    let mut runner = c.admin("postgres");
    let pid: i32 = runner
        .query_one("SELECT pg_backend_pid()", &[])
        .unwrap()
        .get(0);
    // Dates printed day first there and read month first by the run that attaches the leaves
    // again: the bound it was detached with must read back the same.
    runner.batch_execute("SET DateStyle = 'SQL, DMY'").unwrap();
    admin.batch_execute("SET DateStyle = 'SQL, MDY'").unwrap();
    let run = std::thread::spawn(move || runner.batch_execute("CALL retention.run()"));
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while count(
        &mut admin,
        &format!(
            "SELECT count(*) FROM pg_stat_activity WHERE pid = {pid} AND wait_event = 'PgSleep'"
        ),
    ) == 0
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the drop never started"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    admin
        .batch_execute(&format!("SELECT pg_terminate_backend({pid}, 10000)"))
        .unwrap();
    assert!(run.join().unwrap().is_err(), "the killed run's CALL fails");
    no_event_trigger(&mut su);
    // retention.retiring_leaves is a catalog table no role is granted: the superuser reads it.
    let left: Vec<String> = su
        .query(
            "SELECT qualified FROM retention.retiring_leaves ORDER BY 1",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(!left.is_empty(), "the killed run left detached leaves");
    for leaf in &left {
        assert_eq!(
            count(
                &mut admin,
                &format!("SELECT count(*) FROM pg_inherits WHERE inhrelid = '{leaf}'::regclass")
            ),
            0,
            "{leaf} is detached"
        );
    }
    assert!(drops(&mut admin).is_empty());
    // With the session's lock gone, one of them is written to: a young row, which its bound
    // no longer keeps out.
    // The application still has its privileges on the detached table.
    let changed = left[0].clone();
    app.batch_execute(&format!(
        "INSERT INTO {changed} VALUES (100000, 0, now(), 'new')"
    ))
    .unwrap();
    let changed_rows = count(&mut admin, &format!("SELECT count(*) FROM {changed}"));

    admin.batch_execute("CALL retention.run()").unwrap();
    let skipped = skips(&mut admin);
    for leaf in &left {
        let reason = &skipped
            .iter()
            .find(|(l, _)| l == leaf)
            .unwrap_or_else(|| panic!("{leaf} has a drop_skipped record: {skipped:?}"))
            .1;
        let prefix = "a run detached the leaf and ended before it dropped it; ";
        if *leaf == changed {
            assert!(
                reason.starts_with(&format!("{prefix}it could not be attached again"))
                    && reason.ends_with(&format!("stays detached as {changed}")),
                "{reason}"
            );
        } else {
            assert_eq!(*reason, format!("{prefix}attached again"));
        }
    }
    // The changed leaf is kept, every row of it; the others were proven again and dropped.
    assert_eq!(
        count(&mut admin, &format!("SELECT count(*) FROM {changed}")),
        changed_rows
    );
    let mut expected: Vec<(String, i64)> = per_leaf
        .into_iter()
        .filter(|(l, _)| *l != changed)
        .collect();
    expected.sort();
    assert_eq!(drops(&mut admin), expected);
    assert_eq!(
        count(&mut su, "SELECT count(*) FROM retention.retiring_leaves"),
        0
    );
}
