//! The archiver's HTTP side (exact paths and methods, `serve-metrics`), and a real Prometheus
//! scraping the archiver and postgres_exporter with deploy/'s files, firing a provoked alert.

use super::*;

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
