//! Archive-lifecycle observability (issue 38, item 7), with the real archiver binary: the
//! figures of `expire` and `sweep-orphans` (one-shot commands) reach the `/metrics` of a
//! long-running `serve-metrics` through the `--state-dir` file; `run`'s `/readyz` proves the
//! store readable (503 with a reason while a file store's directory is gone or an S3 server is
//! stopped, 200 again after); the start-up probe of create-only writes passes on `file://` and
//! on SeaweedFS and leaves no probe object behind.
//!
//! The archiver runs as `archiver`, a LOGIN role that is only a member of `retention_archiver`
//! ([`Cluster::archiver_url`]); the test's own setup and checks use the superuser.

use pg_retention_integration::archiver::{text, Archiver};
use pg_retention_integration::seaweed::{ACCESS_KEY, SECRET_KEY};
use pg_retention_integration::{scalar, Cluster, Seaweed};
use postgres::Client;
use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Child, Output};
use std::time::{Duration, Instant};

/// `GET path` on `port`: the status and the body (status 0 when nothing answers).
fn get(port: u16, path: &str) -> (u16, String) {
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return (0, String::new());
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(20)));
    let _ = write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
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

/// Waits up to `secs` for `cond`.
fn wait_for(secs: u64, mut cond: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < until {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(250));
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

/// Starts `a` with `args` serving on a free port and waits until `/healthz` answers; another
/// port is tried when the one picked was taken meanwhile (the server exits).
fn serve(a: &Archiver, args: &[&str]) -> (Running, u16) {
    for _ in 0..4 {
        let port = pg_retention_integration::ports::free_ports(1)[0];
        let mut server = Running(
            a.clone()
                .with_env("PG_RETENTION_METRICS_ADDR", &format!("127.0.0.1:{port}"))
                .spawn(args),
        );
        let up = wait_for(60, || {
            get(port, "/healthz").0 == 200 || matches!(server.0.try_wait(), Ok(Some(_)))
        });
        if up && get(port, "/healthz").0 == 200 {
            return (server, port);
        }
        if matches!(server.0.try_wait(), Ok(None)) {
            break;
        }
    }
    panic!("the archiver never served {args:?}");
}

/// 300 closed audit rows, 40 to 60 days old, under an archive policy whose archives are kept
/// one second: `once` archives them in three batches of 100.
fn audit_table(db: &mut Client) {
    db.batch_execute(
        "CREATE TABLE audit (id bigint PRIMARY KEY, status text NOT NULL, closed_at timestamptz, note text);
         INSERT INTO audit SELECT g, 'closed', now() - make_interval(days => 40 + g % 20), 'n' || g
           FROM generate_series(1, 300) g;
         SELECT retention.add_policy(name => 'audit', relation => 'audit', kind => 'age', age_column => 'closed_at',
                older_than => '30 days', terminal => $$status = 'closed'$$, action => 'archive_then_delete',
                archive_keep => '1 second');",
    )
    .unwrap();
}

fn last_line(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .last()
        .unwrap_or_default()
        .to_owned()
}

/// A sample: its name, its labels (sorted), its value.
type Sample = (String, Vec<(String, String)>, f64);

/// The samples of `exposition` whose name starts with `family`.
fn samples(exposition: &str, family: &str) -> Vec<Sample> {
    let lines = exposition.lines().map(|l| Ok(l.to_owned()));
    let scrape = prometheus_parse::Scrape::parse(lines).expect("the exposition parses");
    scrape
        .samples
        .into_iter()
        .filter(|s| s.metric.starts_with(family))
        .map(|s| {
            let value = match s.value {
                prometheus_parse::Value::Counter(v)
                | prometheus_parse::Value::Gauge(v)
                | prometheus_parse::Value::Untyped(v) => v,
                _ => f64::NAN,
            };
            let mut labels: Vec<(String, String)> = s
                .labels
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            labels.sort();
            (s.metric, labels, value)
        })
        .collect()
}

/// The value of the sample `name` with exactly `labels` (None when absent).
fn value(exposition: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let mut want: Vec<(String, String)> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    want.sort();
    samples(exposition, name)
        .into_iter()
        .find(|(n, l, _)| n == name && *l == want)
        .map(|(_, _, v)| v)
}

fn now_unix() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// A file store's files (relative paths) under `dir`.
fn files(dir: &Path) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries {
            let p = entry.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.insert(p.strip_prefix(dir).unwrap().display().to_string());
            }
        }
    }
    out
}

#[test]
fn expire_and_sweep_orphans_figures_reach_the_metrics_of_serve_metrics() {
    let c = Cluster::start(&[]);
    let mut db = c.connect("postgres");
    let store = pg_retention_integration::temp_dir("pg-retention-lifecycle-store");
    let state = pg_retention_integration::temp_dir("pg-retention-lifecycle-state");
    let plans = pg_retention_integration::temp_dir("pg-retention-lifecycle-plans");
    std::fs::create_dir_all(&plans).unwrap();
    let a = Archiver::new(
        &c.archiver_url("postgres"),
        &format!("file://{}", store.display()),
    )
    .with_env("PG_RETENTION_STATE_DIR", &state.display().to_string());
    audit_table(&mut db);
    let o = a.run(&["once", "--batch-rows", "100"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        scalar(&mut db, "SELECT count(*) FROM retention.archives"),
        3
    );
    std::thread::sleep(Duration::from_millis(1200));

    // Before any lifecycle run: every family is there, at 0, and no success yet.
    let (_serve, port) = serve(&a, &["serve-metrics"]);
    let (status, before) = get(port, "/metrics");
    assert_eq!(status, 200);
    for command in ["expire", "sweep_orphans"] {
        assert_eq!(
            value(
                &before,
                "pg_retention_archiver_lifecycle_deleted_objects_total",
                &[("command", command)]
            ),
            Some(0.0),
            "{before}"
        );
        assert_eq!(
            value(
                &before,
                "pg_retention_archiver_lifecycle_last_success_timestamp_seconds",
                &[("command", command)]
            ),
            None
        );
    }

    // One archive is held: the plan refuses it (held) and plans the other two, one key per
    // delete request.
    db.batch_execute("SELECT retention.place_hold('audit', 'id = 150', 'case 7', 'legal')")
        .unwrap();
    let plan = plans.join("plan.json");
    let o = a.run(&[
        "expire",
        "--keys-per-request",
        "1",
        "plan",
        "--output",
        &plan.display().to_string(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let sha = last_line(&o);
    let planned: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&plan).unwrap()).unwrap();
    let objects: Vec<(String, u64)> = planned["policies"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["archives"].as_array().unwrap().iter())
        .flat_map(|a| a["objects"].as_array().unwrap().iter())
        .map(|o| {
            (
                o["key"].as_str().unwrap().to_owned(),
                o["size"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        objects.len(),
        4,
        "two archives, a slice and a manifest each"
    );
    let planned_bytes: u64 = objects.iter().map(|(_, s)| s).sum();
    let o = a.run(&[
        "expire",
        "prepare",
        "--plan",
        &plan.display().to_string(),
        "--plan-sha256",
        &sha,
        "--quiescence",
        "2s",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let op = last_line(&o);
    let apply = |a: &Archiver| {
        a.run(&[
            "expire",
            "apply",
            "--operation-id",
            &op,
            "--plan-sha256",
            &sha,
        ])
    };
    // Too early: not_ready (a refusal).
    let o = apply(&a);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    std::thread::sleep(Duration::from_millis(2200));
    // A store failure after the first request: partial.
    let o = apply(
        &a.clone()
            .with_env("PG_RETENTION_ARCHIVER_FAULT", "expire-partial"),
    );
    assert_eq!(o.status.code(), Some(4), "{}", text(&o));
    // The retry completes.
    let o = apply(&a);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let expired_at = now_unix();

    // An orphan inside the namespace, beside the kept archive: listed, then deleted.
    let kept = files(&store)
        .into_iter()
        .find(|f| f.ends_with(".slice"))
        .expect("the held archive's slice");
    let orphan = store
        .join(&kept)
        .with_file_name("00000000-0000-4000-8000-000000000000.slice");
    std::fs::write(&orphan, b"debris").unwrap();
    let o = a.run(&["sweep-orphans", "--older-than", "0s"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(orphan.exists(), "a dry run deletes nothing");
    let o = a.run(&["sweep-orphans", "--older-than", "0s", "--apply"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(!orphan.exists());

    let (status, after) = get(port, "/metrics");
    assert_eq!(status, 200);
    assert!(after.ends_with("# EOF\n"), "{after}");
    let expire = [("command", "expire")];
    let sweep = [("command", "sweep_orphans")];
    let f = |name: &str, labels: &[(&str, &str)]| {
        value(
            &after,
            &format!("pg_retention_archiver_lifecycle_{name}"),
            labels,
        )
    };
    assert_eq!(f("planned_objects_total", &expire), Some(4.0), "{after}");
    assert_eq!(
        f("planned_bytes_total", &expire),
        Some(planned_bytes as f64)
    );
    assert_eq!(f("deleted_objects_total", &expire), Some(4.0));
    assert_eq!(
        f("deleted_bytes_total", &expire),
        Some(planned_bytes as f64)
    );
    assert_eq!(f("partial_total", &expire), Some(1.0));
    for (reason, n) in [
        ("held", 1.0),
        ("not_ready", 1.0),
        ("inventory_changed", 0.0),
    ] {
        assert_eq!(
            f(
                "refusals_total",
                &[("command", "expire"), ("reason", reason)]
            ),
            Some(n),
            "{reason}"
        );
    }
    let success = f("last_success_timestamp_seconds", &expire).expect("a success");
    assert!((success - expired_at).abs() < 60.0, "{success}");
    // Two sweeps listed the orphan (6 bytes); the second deleted it.
    assert_eq!(f("planned_objects_total", &sweep), Some(2.0));
    assert_eq!(f("planned_bytes_total", &sweep), Some(12.0));
    assert_eq!(f("deleted_objects_total", &sweep), Some(1.0));
    assert_eq!(f("deleted_bytes_total", &sweep), Some(6.0));
    assert_eq!(f("partial_total", &sweep), Some(0.0));
    assert!(f("last_success_timestamp_seconds", &sweep).is_some());
    // Closed labels only: never a key, an operation id, a namespace or a digest.
    for (name, labels, _) in samples(&after, "pg_retention_archiver_lifecycle_") {
        for (k, v) in &labels {
            assert!(k == "command" || k == "reason", "{name} has label {k}={v}");
        }
    }
    for secret in [op.as_str(), sha.as_str(), "00000000-0000-4000"] {
        assert!(!after.contains(secret), "{secret} on /metrics");
    }
    // The database's families are still there.
    assert!(after.contains("pg_retention_build_info"), "{after}");
}

#[test]
fn readyz_goes_503_while_the_file_store_is_gone_and_200_once_it_is_back() {
    let c = Cluster::start(&[]);
    let dir = pg_retention_integration::temp_dir("pg-retention-readyz");
    let store = dir.join("store");
    let a = Archiver::new(
        &c.archiver_url("postgres"),
        &format!("file://{}", store.display()),
    );
    let (_run, port) = serve(&a, &["run"]);
    assert!(wait_for(30, || get(port, "/readyz").0 == 200));
    let (_, metrics) = get(port, "/metrics");
    assert_eq!(
        value(&metrics, "pg_retention_archiver_store_create_only", &[]),
        Some(1.0),
        "the probe found create-only writes honoured: {metrics}"
    );
    assert!(
        files(&store)
            .iter()
            .all(|f| !f.starts_with("_retention/probes")),
        "no probe object is left: {:?}",
        files(&store)
    );
    let away = dir.join("store.away");
    std::fs::rename(&store, &away).unwrap();
    let (status, body) = get(port, "/readyz");
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("namespace claim"), "{body}");
    assert_eq!(get(port, "/healthz").0, 200, "alive, not ready");
    std::fs::rename(&away, &store).unwrap();
    assert!(wait_for(30, || get(port, "/readyz").0 == 200));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn readyz_goes_503_while_the_s3_server_is_stopped_and_200_once_it_is_back() {
    let c = Cluster::start(&[]);
    let mut s3 = Seaweed::start("archive");
    let a = Archiver::on_s3(&c.archiver_url("postgres"), &s3.endpoint())
        .with_env("PG_RETENTION_REQUEST_TIMEOUT", "2s")
        .with_env("PG_RETENTION_CONNECT_TIMEOUT", "1s");
    let (_run, port) = serve(&a, &["run"]);
    assert!(wait_for(30, || get(port, "/readyz").0 == 200));
    let (_, metrics) = get(port, "/metrics");
    assert_eq!(
        value(&metrics, "pg_retention_archiver_store_create_only", &[]),
        Some(1.0),
        "SeaweedFS refuses a second create: {metrics}"
    );
    s3.stop();
    let started = Instant::now();
    let (status, body) = get(port, "/readyz");
    assert_eq!(status, 503, "{body}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "bounded: {:?}",
        started.elapsed()
    );
    assert!(body.contains("object store"), "{body}");
    for secret in [SECRET_KEY, ACCESS_KEY] {
        assert!(!body.contains(secret), "{body}");
    }
    s3.restart();
    assert!(wait_for(60, || get(port, "/readyz").0 == 200));
}

#[test]
fn the_create_only_probe_passes_on_file_and_seaweedfs_and_leaves_nothing() {
    let c = Cluster::start(&[]);
    let mut db = c.connect("postgres");
    audit_table(&mut db);
    let store = pg_retention_integration::temp_dir("pg-retention-probe");
    let s3 = Seaweed::start("archive");
    let on_file = Archiver::new(
        &c.archiver_url("postgres"),
        &format!("file://{}", store.display()),
    );
    let on_s3 = Archiver::on_s3(&c.archiver_url("postgres"), &s3.endpoint());
    for (name, a) in [("file", &on_file), ("s3", &on_s3)] {
        let o = a.run(&["once", "--batch-rows", "50", "--max-batches", "1"]);
        assert!(o.status.success(), "{name}: {}", text(&o));
        let log = String::from_utf8_lossy(&o.stderr);
        assert!(
            log.contains("create-only writes are honoured"),
            "{name}: {log}"
        );
        // The flag only matters on a store that overwrites: here it changes nothing.
        let o = a.run(&[
            "once",
            "--batch-rows",
            "50",
            "--max-batches",
            "1",
            "--allow-overwriting-store",
        ]);
        assert!(o.status.success(), "{name}: {}", text(&o));
    }
    assert!(
        files(&store)
            .iter()
            .all(|f| !f.starts_with("_retention/probes")),
        "{:?}",
        files(&store)
    );
    let left = s3_keys(&s3, "pg/_retention/probes");
    assert!(left.is_empty(), "{left:?}");
    assert_eq!(
        scalar(&mut db, "SELECT count(*) FROM retention.archives"),
        4
    );
    let _ = std::fs::remove_dir_all(store);
}

/// The keys under `prefix` in the S3 server's bucket.
fn s3_keys(s3: &Seaweed, prefix: &str) -> Vec<String> {
    use futures::TryStreamExt;
    use object_store::ObjectStore;
    let client = object_store::aws::AmazonS3Builder::new()
        .with_endpoint(s3.endpoint())
        .with_allow_http(true)
        .with_bucket_name(&s3.bucket)
        .with_region("us-east-1")
        .with_access_key_id(ACCESS_KEY)
        .with_secret_access_key(SECRET_KEY)
        .build()
        .unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let prefix = object_store::path::Path::from(prefix);
        let listed: Vec<object_store::ObjectMeta> =
            client.list(Some(&prefix)).try_collect().await.unwrap();
        listed.into_iter().map(|m| m.location.to_string()).collect()
    })
}
