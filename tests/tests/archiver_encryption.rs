//! Encryption of archives at rest is the object store's (docs/security.md#encryption-of-archives):
//! `--s3-sse` asks an S3 store to encrypt every object the archiver writes. Against the real
//! SeaweedFS server, through a small proxy that records the head of every request the archiver
//! sends: with `--s3-sse aes256` every PUT carries `x-amz-server-side-encryption: AES256`, and
//! `once`, `verify --all` and `restore` work as without it. The options are refused (exit 2,
//! before anything is done) where they would mean nothing: with a `file://` store, or a KMS key
//! without `aws:kms`.

use pg_retention_integration::archiver::{text, Archiver};
use pg_retention_integration::{scalar, Cluster, Seaweed};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

/// The head of one request: method, target and headers (names lower-cased).
#[derive(Debug, Clone)]
struct Head {
    method: String,
    target: String,
    headers: Vec<(String, String)>,
}

impl Head {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A TCP proxy on a free loopback port in front of `upstream` that records the head of every
/// HTTP/1.1 request passing through (bodies are forwarded, by Content-Length or chunked). It
/// lives as long as the test process: its threads end with their connections.
struct HeaderProxy {
    port: u16,
    heads: Arc<Mutex<Vec<Head>>>,
}

impl HeaderProxy {
    fn start(upstream: String) -> HeaderProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        let port = listener.local_addr().expect("proxy address").port();
        let heads = Arc::new(Mutex::new(Vec::new()));
        let recorded = Arc::clone(&heads);
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let Ok(server) = TcpStream::connect(&upstream) else {
                    continue;
                };
                let recorded = Arc::clone(&recorded);
                let (Ok(client_w), Ok(server_r)) = (client.try_clone(), server.try_clone()) else {
                    continue;
                };
                std::thread::spawn(move || {
                    let _ = forward_requests(client, server, &recorded);
                });
                std::thread::spawn(move || {
                    let (mut from, mut to) = (server_r, client_w);
                    let _ = std::io::copy(&mut from, &mut to);
                    let _ = to.shutdown(Shutdown::Write);
                });
            }
        });
        HeaderProxy { port, heads }
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn heads(&self) -> Vec<Head> {
        self.heads.lock().expect("heads").clone()
    }
}

/// Copies requests from `client` to `server`, recording each head.
fn forward_requests(
    client: TcpStream,
    mut server: TcpStream,
    recorded: &Mutex<Vec<Head>>,
) -> std::io::Result<()> {
    let mut reader = BufReader::new(client);
    loop {
        let mut raw = Vec::new();
        let mut line = Vec::new();
        loop {
            line.clear();
            if reader.read_until(b'\n', &mut line)? == 0 {
                let _ = server.shutdown(Shutdown::Write);
                return Ok(());
            }
            raw.extend_from_slice(&line);
            if line == b"\r\n" {
                break;
            }
        }
        server.write_all(&raw)?;
        let head = parse_head(&String::from_utf8_lossy(&raw));
        let chunked = head
            .header("transfer-encoding")
            .is_some_and(|v| v.eq_ignore_ascii_case("chunked"));
        let length: u64 = head
            .header("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        recorded.lock().expect("heads").push(head);
        if chunked {
            loop {
                line.clear();
                reader.read_until(b'\n', &mut line)?;
                server.write_all(&line)?;
                let size = String::from_utf8_lossy(&line);
                let size = size.trim().split(';').next().unwrap_or("0");
                let size = u64::from_str_radix(size, 16).unwrap_or(0);
                if size == 0 {
                    // Trailers, then the blank line.
                    loop {
                        line.clear();
                        reader.read_until(b'\n', &mut line)?;
                        server.write_all(&line)?;
                        if line == b"\r\n" || line.is_empty() {
                            break;
                        }
                    }
                    break;
                }
                std::io::copy(&mut (&mut reader).take(size + 2), &mut server)?;
            }
        } else {
            std::io::copy(&mut (&mut reader).take(length), &mut server)?;
        }
    }
}

fn parse_head(raw: &str) -> Head {
    let mut lines = raw.split("\r\n");
    let mut first = lines.next().unwrap_or_default().split_whitespace();
    let method = first.next().unwrap_or_default().to_owned();
    let target = first.next().unwrap_or_default().to_owned();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    Head {
        method,
        target,
        headers,
    }
}

/// The response headers (names lower-cased) of an unsigned HEAD of `path` on `port` (SeaweedFS
/// runs without IAM in the tests).
fn head_response(port: &str, path: &str) -> (u16, Vec<(String, String)>) {
    let mut s = TcpStream::connect(format!("127.0.0.1:{port}")).expect("connect to SeaweedFS");
    write!(
        s,
        "HEAD {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
    )
    .expect("send HEAD");
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    let head = parse_head(&answer);
    (head.target.parse().unwrap_or(0), head.headers)
}

const ROWS: i64 = 300;

/// `audit`: ROWS closed rows, all 60 days old, under an `archive_then_delete` policy.
fn audit(c: &Cluster) {
    let sql = format!(
        "CREATE TABLE audit (id bigint PRIMARY KEY, status text NOT NULL,
                                 closed_at timestamptz NOT NULL, note text);
             INSERT INTO audit SELECT g, 'closed', now() - interval '60 days', 'row ' || g
               FROM generate_series(1, {ROWS}) g;
             SELECT retention.add_policy(name => 'audit', relation => 'audit', kind => 'age',
                    age_column => 'closed_at', older_than => '30 days',
                    terminal => $$status = 'closed'$$, action => 'archive_then_delete');"
    );
    if let Err(e) = c.connect("postgres").batch_execute(&sql) {
        panic!("{sql}: {:?}", e.as_db_error());
    }
}

/// SSE-S3 end to end; then SSE-KMS, which this SeaweedFS (no KMS configured) answers with
/// 500: the archiver asked for it on every PUT, gave up after its retries (exit 4) and deleted
/// nothing. One cluster and one server for both, to keep the test short.
#[test]
fn sse_s3_puts_ask_for_encryption_and_archive_verify_and_restore_and_a_refused_sse_kms_deletes_nothing(
) {
    let c = Cluster::start(&[]);
    audit(&c);
    let s3 = Seaweed::start("archive");
    let upstream = s3.endpoint().trim_start_matches("http://").to_owned();
    let proxy = HeaderProxy::start(upstream.clone());
    let a = Archiver::on_s3(&c.archiver_url("postgres"), &proxy.endpoint())
        .with_env("PG_RETENTION_S3_SSE", "aes256");

    let o = a.run(&["once", "--batch-rows", "100"]);
    assert!(o.status.success(), "{}", text(&o));
    let mut db = c.connect("postgres");
    assert_eq!(scalar(&mut db, "SELECT count(*) FROM audit"), 0);
    assert_eq!(
        scalar(&mut db, "SELECT count(*) FROM retention.archives"),
        3
    );
    let o = a.run(&["verify", "--all"]);
    assert!(o.status.success(), "{}", text(&o));
    let keys = a.slice_keys();
    assert_eq!(keys.len(), 3, "{keys:?}");
    let restorer = a.clone().with_database_url(&c.restorer_url("postgres"));
    let o = restorer.run(&["restore", &keys[0], "--into", "public.restored"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(scalar(&mut db, "SELECT count(*) FROM restored"), 100);

    // What the archiver sent: every PUT (the create-only probe, the namespace claim, three
    // slices and three manifests) asks for SSE-S3; no other request carries the header.
    let heads = proxy.heads();
    let puts: Vec<&Head> = heads.iter().filter(|h| h.method == "PUT").collect();
    assert!(puts.len() >= 2 + 2 * 3, "{} PUTs: {puts:?}", puts.len());
    for put in &puts {
        assert_eq!(
            put.header("x-amz-server-side-encryption"),
            Some("AES256"),
            "{put:?}"
        );
        assert_eq!(
            put.header("x-amz-server-side-encryption-aws-kms-key-id"),
            None
        );
    }
    for h in heads.iter().filter(|h| h.method != "PUT") {
        assert_eq!(h.header("x-amz-server-side-encryption"), None, "{h:?}");
    }
    for key in &keys {
        let put = format!("/archive/pg/{key}");
        assert!(
            puts.iter().any(|p| p.target == put),
            "the slice {key} was PUT through the proxy"
        );
    }

    // What SeaweedFS made of it: the object records the encryption it was asked for.
    let port = upstream.rsplit(':').next().unwrap_or_default();
    let (status, headers) = head_response(port, &format!("/archive/pg/{}", keys[0]));
    assert_eq!(status, 200, "{headers:?}");
    assert!(
        headers
            .iter()
            .any(|(n, v)| n == "x-amz-server-side-encryption" && v == "AES256"),
        "SeaweedFS answers a HEAD of the slice with its encryption: {headers:?}"
    );

    // SSE-KMS with a key this store cannot use: refused on the first PUT (the create-only
    // probe, before any claim, then again before the first write), every batch released.
    db.batch_execute(&format!(
        "INSERT INTO audit SELECT g, 'closed', now() - interval '60 days', 'row ' || g
           FROM generate_series({ROWS} + 1, {ROWS} + 50) g"
    ))
    .expect("more rows");
    let before = proxy.heads().len();
    let kms = a
        .clone()
        .with_env("PG_RETENTION_S3_SSE", "aws:kms")
        .with_env("PG_RETENTION_S3_SSE_KMS_KEY_ID", "alias/archives")
        .with_env("PG_RETENTION_MAX_RETRIES", "1");
    let o = kms.run(&["once", "--batch-rows", "100"]);
    assert_eq!(o.status.code(), Some(4), "{}", text(&o));
    assert!(
        text(&o).contains("500 Internal Server Error"),
        "{}",
        text(&o)
    );
    assert_eq!(scalar(&mut db, "SELECT count(*) FROM audit"), 50);
    assert_eq!(
        scalar(&mut db, "SELECT count(*) FROM retention.archives"),
        3
    );
    assert_eq!(
        scalar(
            &mut db,
            "SELECT count(*) FROM retention.batches WHERE state = 'claimed'"
        ),
        0,
        "every batch claimed was released"
    );
    let heads = proxy.heads();
    let puts: Vec<&Head> = heads[before..]
        .iter()
        .filter(|h| h.method == "PUT")
        .collect();
    assert!(!puts.is_empty());
    for put in puts {
        assert_eq!(put.header("x-amz-server-side-encryption"), Some("aws:kms"));
        assert_eq!(
            put.header("x-amz-server-side-encryption-aws-kms-key-id"),
            Some("alias/archives"),
            "{put:?}"
        );
    }
}

#[test]
fn encryption_options_are_refused_with_a_file_store_or_a_key_without_kms() {
    let dir = pg_retention_integration::temp_dir("pg-retention-sse-file");
    let file = Archiver::new(
        "host=127.0.0.1 port=1 dbname=none",
        &format!("file://{}", dir.display()),
    );
    let o = file.run(&["once", "--s3-sse", "aes256"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("a file store relies on the encryption of the disk"),
        "{}",
        text(&o)
    );
    assert!(!dir.exists(), "the store was not even created");

    let s3 = Archiver::new("host=127.0.0.1 port=1 dbname=none", "s3://archive/pg");
    for args in [
        vec!["once", "--s3-sse-kms-key-id", "alias/archives"],
        vec![
            "once",
            "--s3-sse",
            "aes256",
            "--s3-sse-kms-key-id",
            "alias/archives",
        ],
    ] {
        let o = s3.run(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o));
        assert!(
            text(&o).contains("a KMS key is only used by SSE-KMS"),
            "{}",
            text(&o)
        );
    }
    let o = s3.run(&["once", "--s3-sse", "sse-c"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("use aes256 (SSE-S3) or aws:kms (SSE-KMS)"));
}
