//! Limits on a run: the per-run row cap, the WAL rate budget and adaptive pacing.

use super::*;

#[test]
fn run_cap_stops_and_ledgers_a_warning() {
    run_cap_stops(false);
}

#[test]
fn run_cap_stops_an_index_walk_and_ledgers_a_warning() {
    run_cap_stops(true);
}

fn run_cap_stops(by_index: bool) {
    let c = outbox_cluster(2000, by_index);
    let mut admin = c.admin("postgres");
    age_policy(&mut admin, ", max_rows_per_run => 250");
    let eligible = count(
        &mut admin,
        "SELECT count(*) FROM outbox WHERE created_at < now() - interval '30 days'",
    );
    admin.batch_execute("CALL retention.run()").unwrap();
    assert_eq!(
        count(
            &mut admin,
            "SELECT sum(rows)::bigint FROM retention.ledger WHERE method = 'prune'"
        ),
        250
    );
    assert_eq!(
        count(
            &mut admin,
            "SELECT rows FROM retention.ledger WHERE method = 'cap_reached'"
        ),
        eligible - 250
    );
    assert_eq!(
        count(&mut admin, "SELECT backlog FROM retention.stats"),
        eligible - 250
    );
}

#[test]
fn max_wal_rate_paces_a_run_and_ledgers_its_pauses() {
    let c = Cluster::start(&[
        "pg_retention.max_wal_rate = '256kB'",
        "pg_retention.max_replica_lag = 0",
        // Only the WAL budget's pauses here (adaptive pacing has its own test).
        "pg_retention.adaptive_pacing = off",
    ]);
    let (mut app, mut admin) = set_up(
        &c,
        "CREATE TABLE feed (id bigserial PRIMARY KEY, at timestamptz NOT NULL, body text);",
    );
    app.batch_execute(
        "INSERT INTO feed (at, body) SELECT now() - interval '40 days', repeat('x', 100) FROM generate_series(1, 8000);",
    )
    .unwrap();
    admin.batch_execute(
        "SELECT retention.add_policy(name => 'feed', relation => 'feed', kind => 'age', age_column => 'at',
                older_than => '30 days', batch_size => 500);",
    )
    .unwrap();
    c.execute("postgres", "CHECKPOINT;");
    let lsn_before: String = admin
        .query_one("SELECT pg_current_wal_lsn()::text", &[])
        .unwrap()
        .get(0);
    let started = std::time::Instant::now();
    admin.batch_execute("CALL retention.run('feed')").unwrap();
    let elapsed = started.elapsed().as_secs_f64();
    assert_eq!(count(&mut admin, "SELECT count(*) FROM feed"), 0);
    let wal: f64 = admin
        .query_one(
            "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::text::pg_lsn)::float8",
            &[&lsn_before],
        )
        .unwrap()
        .get(0);
    // The budget allows a second of burst and then 256 kB a second; the last step is not paced
    // (nothing follows it), so at least (WAL - burst - a step's WAL) / rate seconds passed.
    let rate = 256.0 * 1024.0;
    let floor = (wal - rate) / rate - 1.0;
    assert!(
        elapsed >= floor,
        "{wal} bytes of WAL in {elapsed:.2} s at {rate} B/s (expected at least {floor:.2} s)"
    );
    let (pauses, seconds): (i64, f64) = {
        let r = admin
            .query_one(
                "SELECT count(*), coalesce(sum((detail->>'seconds')::float8), 0) FROM retention.ledger
                  WHERE method = 'pause' AND detail->>'reason' = 'wal_rate'",
                &[],
            )
            .unwrap();
        (r.get(0), r.get(1))
    };
    assert!(pauses >= 1 && seconds > 0.0, "{pauses} pauses, {seconds} s");
    assert_eq!(
        count(
            &mut admin,
            "SELECT pauses_total FROM retention.stats WHERE policy = 'feed'"
        ),
        pauses
    );
}

/// `detail.paced` of the last run of policy `feed`: what adaptive pacing did in it.
fn last_run_paced(db: &mut Client) -> serde_json::Value {
    serde_json::from_str(
        db.query_one(
            "SELECT detail->>'paced' FROM retention.ledger WHERE method = 'run' AND policy = 'feed'
              ORDER BY id DESC LIMIT 1",
            &[],
        )
        .unwrap()
        .get(0),
    )
    .unwrap()
}

#[test]
fn adaptive_pacing_shrinks_steps_whose_flush_is_slow_and_ledgers_its_pauses_once_per_run() {
    // A flush target below any fsync (one of 8 kB takes about 0.15 ms on this machine), steps
    // of about 20 MB of WAL (their first change of each page after the checkpoint below logs
    // the whole page), and neither the WAL writer nor the background writer flushing the
    // sweep's commits first: each step after the first waits for its own flush (the WAL since
    // the last full segment), pauses and shrinks the next.
    let c = Cluster::start(&[
        // The fixture turns fsync off for speed; here flushes are what is measured.
        "fsync = on",
        "pg_retention.pacing_flush_target = 0.1",
        "pg_retention.max_replica_lag = 0",
        "wal_writer_delay = '10s'",
        "wal_writer_flush_after = '1GB'",
        "bgwriter_lru_maxpages = 0",
    ]);
    let (mut app, mut admin) = set_up(
        &c,
        "CREATE TABLE feed (id bigserial PRIMARY KEY, at timestamptz NOT NULL, body text);",
    );
    app.batch_execute(
        "INSERT INTO feed (at, body) SELECT now() - interval '40 days', repeat(md5(g::text), 30)
           FROM generate_series(1, 100000) g;",
    )
    .unwrap();
    admin.batch_execute(
        "SELECT retention.add_policy(name => 'feed', relation => 'feed', kind => 'age', age_column => 'at',
                older_than => '30 days', batch_size => 20000);",
    )
    .unwrap();
    c.execute("postgres", "CHECKPOINT;");
    admin.batch_execute("CALL retention.run('feed')").unwrap();
    assert_eq!(count(&mut admin, "SELECT count(*) FROM feed"), 0);
    let paced = last_run_paced(&mut admin);
    let pauses = paced["pauses"].as_i64().unwrap();
    assert!(pauses >= 1, "{paced}");
    assert!(paced["max_flush_ms"].as_f64().unwrap() > 0.1, "{paced}");
    assert!(paced["min_step_rows"].as_i64().unwrap() < 20000, "{paced}");
    // The steps shrank: some prune deleted fewer rows than batch_size before the last one.
    assert!(
        count(
            &mut admin,
            "SELECT count(*) FROM (SELECT rows, lead(id) OVER (ORDER BY id) AS next
                                     FROM retention.ledger WHERE method = 'prune') b
              WHERE rows < 20000 AND next IS NOT NULL"
        ) >= 1
    );
    // One pause record for the run, with the run's count and seconds, counted by the stats.
    let (records, ledgered, seconds): (i64, i64, f64) = {
        let r = admin
            .query_one(
                "SELECT count(*), sum((detail->>'pauses')::bigint)::bigint, sum((detail->>'seconds')::float8)
                   FROM retention.ledger WHERE method = 'pause' AND detail->>'reason' = 'adaptive'",
                &[],
            )
            .unwrap();
        (r.get(0), r.get(1), r.get(2))
    };
    assert_eq!((records, ledgered), (1, pauses));
    assert!(seconds > 0.0);
    assert_eq!(
        count(
            &mut admin,
            "SELECT pauses_total FROM retention.stats WHERE policy = 'feed'"
        ),
        pauses
    );

    // Off: steps of batch_size back to back, no pause.
    app.batch_execute(
        "INSERT INTO feed (at, body) SELECT now() - interval '40 days', repeat(md5(g::text), 30)
           FROM generate_series(1, 60000) g;",
    )
    .unwrap();
    // Superuser-settable only (docs/configuration.md): the superuser sets it for the admin's
    // sessions, and the admin connects again.
    c.execute(
        "postgres",
        "ALTER ROLE admin SET pg_retention.adaptive_pacing = off",
    );
    let mut admin = c.admin("postgres");
    admin.batch_execute("CALL retention.run('feed')").unwrap();
    assert_eq!(count(&mut admin, "SELECT count(*) FROM feed"), 0);
    let last = last_run_paced(&mut admin);
    assert_eq!(last["pauses"], 0, "{last}");
    assert!(last["step_rows"].is_null(), "{last}");
    assert_eq!(
        count(
            &mut admin,
            "SELECT count(*) FROM retention.ledger WHERE method = 'pause'"
        ),
        1
    );
    assert_eq!(
        count(
            &mut admin,
            "SELECT count(*) FROM (SELECT rows FROM retention.ledger WHERE method = 'prune' ORDER BY id DESC LIMIT 3) b
              WHERE rows = 20000"
        ),
        3
    );
}
