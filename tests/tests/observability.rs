//! Observability (docs/observability.md): the ledger's running totals equal the ledger, and
//! summing `rows_deleted` gives the rows deleted; `retention.metrics()` for pg_monitor, with the
//! signal of a stall; reads stay cheap at a million ledger rows; the archiver's HTTP side (exact
//! paths and methods, `serve-metrics`), every family it declares updated in an end-to-end run;
//! and a real Prometheus scraping the archiver and postgres_exporter (deploy/'s query file),
//! with deploy/'s alert rules, finding every family and firing the alert the test provokes.
//!
//! Production roles throughout: tables are made by the superuser in set-up, application rows
//! are written by `app` (table privileges only), policies, holds, `CALL retention.run()` and
//! every read of the retention views are `admin`'s (a member of `retention_admin`, not a
//! superuser, who also reads the governed tables for the assertions), `retention.metrics()` is
//! read by `mon` (a LOGIN member of `pg_monitor` only, the monitoring role docs/observability.md
//! names; postgres_exporter connects as it), the archiver runs as `archiver` (a LOGIN only in
//! `retention_archiver`) and the erasure is `dpo`'s (a LOGIN only in `retention_eraser`, with
//! SELECT and DELETE on the table). The superuser stays only where a test needs it, commented:
//! reading and loading the catalog tables (`retention.ledger_entries`,
//! `retention.archive_records`) that no role is granted.

use pg_retention_integration::archiver::{terminate, text, Archiver};
use pg_retention_integration::{expect_error, scalar, Cluster};
use postgres::Client;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `GET` (or `method`) of `path` on `port`: the status and the body.
fn http(method: &str, port: u16, path: &str) -> (u16, String) {
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return (0, String::new());
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(20)));
    let _ = write!(s, "{method} {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
    let mut response = String::new();
    let _ = s.read_to_string(&mut response);
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

fn get(port: u16, path: &str) -> (u16, String) {
    http("GET", port, path)
}

/// Percent-encodes a query parameter.
fn encode(v: &str) -> String {
    v.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Waits up to `secs` for `cond`.
fn wait_for(secs: u64, mut cond: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < until {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    cond()
}

/// A child process stopped when dropped.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Makes `role` (LOGIN, a member of `member_of` only) unless it exists; by the superuser.
fn login_role(c: &Cluster, role: &str, member_of: &str) {
    c.execute(
        "postgres",
        &format!(
            "DO $$ BEGIN
                 CREATE ROLE {role} LOGIN IN ROLE {member_of};
             EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
             END $$"
        ),
    );
}

/// A connection as `mon`: a LOGIN member of `pg_monitor` only, the role a metrics exporter
/// connects as (docs/observability.md). Made on first use; idempotent.
fn monitor(c: &Cluster) -> Client {
    login_role(c, "mon", "pg_monitor");
    c.connect_as("postgres", "mon")
}

/// A connection as `dpo`: a LOGIN member of `retention_eraser` only, with SELECT and DELETE on
/// `table` (docs/security.md: an eraser erases only from tables it may SELECT and DELETE). Made
/// by the superuser; idempotent.
fn eraser(c: &Cluster, table: &str) -> Client {
    login_role(c, "dpo", "retention_eraser");
    c.execute(
        "postgres",
        &format!("GRANT SELECT, DELETE ON {table} TO dpo"),
    );
    c.connect_as("postgres", "dpo")
}

/// Three policies: `outbox` (delete, never run: its rows are 40 days old against a 30-day
/// window, a stall), `events` (delete, run once, with a hold and a row cap), `audit`
/// (archive_then_delete, 300 closed rows of ten subjects, 40 to 60 days old). The tables are
/// made by the superuser, their rows written by `app`, the policies, the hold and the run
/// `admin`'s; returns a connection as `admin`.
fn scene(c: &Cluster) -> Client {
    c.execute(
        "postgres",
        "CREATE TABLE outbox (id bigint PRIMARY KEY, created_at timestamptz NOT NULL);
         CREATE INDEX ON outbox (created_at);
         CREATE TABLE events (id bigint PRIMARY KEY, tenant int, created_at timestamptz NOT NULL);
         CREATE TABLE audit (id bigint PRIMARY KEY, subject int NOT NULL, status text NOT NULL,
                             closed_at timestamptz, note text);",
    );
    c.grant_app_and_admin("postgres");
    let (mut app, mut db) = c.app_and_admin("postgres");
    app.batch_execute(
        "INSERT INTO outbox SELECT g, now() - interval '40 days' FROM generate_series(1, 50) g;
         INSERT INTO events SELECT g, g % 5, now() - interval '10 days' FROM generate_series(1, 500) g;
         INSERT INTO audit SELECT g, g % 10, 'closed', now() - make_interval(days => 40 + g % 20), 'n' || g
           FROM generate_series(1, 300) g;",
    )
    .unwrap();
    db.batch_execute(
        "SELECT retention.add_policy(name => 'outbox', relation => 'outbox', kind => 'age',
                age_column => 'created_at', older_than => '30 days');
         SELECT retention.add_policy(name => 'events', relation => 'events', kind => 'age',
                age_column => 'created_at', older_than => '1 day', batch_size => 50,
                max_rows_per_run => 200);
         SELECT retention.place_hold('events', 'tenant = 0', 'case', 'legal');
         SELECT retention.add_policy(name => 'audit', relation => 'audit', kind => 'age', age_column => 'closed_at',
                older_than => '30 days', terminal => $$status = 'closed'$$, action => 'archive_then_delete');",
    )
    .unwrap();
    // On its own: a CALL that commits cannot share an implicit transaction.
    db.batch_execute("CALL retention.run('events')").unwrap();
    db
}

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
fn metrics_are_for_pg_monitor_and_show_a_stall_until_the_policy_runs() {
    let c = Cluster::start(&[]);
    let mut admin = scene(&c);
    let mut mon = monitor(&c);
    let sample = |db: &mut Client, name: &str, policy: &str| -> Option<f64> {
        db.query_opt(
            "SELECT value FROM retention.metrics() WHERE name = $1 AND labels->>'policy' = $2",
            &[&name, &policy],
        )
        .unwrap()
        .map(|r| r.get(0))
    };
    let names: Vec<String> = mon
        .query(
            "SELECT DISTINCT name FROM retention.metrics() ORDER BY 1",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    for family in [
        "pg_retention_policy_rows_deleted_total",
        "pg_retention_policy_rows_archived_total",
        "pg_retention_policy_bytes_archived_total",
        "pg_retention_policy_hold_skips_total",
        "pg_retention_policy_cap_hits_total",
        "pg_retention_policy_errors_total",
        "pg_retention_policy_backlog_rows",
        "pg_retention_policy_oldest_eligible_age_seconds",
        "pg_retention_policy_window_seconds",
        "pg_retention_worker_up",
        "pg_retention_build_info",
    ] {
        assert!(names.iter().any(|n| n == family), "{family} in {names:?}");
    }
    // Every row has its family's help and type; labels are closed sets.
    assert_eq!(
        scalar(
            &mut mon,
            "SELECT count(*) FROM retention.metrics() WHERE help IS NULL OR type NOT IN ('counter', 'gauge')
                OR EXISTS (SELECT 1 FROM jsonb_object_keys(labels) k WHERE k NOT IN ('policy', 'reason', 'database', 'version'))"
        ),
        0
    );
    assert_eq!(
        scalar(
            &mut mon,
            "SELECT count(*) FROM retention.metrics() WHERE name = 'pg_retention_policy_errors_total' AND labels->>'policy' = 'outbox'"
        ),
        7,
        "one series per reason"
    );
    // outbox never ran: its oldest deletable row is 40 days old against a 30-day window.
    let age = sample(
        &mut mon,
        "pg_retention_policy_oldest_eligible_age_seconds",
        "outbox",
    )
    .unwrap();
    assert!((40.0 * 86400.0 - age).abs() < 120.0, "{age}");
    assert_eq!(
        sample(&mut mon, "pg_retention_policy_window_seconds", "outbox"),
        Some(30.0 * 86400.0)
    );
    assert_eq!(
        sample(
            &mut mon,
            "pg_retention_policy_last_success_timestamp_seconds",
            "outbox"
        ),
        None
    );
    // The archive policy's backlog is its deletable rows now.
    assert_eq!(
        sample(&mut mon, "pg_retention_policy_backlog_rows", "audit"),
        Some(300.0)
    );
    // events stopped at its cap with 200 deletable rows 10 days old left; once they are gone,
    // its oldest rows are held: none is deletable.
    let age = sample(
        &mut mon,
        "pg_retention_policy_oldest_eligible_age_seconds",
        "events",
    )
    .unwrap();
    assert!((10.0 * 86400.0 - age).abs() < 120.0, "{age}");
    admin.batch_execute("CALL retention.run('events')").unwrap();
    assert_eq!(
        sample(
            &mut mon,
            "pg_retention_policy_oldest_eligible_age_seconds",
            "events"
        ),
        Some(0.0)
    );
    admin.batch_execute("CALL retention.run('outbox')").unwrap();
    assert_eq!(
        sample(
            &mut mon,
            "pg_retention_policy_oldest_eligible_age_seconds",
            "outbox"
        ),
        Some(0.0)
    );
    assert!(sample(
        &mut mon,
        "pg_retention_policy_last_success_timestamp_seconds",
        "outbox"
    )
    .is_some());
    assert_eq!(
        sample(&mut mon, "pg_retention_policy_rows_deleted_total", "outbox"),
        Some(50.0)
    );
    // Not for everyone (the role made by the superuser, as every role).
    c.execute("postgres", "CREATE ROLE nobody LOGIN");
    let (state, _) = expect_error(
        &mut c.connect_as("postgres", "nobody"),
        "SELECT * FROM retention.metrics()",
    );
    assert_eq!(state, "42501");
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

/// The archiver's families (from its own exposition): each with a sample above zero.
fn families_updated(exposition: &str) -> Vec<(String, bool)> {
    let mut out: Vec<(String, bool)> = Vec::new();
    for line in exposition.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE pg_retention_archiver_") {
            let name = format!(
                "pg_retention_archiver_{}",
                rest.split(' ').next().unwrap_or("")
            );
            out.push((name, false));
        } else if !line.starts_with('#') {
            if let Some((name, value)) = line.rsplit_once(' ') {
                let value: f64 = value.parse().unwrap_or(0.0);
                if let Some(f) = out.iter_mut().find(|(f, _)| name.starts_with(f.as_str())) {
                    f.1 |= value > 0.0;
                }
            }
        }
    }
    out
}

/// Starts the server `make` builds for a port, on a port free just before it starts, and waits
/// up to 30 s for `ready`. A port picked earlier can be taken in between (an outgoing
/// connection's local port comes from the same range), and a server that cannot bind exits:
/// then another port is tried. Panics with the server's own output if none becomes ready.
fn serve(make: impl Fn(u16) -> Command, ready: impl Fn(u16) -> bool) -> (Running, u16) {
    let mut output = String::new();
    for attempt in 0..4 {
        let port = pg_retention_integration::ports::free_ports(1)[0];
        let log = std::env::temp_dir().join(format!("pg-retention-serve-{port}-{attempt}.log"));
        let file = std::fs::File::create(&log).expect("a log file");
        let mut command = make(port);
        let mut server = Running(
            command
                .stdin(Stdio::null())
                .stdout(file.try_clone().expect("a log file"))
                .stderr(file)
                .spawn()
                .expect("start"),
        );
        let up = wait_for(30, || {
            ready(port) || matches!(server.0.try_wait(), Ok(Some(_)))
        });
        if up && ready(port) {
            return (server, port);
        }
        output = std::fs::read_to_string(&log).unwrap_or_default();
        if matches!(server.0.try_wait(), Ok(None)) {
            break; // running, but never ready: another port would not help
        }
    }
    panic!("no server became ready:\n{output}");
}

/// deploy/'s alert rules, with every `for:` made 0s so the test need not wait for them.
fn rules_now(dir: &Path) -> PathBuf {
    let rules = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../deploy/prometheus/pg_retention.rules.yml"),
    )
    .unwrap();
    let now: String = rules
        .lines()
        .map(|l| {
            if l.trim_start().starts_with("for: ") {
                format!("{}for: 0s", &l[..l.len() - l.trim_start().len()])
            } else {
                l.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    let path = dir.join("rules.yml");
    std::fs::write(&path, now).unwrap();
    path
}

#[test]
fn prometheus_scrapes_the_archiver_and_the_exporter_finds_every_family_and_fires_a_provoked_alert()
{
    let c = Cluster::start(&[]);
    let mut db = scene(&c);
    let mut mon = monitor(&c);
    let mut dpo = eraser(&c, "audit");
    let dir = pg_retention_integration::temp_dir("pg-retention-prometheus");
    std::fs::create_dir_all(&dir).unwrap();
    let archiver_port = pg_retention_integration::ports::free_ports(1)[0];
    let a = Archiver::new(
        &c.archiver_url("postgres"),
        &format!("file://{}", dir.join("store").display()),
    )
    .with_env(
        "PG_RETENTION_METRICS_ADDR",
        &format!("127.0.0.1:{archiver_port}"),
    )
    .with_env("PG_RETENTION_LEASE", "1s")
    .with_env("PG_RETENTION_BATCH_ROWS", "100")
    // A corrupted first upload (verify failure, retry), another writer's object at the
    // first key (store failure), and a pause before each prune (lease extensions).
    .with_env(
        "PG_RETENTION_ARCHIVER_FAULT",
        "corrupt-once-after-upload,occupy-once,pause-before-complete",
    );
    let run = Running(a.spawn(&["run"]));
    assert!(
        wait_for(120, || scalar(&mut db, "SELECT count(*) FROM audit") == 0),
        "the archiver archived audit"
    );
    // An erasure the running archiver supersedes in its next pass: every archive it touches.
    dpo.batch_execute("SELECT retention.erase('audit', 'subject = 1', 'DSR-1', 'test')")
        .unwrap();
    assert!(wait_for(60, || scalar(
        &mut db,
        "SELECT count(*) FROM retention.erasures
          WHERE request_ref = 'DSR-1' AND pending = 0 AND archives_unaffected = 0
            AND archives_superseded = (SELECT count(*) FROM retention.archives)"
    ) == 1));

    // The HTTP side: exact paths and methods.
    assert_eq!(get(archiver_port, "/healthz").0, 200);
    assert_eq!(get(archiver_port, "/readyz").0, 200);
    assert_eq!(get(archiver_port, "/metricsx").0, 404);
    assert_eq!(get(archiver_port, "/").0, 404);
    assert_eq!(http("POST", archiver_port, "/metrics").0, 405);
    let (status, exposition) = get(archiver_port, "/metrics");
    assert_eq!(status, 200);
    assert!(exposition.ends_with("# EOF\n"), "{exposition}");
    let families = families_updated(&exposition);
    assert!(families.len() >= 12, "{families:?}");
    let never: Vec<&String> = families
        .iter()
        .filter(|(_, u)| !u)
        .map(|(f, _)| f)
        .collect();
    assert!(
        never.is_empty(),
        "declared but never updated: {never:?}\n{exposition}"
    );
    for db_family in [
        "pg_retention_policy_rows_deleted_total",
        "pg_retention_build_info",
    ] {
        assert!(exposition.contains(db_family), "{db_family}");
    }

    // At most 16 connections: a 17th waits until one of them closes.
    let idle: Vec<std::net::TcpStream> = (0..16)
        .map(|_| std::net::TcpStream::connect(("127.0.0.1", archiver_port)).unwrap())
        .collect();
    let mut waiting = std::net::TcpStream::connect(("127.0.0.1", archiver_port)).unwrap();
    waiting
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    write!(waiting, "GET /healthz HTTP/1.0\r\n\r\n").unwrap();
    let mut first = [0u8; 12];
    assert!(
        waiting.read(&mut first).is_err(),
        "a 17th connection is not served while 16 are open"
    );
    drop(idle);
    waiting
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut answer = String::new();
    let _ = waiting.read_to_string(&mut answer);
    assert!(
        answer.starts_with("HTTP/1.") && answer.contains(" 200 "),
        "{answer}"
    );

    // serve-metrics: the database's families alone.
    let (_serve, serve_port) = serve(
        |port| {
            a.clone()
                .with_env("PG_RETENTION_METRICS_ADDR", &format!("127.0.0.1:{port}"))
                .command(&["serve-metrics"])
        },
        |port| get(port, "/readyz").0 == 200,
    );
    let (_, alone) = get(serve_port, "/metrics");
    assert!(
        alone.contains("pg_retention_policy_oldest_eligible_age_seconds{policy=\"outbox\"}"),
        "{alone}"
    );
    assert!(!alone.contains("pg_retention_archiver_batches"), "{alone}");

    // postgres_exporter with deploy/'s query file, as the pg_monitor role.
    let (_exporter, exporter_port) = serve(
        |port| {
            let mut exporter = Command::new("prometheus-postgres-exporter");
            exporter
                .env(
                    "DATA_SOURCE_NAME",
                    format!(
                        "postgresql://mon@127.0.0.1:{}/postgres?sslmode=disable",
                        c.port()
                    ),
                )
                .args([
                    &format!("--web.listen-address=127.0.0.1:{port}"),
                    &format!(
                        "--extend.query-path={}",
                        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                            .join("../deploy/postgres_exporter/queries.yaml")
                            .display()
                    ),
                    "--disable-default-metrics",
                    "--disable-settings-metrics",
                ]);
            exporter
        },
        |port| get(port, "/metrics").0 == 200,
    );
    let rules = rules_now(&dir);
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global: {{scrape_interval: 1s, evaluation_interval: 1s}}
rule_files: [{rules}]
scrape_configs:
  - job_name: archiver
    static_configs: [{{targets: ['127.0.0.1:{archiver_port}']}}]
  - job_name: postgres
    static_configs: [{{targets: ['127.0.0.1:{exporter_port}']}}]
",
            rules = rules.display()
        ),
    )
    .unwrap();
    let (_prometheus, prometheus_port) = serve(
        |port| {
            let mut prometheus = Command::new("prometheus");
            prometheus.args([
                &format!("--config.file={}", config.display()),
                &format!("--storage.tsdb.path={}", dir.join("tsdb").display()),
                &format!("--web.listen-address=127.0.0.1:{port}"),
            ]);
            prometheus
        },
        |port| get(port, "/-/ready").0 == 200,
    );
    let query = |q: &str| -> String {
        get(
            prometheus_port,
            &format!("/api/v1/query?query={}", encode(q)),
        )
        .1
    };
    let has = |q: &str| query(q).contains("\"result\":[{");
    // Every family of retention.metrics() through the exporter, every archiver family through
    // the archiver, as Prometheus stored them.
    let db_families: Vec<String> = mon
        .query(
            "SELECT DISTINCT name FROM retention.metrics() ORDER BY 1",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let mut missing = Vec::new();
    for f in &db_families {
        if !wait_for(60, || has(&format!("{f}{{job=\"postgres\"}}"))) {
            missing.push(format!("{f} (postgres_exporter)"));
        }
    }
    for (f, _) in &families {
        let series = match f.as_str() {
            "pg_retention_archiver_stage_seconds" => format!("{f}_count"),
            "pg_retention_archiver_build" => format!("{f}_info"),
            "pg_retention_archiver_last_success_timestamp_seconds"
            | "pg_retention_archiver_database_reachable"
            | "pg_retention_archiver_store_create_only" => f.clone(),
            _ => format!("{f}_total"),
        };
        if !wait_for(30, || has(&format!("{series}{{job=\"archiver\"}} > 0"))) {
            missing.push(format!("{series} (archiver)"));
        }
    }
    assert!(missing.is_empty(), "not in Prometheus: {missing:?}");
    // Every query of the Grafana dashboard is one Prometheus accepts and answers.
    let dashboard: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/grafana/pg_retention.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let exprs: Vec<String> = dashboard["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["targets"].as_array().cloned().unwrap_or_default())
        .filter_map(|t| t["expr"].as_str().map(|e| e.replace("$policy", ".*")))
        .collect();
    assert!(exprs.len() >= 8);
    for e in &exprs {
        let answer = query(e);
        assert!(answer.contains("\"status\":\"success\""), "{e}: {answer}");
    }
    // outbox never runs: PgRetentionStalled fires for it.
    let firing = wait_for(60, || {
        let alerts = get(prometheus_port, "/api/v1/alerts").1;
        alerts.contains("\"alertname\":\"PgRetentionStalled\"")
            && alerts.contains("\"policy\":\"outbox\"")
            && alerts.contains("\"state\":\"firing\"")
    });
    assert!(firing, "{}", get(prometheus_port, "/api/v1/alerts").1);
    // SIGTERM: a clean stop (the batch in progress finished first).
    terminate(&run.0);
}
