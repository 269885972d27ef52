//! A fleet on one cluster: a launcher and a small pool of workers serve every database in turn
//! (docs/operations.md, "Many databases"), with PostgreSQL's default `max_worker_processes`.
//!
//! Production roles: databases, tables and the extension are made by the superuser in set-up;
//! rows are written by `app`, policies made and `retention.health()`, `retention.workers` read
//! by `admin` (a member of `retention_admin`, not a superuser). The superuser also reads
//! `retention.worker_state` across databases for the timing assertions (cluster-wide
//! observation no single role has) and flips `pg_retention.enabled` (configuration).

use pg_retention_integration::{scalar, Cluster};
use postgres::Client;
use std::time::{Duration, Instant};

/// Makes `db` from nothing: the extension, `tables` tables of `rows` rows each (every row past
/// the one-day window), one delete policy per table owned by `admin`.
fn populate(c: &Cluster, db: &str, tables: usize, rows: usize) {
    c.execute("postgres", &format!("CREATE DATABASE {db}"));
    let mut ddl = String::from("CREATE EXTENSION pg_retention;");
    for t in 0..tables {
        ddl.push_str(&format!(
            "CREATE TABLE t{t} (id bigserial PRIMARY KEY, created_at timestamptz NOT NULL);"
        ));
    }
    c.execute(db, &ddl);
    c.grant_app_and_admin(db);
    let mut app = c.app(db);
    let mut admin = c.admin(db);
    for t in 0..tables {
        app.batch_execute(&format!(
            "INSERT INTO t{t} (created_at) SELECT now() - interval '2 days' FROM generate_series(1, {rows})"
        ))
        .unwrap();
        admin
            .batch_execute(&format!(
                "SELECT retention.add_policy('p{t}', 't{t}', 'age', age_column => 'created_at', older_than => '1 day')"
            ))
            .unwrap();
    }
}

/// `db` with one policy over `rows` expired rows whose deletes each take 2 ms (a trigger made
/// by the superuser), swept 50 rows a batch: a long backlog.
fn backlog(c: &Cluster, db: &str, rows: usize) {
    populate(c, db, 1, rows);
    c.execute(
        db,
        "CREATE FUNCTION slow() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN PERFORM pg_sleep(0.002); RETURN OLD; END $$;
         CREATE TRIGGER slow BEFORE DELETE ON t0 FOR EACH ROW EXECUTE FUNCTION slow();",
    );
    c.admin(db)
        .batch_execute("SELECT retention.alter_policy('p0', batch_size => 50)")
        .unwrap();
}

/// Rows left in the `tables` tables of `db` (as `admin`).
fn rows_left(c: &Cluster, db: &str, tables: usize) -> i64 {
    let mut admin = c.admin(db);
    (0..tables)
        .map(|t| scalar(&mut admin, &format!("SELECT count(*) FROM t{t}")))
        .sum()
}

/// When the first visit to `db` started and when its cycle ended, seconds since `epoch`
/// (a Unix time), or None before the cycle ended.
fn first_cycle(su: &mut Client, epoch: f64) -> Option<(f64, f64)> {
    let row = su
        .query_opt(
            "SELECT extract(epoch FROM last_cycle_start)::float8, extract(epoch FROM last_cycle_end)::float8
               FROM retention.worker_state WHERE last_cycle_end IS NOT NULL",
            &[],
        )
        .ok()
        .flatten()?;
    Some((row.get::<_, f64>(0) - epoch, row.get::<_, f64>(1) - epoch))
}

fn unix_now(su: &mut Client) -> f64 {
    su.query_one("SELECT extract(epoch FROM clock_timestamp())::float8", &[])
        .unwrap()
        .get(0)
}

fn enable(c: &Cluster) {
    c.append_conf(&["pg_retention.enabled = on"]);
    c.reload();
}

#[test]
fn thirty_databases_are_all_swept_by_a_pool_of_two() {
    const DBS: usize = 30;
    const TABLES: usize = 20;
    const NAPTIME: f64 = 20.0;
    let c = Cluster::start(&[
        "max_worker_processes = 8",
        "pg_retention.enabled = off",
        "pg_retention.databases = '*'",
        "pg_retention.max_workers = 2",
        "pg_retention.naptime = '20s'",
        "pg_retention.jitter = 0",
    ]);
    let names: Vec<String> = (0..DBS).map(|i| format!("d{i:02}")).collect();
    for db in &names {
        populate(&c, db, TABLES, 50);
    }
    // Databases without pg_retention are visited too ('*') and left as they are.
    c.execute("postgres", "CREATE DATABASE plain");
    let mut su = c.connect("postgres");
    let epoch = unix_now(&mut su);
    enable(&c);

    let started = Instant::now();
    let all_swept = c.wait_until(Duration::from_secs(300), || {
        names.iter().all(|db| rows_left(&c, db, TABLES) == 0)
    });
    let elapsed = started.elapsed();
    assert!(all_swept, "not every database was swept; log:\n{}", c.log());
    println!(
        "fleet: {DBS} databases x {TABLES} policies swept by 2 workers in {:.1} s",
        elapsed.as_secs_f64()
    );
    // Every database's first cycle: each began within one naptime plus the time the pool
    // needed for the databases before it (all were due at once; jitter 0).
    let mut ends = Vec::new();
    for db in &names {
        let mut d = c.connect(db);
        let (start, end) = first_cycle(&mut d, epoch)
            .unwrap_or_else(|| panic!("{db}: no cycle ended though its rows are gone"));
        assert!(start >= 0.0 && end >= start, "{db}: {start} .. {end}");
        ends.push(end);
    }
    let last = ends.iter().cloned().fold(0.0, f64::max);
    assert!(
        last < NAPTIME + elapsed.as_secs_f64() + 1.0,
        "the last database's first cycle ended {last:.1} s after enabling"
    );
    assert!(
        !c.log().contains("could not start a worker"),
        "the pool stayed within max_worker_processes; log:\n{}",
        c.log()
    );
    // The pool keeps serving: every database gets its next visit about a naptime after its
    // last one, none waiting past two naptimes (health() would say so).
    for db in &names {
        let mut admin = c.admin(db);
        let unhealthy = scalar(
            &mut admin,
            "SELECT count(*) FROM retention.health() WHERE NOT healthy",
        );
        assert_eq!(unhealthy, 0, "{db}: health() is not clean");
    }
    let mut d = c.connect("d00");
    let first_end: f64 = d
        .query_one(
            "SELECT extract(epoch FROM last_cycle_end)::float8 FROM retention.worker_state",
            &[],
        )
        .unwrap()
        .get(0);
    let again = c.wait_until(Duration::from_secs((3.0 * NAPTIME) as u64), || {
        names.iter().all(|db| {
            let mut d = c.connect(db);
            let end: f64 = d
                .query_one(
                    "SELECT extract(epoch FROM last_cycle_end)::float8 FROM retention.worker_state",
                    &[],
                )
                .unwrap()
                .get(0);
            end > first_end
        })
    });
    assert!(
        again,
        "not every database had its second visit within three naptimes; log:\n{}",
        c.log()
    );
    let mut plain = c.connect("plain");
    assert_eq!(
        scalar(
            &mut plain,
            "SELECT count(*) FROM pg_extension WHERE extname = 'pg_retention'"
        ),
        0
    );
}

#[test]
fn a_database_with_a_long_backlog_does_not_starve_the_others() {
    let c = Cluster::start(&[
        "max_worker_processes = 8",
        "pg_retention.enabled = off",
        "pg_retention.databases = 'big, s1, s2, s3'",
        "pg_retention.max_workers = 1",
        "pg_retention.max_visit_time = '2s'",
        "pg_retention.naptime = '1s'",
        "pg_retention.jitter = 0",
        "pg_retention.adaptive_pacing = off",
    ]);
    // `big`: 3,000 expired rows at 2 ms a delete: about six seconds of sweeping, so three or
    // more visits.
    backlog(&c, "big", 3000);
    for db in ["s1", "s2", "s3"] {
        populate(&c, db, 2, 20);
    }
    enable(&c);
    // The small databases are swept while big's cycle is still unfinished.
    let small_done = c.wait_until(Duration::from_secs(30), || {
        ["s1", "s2", "s3"]
            .iter()
            .all(|db| rows_left(&c, db, 2) == 0)
    });
    assert!(
        small_done,
        "the small databases waited behind big; log:\n{}",
        c.log()
    );
    let big_left = rows_left(&c, "big", 1);
    assert!(
        big_left > 0,
        "big was swept in one go, the test proves nothing"
    );
    let mut big = c.admin("big");
    // Each cut visit left the policy for the next: its runs stop at the visit bound, and the
    // cycle is not over yet.
    let cut = c.wait_until(Duration::from_secs(30), || {
        scalar(
            &mut big,
            "SELECT count(*) FROM retention.ledger
              WHERE method = 'run' AND detail->>'reason' LIKE '%pg_retention.max_visit_time%'",
        ) > 0
    });
    assert!(
        cut,
        "no run of big was cut at the visit bound; log:\n{}",
        c.log()
    );
    let done = c.wait_until(Duration::from_secs(120), || rows_left(&c, "big", 1) == 0);
    assert!(done, "big was never finished; log:\n{}", c.log());
    let stats = scalar(
        &mut big,
        "SELECT count(*) FROM retention.ledger WHERE method = 'run' AND (detail->>'deleted')::bigint > 0",
    );
    assert!(
        stats >= 2,
        "big's backlog took {stats} visits with deletions"
    );
}

#[test]
fn a_database_waiting_past_two_naptimes_is_unhealthy_and_shown_waiting() {
    let c = Cluster::start(&[
        "max_worker_processes = 8",
        "pg_retention.enabled = off",
        "pg_retention.databases = 'big, small'",
        "pg_retention.max_workers = 1",
        "pg_retention.max_visit_time = '8s'",
        "pg_retention.naptime = '1s'",
        "pg_retention.jitter = 0",
        "pg_retention.adaptive_pacing = off",
    ]);
    backlog(&c, "big", 20_000);
    populate(&c, "small", 1, 10);
    enable(&c);
    // While big holds the only worker for up to 8 s at a time, small waits: health() there
    // names the wait, and retention.workers shows since when it waits.
    let mut reasons = String::new();
    let mut waiting = false;
    let seen = c.wait_until(Duration::from_secs(60), || {
        let mut small = c.admin("small");
        if scalar(
            &mut small,
            "SELECT count(*) FROM retention.workers WHERE waiting_since IS NOT NULL",
        ) > 0
        {
            waiting = true;
        }
        reasons = small
            .query_one(
                "SELECT coalesce(string_agg(array_to_string(reasons, '; '), ' | '), '') FROM retention.health()",
                &[],
            )
            .unwrap()
            .get(0);
        waiting && reasons.contains("database not served for")
    });
    assert!(
        seen,
        "health() never named the wait (last: {reasons:?}, waiting seen: {waiting}); log:\n{}",
        c.log()
    );
    assert!(
        reasons.contains("pg_retention.max_workers = 1"),
        "{reasons}"
    );
}
