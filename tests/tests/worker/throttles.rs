//! What holds a sweep back, and how health flags it: the cycle cap, and a pause while a
//! streaming replica lags.

use super::*;

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
