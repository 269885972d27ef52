//! A table named with a double quote, a tab, a percent-encoded slash, a slash and a newline,
//! through every archiver command (once, ls, inspect, verify, restore, sweep-orphans, expire),
//! on the file:// store and on S3.

use super::*;

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
