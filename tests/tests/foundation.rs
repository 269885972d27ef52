//! Foundation: a live cluster with pg_retention preloaded, and the S3 test server with
//! create-only writes.
//!
//! Production roles: the settings, the version and a misspelt setting are seen by `admin` (a
//! member of `retention_admin`, not a superuser, `Cluster::admin`). The superuser stays where
//! it is needed, commented: `shared_preload_libraries` is a setting only a superuser may read,
//! and in the image's entry point test the superuser is the one the image makes (with the
//! password under test); it creates the extension, the table and the image's `admin`, whose
//! policy and health check go over TCP with its own password.

use bytes::Bytes;
use object_store::{path::Path, ObjectStore, PutMode, PutOptions, PutPayload};
use pg_retention_integration::{as_postgres, stop_server, succeed, Cluster, Seaweed};

#[test]
fn preloaded_cluster_exposes_settings_and_version() {
    let cluster = Cluster::start(&[]);
    let mut db = cluster.admin("postgres");
    let names: Vec<String> = db
        .query(
            "SELECT name FROM pg_settings WHERE name LIKE 'pg_retention.%' ORDER BY name",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    for expected in [
        "pg_retention.databases",
        "pg_retention.enabled",
        "pg_retention.jitter",
        "pg_retention.max_rows_per_cycle",
        "pg_retention.naptime",
        "pg_retention.role",
    ] {
        assert!(
            names.iter().any(|n| n == expected),
            "{expected} missing from {names:?}"
        );
    }
    // shared_preload_libraries is a superuser-only setting: the superuser reads it.
    let preload: String = cluster
        .connect("postgres")
        .query_one("SHOW shared_preload_libraries", &[])
        .unwrap()
        .get(0);
    assert_eq!(preload, "pg_retention");
    let version: String = db
        .query_one("SELECT retention.version()", &[])
        .unwrap()
        .get(0);
    assert_eq!(version, env!("CARGO_PKG_VERSION"));
}

#[test]
fn misspelt_setting_under_the_prefix_is_refused() {
    let cluster = Cluster::start(&[]);
    let mut db = cluster.admin("postgres");
    let err = db
        .batch_execute("SET pg_retention.enabeld = on")
        .unwrap_err();
    let msg = err
        .as_db_error()
        .map(|e| e.message().to_owned())
        .unwrap_or_default();
    assert!(
        msg.contains("pg_retention.enabeld"),
        "unexpected error: {err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_server_enforces_create_only_writes() {
    let server = Seaweed::start("foundation");
    let store = server.store();
    let key = Path::from("probe/one.bin");
    let create = || PutOptions {
        mode: PutMode::Create,
        ..Default::default()
    };

    store
        .put_opts(
            &key,
            PutPayload::from(Bytes::from_static(b"first")),
            create(),
        )
        .await
        .unwrap();
    let second = store
        .put_opts(
            &key,
            PutPayload::from(Bytes::from_static(b"second")),
            create(),
        )
        .await;
    assert!(
        matches!(second, Err(object_store::Error::AlreadyExists { .. })),
        "second create-only write must fail with AlreadyExists, got {second:?}"
    );
    let body = store.get(&key).await.unwrap().bytes().await.unwrap();
    assert_eq!(&body[..], b"first", "the occupant must be unchanged");
}

/// A PostgreSQL container's entry point for images not built on the official one
/// (deploy/postgres-start; the Dockerfile builds on the official image), run without Docker on a
/// scratch data directory: pg_retention preloaded, listening on every interface,
/// TCP clients by password only, the password set from POSTGRES_PASSWORD (quotes and all).
#[test]
fn the_postgres_images_entry_point_preloads_listens_and_requires_a_password() {
    use std::process::{Command, Stdio};
    let port = pg_retention_integration::ports::free_ports(1)[0];
    let dir = std::path::Path::new(pg_retention_integration::cluster::SCRATCH)
        .join(format!("image-{}-{port}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let script = dir.join("postgres-start");
    std::fs::copy(
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/postgres-start"),
        &script,
    )
    .unwrap();
    succeed(
        Command::new("chown")
            .args(["-R", "postgres:postgres"])
            .arg(&dir),
    );
    let bin = Cluster::program("postgres");
    let path = format!("{}:/usr/bin:/bin", bin.parent().unwrap().display());
    let data = dir.join("data");
    let password = "it's a secret";
    let mut server = as_postgres("env")
        .arg(format!("PATH={path}"))
        .arg(format!("PGDATA={}", data.display()))
        .arg(format!("POSTGRES_PASSWORD={password}"))
        .arg(&script)
        .args(["-p", &port.to_string(), "-k", &dir.to_string_lossy()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let url = format!("host=127.0.0.1 port={port} user=postgres dbname=postgres");
    let mut connected = None;
    for _ in 0..300 {
        if let Ok(c) = postgres::Client::connect(
            &format!("{url} password='it\\'s a secret'"),
            postgres::NoTls,
        ) {
            connected = Some(c);
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let stop = || stop_server(&Cluster::program("pg_ctl"), &data);
    let Some(mut db) = connected else {
        stop();
        let _ = server.kill();
        let out = server.wait_with_output().unwrap();
        panic!(
            "the entry point's server never accepted the password: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let show = |db: &mut postgres::Client, name: &str| -> String {
        db.query_one(&format!("SHOW {name}"), &[]).unwrap().get(0)
    };
    assert_eq!(show(&mut db, "shared_preload_libraries"), "pg_retention");
    assert_eq!(show(&mut db, "listen_addresses"), "*");
    // The image's superuser creates the extension, the table and a retention administrator
    // (set-up); the policy and the health check are the administrator's, over TCP with its
    // own password.
    db.batch_execute(
        "CREATE EXTENSION pg_retention;
         CREATE TABLE t (id int PRIMARY KEY, at timestamptz NOT NULL);
         CREATE ROLE admin LOGIN PASSWORD 'admin secret' IN ROLE retention_admin;
         GRANT SELECT, UPDATE, DELETE ON t TO admin;",
    )
    .unwrap();
    let mut admin = postgres::Client::connect(
        &format!("host=127.0.0.1 port={port} user=admin dbname=postgres password='admin secret'"),
        postgres::NoTls,
    )
    .unwrap_or_else(|e| panic!("connect as admin with its password: {e}"));
    admin
        .batch_execute(
            "SELECT retention.add_policy(name => 't', relation => 't', kind => 'age', age_column => 'at', older_than => '1 day');",
        )
        .unwrap();
    // Preloaded, so health() names the worker as merely disabled (the default), not missing.
    let reasons: Vec<String> = admin
        .query_one(
            "SELECT reasons FROM retention.health() WHERE policy = 't'",
            &[],
        )
        .unwrap()
        .get(0);
    assert!(
        reasons.iter().any(|r| r.contains("worker disabled")),
        "{reasons:?}"
    );
    let refused = postgres::Client::connect(&url, postgres::NoTls);
    assert!(
        refused.is_err(),
        "a TCP client without the password is refused"
    );
    let wrong = postgres::Client::connect(&format!("{url} password=wrong"), postgres::NoTls);
    assert!(wrong.is_err(), "a wrong password is refused");
    drop(db);
    drop(admin);
    stop();
    let _ = server.wait();
    let _ = std::fs::remove_dir_all(&dir);
}
