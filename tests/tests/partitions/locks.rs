//! Locks: a drop blocked by a long transaction or a locked leaf is put off and ledgered without
//! blocking the application's inserts, and a whole-leaf drop never holds the partitioned table.

use super::*;

#[test]
fn a_drop_blocked_by_a_long_transaction_is_skipped_and_ledgered_without_blocking_inserts() {
    let c = Cluster::start(&[]);
    let (_, mut admin) = events(&c);
    policy(&mut admin, "");
    // A long transaction of the application's that has read the table: its ACCESS SHARE lock
    // stays until it ends.
    let mut long = c.app("postgres");
    long.batch_execute("BEGIN; SELECT count(*) FROM events;")
        .unwrap();
    // The application inserting all along; a blocked insert would fail its 5 s statement
    // timeout.
    let url = c.url_as("postgres", "app");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut w = Client::connect(&url, postgres::NoTls).unwrap();
            w.batch_execute("SET statement_timeout = '5s'").unwrap();
            let mut n = 0i64;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                w.execute(
                    "INSERT INTO events VALUES (100000 + $1::bigint, 0, now(), 'new')",
                    &[&n],
                )
                .expect("an insert is never blocked by a partition drop");
                n += 1;
                std::thread::sleep(Duration::from_millis(5));
            }
            n
        })
    };
    std::thread::sleep(Duration::from_millis(200));
    admin.batch_execute("CALL retention.run()").unwrap();
    std::thread::sleep(Duration::from_millis(200));
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let inserted = writer.join().expect("the writer's inserts all succeeded");
    assert!(
        inserted > 10,
        "the writer ran throughout ({inserted} inserts)"
    );
    assert!(
        drops(&mut admin).is_empty(),
        "nothing is dropped while the long transaction holds its lock"
    );
    let skipped: Vec<String> = admin
        .query(
            "SELECT detail->>'partition' FROM retention.ledger WHERE method = 'drop_skipped'",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(
        sorted(skipped),
        public(&WHOLLY_EXPIRED),
        "each put-off drop is ledgered"
    );
    for leaf in WHOLLY_EXPIRED {
        assert!(exists(&mut admin, leaf));
    }
    // The next run, with the long transaction gone, drops them.
    long.batch_execute("COMMIT").unwrap();
    admin.batch_execute("CALL retention.run()").unwrap();
    assert_eq!(
        sorted(drops(&mut admin).into_iter().map(|d| d.0).collect()),
        public(&WHOLLY_EXPIRED)
    );
    assert_eq!(expired(&mut admin), 0);
}

#[test]
fn a_leaf_locked_by_another_transaction_is_put_off_while_the_leaves_around_it_are_dropped() {
    let c = Cluster::start(&[]);
    let (_, mut admin) = events(&c);
    policy(&mut admin, "");
    // An application transaction that holds one expired leaf (not the partitioned table): the
    // run's SHARE lock on that leaf is not granted, every other lock is.
    let mut long = c.app("postgres");
    long.batch_execute("BEGIN; LOCK TABLE ONLY events_m8 IN ROW EXCLUSIVE MODE;")
        .unwrap();
    admin.batch_execute("CALL retention.run()").unwrap();
    let others: Vec<&str> = WHOLLY_EXPIRED
        .iter()
        .copied()
        .filter(|l| *l != "events_m8")
        .collect();
    assert_eq!(
        sorted(drops(&mut admin).into_iter().map(|d| d.0).collect()),
        public(&others),
        "the leaves before and after the locked one are dropped in the same run"
    );
    assert_eq!(
        text(
            &mut admin,
            "SELECT string_agg(detail->>'partition', ',') FROM retention.ledger
              WHERE method = 'drop_skipped'"
        ),
        "public.events_m8",
        "the locked leaf's drop is put off and ledgered"
    );
    assert!(exists(&mut admin, "events_m8"));
    assert_eq!(
        count(&mut admin, "SELECT count(*) FROM events_m8"),
        24,
        "its rows are all still there"
    );
    long.batch_execute("COMMIT").unwrap();
    admin.batch_execute("CALL retention.run()").unwrap();
    assert_eq!(
        sorted(drops(&mut admin).into_iter().map(|d| d.0).collect()),
        public(&WHOLLY_EXPIRED),
        "the next run drops it"
    );
    assert_eq!(expired(&mut admin), 0);
}

#[test]
fn a_whole_leaf_drop_runs_without_the_partitioned_table_locked() {
    let c = Cluster::start(&[]);
    let (_, mut admin) = events(&c);
    policy(&mut admin, "");
    // At each DROP TABLE: whether the dropping transaction holds any lock on `events`. A drop
    // removes the leaf's files at its commit, and a writer of `events` would wait for that.
    // The record table and the event trigger are the superuser's (only a superuser may make an
    // event trigger); the trigger fires in the run's DROP TABLE, which runs as the policy's
    // owner, so `admin` may insert into the record table.
    c.execute(
        "postgres",
        "CREATE TABLE drop_saw (parent_locked boolean);
         GRANT SELECT, INSERT ON drop_saw TO admin;",
    );
    on_drop_table(
        &mut c.connect("postgres"),
        "INSERT INTO public.drop_saw
             SELECT EXISTS (SELECT 1 FROM pg_locks WHERE pid = pg_backend_pid()
                               AND relation = 'public.events'::regclass);",
    );
    admin.batch_execute("CALL retention.run()").unwrap();
    assert_eq!(
        sorted(drops(&mut admin).into_iter().map(|d| d.0).collect()),
        public(&WHOLLY_EXPIRED)
    );
    assert_eq!(
        count(&mut admin, "SELECT count(*) FROM drop_saw"),
        WHOLLY_EXPIRED.len() as i64
    );
    assert_eq!(
        count(
            &mut admin,
            "SELECT count(*) FROM drop_saw WHERE parent_locked"
        ),
        0,
        "no drop's transaction holds the partitioned table"
    );
}
