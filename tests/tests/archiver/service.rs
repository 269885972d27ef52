//! The archiver as a service: `/metrics` and `/healthz` served, a clean stop on SIGTERM, and
//! `--help` that never shows credentials from the environment.

use super::*;

#[test]
fn metrics_and_health_are_served_and_sigterm_stops_cleanly() {
    let c = Cluster::start(&[]);
    let mut db = c.connect("postgres");
    mixed_audit(&mut db, 500);
    let (dir, url) = file_store();
    // Port 0: the archiver binds a free port and logs it, so no other test can take it first.
    let a = Archiver::new(&c.archiver_url("postgres"), &url)
        .with_env("PG_RETENTION_METRICS_ADDR", "127.0.0.1:0");
    let mut child = a.spawn(&["run", "--log-format", "json"]);
    let stderr = child.stderr.take().unwrap();
    let (addr_tx, addr_rx) = std::sync::mpsc::channel::<u16>();
    let logs = std::thread::spawn(move || {
        let mut all = String::new();
        for line in std::io::BufRead::lines(std::io::BufReader::new(stderr)).map_while(Result::ok) {
            if line.contains("serving /metrics") {
                let v: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
                let addr = v["fields"]["addr"].as_str().unwrap_or_default().to_owned();
                if let Some(port) = addr.rsplit(':').next().and_then(|p| p.parse().ok()) {
                    let _ = addr_tx.send(port);
                }
            }
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    let port = addr_rx
        .recv_timeout(std::time::Duration::from_secs(30))
        .expect("the archiver logs its metrics address");
    assert!(
        c.wait_until(std::time::Duration::from_secs(60), || eligible(
            &mut c.connect("postgres")
        ) == 0)
    );
    let get = |path: &str| -> std::io::Result<String> {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port))?;
        s.set_nodelay(true)?;
        // Several segments on purpose: the server must read the whole head before answering.
        // HTTP/1.1 keeps a connection open unless asked not to: read_to_string needs the end.
        for part in [
            format!("GET {path} HTTP/1.1\r\n"),
            "Host: x\r\nConnection: close\r\n\r\n".into(),
        ] {
            s.write_all(part.as_bytes())?;
            s.flush()?;
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let mut out = String::new();
        s.read_to_string(&mut out)?;
        Ok(out)
    };
    let mut logs = Some(logs);
    let mut get = |path: &str| -> String {
        get(path).unwrap_or_else(|e| {
            // Say why, with the archiver's own account of it.
            std::thread::sleep(std::time::Duration::from_millis(500));
            let exited = child.try_wait().ok().flatten();
            let _ = child.kill();
            let stderr = logs.take().map(|l| l.join().unwrap_or_default());
            panic!(
                "GET {path} on port {port}: {e}; archiver exit status: {exited:?}; stderr:\n{}",
                stderr.unwrap_or_default()
            )
        })
    };
    assert!(get("/healthz").starts_with("HTTP/1.1 200"));
    let response = get("/metrics");
    let body = response
        .split("\r\n\r\n")
        .nth(1)
        .unwrap_or_default()
        .to_owned();
    let scrape = prometheus_parse::Scrape::parse(body.lines().map(|l| Ok(l.to_owned()))).unwrap();
    let archived = scrape
        .samples
        .iter()
        .find(|s| {
            s.metric == "pg_retention_archiver_batches_total"
                && s.labels.get("outcome") == Some("archived")
        })
        .expect("archived batches counted");
    // OpenMetrics names a counter's family without `_total`; this parser then reads its
    // samples as untyped.
    assert!(matches!(
        archived.value,
        prometheus_parse::Value::Counter(v) | prometheus_parse::Value::Untyped(v) if v >= 1.0
    ));
    assert!(scrape
        .samples
        .iter()
        .any(|s| s.metric == "pg_retention_policy_rows_deleted_total"
            && s.labels.get("policy") == Some("audit")));
    assert!(
        !body.contains(SECRET_KEY) && !body.contains(".slice"),
        "no keys or secrets in labels"
    );
    // SIGTERM: graceful stop, exit 0.
    terminate(&child);
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    let stderr = logs
        .and_then(|l| l.join().ok())
        .expect("the archiver's stderr");
    assert!(
        stderr
            .lines()
            .any(|l| l.starts_with('{') && l.contains("shutting down")),
        "json logs: {stderr}"
    );
    assert!(!stderr.contains("secret"), "no credentials logged");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn help_never_shows_credentials_from_the_environment() {
    let out = std::process::Command::new(pg_retention_integration::archiver::binary())
        .arg("--help")
        .env(
            "PG_RETENTION_DATABASE_URL",
            "postgres://archiver:db-sekret@db.example/app",
        )
        .env("AWS_ACCESS_KEY_ID", "AKIA-key-sekret")
        .env("AWS_SECRET_ACCESS_KEY", "aws-sekret")
        .env(
            "PG_RETENTION_S3_ENDPOINT",
            "https://u:endpoint-sekret@s3.example",
        )
        .env("PG_RETENTION_STORE", "s3://bucket/prefix")
        .output()
        .expect("run --help");
    let help =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{help}");
    assert!(
        help.contains("PG_RETENTION_DATABASE_URL"),
        "the variables are still named: {help}"
    );
    assert!(
        !help.contains("sekret"),
        "--help shows a credential: {help}"
    );
}
