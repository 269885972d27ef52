//! The archiver's trust boundary, end to end (class 11): a real cluster and the real archiver
//! binary against what an adversary controls — the names of the tables it archives, the bytes of
//! the object store (a manifest names the types `restore` loads rows through), and the text of
//! connection strings and configuration files that must never be echoed.
//!
//! The archiver runs as production runs it: `archiver`, a LOGIN member of `retention_archiver`
//! only ([`Cluster::archiver_url`]); `restore` runs as `restorer` (the same, with CREATE on
//! schema `public`) or, where the test is about what a superuser operator risks, as the
//! superuser.

use bytes::Bytes;
use object_store::{path::Path, ObjectStore, PutPayload};
use pg_retention_integration::archiver::{binary, text, Archiver};
use pg_retention_integration::{column, scalar, Cluster, Seaweed};
use postgres::Client;
use std::collections::BTreeSet;
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::time::Duration;

/// A table name with a double quote, a tab, a percent-encoded slash, a real slash (a level of
/// the object key) and a newline.
const WEIRD: &str = "we\"ird\tta%2Fble/x\ny";

/// `name` as a quoted SQL identifier.
fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// A key as `ls` prints it (docs/archiver.md: backslash, tab, newline, carriage return
/// escaped; this test's keys hold no other control character).
fn display(key: &str) -> String {
    key.replace('\\', "\\\\")
        .replace('\t', "\\t")
        .replace('\n', "\\n")
        .replace('\r', "\\r")
}

fn manifest_for(slice_key: &str) -> String {
    format!(
        "{}.manifest.json",
        slice_key.strip_suffix(".slice").expect("a slice key")
    )
}

/// Runs a future to completion (the object-store client is async).
fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
        .block_on(f)
}

/// The object-store path of a recorded key under `prefix`: each `/`-separated part encoded once
/// by object_store's rules, empty parts dropped (docs/archiver.md, "Objects").
fn path_of(prefix: &str, key: &str) -> Path {
    Path::from_iter(prefix.split('/').chain(key.split('/')))
}

fn exists(store: &dyn ObjectStore, path: &Path) -> bool {
    match block_on(store.head(path)) {
        Ok(_) => true,
        Err(object_store::Error::NotFound { .. }) => false,
        Err(e) => panic!("head {path}: {e}"),
    }
}

/// Every object under `prefix` (paths as the store lists them).
fn listing(store: &dyn ObjectStore, prefix: &str) -> BTreeSet<String> {
    use futures::StreamExt;
    let prefix = (!prefix.is_empty()).then(|| Path::from(prefix));
    block_on(async {
        let mut out = BTreeSet::new();
        let mut s = store.list(prefix.as_ref());
        while let Some(meta) = s.next().await {
            out.insert(meta.expect("list the store").location.to_string());
        }
        out
    })
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn scratch(name: &str) -> std::path::PathBuf {
    let d = pg_retention_integration::temp_dir(name);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Schema `odd`, table [`WEIRD`] in it with 200 rows (150 archive-eligible, notes holding tabs,
/// newlines and quotes), an archive policy kept one second, and `public.expected_weird`: a copy
/// of the eligible rows. Returns the relation as `format('%I.%I')` spells it.
fn weird_table(db: &mut Client) -> String {
    let table = format!("odd.{}", quote_ident(WEIRD));
    db.batch_execute(&format!(
        "CREATE SCHEMA odd;
         CREATE TABLE {table} (id bigint PRIMARY KEY, status text NOT NULL, closed_at timestamptz, note text);
         INSERT INTO {table}
         SELECT g, CASE WHEN g % 4 = 0 THEN 'open' ELSE 'closed' END,
                now() - make_interval(days => 40 + g % 20),
                E'note\\t\"' || g || E'\"\\n\\\\%2F'
           FROM generate_series(1, 200) g;
         CREATE TABLE public.expected_weird AS SELECT * FROM {table} WHERE status = 'closed';"
    ))
    .unwrap();
    db.query_one(
        "SELECT retention.add_policy(name => 'weird', relation => $1::text::regclass, kind => 'age',
                age_column => 'closed_at', older_than => '30 days', terminal => $$status = 'closed'$$,
                action => 'archive_then_delete', archive_keep => '1 second')::text",
        &[&table],
    )
    .unwrap();
    db.query_one("SELECT format('%I.%I', 'odd', $1::text)", &[&WEIRD])
        .unwrap()
        .get(0)
}

/// Archive → ls → inspect → verify → restore → sweep-orphans → expire of [`WEIRD`]'s rows,
/// through `a` (the archiver role) and `store` (the same objects, read directly under
/// `prefix`).
fn weird_round_trip(c: &Cluster, a: &Archiver, store: Arc<dyn ObjectStore>, prefix: &str) {
    let mut db = c.connect("postgres");
    let relation = weird_table(&mut db);
    assert!(relation.contains('\t') && relation.contains('\n') && relation.contains("\"\""));

    // `once` archives and prunes every eligible row, in three batches.
    let o = a.run(&["once", "--batch-rows", "60"]);
    assert!(o.status.success(), "{}", text(&o));
    let table = format!("odd.{}", quote_ident(WEIRD));
    assert_eq!(
        scalar(
            &mut db,
            &format!("SELECT count(*) FROM {table} WHERE status = 'closed'")
        ),
        0,
        "every eligible row archived and pruned"
    );
    assert_eq!(
        scalar(&mut db, &format!("SELECT count(*) FROM {table}")),
        50
    );
    assert_eq!(
        scalar(
            &mut db,
            "SELECT sum(deleted)::bigint FROM retention.archives"
        ),
        150
    );
    let keys: Vec<String> = column(
        &mut db,
        "SELECT object_key FROM retention.archives ORDER BY id",
    );
    assert_eq!(keys.len(), 3);
    let ns: String = column(&mut db, "SELECT namespace FROM retention.archive_namespace")
        .pop()
        .unwrap();
    for k in &keys {
        assert!(
            k.starts_with(&format!("{ns}/{relation}/")),
            "the key holds the relation as it is: {k:?}"
        );
        assert!(
            exists(&*store, &path_of(prefix, k)),
            "{k:?} is in the store"
        );
        assert!(exists(&*store, &path_of(prefix, &manifest_for(k))));
    }
    let relations: Vec<String> =
        column(&mut db, "SELECT DISTINCT relation FROM retention.archives");
    assert_eq!(relations, vec![relation.clone()]);

    // `ls`: one line per slice, the key escaped as the docs say.
    let o = a.run(&["ls"]);
    assert!(o.status.success(), "{}", text(&o));
    let lines: Vec<String> = stdout(&o).lines().map(str::to_owned).collect();
    assert_eq!(lines.len(), 3, "one line per slice: {lines:#?}");
    let listed: BTreeSet<String> = lines
        .iter()
        .map(|l| {
            let fields: Vec<&str> = l.split('\t').collect();
            assert_eq!(fields.len(), 5, "key, rows, bytes, policy, batch: {l:?}");
            assert_eq!(fields[3], "weird");
            fields[0].to_owned()
        })
        .collect();
    let shown: BTreeSet<String> = keys.iter().map(|k| display(k)).collect();
    assert_eq!(listed, shown);

    // `inspect` takes the key as ls prints it.
    let o = a.run(&["inspect", &display(&keys[0])]);
    assert!(o.status.success(), "{}", text(&o));
    let m: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("a manifest");
    assert_eq!(m["relation"], relation.as_str());
    assert_eq!(m["rows"], 60);

    // `verify --all` and `verify <key>`.
    let o = a.run(&["verify", "--all"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(stdout(&o).contains("3 verified, 0 failed"), "{}", text(&o));
    assert!(!stdout(&o).contains("never pruned"), "{}", text(&o));
    let o = a.run(&["verify", &display(&keys[2])]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(stdout(&o).contains("1 verified, 0 failed"), "{}", text(&o));

    // `restore` (as the restorer: it creates tables) gives back exactly the pruned rows; by key
    // as ls prints it, and by batch id.
    let restorer = a.clone().with_database_url(&c.restorer_url("postgres"));
    let mut union = Vec::new();
    for (i, k) in keys.iter().enumerate() {
        let into = format!("public.weird_restored_{i}");
        let o = restorer.run(&["restore", &display(k), "--into", &into]);
        assert!(o.status.success(), "{}", text(&o));
        union.push(format!("SELECT * FROM {into}"));
    }
    let restored = union.join(" UNION ALL ");
    assert_eq!(
        scalar(&mut db, &format!("SELECT count(*) FROM ({restored}) r")),
        150
    );
    for diff in [
        format!("SELECT * FROM expected_weird EXCEPT ALL ({restored})"),
        format!("({restored}) EXCEPT ALL SELECT * FROM expected_weird"),
    ] {
        assert_eq!(
            scalar(&mut db, &format!("SELECT count(*) FROM ({diff}) d")),
            0,
            "the restored rows are exactly the pruned rows"
        );
    }
    let batch: String = db
        .query_one(
            "SELECT batch::text FROM retention.archives ORDER BY id DESC LIMIT 1",
            &[],
        )
        .unwrap()
        .get(0);
    let o = restorer.run(&["restore", &batch, "--into", "public.weird_by_batch"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        scalar(&mut db, "SELECT count(*) FROM weird_by_batch"),
        30,
        "the last batch's rows"
    );

    // `sweep-orphans`: debris beside an archive (named after no batch) is the only orphan, even
    // at age 0; every referenced object stays and the archive still verifies.
    let dir = keys[0].rsplit_once('/').unwrap().0;
    let debris = format!("{dir}/debris.slice");
    block_on(store.put(
        &path_of(prefix, &debris),
        PutPayload::from(Bytes::from_static(b"debris")),
    ))
    .expect("write debris");
    let before = listing(&*store, prefix);
    let o = a.run(&["sweep-orphans", "--older-than", "0s"]);
    assert!(o.status.success(), "{}", text(&o));
    let orphans: Vec<String> = stdout(&o)
        .lines()
        .filter_map(|l| l.strip_prefix("orphan\t"))
        .map(|l| l.split('\t').next().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(orphans, vec![display(&debris)], "{}", text(&o));
    assert_eq!(
        listing(&*store, prefix),
        before,
        "a dry run deletes nothing"
    );
    let o = a.run(&["sweep-orphans", "--older-than", "0s", "--apply"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        stdout(&o).contains("deleted 1 unreferenced objects"),
        "{}",
        text(&o)
    );
    assert!(!exists(&*store, &path_of(prefix, &debris)));
    let mut after = before.clone();
    after.remove(&path_of(prefix, &debris).to_string());
    assert_eq!(listing(&*store, prefix), after, "only the debris went");
    for k in &keys {
        assert!(exists(&*store, &path_of(prefix, k)), "{k:?} swept");
        assert!(exists(&*store, &path_of(prefix, &manifest_for(k))));
    }
    let swept: Vec<String> = column(
        &mut db,
        "SELECT detail->'keys'->>0 FROM retention.ledger WHERE method = 'orphan_object_sweep'",
    );
    assert_eq!(
        swept,
        vec![debris.clone()],
        "the ledger names the recorded key"
    );
    let o = a.run(&["sweep-orphans", "--older-than", "0s", "--apply"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        stdout(&o).contains("deleted 0 unreferenced objects"),
        "nothing referenced is ever an orphan: {}",
        text(&o)
    );
    let o = a.run(&["verify", "--all"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(stdout(&o).contains("3 verified, 0 failed"), "{}", text(&o));

    // `expire`: the archives are past their one-second keep; plan, prepare and apply delete
    // exactly their six objects.
    std::thread::sleep(Duration::from_millis(1200));
    let plans = scratch("pg-retention-weird-plans");
    let plan_path = plans.join("plan.json");
    let plan_text = plan_path.display().to_string();
    let o = a.run(&["expire", "plan", "--output", &plan_text]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let sha = stdout(&o).lines().last().unwrap_or_default().to_owned();
    let plan: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&plan_path).unwrap()).unwrap();
    assert_eq!(plan["policies"][0]["count"], 3, "{plan:#}");
    let planned: BTreeSet<String> = plan["policies"][0]["archives"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|a| a["objects"].as_array().unwrap().iter())
        .map(|o| o["key"].as_str().unwrap().to_owned())
        .collect();
    let recorded: BTreeSet<String> = keys
        .iter()
        .flat_map(|k| [k.clone(), manifest_for(k)])
        .collect();
    assert_eq!(planned, recorded, "the plan names the recorded keys");
    let o = a.run(&[
        "expire",
        "prepare",
        "--plan",
        &plan_text,
        "--plan-sha256",
        &sha,
        "--quiescence",
        "0s",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let op = stdout(&o).lines().last().unwrap_or_default().to_owned();
    let o = a.run(&[
        "expire",
        "apply",
        "--operation-id",
        &op,
        "--plan-sha256",
        &sha,
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    for k in &recorded {
        assert!(!exists(&*store, &path_of(prefix, k)), "{k:?} expired");
    }
    assert_eq!(
        scalar(
            &mut db,
            "SELECT count(*) FROM retention.archives WHERE expired_at IS NOT NULL"
        ),
        3
    );
    assert!(a.slice_keys().is_empty(), "ls lists nothing any more");
    let o = a.run(&["expire", "status", "--operation-id", &op]);
    assert!(text(&o).contains("\"completed\""), "{}", text(&o));
    let _ = std::fs::remove_dir_all(plans);
}

#[test]
fn a_table_named_with_quotes_tabs_and_newlines_round_trips() {
    let c = Cluster::start(&[]);
    let dir = scratch("pg-retention-weird");
    let a = Archiver::new(
        &c.archiver_url("postgres"),
        &format!("file://{}", dir.display()),
    );
    let store = Arc::new(
        object_store::local::LocalFileSystem::new_with_prefix(std::fs::canonicalize(&dir).unwrap())
            .unwrap(),
    );
    weird_round_trip(&c, &a, store, "");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_table_named_with_quotes_tabs_and_newlines_round_trips_on_s3() {
    let c = Cluster::start(&[]);
    let s3 = Seaweed::start("archive");
    let a = Archiver::on_s3(&c.archiver_url("postgres"), &s3.endpoint());
    weird_round_trip(&c, &a, Arc::new(s3.store()), "pg");
}

/// Schema `m`: a probe that records who runs it, a domain `m.evil` whose CHECK calls it (and a
/// composite holding one), a harmless domain `m.positive`, and table `m.t` (its `level` a
/// `m.positive`) with 100 archive-eligible rows, archived by the archiver role in two batches.
/// Returns the two slice keys, oldest first.
fn probed_archive(c: &Cluster, a: &Archiver) -> Vec<String> {
    let mut db = c.connect("postgres");
    db.batch_execute(
        "CREATE SCHEMA m;
         CREATE TABLE m.probe_log (who text, val text);
         GRANT INSERT ON m.probe_log TO PUBLIC;
         GRANT USAGE ON SCHEMA m TO PUBLIC;
         CREATE FUNCTION m.probe(v text) RETURNS boolean LANGUAGE plpgsql AS $$
         BEGIN INSERT INTO m.probe_log VALUES (current_user, v); RETURN true; END $$;
         CREATE DOMAIN m.evil AS text CHECK (m.probe(VALUE));
         CREATE TYPE m.comp AS (v m.evil);
         CREATE DOMAIN m.positive AS int CHECK (VALUE > 0);
         CREATE TABLE m.t (id bigint PRIMARY KEY, status text NOT NULL, closed_at timestamptz,
                           note text, level m.positive);
         INSERT INTO m.t SELECT g, 'closed', now() - interval '40 days', 'n' || g, g
           FROM generate_series(1, 100) g;
         CREATE TABLE m.expected AS SELECT * FROM m.t;
         SELECT retention.add_policy(name => 't', relation => 'm.t', kind => 'age', age_column => 'closed_at',
                older_than => '30 days', terminal => $$status = 'closed'$$, action => 'archive_then_delete');",
    )
    .unwrap();
    let o = a.run(&["once", "--batch-rows", "50"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(scalar(&mut db, "SELECT count(*) FROM m.t"), 0);
    let keys: Vec<String> = column(
        &mut db,
        "SELECT object_key FROM retention.archives ORDER BY id",
    );
    assert_eq!(keys.len(), 2);
    keys
}

/// The type `format_type` gives column `col` of `table`.
fn column_type(db: &mut Client, table: &str, col: &str) -> String {
    db.query_one(
        "SELECT format_type(atttypid, atttypmod) FROM pg_attribute
          WHERE attrelid = $1::text::regclass AND attname = $2 AND attnum > 0",
        &[&table, &col],
    )
    .unwrap_or_else(|e| panic!("{table}.{col}: {e}"))
    .get(0)
}

fn no_table(db: &mut Client, name: &str) -> bool {
    scalar(
        db,
        &format!("SELECT count(*) FROM pg_class WHERE relname = '{name}'"),
    ) == 0
}

/// Rows of `table` that are not in `m.expected` (or the other way round, of the ids it has).
fn differing(db: &mut Client, table: &str) -> i64 {
    let cols = "id, status, closed_at, note::text, level::int";
    scalar(
        db,
        &format!(
            "SELECT count(*) FROM (
               (SELECT {cols} FROM {table} EXCEPT ALL SELECT {cols} FROM m.expected)
               UNION ALL
               (SELECT {cols} FROM m.expected WHERE id IN (SELECT id FROM {table})
                EXCEPT ALL SELECT {cols} FROM {table})) d"
        ),
    )
}

#[test]
fn restore_refuses_a_manifest_that_names_a_domain_the_archive_does_not_record() {
    let c = Cluster::start(&[]);
    let dir = scratch("pg-retention-probe");
    let a = Archiver::new(
        &c.archiver_url("postgres"),
        &format!("file://{}", dir.display()),
    );
    let keys = probed_archive(&c, &a);
    let mut db = c.connect("postgres");
    let probes = |db: &mut Client| scalar(db, "SELECT count(*) FROM m.probe_log");
    // The operator restores as a superuser: what a tampered manifest could make it run.
    let operator = a.clone().with_database_url(&c.url("postgres"));

    // The manifest is not covered by any digest (the slice is, by the manifest): rewrite it in
    // the store so that column `note` (text in the table) names a type whose input runs code.
    let manifest_path = dir.join(manifest_for(&keys[0]));
    let genuine = std::fs::read_to_string(&manifest_path).unwrap();
    let tamper = |type_name: &str| {
        let mut m: serde_json::Value = serde_json::from_str(&genuine).unwrap();
        let note = m["columns"]
            .as_array_mut()
            .unwrap()
            .iter_mut()
            .find(|c| c["name"] == "note")
            .expect("a note column");
        note["type"] = type_name.into();
        std::fs::write(&manifest_path, serde_json::to_vec_pretty(&m).unwrap()).unwrap();
    };
    // A domain whose CHECK is the probe, an array and a composite of it, another column's
    // recorded domain, and the probe's domain spelled otherwise.
    for hostile in [
        "m.evil",
        "m.evil[]",
        "m.comp",
        "m.positive",
        "M.EVIL",
        "\"m\".\"evil\"",
    ] {
        tamper(hostile);
        let o = operator.run(&["restore", &keys[0], "--into", "public.refused"]);
        assert_eq!(o.status.code(), Some(5), "{hostile}: {}", text(&o));
        assert!(
            text(&o).contains("manifest column \"note\""),
            "{hostile}: the refusal names the column: {}",
            text(&o)
        );
        assert!(
            text(&o).contains("--untyped-as-text"),
            "{hostile}: {}",
            text(&o)
        );
        assert!(no_table(&mut db, "refused"), "{hostile}: no DDL ran");
        assert_eq!(probes(&mut db), 0, "{hostile}: the probe never ran");
    }

    // With --untyped-as-text the column is restored as text holding the archived text, and the
    // recorded domain of `level` is kept.
    tamper("m.evil");
    let o = operator.run(&[
        "restore",
        &keys[0],
        "--into",
        "public.as_text",
        "--untyped-as-text",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(column_type(&mut db, "public.as_text", "note"), "text");
    assert_eq!(
        column_type(&mut db, "public.as_text", "level"),
        "m.positive"
    );
    assert_eq!(scalar(&mut db, "SELECT count(*) FROM as_text"), 50);
    assert_eq!(differing(&mut db, "as_text"), 0);
    assert_eq!(probes(&mut db), 0, "the probe never ran");

    // An untampered archive: `level`'s domain is what the database records for that column of
    // the archived table, so it restores through it, without --untyped-as-text.
    let o = operator.run(&["restore", &keys[1], "--into", "public.recorded"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        column_type(&mut db, "public.recorded", "level"),
        "m.positive"
    );
    assert_eq!(column_type(&mut db, "public.recorded", "note"), "text");
    assert_eq!(scalar(&mut db, "SELECT count(*) FROM recorded"), 50);
    assert_eq!(differing(&mut db, "recorded"), 0);

    // The archived table gone (renamed away: for the archive index, which names `m.t`, as good
    // as dropped) and `m.t` made again with `level` an int: the manifest's genuine domain is no
    // longer what the database records, so it is refused like any other domain...
    db.batch_execute(
        "ALTER TABLE m.t RENAME TO t_before;
         CREATE TABLE m.t (id bigint PRIMARY KEY, status text NOT NULL, closed_at timestamptz,
                           note text, level int);",
    )
    .unwrap();
    let o = operator.run(&["restore", &keys[1], "--into", "public.gone"]);
    assert_eq!(o.status.code(), Some(5), "{}", text(&o));
    assert!(
        text(&o).contains("manifest column \"level\""),
        "{}",
        text(&o)
    );
    assert!(no_table(&mut db, "gone"), "no DDL ran");
    // ... and restored as text when asked.
    let o = operator.run(&[
        "restore",
        &keys[1],
        "--into",
        "public.gone",
        "--untyped-as-text",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(column_type(&mut db, "public.gone", "level"), "text");
    assert_eq!(differing(&mut db, "gone"), 0);
    assert_eq!(probes(&mut db), 0, "the probe never ran, as anyone");
    let _ = std::fs::remove_dir_all(dir);
}

/// The outputs of the archiver binary run with `args` and `env` (nothing else from the test's
/// environment that configures it), bounded: a run still going after 20 s is killed.
fn run_bounded(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(binary());
    cmd.args(args)
        .env_remove("PG_RETENTION_DATABASE_URL")
        .env_remove("PG_RETENTION_STORE")
        .env_remove("PG_RETENTION_CONFIG")
        .env_remove("AWS_ACCESS_KEY_ID")
        .env_remove("AWS_SECRET_ACCESS_KEY")
        .env("PG_RETENTION_CONNECT_TIMEOUT", "2s")
        .env("PG_RETENTION_REQUEST_TIMEOUT", "2s")
        .env("PG_RETENTION_MAX_RETRIES", "0")
        .env("PG_RETENTION_RETRY_TIMEOUT", "2s")
        .env("PG_RETENTION_METRICS_ADDR", "127.0.0.1:0")
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("start the archiver");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while child.try_wait().unwrap().is_none() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    child.wait_with_output().unwrap()
}

/// Every output that shows something of a secret, with what it showed: every secret in this
/// test holds `kret` (or is `se%6Bret`, "sekret" percent-encoded).
#[derive(Default)]
struct Leaks(Vec<String>);

impl Leaks {
    fn check(&mut self, what: &str, o: &Output) {
        let all = text(o);
        if ["kret", "%6Bret", "%6bret"].iter().any(|l| all.contains(l)) {
            self.0.push(format!("{what} shows a secret:\n{all}"));
        }
    }
}

#[test]
fn secrets_never_reach_output() {
    // A port nothing listens on: every connection fails.
    let port = pg_retention_integration::ports::free_ports(1)[0];
    let host = "127.0.0.1";
    let store_dir = scratch("pg-retention-secrets");
    let store = format!("file://{}", store_dir.display());
    let urls = [
        format!("postgres://u:sekret@{host}:{port}/db"),
        format!("postgresql://u:sekret@{host}:{port}/db?sslmode=disable"),
        format!("postgres://u@{host}:{port}/db?password=sekret"),
        format!("postgres://u@{host}:{port}/db?sslmode=disable&password=sekret&application_name=x"),
        format!("postgres://u@{host}:{port}/db?password=se%6Bret"),
        format!("postgres://u:se%20kret@{host}:{port}/db"),
        format!("postgres://u:pa@sekret@{host}:{port}/db"),
        format!("postgres://u:pa:sekret@{host}:{port}/db"),
        format!("postgres://u@{host}:{port}/db?sslpassword=sekret"),
        format!("host={host} port={port} user=u password=sekret dbname=db"),
        format!("host={host} port={port} user=u password='se kret' dbname=db"),
        format!("host={host} port={port} user=u password = sekret dbname=db"),
        format!("host={host} port={port} user=u password= 'se kret' dbname=db"),
        format!("host={host} port={port} user=u password =sekret dbname=db"),
        format!("host={host} port={port} user=u password='it\\'s sekret' dbname=db"),
        format!("host={host} port={port} user=u password=a\\ sekret dbname=db"),
        format!("host={host} port={port} user=u password=\"se kret\" dbname=db"),
        format!("host={host} port={port} user=u PASSWORD=sekret dbname=db"),
        format!("host={host} port={port} user=u sslpassword=sekret dbname=db"),
        format!("password=sekret host={host} port={port}"),
        format!("host={host} port={port} password sekret"),
        format!("host={host} port=notaport password=sekret"),
        format!("host={host}\nport={port}\npassword=sekret"),
    ];
    let conf_dir = scratch("pg-retention-secrets-conf");
    let mut leaks = Leaks::default();
    let mut configs = Vec::new();
    for (i, url) in urls.iter().enumerate() {
        // Through the environment, the flag and (below) a configuration file.
        for args in [
            vec!["once"],
            vec!["verify", "--all"],
            vec!["sweep-orphans", "--older-than", "1h"],
            vec!["restore", "a/b.slice", "--into", "public.t"],
            vec![
                "expire",
                "status",
                "--operation-id",
                "00000000-0000-0000-0000-000000000000",
            ],
        ] {
            let o = run_bounded(
                &args,
                &[
                    ("PG_RETENTION_DATABASE_URL", url),
                    ("PG_RETENTION_STORE", &store),
                ],
            );
            assert!(
                !o.status.success(),
                "{url:?} {args:?} connects: {}",
                text(&o)
            );
            leaks.check(&format!("{args:?} with {url:?} in the environment"), &o);
        }
        let o = run_bounded(
            &["once", "--log-format", "json", "--database-url", url],
            &[("PG_RETENTION_STORE", &store), ("RUST_LOG", "trace")],
        );
        assert!(!o.status.success(), "{}", text(&o));
        leaks.check(&format!("once --database-url {url:?} (trace logs)"), &o);
        let o = run_bounded(
            &["run", "--database-url", url],
            &[("PG_RETENTION_STORE", &store), ("RUST_LOG", "debug")],
        );
        leaks.check(&format!("run --database-url {url:?}"), &o);
        // A valid configuration file holding it.
        let path = conf_dir.join(format!("ok-{i}.toml"));
        let toml_url = url
            .replace('\\', "\\\\")
            .replace('"', "\\\"")
            .replace('\n', "\\n");
        std::fs::write(
            &path,
            format!("database_url = \"{toml_url}\"\nstore = \"{store}\"\n"),
        )
        .unwrap();
        configs.push(path);
        // The connection string given where a command is expected: a usage error quotes it.
        let o = run_bounded(&[url.as_str()], &[]);
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
        leaks.check(&format!("the command line {url:?}"), &o);
        let o = run_bounded(&["once", url.as_str()], &[]);
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
        leaks.check(&format!("the command line once {url:?}"), &o);
    }
    for path in &configs {
        let o = run_bounded(&["once", "--config", &path.display().to_string()], &[]);
        assert!(!o.status.success(), "{}", text(&o));
        leaks.check(&format!("configuration file {}", path.display()), &o);
    }

    // Configuration files that do not parse, each holding a secret.
    let bad_files = [
        format!("database_url = \"postgres://u:sekret@{host}:{port}/db\"\nbatch_rows = \"many\"\n"),
        format!("database_url = \"postgres://u:sekret@{host}:{port}/db\n"),
        format!("database_url = postgres://u:sekret@{host}:{port}/db\n"),
        "database_url = 'host=h password='se kret''\n".to_owned(),
        "databse_url = \"host=h password='se kret'\"\n".to_owned(),
        "password = \"sekret\"\n".to_owned(),
        "[database_url]\npassword = \"sekret\"\n".to_owned(),
        "database_url = [\"postgres://u:sekret@h/db\"]\n".to_owned(),
        "database_url = { url = \"postgres://u:sekret@h/db\" }\n".to_owned(),
        "\"postgres://u:sekret@h/db\" = 1\n".to_owned(),
        "\"password=sekret\" = 1\n".to_owned(),
        "database_url = \"postgres://u@h/db\"\nsekret\n".to_owned(),
        "database_url = \"postgres://u@h/db\"\n\"sekret\"\n".to_owned(),
        "s3_secret_access_key = \"sekret\"\ns3_secret_access_key = \"sekret\"\n".to_owned(),
        "s3_secret_access_key = sekret\n".to_owned(),
        "store = \"s3://AKIA:sekret@bucket/p\"\nbatch_rows = 1.5\n".to_owned(),
        "database_url = \"\"\"\npostgres://u:sekret@h/db\"\"\"\nlease = 5\n".to_owned(),
    ];
    for (i, body) in bad_files.iter().enumerate() {
        let path = conf_dir.join(format!("bad-{i}.toml"));
        std::fs::write(&path, body).unwrap();
        let path = path.display().to_string();
        for args in [
            vec!["once", "--config", &path],
            vec!["ls", "--config", &path],
        ] {
            let o = run_bounded(&args, &[]);
            assert!(!o.status.success(), "{body:?}: {}", text(&o));
            leaks.check(&format!("a bad configuration file {body:?}"), &o);
        }
        let o = run_bounded(&["once"], &[("PG_RETENTION_CONFIG", &path)]);
        assert!(!o.status.success(), "{body:?}: {}", text(&o));
        leaks.check(&format!("PG_RETENTION_CONFIG={body:?}"), &o);
    }

    // Object-store secrets: in the store URL (refused), the endpoint's user info, the keys. At
    // the default log level: with RUST_LOG=debug, the HTTP client's own log lines (reqwest,
    // hyper-util) print an endpoint with its user info, which no redaction of ours reaches.
    let endpoint = format!("http://AKIA:sekret@{host}:{port}");
    for (args, env) in [
        (
            vec!["ls"],
            vec![("PG_RETENTION_STORE", "s3://AKIA:sekret@bucket/p".to_owned())],
        ),
        (
            vec!["ls"],
            vec![(
                "PG_RETENTION_STORE",
                "s3://bucket/p?secret_access_key=sekret".to_owned(),
            )],
        ),
        (
            vec!["ls"],
            vec![(
                "PG_RETENTION_STORE",
                "s3://bucket/p#token=sekret".to_owned(),
            )],
        ),
        (
            vec!["ls", "--s3-endpoint", endpoint.as_str()],
            vec![
                ("PG_RETENTION_STORE", "s3://bucket/p".to_owned()),
                ("AWS_ACCESS_KEY_ID", "AKIA".to_owned()),
                ("AWS_SECRET_ACCESS_KEY", "sekret".to_owned()),
            ],
        ),
        (
            vec![
                "verify",
                "--all",
                "--s3-secret-access-key",
                "sekret",
                "--s3-access-key-id",
                "AKIA",
            ],
            vec![
                ("PG_RETENTION_STORE", "s3://bucket/p".to_owned()),
                ("PG_RETENTION_S3_ENDPOINT", format!("http://{host}:{port}")),
            ],
        ),
        (
            vec!["ls"],
            vec![
                ("PG_RETENTION_STORE", "s3://bucket/p".to_owned()),
                ("AWS_ENDPOINT", endpoint.clone()),
                ("AWS_ALLOW_HTTP", "true".to_owned()),
                ("AWS_ACCESS_KEY_ID", "AKIA".to_owned()),
                ("AWS_SECRET_ACCESS_KEY", "sekret".to_owned()),
            ],
        ),
        (
            vec!["ls"],
            vec![
                ("PG_RETENTION_STORE", "s3://bucket/p".to_owned()),
                ("AWS_ENDPOINT", endpoint.clone()),
            ],
        ),
    ] {
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let o = run_bounded(&args, &env);
        assert!(!o.status.success(), "{args:?} {env:?}: {}", text(&o));
        leaks.check(&format!("{args:?} with {env:?}"), &o);
    }

    // --help, of the binary and of every command, with every secret-bearing variable set.
    let env = [
        (
            "PG_RETENTION_DATABASE_URL",
            "postgres://u:sekret@h/db?password=sekret",
        ),
        ("PG_RETENTION_STORE", "s3://AKIA:sekret@bucket/p"),
        ("PG_RETENTION_S3_ENDPOINT", "https://u:sekret@s3.example"),
        ("AWS_ACCESS_KEY_ID", "AKIA-sekret"),
        ("AWS_SECRET_ACCESS_KEY", "sekret"),
    ];
    for args in [
        vec!["--help"],
        vec!["-h"],
        vec!["help"],
        vec!["--version"],
        vec!["once", "--help"],
        vec!["run", "--help"],
        vec!["restore", "--help"],
        vec!["sweep-orphans", "--help"],
        vec!["expire", "--help"],
        vec!["expire", "apply", "--help"],
        vec!["help", "verify"],
    ] {
        let o = run_bounded(&args, &env);
        assert!(o.status.success(), "{args:?}: {}", text(&o));
        leaks.check(&format!("{args:?}"), &o);
    }
    let _ = std::fs::remove_dir_all(store_dir);
    let _ = std::fs::remove_dir_all(conf_dir);
    assert!(
        leaks.0.is_empty(),
        "{} outputs show a secret:\n\n{}",
        leaks.0.len(),
        leaks.0.join("\n\n")
    );
}
