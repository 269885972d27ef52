//! A throwaway SeaweedFS server (`weed mini`) speaking S3 on a free loopback port, with a fresh
//! bucket. The process is killed and its directory removed when the value is dropped.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Credentials handed to object_store. SeaweedFS runs without IAM here and accepts any; they
/// must be present or object_store probes a cloud metadata address.
pub const ACCESS_KEY: &str = "pg-retention-test";
/// See [`ACCESS_KEY`].
pub const SECRET_KEY: &str = "pg-retention-test-secret";

/// A running SeaweedFS server.
pub struct Seaweed {
    child: Child,
    flags: Vec<String>,
    dir: PathBuf,
    s3_port: u16,
    /// The bucket made for this test.
    pub bucket: String,
}

impl Seaweed {
    /// Starts `weed mini` with every port on a free loopback port and creates `bucket`. A port
    /// found free can be taken by another process before weed binds it (an outgoing
    /// connection's local port comes from the same range): weed then exits, and it is started
    /// again on other ports.
    pub fn start(bucket: &str) -> Seaweed {
        let mut attempt = 0;
        loop {
            attempt += 1;
            match Seaweed::start_once(bucket) {
                Ok(server) => return server,
                Err(log) if attempt < 4 && log.contains("address already in use") => continue,
                Err(log) => panic!("weed mini exited early; log:\n{log}"),
            }
        }
    }

    fn start_once(bucket: &str) -> Result<Seaweed, String> {
        let p = crate::ports::free_ports(16);
        let dir =
            std::env::temp_dir().join(format!("pg-retention-weed-{}-{}", std::process::id(), p[0]));
        std::fs::create_dir_all(&dir).expect("weed dir");
        let log = std::fs::File::create(dir.join("weed.log")).expect("weed log");
        let flags = [
            format!("-dir={}", dir.display()),
            "-ip=127.0.0.1".into(),
            "-ip.bind=127.0.0.1".into(),
            "-master.telemetry=false".into(),
            "-admin.ui=false".into(),
            "-webdav=false".into(),
            format!("-s3.port={}", p[0]),
            format!("-s3.port.grpc={}", p[1]),
            format!("-master.port={}", p[2]),
            format!("-master.port.grpc={}", p[3]),
            format!("-volume.port={}", p[4]),
            format!("-volume.port.grpc={}", p[5]),
            format!("-filer.port={}", p[6]),
            format!("-filer.port.grpc={}", p[7]),
            format!("-admin.port={}", p[8]),
            format!("-admin.port.grpc={}", p[9]),
            format!("-s3.port.iceberg={}", p[10]),
            format!("-s3.port.lance={}", p[11]),
            format!("-webdav.port={}", p[12]),
            format!("-metricsPort={}", p[13]),
            format!("-s3.metricsPort={}", p[14]),
            format!("-debug.port={}", p[15]),
        ];
        let flags: Vec<String> = flags.to_vec();
        let child = spawn_weed(&flags, log);
        let mut server = Seaweed {
            child,
            flags,
            dir,
            s3_port: p[0],
            bucket: bucket.to_owned(),
        };
        server.wait_for_bucket()?;
        Ok(server)
    }

    /// Stops the server (the data directory stays).
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts the stopped server again on the same ports and data; a port still held (a
    /// closing connection) is waited for, up to ten tries two seconds apart.
    pub fn restart(&mut self) {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let log = std::fs::OpenOptions::new()
                .append(true)
                .open(self.dir.join("weed.log"))
                .expect("weed log");
            self.child = spawn_weed(&self.flags, log);
            match self.wait_for_bucket() {
                Ok(()) => return,
                Err(_) if attempt < 10 => std::thread::sleep(Duration::from_secs(2)),
                Err(log) => panic!("weed mini exited early, {attempt} times; log:\n{log}"),
            }
        }
    }

    /// The S3 endpoint URL.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.s3_port)
    }

    /// Waits for the bucket to take writes; the log when weed exited first.
    fn wait_for_bucket(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!("({status})\n{}", self.log()));
            }
            // 409: the bucket exists already (a restart). The bucket answering is not enough:
            // until a volume server has registered, object writes stall, so write a probe.
            let bucket = format!("/{}", self.bucket);
            let probe = format!("{bucket}/.ready-probe");
            if matches!(
                http_status(self.s3_port, "PUT", &bucket, ""),
                Some(200 | 409)
            ) && http_status(self.s3_port, "GET", &bucket, "") == Some(200)
                && http_status(self.s3_port, "PUT", &probe, "ready") == Some(200)
                && http_status(self.s3_port, "DELETE", &probe, "") == Some(204)
            {
                return Ok(());
            }
            assert!(
                Instant::now() < deadline,
                "SeaweedFS S3 not ready in 60 s; log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Server log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("weed.log")).unwrap_or_default()
    }

    /// An object_store S3 client for the test bucket, with explicit credentials and short
    /// timeouts so a dead server fails a test quickly instead of hanging it.
    pub fn store(&self) -> object_store::aws::AmazonS3 {
        object_store::aws::AmazonS3Builder::new()
            .with_endpoint(self.endpoint())
            .with_bucket_name(&self.bucket)
            .with_region("us-east-1")
            .with_access_key_id(ACCESS_KEY)
            .with_secret_access_key(SECRET_KEY)
            .with_allow_http(true)
            .with_virtual_hosted_style_request(false)
            .with_client_options(
                object_store::ClientOptions::new()
                    .with_allow_http(true)
                    .with_timeout(Duration::from_secs(10))
                    .with_connect_timeout(Duration::from_secs(2)),
            )
            .with_retry(object_store::RetryConfig {
                max_retries: 2,
                retry_timeout: Duration::from_secs(10),
                ..Default::default()
            })
            .build()
            .expect("build S3 client")
    }
}

fn spawn_weed(flags: &[String], log: std::fs::File) -> Child {
    Command::new("weed")
        .arg("mini")
        .args(flags)
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("log handle"))
        .stderr(log)
        .spawn()
        .expect("start `weed mini` (installed by scripts/setup)")
}

/// Sends one unauthenticated HTTP request with `body` and returns the status code.
fn http_status(port: u16, method: &str, path: &str, body: &str) -> Option<u16> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).ok()?;
    let mut buf = [0u8; 64];
    let n = s.read(&mut buf).ok()?;
    let head = std::str::from_utf8(&buf[..n]).ok()?;
    head.split_whitespace().nth(1)?.parse().ok()
}

impl Drop for Seaweed {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
