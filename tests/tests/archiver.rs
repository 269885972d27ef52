//! The archiver binary end to end against a real cluster, on the file:// store and on a real
//! S3-compatible server, plus the fault suite: after every fault, no row is deleted without a
//! verified archive and no row is lost.
//!
//! The archiver connects as production runs it: as `archiver`, a LOGIN role that is only a
//! member of `retention_archiver` ([`Cluster::archiver_url`]), for `once`, `run`, `ls`, `verify`
//! and every other command but `restore`, which creates a table and so runs as `restorer`
//! ([`Cluster::restorer_url`]: a member of `retention_archiver` with CREATE on schema `public`,
//! not a superuser). The test's own setup and checks use the superuser.

use pg_retention_integration::archiver::{terminate, text, Archiver};
use pg_retention_integration::seaweed::{ACCESS_KEY, SECRET_KEY};
use pg_retention_integration::tls::{tls_only_cluster, Certs};
use pg_retention_integration::{manifest_of, scalar, Cluster, Seaweed};
use postgres::Client;
use std::path::PathBuf;

const ELIGIBLE: &str = "status = 'closed' AND closed_at < now() - interval '30 days'";

/// An audit table of `n` rows of mixed types; about 60% are archive-eligible. `expected` keeps
/// a copy of the eligible rows to compare restores with.
fn mixed_audit(db: &mut Client, n: i64) {
    db.batch_execute(&format!(
        "CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
         CREATE DOMAIN positive AS int CHECK (VALUE > 0);
         CREATE TABLE audit (id bigint PRIMARY KEY, status text NOT NULL, closed_at timestamptz, amount numeric(12,2),
                             note text, flag bool, data jsonb, tags text[], raw bytea, day date, span interval,
                             ref uuid, mood mood, level positive);
         INSERT INTO audit
         SELECT g, CASE WHEN g % 10 = 0 THEN 'open' ELSE 'closed' END,
                CASE WHEN g % 10 = 0 THEN NULL ELSE now() - make_interval(days => g % 90, hours => 12) END,
                g * 1.25, CASE WHEN g % 7 = 0 THEN NULL ELSE 'note ✓ ' || g || E'\\twith tab' END,
                CASE WHEN g % 7 = 0 THEN NULL ELSE g % 2 = 0 END,
                jsonb_build_object('g', g, 'nested', jsonb_build_array(g, 'x')),
                CASE WHEN g % 7 = 0 THEN NULL ELSE ARRAY['a' || g, NULL, 'b,c'] END,
                decode(md5(g::text), 'hex'), DATE '2020-01-01' + g, make_interval(mins => g),
                md5(g::text)::uuid, (ARRAY['sad', 'ok', 'happy'])[1 + g % 3]::mood, 1 + g % 50
           FROM generate_series(1, {n}) g;
         SELECT retention.add_policy(name => 'audit', relation => 'audit', kind => 'age', age_column => 'closed_at',
                older_than => '30 days', terminal => $$status = 'closed'$$, action => 'archive_then_delete');
         CREATE TABLE expected AS SELECT * FROM audit WHERE {ELIGIBLE};"
    ))
    .unwrap();
}

fn eligible(db: &mut Client) -> i64 {
    scalar(db, &format!("SELECT count(*) FROM audit WHERE {ELIGIBLE}"))
}

fn total(db: &mut Client) -> i64 {
    scalar(db, "SELECT count(*) FROM audit")
}

/// The rows of `expected` that are in the table no more are exactly the rows archived.
fn assert_nothing_lost(db: &mut Client) {
    let missing = scalar(
        db,
        "SELECT count(*) FROM expected e WHERE NOT EXISTS (SELECT 1 FROM audit a WHERE a.id = e.id)",
    );
    let archived = scalar(
        db,
        "SELECT coalesce(sum(deleted), 0)::bigint FROM retention.archives",
    );
    assert_eq!(
        missing, archived,
        "every deleted row is in a verified archive, and only those are deleted"
    );
    assert_eq!(
        scalar(db, "SELECT count(*) FROM audit a WHERE NOT (status = 'closed' AND closed_at < now() - interval '30 days')"),
        scalar(db, "SELECT count(*) FROM (SELECT 1 FROM audit) x") - eligible(db),
        "no ineligible row was touched"
    );
}

fn file_store() -> (PathBuf, String) {
    let dir = pg_retention_integration::temp_dir("pg-retention-archive");
    let url = format!("file://{}", dir.display());
    (dir, url)
}

/// archive → verify → restore every slice and compare with what was pruned. `a` archives and
/// verifies as the archiver role; restores run as the restorer (they create tables).
fn round_trip(c: &Cluster, a: &Archiver) {
    let mut db = c.connect("postgres");
    mixed_audit(&mut db, 3000);
    let want = eligible(&mut db);
    assert!(want > 1000);
    let o = a.run(&["once", "--batch-rows", "700"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        eligible(&mut db),
        0,
        "every eligible row was archived and pruned"
    );
    assert_eq!(
        scalar(
            &mut db,
            "SELECT sum(deleted)::bigint FROM retention.archives"
        ),
        want
    );
    assert_nothing_lost(&mut db);
    let o = a.run(&["verify", "--all"]);
    assert!(o.status.success(), "{}", text(&o));
    let keys = a.slice_keys();
    assert_eq!(
        keys.len() as i64,
        scalar(&mut db, "SELECT count(*) FROM retention.archives")
    );
    let restorer = a.clone().with_database_url(&c.restorer_url("postgres"));
    let restored = restorer.restore_all();
    assert_eq!(
        scalar(&mut db, &format!("SELECT count(*) FROM ({restored}) r")),
        want
    );
    assert_eq!(
        scalar(
            &mut db,
            &format!("SELECT count(*) FROM (SELECT * FROM expected EXCEPT ALL ({restored})) d")
        ),
        0
    );
    assert_eq!(
        scalar(
            &mut db,
            &format!("SELECT count(*) FROM (({restored}) EXCEPT ALL SELECT * FROM expected) d")
        ),
        0
    );
    // A second restore into a table that has rows is refused.
    let o = restorer.run(&["restore", &keys[0], "--into", "public.restored_0"]);
    assert!(!o.status.success());
    assert!(text(&o).contains("already has"), "{}", text(&o));
}

#[test]
fn archive_then_prune_restore_and_verify_on_the_file_store() {
    let c = Cluster::start(&[]);
    let (dir, url) = file_store();
    let a = Archiver::new(&c.archiver_url("postgres"), &url);
    round_trip(&c, &a);
    let _ = std::fs::remove_dir_all(dir);
}

/// A table without a primary key (a log: `pgbench_history`'s shape, identical rows among its
/// rows) is archived by place: each batch names its rows by their claim-time ctids, the prune
/// proves it deletes those very versions (ctid, xmin, relfilenode), and the restored rows are
/// the archived multiset, duplicates included. The policy is `admin`'s, the rows `app`'s.
#[test]
fn a_table_without_a_primary_key_is_archived_and_restored_row_for_row() {
    let c = Cluster::start(&[]);
    c.execute(
        "postgres",
        "CREATE TABLE history (tid int, delta int, mtime timestamptz NOT NULL, filler text)",
    );
    c.grant_app_and_admin("postgres");
    let (mut app, mut admin) = c.app_and_admin("postgres");
    // 2,400 rows, each written twice (identical rows), half of them 60 days old.
    app.batch_execute(
        "INSERT INTO history SELECT g % 10, g, now() - make_interval(days => CASE WHEN g % 2 = 0 THEN 60 ELSE 1 END), 'row ' || g
           FROM generate_series(1, 1200) g, generate_series(1, 2) twice",
    )
    .unwrap();
    let mut db = c.connect("postgres");
    db.batch_execute(
        "CREATE TABLE expected AS SELECT * FROM history WHERE mtime < now() - interval '30 days';
         CREATE TABLE young AS SELECT * FROM history WHERE mtime >= now() - interval '30 days';",
    )
    .unwrap();
    admin
        .batch_execute(
            "SELECT retention.add_policy(name => 'history', relation => 'history', kind => 'age',
                    age_column => 'mtime', older_than => '30 days', terminal => 'true',
                    action => 'archive_then_delete')",
        )
        .unwrap();
    let (dir, url) = file_store();
    let a = Archiver::new(&c.archiver_url("postgres"), &url);
    let o = a.run(&["once", "--batch-rows", "500"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        scalar(
            &mut db,
            "SELECT sum(deleted)::bigint FROM retention.archives"
        ),
        1200
    );
    assert_eq!(
        scalar(
            &mut db,
            "SELECT count(*) FROM ((SELECT * FROM history) EXCEPT ALL (SELECT * FROM young)) d"
        ) + scalar(
            &mut db,
            "SELECT count(*) FROM ((SELECT * FROM young) EXCEPT ALL (SELECT * FROM history)) d"
        ),
        0,
        "exactly the young rows stay"
    );
    let keys = a.slice_keys();
    assert!(keys.len() >= 3, "{keys:?}");
    let batch: String = db
        .query_one("SELECT batch::text FROM retention.archives LIMIT 1", &[])
        .unwrap()
        .get(0);
    let manifest = manifest_of(&mut db, &batch, false);
    assert_eq!(manifest["key_columns"], serde_json::json!(["ctid"]));
    let o = a.run(&["verify", "--all"]);
    assert!(o.status.success(), "{}", text(&o));
    let restored = a
        .clone()
        .with_database_url(&c.restorer_url("postgres"))
        .restore_all();
    for (left, right) in [
        ("SELECT * FROM expected", restored.as_str()),
        (restored.as_str(), "SELECT * FROM expected"),
    ] {
        assert_eq!(
            scalar(
                &mut db,
                &format!("SELECT count(*) FROM (({left}) EXCEPT ALL ({right})) d")
            ),
            0,
            "the restored rows are the archived multiset"
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn archive_then_prune_restore_and_verify_on_s3() {
    let c = Cluster::start(&[]);
    let s3 = Seaweed::start("archive");
    let a = Archiver::on_s3(&c.archiver_url("postgres"), &s3.endpoint());
    round_trip(&c, &a);
}

/// Many small batches: each batch's prune overlaps the next claim on a second connection, and
/// still every eligible row is claimed, archived and pruned exactly once, across runs.
#[test]
fn overlapping_batches_archive_every_row_once() {
    let c = Cluster::start(&[]);
    let mut db = c.connect("postgres");
    mixed_audit(&mut db, 1200);
    let want = eligible(&mut db);
    let (dir, url) = file_store();
    let a = Archiver::new(&c.archiver_url("postgres"), &url);
    let o = a.run(&["once", "--batch-rows", "60", "--max-batches", "2"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        scalar(&mut db, "SELECT count(*) FROM retention.archives"),
        2
    );
    let o = a.run(&["once", "--batch-rows", "60"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(eligible(&mut db), 0);
    assert_nothing_lost(&mut db);
    let batches = scalar(&mut db, "SELECT count(*) FROM retention.archives");
    assert!(batches >= want / 60, "{batches} batches for {want} rows");
    assert_eq!(
        scalar(&mut db, "SELECT sum(rows)::bigint FROM retention.archives"),
        want
    );
    assert_eq!(
        scalar(
            &mut db,
            "SELECT count(*) FROM retention.ledger WHERE method = 'claim'"
        ),
        batches,
        "one claim per archive: no batch resumed or claimed twice"
    );
    assert_eq!(
        scalar(
            &mut db,
            "SELECT count(*) FROM retention.batches WHERE state <> 'pruned'"
        ),
        0
    );
    assert_eq!(a.slice_keys().len() as i64, batches);
    let o = a.run(&["verify", "--all"]);
    assert!(o.status.success(), "{}", text(&o));
    let _ = std::fs::remove_dir_all(dir);
}

/// Three archivers `run` against one database at once, and one of them dies right after its
/// first claim: no row is claimed twice, no slice written twice, the dead one's batch expires
/// and is completed by the others, the total archived equals the eligible rows, and
/// `verify --all` passes.
#[test]
fn three_archivers_at_once_archive_every_row_once_even_when_one_dies_mid_batch() {
    let c = Cluster::start(&[]);
    let mut db = c.connect("postgres");
    mixed_audit(&mut db, 6000);
    let want = eligible(&mut db);
    let (dir, url) = file_store();
    let base = Archiver::new(&c.archiver_url("postgres"), &url)
        .with_env("PG_RETENTION_LEASE", "3s")
        .with_env("PG_RETENTION_METRICS_ADDR", "127.0.0.1:0");
    let archiver = |owner: &str| Archiver {
        owner: owner.into(),
        ..base.clone()
    };
    let args = ["run", "--batch-rows", "150", "--idle-sleep", "1s"];
    // The one that dies starts first, so it has rows to claim; the others start at once.
    let mut dying = archiver("dying")
        .with_env("PG_RETENTION_ARCHIVER_FAULT", "after-claim")
        .spawn(&args);
    let children: Vec<_> = ["first", "second"]
        .iter()
        .map(|o| archiver(o).spawn(&args))
        .collect();
    assert!(!dying.wait().unwrap().success(), "the fault kills it");
    let done = c.wait_until(std::time::Duration::from_secs(120), || {
        let mut db = c.connect("postgres");
        eligible(&mut db) == 0
            && scalar(
                &mut db,
                "SELECT count(*) FROM retention.batches WHERE state = 'claimed'",
            ) == 0
    });
    for child in &children {
        terminate(child);
    }
    let mut logs = String::new();
    for child in children {
        let o = child.wait_with_output().unwrap();
        assert!(o.status.success(), "{}", text(&o));
        logs.push_str(&text(&o));
    }
    assert!(
        done,
        "the two archivers left finish the work, the dead one's batch included:\n{logs}"
    );
    assert_nothing_lost(&mut db);
    assert_eq!(
        scalar(&mut db, "SELECT sum(rows)::bigint FROM retention.archives"),
        want,
        "every eligible row archived once"
    );
    assert_eq!(
        scalar(
            &mut db,
            "SELECT count(*) FROM retention.batches WHERE owner = 'dying' AND state = 'expired'"
        ),
        1,
        "the dead archiver's batch expired"
    );
    assert!(
        scalar(
            &mut db,
            "SELECT count(*) FROM retention.ledger WHERE method = 'lease_expired'"
        ) >= 1
    );
    assert_eq!(
        scalar(
            &mut db,
            "SELECT count(DISTINCT b.owner) FROM retention.batches b WHERE b.state = 'pruned'"
        ),
        2,
        "both archivers left pruned batches"
    );
    // One slice per archive (the dead one's claim wrote nothing), every slice a distinct key.
    let keys = base.slice_keys();
    let distinct: std::collections::HashSet<&String> = keys.iter().collect();
    assert_eq!(distinct.len(), keys.len());
    assert_eq!(
        keys.len() as i64,
        scalar(&mut db, "SELECT count(*) FROM retention.archives")
    );
    let o = base.run(&["verify", "--all"]);
    assert!(o.status.success(), "{}", text(&o));
    // Restores create tables: the restorer, not the archiver role.
    let restored = base
        .clone()
        .with_database_url(&c.restorer_url("postgres"))
        .restore_all();
    for diff in [
        format!("SELECT * FROM expected EXCEPT ALL ({restored})"),
        format!("({restored}) EXCEPT ALL SELECT * FROM expected"),
    ] {
        assert_eq!(
            scalar(&mut db, &format!("SELECT count(*) FROM ({diff}) d")),
            0,
            "the slices hold exactly the eligible rows, none twice"
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// Rows that keep ageing past the cutoff (a trickle): a short batch means the archiver caught
/// up, so `run` sleeps its idle time instead of claiming again at once (each claim would read the
/// table's unexpired rows again for the one row that aged meanwhile), and `once` stops.
#[test]
fn a_short_batch_means_caught_up() {
    let c = Cluster::start(&[]);
    let mut db = c.connect("postgres");
    db.batch_execute(
        "CREATE TABLE trickle (id int PRIMARY KEY, at timestamptz NOT NULL, done bool NOT NULL DEFAULT true);
         INSERT INTO trickle (id, at) SELECT g, now() - interval '31 days' FROM generate_series(1, 50) g;
         -- one more row ages past the 30-day cutoff every 50 ms for the next 10 s
         INSERT INTO trickle (id, at)
              SELECT 50 + g, now() - interval '30 days' + make_interval(secs => g * 0.05)
                FROM generate_series(1, 200) g;
         SELECT retention.add_policy(name => 'trickle', relation => 'trickle', kind => 'age', age_column => 'at',
                older_than => '30 days', terminal => 'done', action => 'archive_then_delete');",
    )
    .unwrap();
    let (dir, url) = file_store();
    let a = Archiver::new(&c.archiver_url("postgres"), &url);
    let o = a.run(&["once", "--batch-rows", "1000"]);
    assert!(o.status.success(), "{}", text(&o));
    let claims = || "SELECT count(*) FROM retention.ledger WHERE method = 'claim'";
    assert_eq!(
        scalar(&mut db, claims()),
        1,
        "once stops after its short batch"
    );
    let mut child = a
        .clone()
        .with_env("PG_RETENTION_METRICS_ADDR", "127.0.0.1:0")
        .spawn(&["run", "--batch-rows", "1000", "--idle-sleep", "30s"]);
    assert!(c.wait_until(std::time::Duration::from_secs(30), || {
        let mut db = c.connect("postgres");
        scalar(&mut db, claims()) == 2
    }));
    std::thread::sleep(std::time::Duration::from_secs(3));
    assert_eq!(
        scalar(&mut db, claims()),
        2,
        "run sleeps after a short batch while rows keep ageing"
    );
    terminate(&child);
    assert!(child.wait().unwrap().success());
    assert_eq!(
        scalar(
            &mut db,
            "SELECT count(*) FROM retention.batches WHERE state <> 'pruned'"
        ),
        0,
        "both batches pruned"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// A prune refused while the next batch is already verified and the one after it claimed: the
/// verified one is still pruned before `once` stops with the refusal, the claimed one is
/// released unwritten, and the refused batch is released with nothing deleted.
#[test]
fn a_refused_prune_mid_pipeline_still_prunes_the_verified_next_batch() {
    let c = Cluster::start(&[]);
    let mut db = c.connect("postgres");
    mixed_audit(&mut db, 1200);
    let before = total(&mut db);
    let first = scalar(
        &mut db,
        &format!("SELECT min(id) FROM audit WHERE {ELIGIBLE}"),
    );
    let (dir, url) = file_store();
    let a = Archiver::new(&c.archiver_url("postgres"), &url)
        .with_env("PG_RETENTION_ARCHIVER_FAULT", "pause-before-complete");
    let child = a.spawn(&["once", "--batch-rows", "60"]);
    // The first batch's prune waits 3 s; meanwhile the second batch is written and the third
    // claimed (the pipeline's three stages).
    assert!(
        c.wait_until(std::time::Duration::from_secs(30), || a.slice_keys().len()
            == 2)
    );
    db.batch_execute(&format!(
        "SET session_replication_role = replica; UPDATE audit SET note = 'tampered' WHERE id = {first}; RESET session_replication_role"
    ))
    .unwrap();
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(5), "{}", text(&o));
    assert!(text(&o).contains("refused"), "{}", text(&o));
    assert_eq!(
        scalar(&mut db, "SELECT count(*) FROM retention.archives"),
        1
    );
    let pruned = scalar(&mut db, "SELECT deleted FROM retention.archives");
    assert_eq!(pruned, 60);
    assert_eq!(
        total(&mut db),
        before - pruned,
        "only the second batch pruned"
    );
    assert_eq!(
        a.slice_keys().len(),
        2,
        "nothing written for the third batch"
    );
    assert_eq!(
        scalar(&mut db, "SELECT count(*) FROM retention.ledger WHERE method = 'release' AND detail->>'reason' LIKE 'stopped%'"),
        1,
        "the third batch released unwritten"
    );
    assert_eq!(
        scalar(
            &mut db,
            &format!("SELECT count(*) FROM audit WHERE id = {first}")
        ),
        1
    );
    assert_eq!(
        scalar(
            &mut db,
            "SELECT count(*) FROM retention.batches WHERE state = 'claimed'"
        ),
        0,
        "nothing left in flight"
    );
    assert_eq!(
        scalar(&mut db, "SELECT count(*) FROM retention.ledger WHERE method = 'release' AND detail->>'reason' LIKE 'refused%'"),
        1
    );
    let _ = std::fs::remove_dir_all(dir);
}

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

/// A fault that kills the archiver at `point`; then a new archiver (same owner) finishes.
fn killed_at(point: &str) {
    let c = Cluster::start(&[]);
    let mut db = c.connect("postgres");
    mixed_audit(&mut db, 400);
    let before = total(&mut db);
    let want = eligible(&mut db);
    let (dir, url) = file_store();
    let a = Archiver::new(&c.archiver_url("postgres"), &url);
    let o = a
        .clone()
        .with_env("PG_RETENTION_ARCHIVER_FAULT", point)
        .run(&["once"]);
    assert!(
        !o.status.success(),
        "the fault must kill the archiver at {point}"
    );
    assert_eq!(
        total(&mut db),
        before,
        "{point}: nothing deleted by a killed archiver"
    );
    // A new archiver finishes the work. Mid-upload leaves a half object that must be refused
    // first (foreign occupant), and the next pass claims the rows into a new batch.
    let mut o = a.run(&["once"]);
    if point == "mid-upload" {
        assert_eq!(o.status.code(), Some(5), "{}", text(&o));
        assert!(text(&o).contains("foreign occupant"), "{}", text(&o));
        assert_eq!(total(&mut db), before);
        o = a.run(&["once"]);
    }
    assert!(o.status.success(), "{point}: {}", text(&o));
    assert_eq!(eligible(&mut db), 0);
    assert_eq!(total(&mut db), before - want);
    assert_nothing_lost(&mut db);
    // No duplicate archives of the same rows: one manifest per archive record.
    assert_eq!(
        a.slice_keys().len() as i64,
        scalar(&mut db, "SELECT count(*) FROM retention.archives")
    );
    let o = a.run(&["verify", "--all"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        !text(&o).contains("never pruned"),
        "no orphan slices: {}",
        text(&o)
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn killed_after_claim_a_new_archiver_finishes_without_duplicates() {
    killed_at("after-claim");
}

/// Chaos seed 505 (60 minutes): an archiver killed after its claim came back under the same
/// owner, while a row of its batch had been erased meanwhile. Each restart resumed that batch,
/// could not render it again (RT502), and tried again two seconds later, for 42 minutes, never
/// claiming another batch; with all three archivers so stuck nothing ended their leases.
#[test]
fn a_resumed_batch_whose_rows_vanished_is_released_and_its_rows_claimed_afresh() {
    let c = Cluster::start(&[]);
    let mut db = c.connect("postgres");
    mixed_audit(&mut db, 400);
    let (dir, url) = file_store();
    let a = Archiver::new(&c.archiver_url("postgres"), &url);
    let o = a
        .clone()
        .with_env("PG_RETENTION_ARCHIVER_FAULT", "after-claim")
        .run(&["once"]);
    assert!(
        !o.status.success(),
        "the fault kills the archiver after its claim"
    );
    let batch: String = db
        .query_one(
            "SELECT id::text FROM retention.batches WHERE state = 'claimed'",
            &[],
        )
        .unwrap()
        .get(0);
    // A row of the claimed batch is erased meanwhile, as in the chaos run: by `dpo`, a member
    // of retention_eraser with SELECT and DELETE on the table.
    db.batch_execute(
        "CREATE ROLE dpo LOGIN IN ROLE retention_eraser;
         GRANT SELECT, DELETE ON audit TO dpo;",
    )
    .unwrap();
    let victim = scalar(
        &mut db,
        &format!("SELECT min(id) FROM audit WHERE {ELIGIBLE}"),
    );
    let erased: i64 = c
        .connect_as("postgres", "dpo")
        .query_one(
            &format!("SELECT retention.erase('audit', 'id = {victim}', 'DSR-1', 'dpo desk')"),
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(erased, 1);
    db.batch_execute("DELETE FROM expected WHERE id NOT IN (SELECT id FROM audit)")
        .unwrap();
    let (before, want) = (total(&mut db), eligible(&mut db));
    // The same owner comes back: its batch can never be pruned, so the claim gives it up and
    // takes the rows left afresh.
    let o = a.run(&["once"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(eligible(&mut db), 0);
    assert_eq!(total(&mut db), before - want);
    assert_nothing_lost(&mut db);
    assert_eq!(
        scalar(
            &mut db,
            &format!(
                "SELECT count(*) FROM retention.ledger WHERE method = 'release'
                  AND detail->>'batch' = '{batch}' AND detail->>'cause' = 'refused'
                  AND detail->>'reason' LIKE 'resumed, but 1 of its % rows changed, moved or vanished since the claim'"
            )
        ),
        1,
        "the resumed batch is released, and says why"
    );
    assert_eq!(
        scalar(
            &mut db,
            "SELECT count(*) FROM retention.batches WHERE state = 'claimed'"
        ),
        0,
        "nothing is left claimed"
    );
    assert_eq!(
        scalar(&mut db, "SELECT count(*) FROM retention.archives"),
        1,
        "the rows left are archived once, in one new batch"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn killed_mid_upload_the_partial_object_is_never_trusted() {
    killed_at("mid-upload");
}

#[test]
fn killed_after_upload_before_verify_the_batch_completes_without_reupload() {
    killed_at("after-upload");
}

#[test]
fn killed_after_verify_before_complete_the_batch_completes_without_reupload() {
    killed_at("after-verify");
}

#[test]
fn a_foreign_object_at_the_batch_key_fails_the_batch_and_prunes_nothing() {
    let c = Cluster::start(&[]);
    let mut db = c.connect("postgres");
    mixed_audit(&mut db, 300);
    let before = total(&mut db);
    let (dir, url) = file_store();
    let a = Archiver::new(&c.archiver_url("postgres"), &url);
    // Claim as the archiver's owner and role, then put someone else's bytes where its slice
    // will go.
    let batch: String = c
        .connect_as("postgres", "archiver")
        .query_one(
            "SELECT retention.claim_batch('audit', 10000, '1 minute', 'test-archiver')::text",
            &[],
        )
        .unwrap()
        .get(0);
    let m = manifest_of(&mut db, &batch, true);
    let created = m["created_at"].as_str().unwrap();
    // Keys go under the database's archive namespace (docs/archiver.md#objects).
    let ns: String = db
        .query_one("SELECT namespace FROM retention.archive_namespace()", &[])
        .unwrap()
        .get(0);
    let key = format!(
        "{}/{}/{}/{}/{}/{batch}.slice",
        ns,
        m["relation"].as_str().unwrap(),
        &created[0..4],
        &created[5..7],
        &created[8..10]
    );
    let path = dir.join(&key);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, b"someone else's object").unwrap();
    let o = a.run(&["once"]);
    assert_eq!(o.status.code(), Some(5), "{}", text(&o));
    assert!(text(&o).contains("foreign occupant"));
    assert_eq!(total(&mut db), before, "nothing pruned");
    assert_eq!(
        std::fs::read(&path).unwrap(),
        b"someone else's object",
        "the occupant is untouched"
    );
    assert_eq!(scalar(&mut db, &format!("SELECT count(*) FROM retention.ledger WHERE method = 'release' AND detail->>'batch' = '{batch}'")), 1);
    // The rows go into a new batch with new keys.
    let o = a.run(&["once"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(eligible(&mut db), 0);
    assert_nothing_lost(&mut db);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn an_object_corrupted_before_read_back_is_never_pruned() {
    let c = Cluster::start(&[]);
    let mut db = c.connect("postgres");
    mixed_audit(&mut db, 300);
    let before = total(&mut db);
    let (dir, url) = file_store();
    let a = Archiver::new(&c.archiver_url("postgres"), &url);
    let o = a
        .clone()
        .with_env("PG_RETENTION_ARCHIVER_FAULT", "corrupt-after-upload")
        .run(&["once"]);
    assert_eq!(o.status.code(), Some(5), "{}", text(&o));
    assert!(text(&o).contains("verification failed"), "{}", text(&o));
    assert_eq!(total(&mut db), before, "nothing pruned");
    assert_eq!(
        scalar(&mut db, "SELECT count(*) FROM retention.archives"),
        0
    );
    let _ = std::fs::remove_dir_all(dir);
}

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

#[test]
fn a_row_updated_between_claim_and_complete_is_refused() {
    let c = Cluster::start(&[]);
    let mut db = c.connect("postgres");
    mixed_audit(&mut db, 300);
    let before = total(&mut db);
    let (dir, url) = file_store();
    let a = Archiver::new(&c.archiver_url("postgres"), &url)
        .with_env("PG_RETENTION_ARCHIVER_FAULT", "pause-before-complete");
    let child = a.spawn(&["once"]);
    // Wait until the slice is written, then change a row behind the guard's back.
    assert!(
        c.wait_until(std::time::Duration::from_secs(30), || a.slice_keys().len()
            == 1)
    );
    db.batch_execute("SET session_replication_role = replica; UPDATE audit SET note = 'tampered' WHERE id = 45; RESET session_replication_role").unwrap();
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(5), "{}", text(&o));
    assert!(text(&o).contains("refused"), "{}", text(&o));
    assert_eq!(total(&mut db), before, "nothing pruned");
    assert_eq!(scalar(&mut db, "SELECT count(*) FROM retention.ledger WHERE method = 'release' AND detail->>'reason' LIKE 'refused%'"), 1);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_hold_placed_mid_batch_keeps_its_rows() {
    let c = Cluster::start(&[]);
    let mut db = c.connect("postgres");
    mixed_audit(&mut db, 300);
    let want = eligible(&mut db);
    let (dir, url) = file_store();
    let a = Archiver::new(&c.archiver_url("postgres"), &url)
        .with_env("PG_RETENTION_ARCHIVER_FAULT", "pause-before-complete");
    let child = a.spawn(&["once", "--max-batches", "1"]);
    assert!(
        c.wait_until(std::time::Duration::from_secs(30), || a.slice_keys().len()
            == 1)
    );
    db.batch_execute(
        "SELECT retention.place_hold('audit', 'id % 3 = 0', 'audit request', 'legal')",
    )
    .unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let held = scalar(&mut db, "SELECT count(*) FROM expected WHERE id % 3 = 0");
    assert!(held > 0);
    assert_eq!(
        eligible(&mut db),
        held,
        "held rows survive, the rest of the batch is pruned"
    );
    assert_eq!(
        scalar(&mut db, "SELECT deleted FROM retention.archives"),
        want - held
    );
    assert_eq!(
        scalar(
            &mut db,
            "SELECT rows FROM retention.ledger WHERE method = 'hold_skip'"
        ),
        held
    );
    assert_nothing_lost(&mut db);
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

#[test]
fn restore_refuses_a_manifest_whose_column_type_is_not_a_type() {
    let c = Cluster::start(&[]);
    let (dir, url) = file_store();
    let a = Archiver::new(&c.archiver_url("postgres"), &url);
    let mut db = c.connect("postgres");
    mixed_audit(&mut db, 300);
    let o = a.run(&["once"]);
    assert!(o.status.success(), "{}", text(&o));
    let key = a.slice_keys().into_iter().next().expect("a slice");
    // Restore creates a table: the restorer (a member of retention_archiver with CREATE on
    // schema public), not a superuser.
    let restorer = a.clone().with_database_url(&c.restorer_url("postgres"));
    let manifest_key = match key.strip_suffix(".slice") {
        Some(stem) => format!("{stem}.manifest.json"),
        None => key.clone(),
    };
    let manifest_path = dir.join(manifest_key);
    let manifest = std::fs::read_to_string(&manifest_path)
        .unwrap_or_else(|e| panic!("{}: {e}", manifest_path.display()));
    for hostile in [
        "int CHECK (pg_sleep(5) IS NOT NULL)",
        "int); DROP TABLE audit; --",
        "no_such_type",
        "numeric(pg_sleep(5))",
    ] {
        let mut m: serde_json::Value = serde_json::from_str(&manifest).unwrap();
        m["columns"][0]["type"] = serde_json::Value::String(hostile.into());
        std::fs::write(&manifest_path, serde_json::to_vec(&m).unwrap()).unwrap();
        let started = std::time::Instant::now();
        let o = restorer.run(&["restore", &key, "--into", "public.restored"]);
        assert!(!o.status.success(), "{hostile}: {}", text(&o));
        assert!(text(&o).contains("not a type"), "{hostile}: {}", text(&o));
        assert!(
            started.elapsed() < std::time::Duration::from_secs(5),
            "{hostile} ran"
        );
        assert_eq!(
            scalar(
                &mut db,
                "SELECT count(*) FROM pg_class WHERE relname = 'restored'"
            ),
            0,
            "no DDL ran for {hostile}"
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}
