//! Reaching the object store and the database: the S3 server stopped mid-run, the object
//! store's standard environment, and TLS with each sslmode.

use super::*;

#[test]
fn the_s3_server_stopped_mid_run_releases_the_batch_and_resumes_when_back() {
    let c = Cluster::start(&[]);
    let mut db = c.connect("postgres");
    mixed_audit(&mut db, 300);
    let before = total(&mut db);
    let mut s3 = Seaweed::start("archive");
    let endpoint = s3.endpoint();
    let archiver = |retries: &str, budget: &str| {
        Archiver::on_s3(&c.archiver_url("postgres"), &endpoint)
            .with_env("PG_RETENTION_MAX_RETRIES", retries)
            .with_env("PG_RETENTION_RETRY_TIMEOUT", budget)
            .with_env("PG_RETENTION_REQUEST_TIMEOUT", "2s")
            .with_env("PG_RETENTION_CONNECT_TIMEOUT", "1s")
    };
    s3.stop();
    // Built before the clock starts: the first run of a test process builds the archiver.
    let _ = pg_retention_integration::archiver::binary();
    // Each bound holds on its own: no retries with a long budget, many retries with a short
    // one (the object store's own defaults are 10 retries over 3 minutes).
    for (retries, budget) in [("0", "10min"), ("1000", "3s")] {
        let started = std::time::Instant::now();
        let o = archiver(retries, budget).run(&["once"]);
        assert_eq!(o.status.code(), Some(4), "{}", text(&o));
        assert!(
            started.elapsed() < std::time::Duration::from_secs(30),
            "bounded retries ({retries} retries, {budget} budget): {:?}",
            started.elapsed()
        );
    }
    assert_eq!(
        total(&mut db),
        before,
        "nothing pruned while the store is down"
    );
    assert_eq!(
        scalar(
            &mut db,
            "SELECT count(*) FROM retention.ledger WHERE method = 'release'"
        ),
        2
    );
    let a = archiver("2", "3s");
    s3.restart();
    let o = a.run(&["once"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(eligible(&mut db), 0);
    assert_nothing_lost(&mut db);
}

#[test]
fn the_object_stores_standard_environment_is_honoured() {
    let c = Cluster::start(&[]);
    let mut db = c.connect("postgres");
    mixed_audit(&mut db, 200);
    let before = total(&mut db);
    let s3 = Seaweed::start("archive");
    // object_store's own variables only: no PG_RETENTION_S3_ENDPOINT.
    let standard = Archiver::new(&c.archiver_url("postgres"), "s3://archive/std")
        .with_env("AWS_ENDPOINT", &s3.endpoint())
        .with_env("AWS_ACCESS_KEY_ID", ACCESS_KEY)
        .with_env("AWS_SECRET_ACCESS_KEY", SECRET_KEY);
    // Plain HTTP that was not allowed is refused by name (not an opaque builder error), before
    // anything is claimed.
    let o = standard.run(&["once"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("AWS_ALLOW_HTTP"), "{}", text(&o));
    assert_eq!(
        scalar(
            &mut db,
            "SELECT count(*) FROM retention.ledger WHERE method = 'claim'"
        ),
        0
    );
    assert_eq!(total(&mut db), before);
    // Allowed the standard way, it archives (our timeouts do not replace what it read).
    let o = standard.with_env("AWS_ALLOW_HTTP", "true").run(&["once"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(eligible(&mut db), 0);
    assert_nothing_lost(&mut db);
}

/// The archiver reaches a server that accepts TCP only over TLS with a client certificate, with
/// libpq's meaning of each sslmode: verify-full checks chain and host name, verify-ca the chain
/// only, a wrong CA is refused before anything is claimed, plaintext is refused by the server.
#[test]
fn the_archiver_archives_over_tls_with_verify_full_and_refuses_a_wrong_ca() {
    let certs = Certs::make();
    let c = tls_only_cluster(&certs);
    let mut db = Client::connect(&c.socket_url("postgres"), postgres::NoTls).unwrap();
    mixed_audit(&mut db, 300);
    let before = total(&mut db);
    let (dir, url) = file_store();
    // The archiver role (made here; its URL is TCP without TLS, so unused): the client
    // certificate (CN postgres) maps to it in pg_ident.conf.
    let _ = c.archiver_url("postgres");
    let client = format!(
        "sslcert={} sslkey={}",
        certs.path("client.crt"),
        certs.path("client.key")
    );
    let over = |host: &str, tls: &str| {
        Archiver::new(
            &format!(
                "host={host} port={} user=archiver dbname=postgres {tls}",
                c.port()
            ),
            &url,
        )
    };
    let claims = |db: &mut Client| {
        scalar(
            db,
            "SELECT count(*) FROM retention.ledger WHERE method = 'claim'",
        )
    };
    let refused = |a: Archiver, why: &str, db: &mut Client| {
        let o = a.run(&["once"]);
        assert_eq!(o.status.code(), Some(3), "{}", text(&o));
        assert!(text(&o).contains(why), "{why}: {}", text(&o));
        assert_eq!(claims(db), 0);
    };
    let ca = certs.path("ca.crt");
    // A CA that did not sign the server's certificate: refused, naming why.
    let wrong = format!(
        "sslmode=verify-full sslrootcert={} {client}",
        certs.path("wrong-ca.crt")
    );
    refused(over("localhost", &wrong), "UnknownIssuer", &mut db);
    // The certificate names "localhost", not 127.0.0.1: verify-full refuses the address...
    let full = format!("sslmode=verify-full sslrootcert={ca} {client}");
    refused(over("127.0.0.1", &full), "not valid for name", &mut db);
    // ... plaintext is refused by the server (hostssl only) ...
    refused(
        over("localhost", &format!("sslmode=disable {client}")),
        "pg_hba.conf",
        &mut db,
    );
    // ... and without a client certificate the server refuses too.
    refused(
        over(
            "localhost",
            &format!("sslmode=verify-full sslrootcert={ca}"),
        ),
        "certificate",
        &mut db,
    );
    assert_eq!(total(&mut db), before);
    // verify-ca checks the chain only, so the address passes; one batch goes through it.
    let o = over(
        "127.0.0.1",
        &format!("sslmode=verify-ca sslrootcert={ca} {client}"),
    )
    .run(&["once", "--max-batches", "1", "--batch-rows", "50"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(claims(&mut db), 1);
    // verify-full to the name the certificate carries archives the rest.
    let o = over("localhost", &full).run(&["once"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(eligible(&mut db), 0);
    assert_nothing_lost(&mut db);
    let _ = std::fs::remove_dir_all(dir);
}
