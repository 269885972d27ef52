//! Counters: retention.stats' running totals equal the ledger aggregated, rows_deleted sums to
//! the rows deleted, and stats and metrics read a million ledger rows in milliseconds.

use super::*;

/// The ledger aggregated the way retention.stats did before the counters, per policy. It reads
/// the catalog tables themselves (no role is granted them): run by the superuser.
const FROM_THE_LEDGER: &str = "
    SELECT p.name,
           coalesce(sum(l.rows) FILTER (WHERE l.method IN ('prune', 'orphan_sweep', 'drop_partition')), 0)::bigint,
           count(*) FILTER (WHERE l.method IN ('prune', 'orphan_sweep')),
           coalesce(sum(l.rows) FILTER (WHERE l.method = 'hold_skip'), 0)::bigint,
           count(*) FILTER (WHERE l.method = 'cap_reached'),
           coalesce((SELECT sum(a.rows) FROM retention.archive_records a
                      WHERE a.id IN (SELECT x.archive_id FROM retention.ledger_entries x WHERE x.policy_id = p.id)), 0)::bigint,
           max(l.at) FILTER (WHERE l.method = 'run')::text
      FROM retention.policies p LEFT JOIN retention.ledger_entries l ON l.policy_id = p.id
     GROUP BY p.id, p.name ORDER BY 1";

const FROM_THE_COUNTERS: &str = "
    SELECT s.policy, s.rows_pruned_total, s.batches_total, s.hold_skips_total, s.cap_hits_total,
           s.rows_archived_total, s.last_run_at::text
      FROM retention.stats s ORDER BY 1";

type Figures = Vec<(String, i64, i64, i64, i64, i64, Option<String>)>;

fn figures(db: &mut Client, sql: &str) -> Figures {
    db.query(sql, &[])
        .unwrap()
        .iter()
        .map(|r| {
            (
                r.get(0),
                r.get(1),
                r.get(2),
                r.get(3),
                r.get(4),
                r.get(5),
                r.get(6),
            )
        })
        .collect()
}

#[test]
fn the_counters_equal_the_ledger_and_rows_deleted_sums_to_the_rows_deleted() {
    let c = Cluster::start(&[]);
    let mut db = scene(&c);
    let store = pg_retention_integration::temp_dir("pg-retention-observability");
    let a = Archiver::new(
        &c.archiver_url("postgres"),
        &format!("file://{}", store.display()),
    );
    let o = a.run(&["once", "--batch-rows", "100"]);
    assert!(o.status.success(), "{}", text(&o));
    db.batch_execute("CALL retention.run('events')").unwrap();
    db.batch_execute("CALL retention.run('outbox')").unwrap();
    let counters = figures(&mut db, FROM_THE_COUNTERS);
    // Superuser kept: the ledger's catalog tables are no role's to read.
    assert_eq!(
        counters,
        figures(&mut c.connect("postgres"), FROM_THE_LEDGER)
    );
    // events: 500 rows, 100 held (tenant 0); two runs capped at 200 rows each.
    let events = counters.iter().find(|f| f.0 == "events").unwrap();
    assert_eq!(events.1, 400, "{events:?}");
    assert_eq!(events.4, 1, "the first run stopped at its cap: {events:?}");
    assert!(events.3 > 0, "held rows are counted: {events:?}");
    let audit = counters.iter().find(|f| f.0 == "audit").unwrap();
    assert_eq!((audit.1, audit.5), (300, 300), "{audit:?}");
    // The ledger's rows_deleted sums to exactly the rows each policy deleted.
    for (policy, table, left) in [
        ("events", "events", 100),
        ("outbox", "outbox", 0),
        ("audit", "audit", 0),
    ] {
        let deleted = scalar(
            &mut db,
            &format!(
                "SELECT sum(rows_deleted)::bigint FROM retention.ledger WHERE policy = '{policy}'"
            ),
        );
        let before = match table {
            "events" => 500,
            "outbox" => 50,
            _ => 300,
        };
        assert_eq!(
            scalar(&mut db, &format!("SELECT count(*) FROM {table}")),
            left
        );
        assert_eq!(deleted, before - left, "{policy}");
    }
    // ... while summing rows over every method counts the run summaries twice.
    assert!(
        scalar(
            &mut db,
            "SELECT sum(rows)::bigint FROM retention.ledger WHERE policy = 'events'"
        ) > 400
    );
}

#[test]
fn stats_and_metrics_read_a_million_ledger_rows_in_milliseconds() {
    let c = Cluster::start(&[]);
    let mut admin = scene(&c);
    let mut mon = monitor(&c);
    // Superuser kept: it loads the ledger's catalog table directly (only the engine writes the
    // ledger) and aggregates it (no role may read it).
    let mut db = c.connect("postgres");
    let started = Instant::now();
    db.batch_execute(
        "INSERT INTO retention.ledger_entries (method, policy, policy_id, policy_version, relation, rows, actor, detail)
         SELECT CASE g % 4 WHEN 0 THEN 'run' WHEN 3 THEN 'hold_skip' ELSE 'prune' END, 'events', p.id, 1, 'public.events', 1,
                'load', CASE g % 4 WHEN 0 THEN '{\"outcome\": \"ok\", \"backlog\": 0}'::jsonb ELSE '{}' END
           FROM generate_series(1, 1000000) g, retention.policies p WHERE p.name = 'events'",
    )
    .unwrap();
    let load = started.elapsed();
    assert_eq!(
        figures(&mut admin, FROM_THE_COUNTERS),
        figures(&mut db, FROM_THE_LEDGER)
    );
    let time = |db: &mut Client, sql: &str| {
        db.batch_execute(sql).unwrap();
        let mut runs: Vec<Duration> = (0..7)
            .map(|_| {
                let t = Instant::now();
                db.batch_execute(sql).unwrap();
                t.elapsed()
            })
            .collect();
        runs.sort();
        runs[3]
    };
    let stats = time(&mut admin, "SELECT * FROM retention.stats");
    let metrics = time(&mut mon, "SELECT * FROM retention.metrics()");
    let aggregated = time(&mut db, FROM_THE_LEDGER);
    println!(
        "1,000,000 ledger rows (counted by the trigger in {:.1} s): retention.stats {:.2} ms, \
         retention.metrics() {:.2} ms (median of 7), the ledger aggregated as stats did before {:.1} ms",
        load.as_secs_f64(),
        stats.as_secs_f64() * 1000.0,
        metrics.as_secs_f64() * 1000.0,
        aggregated.as_secs_f64() * 1000.0
    );
    assert!(scalar(&mut db, "SELECT count(*) FROM retention.ledger_entries") > 1_000_000);
}
