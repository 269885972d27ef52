//! Foundation: a live cluster with pg_retention preloaded, and the S3 test server with
//! create-only writes.

use bytes::Bytes;
use object_store::{path::Path, ObjectStore, PutMode, PutOptions, PutPayload};
use pg_retention_integration::{Cluster, Seaweed};

#[test]
fn preloaded_cluster_exposes_settings_and_version() {
    let cluster = Cluster::start(&[]);
    let mut db = cluster.connect("postgres");
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
    let preload: String = db
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
    let mut db = cluster.connect("postgres");
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
