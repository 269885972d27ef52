//! Object stores shared by several databases (issue 36, items 2 and 3): every database writes
//! under a namespace of its own (`<system identifier>.<database>`, recorded in
//! `retention.archive_namespace`, claimed as `_retention/namespaces/<namespace>.json`), so
//! `sweep-orphans --apply`, `expire` and `verify --all` run for one database never touch
//! another's objects, nor foreign files under the prefix; a namespace another database claimed
//! is refused (exit 6); `verify --all` with a database checks that every recorded archive is
//! in the store (exit 5 naming the missing key, the count in `retention._missing_archives()`),
//! and without one says it cannot check completeness.
//!
//! Two clusters (two system identifiers), a database `app` on each and a second database
//! `billing` on the first, on one file:// store and on one S3 store (SeaweedFS). The archiver
//! runs as production runs it ([`Cluster::archiver_url`]: a member of `retention_archiver`
//! only); rows are written by `app`, policies are `admin`'s; checks use the superuser.

use pg_retention_integration::archiver::{text, Archiver};
use pg_retention_integration::{column, scalar, Cluster, Seaweed};
use postgres::Client;
use std::process::Output;

/// One database archiving into the shared store.
struct Side<'a> {
    c: &'a Cluster,
    db: &'static str,
    a: Archiver,
}

impl Side<'_> {
    fn su(&self) -> Client {
        self.c.connect(self.db)
    }

    fn run(&self, args: &[&str]) -> Output {
        self.a.run(args)
    }

    /// Slice keys of this database's unexpired archives.
    fn keys(&self) -> Vec<String> {
        column(
            &mut self.su(),
            "SELECT object_key FROM retention.archives WHERE expired_at IS NULL ORDER BY id",
        )
    }

    fn namespace(&self) -> String {
        self.su()
            .query_one("SELECT namespace FROM retention.archive_namespace", &[])
            .unwrap()
            .get(0)
    }
}

/// Database `db` of `c` with the extension, 300 closed audit rows written by `app` and an
/// archive policy of `admin`'s (kept `keep`), archived by `once` in three batches through
/// `store` (`on_s3`: the SeaweedFS endpoint).
fn side<'a>(
    c: &'a Cluster,
    db: &'static str,
    store: &str,
    s3: Option<&str>,
    keep: &str,
) -> Side<'a> {
    if db != "postgres" {
        c.execute("postgres", &format!("CREATE DATABASE {db}"));
        c.execute(db, "CREATE EXTENSION pg_retention");
    }
    c.execute(
        db,
        "CREATE TABLE audit (id bigint PRIMARY KEY, status text NOT NULL, closed_at timestamptz, note text);",
    );
    c.grant_app_and_admin(db);
    let (mut app, mut admin) = c.app_and_admin(db);
    app.batch_execute(
        "INSERT INTO audit SELECT g, 'closed', now() - make_interval(days => 40 + g % 20), 'n' || g
           FROM generate_series(1, 300) g;",
    )
    .unwrap();
    admin
        .batch_execute(&format!(
            "SELECT retention.add_policy(name => 'audit', relation => 'audit', kind => 'age', age_column => 'closed_at',
                    older_than => '30 days', terminal => $$status = 'closed'$$, action => 'archive_then_delete'{keep});"
        ))
        .unwrap();
    let a = match s3 {
        Some(endpoint) => Archiver::on_s3(&c.archiver_url(db), endpoint),
        None => Archiver::new(&c.archiver_url(db), store),
    };
    let s = Side { c, db, a };
    let o = s.run(&["once", "--batch-rows", "100"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(s.keys().len(), 3, "{db}: three archives");
    s
}

/// Whether every archive of `s` (slice and manifest) is in the store and `verify --all` from
/// it passes with every archive checked.
fn intact(s: &Side<'_>, objects: &dyn Fn() -> Vec<String>) {
    let all = objects();
    let ns = s.namespace();
    for k in s.keys() {
        assert!(k.starts_with(&format!("{ns}/public.audit/")), "{k}");
        assert!(all.iter().any(|o| o.ends_with(&k)), "{k} is in the store");
        let m = k.replace(".slice", ".manifest.json");
        assert!(all.iter().any(|o| o.ends_with(&m)), "{m} is in the store");
    }
    let o = s.run(&["verify", "--all"]);
    assert!(o.status.success(), "{}: {}", s.db, text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("missing"), "{out}");
    assert_eq!(
        out.lines().filter(|l| l.starts_with("ok\t")).count(),
        s.keys().len(),
        "{out}"
    );
    assert!(!out.contains("MISSING"), "{out}");
}

/// The whole scenario on one store: `store` is the archiver's URL, `put_foreign` writes a
/// foreign file under the prefix (returning its key), `objects` lists every key, `delete`
/// removes one (as an accident would).
fn shared_store(
    store: &str,
    s3: Option<&str>,
    put_foreign: &dyn Fn(&str, &[u8]),
    objects: &dyn Fn() -> Vec<String>,
    delete: &dyn Fn(&str),
) {
    let c1 = Cluster::start(&[]);
    let c2 = Cluster::start(&[]);
    let a1 = side(&c1, "app", store, s3, ", archive_keep => '1 second'");
    let b1 = side(&c1, "billing", store, s3, "");
    let a2 = side(&c2, "app", store, s3, "");
    let namespaces = [a1.namespace(), b1.namespace(), a2.namespace()];
    assert!(namespaces[0].ends_with(".app") && namespaces[2].ends_with(".app"));
    assert_ne!(
        namespaces[0], namespaces[2],
        "same database name, another cluster"
    );
    assert_ne!(namespaces[0], namespaces[1]);
    let sysid: i64 = c1
        .connect("postgres")
        .query_one("SELECT system_identifier FROM pg_control_system()", &[])
        .unwrap()
        .get(0);
    assert_eq!(namespaces[0], format!("{sysid}.app"));
    for ns in &namespaces {
        assert!(
            objects().contains(&format!("_retention/namespaces/{ns}.json")),
            "{ns} is claimed"
        );
    }

    // Foreign files: under the prefix, inside a namespace (not shaped as ours) and outside.
    let foreign = [
        "notes/readme.txt".to_owned(),
        format!("{}/public.audit/keep-me.txt", namespaces[0]),
        "app/public.audit/2026/01/01/0b7c5a52-6a47-4f0e-9d7e-1f2a3b4c5d6e.slice".to_owned(),
    ];
    for f in &foreign {
        put_foreign(f, b"not the archiver's");
    }
    std::thread::sleep(std::time::Duration::from_millis(1200));

    // Sweeps from each: nothing is an orphan (each sees only its own namespace).
    for s in [&a1, &b1, &a2] {
        let o = s.run(&["sweep-orphans", "--older-than", "0s", "--apply"]);
        assert!(o.status.success(), "{}", text(&o));
        assert!(
            String::from_utf8_lossy(&o.stdout).contains("deleted 0 unreferenced objects"),
            "{}: {}",
            s.db,
            text(&o)
        );
    }
    // Debris in a1's own namespace (shaped as ours, recorded nowhere) is its orphan.
    let debris = format!(
        "{}/public.audit/2026/01/01/1b7c5a52-6a47-4f0e-9d7e-1f2a3b4c5d6e.slice",
        namespaces[0]
    );
    put_foreign(&debris, b"debris");
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let o = a1.run(&["sweep-orphans", "--older-than", "0s", "--apply"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("deleted 1 unreferenced objects"),
        "{}",
        text(&o)
    );
    assert!(!objects().contains(&debris));

    // Expire: a1's archives are past their keep and go; b1's and a2's are kept forever.
    let scratch = pg_retention_integration::temp_dir("pg-retention-shared-plans");
    std::fs::create_dir_all(&scratch).unwrap();
    for (i, s) in [&a1, &b1, &a2].into_iter().enumerate() {
        let plan = scratch.join(format!("plan-{i}.json"));
        let plan_text = plan.display().to_string();
        let o = s.run(&["expire", "plan", "--output", &plan_text]);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        let sha = String::from_utf8_lossy(&o.stdout)
            .lines()
            .last()
            .unwrap_or_default()
            .to_owned();
        let planned: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&plan).unwrap()).unwrap();
        let keys: Vec<String> = planned["policies"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|p| p["archives"].as_array().unwrap().iter())
            .flat_map(|a| a["objects"].as_array().unwrap().iter())
            .map(|o| o["key"].as_str().unwrap().to_owned())
            .collect();
        if i > 0 {
            assert!(keys.is_empty(), "{}: nothing to expire: {keys:?}", s.db);
            continue;
        }
        assert_eq!(keys.len(), 6, "a1's three slices and manifests: {keys:?}");
        assert!(
            keys.iter().all(|k| k.starts_with(&namespaces[0])),
            "{keys:?}"
        );
        let o = s.run(&[
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
        let op = String::from_utf8_lossy(&o.stdout)
            .lines()
            .last()
            .unwrap_or_default()
            .to_owned();
        let o = s.run(&[
            "expire",
            "apply",
            "--operation-id",
            &op,
            "--plan-sha256",
            &sha,
        ]);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    }
    assert!(a1.keys().is_empty(), "a1's archives expired");

    // Verify from each: every archive of the others is there and verifies; foreign files stay.
    for s in [&b1, &a2] {
        intact(s, objects);
    }
    let o = a1.run(&["verify", "--all"]);
    assert!(o.status.success(), "{}", text(&o));
    let all = objects();
    for f in &foreign {
        assert!(all.contains(f), "foreign {f} untouched: {all:?}");
    }

    // A namespace claimed by another database is refused, before anything is written.
    let mut su = b1.su();
    su.execute(
        "SELECT retention.set_archive_namespace($1)",
        &[&namespaces[2]],
    )
    .unwrap();
    let before = objects();
    for args in [
        vec!["once"],
        vec!["sweep-orphans", "--older-than", "0s", "--apply"],
        vec!["verify", "--all"],
    ] {
        let o = b1.run(&args);
        assert_eq!(o.status.code(), Some(6), "{args:?}: {}", text(&o));
        assert!(
            text(&o).contains("is claimed by database \"app\""),
            "{}",
            text(&o)
        );
    }
    let plan = scratch.join("plan-refused.json").display().to_string();
    let o = b1.run(&["expire", "plan", "--output", &plan]);
    assert_eq!(o.status.code(), Some(6), "{}", text(&o));
    assert_eq!(objects(), before, "nothing written or deleted");
    su.execute(
        "SELECT retention.set_archive_namespace($1)",
        &[&namespaces[1]],
    )
    .unwrap();
    intact(&b1, objects);

    // A recorded archive's slice deleted: verify --all fails (exit 5) naming it, and the
    // recorded count shows in retention._missing_archives().
    let mut su2 = a2.su();
    assert_eq!(
        su2.query_one("SELECT retention._missing_archives()", &[])
            .unwrap()
            .get::<_, Option<i64>>(0),
        Some(0)
    );
    let gone = a2.keys()[1].clone();
    delete(&gone);
    let o = a2.run(&["verify", "--all"]);
    assert_eq!(o.status.code(), Some(5), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains(&format!("MISSING\t{gone}")),
        "{}",
        text(&o)
    );
    assert!(
        String::from_utf8_lossy(&o.stderr).contains(&gone),
        "{}",
        text(&o)
    );
    assert_eq!(scalar(&mut su2, "SELECT retention._missing_archives()"), 1);
    // Its manifest, now nothing's slice, is not listed as another namespace's; b1 is still fine.
    intact(&b1, objects);

    // Without a database: it cannot check completeness, and verifies what it finds.
    let o =
        a2.a.command(&["verify", "--all"])
            .env_remove("PG_RETENTION_DATABASE_URL")
            .output()
            .unwrap();
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("completeness not checked"),
        "{}",
        text(&o)
    );
    assert!(
        o.status.code() == Some(0) || o.status.code() == Some(5),
        "{}",
        text(&o)
    );
}

#[test]
fn databases_sharing_a_file_store_never_touch_each_others_objects() {
    let dir = pg_retention_integration::temp_dir("pg-retention-shared");
    std::fs::create_dir_all(&dir).unwrap();
    let store = format!("file://{}", dir.display());
    let root = dir.clone();
    let put = move |key: &str, bytes: &[u8]| {
        let p = root.join(key);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, bytes).unwrap();
    };
    let root = dir.clone();
    let objects = move || {
        let mut found = Vec::new();
        let mut stack = vec![root.clone()];
        while let Some(d) = stack.pop() {
            for entry in std::fs::read_dir(&d).unwrap() {
                let p = entry.unwrap().path();
                if p.is_dir() {
                    stack.push(p);
                } else {
                    found.push(p.strip_prefix(&root).unwrap().display().to_string());
                }
            }
        }
        found.sort();
        found
    };
    let root = dir.clone();
    let delete = move |key: &str| std::fs::remove_file(root.join(key)).unwrap();
    shared_store(&store, None, &put, &objects, &delete);
}

#[test]
fn databases_sharing_an_s3_store_never_touch_each_others_objects() {
    use object_store::{path::Path, ObjectStore};
    let s3 = Seaweed::start("archive");
    let client = s3.store();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let path = |key: &str| Path::from_iter(std::iter::once("pg").chain(key.split('/')));
    let put = |key: &str, bytes: &[u8]| {
        rt.block_on(client.put(&path(key), bytes.to_vec().into()))
            .unwrap();
    };
    let objects = || {
        use futures::TryStreamExt;
        let prefix = Path::from("pg");
        let mut keys: Vec<String> = rt
            .block_on(client.list(Some(&prefix)).try_collect::<Vec<_>>())
            .unwrap()
            .into_iter()
            .map(|m| {
                m.location
                    .as_ref()
                    .strip_prefix("pg/")
                    .unwrap_or_default()
                    .to_owned()
            })
            .collect();
        keys.sort();
        keys
    };
    let delete = |key: &str| rt.block_on(client.delete(&path(key))).unwrap();
    shared_store(
        "s3://archive/pg",
        Some(&s3.endpoint()),
        &put,
        &objects,
        &delete,
    );
}
