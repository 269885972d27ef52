//! Archives that expire: `expire plan` (deterministic, zero store writes, held archives
//! refused), `prepare` (tombstone + ledger), `apply` (not before the quiescence interval; refuses
//! a changed inventory; a partial delete retried on the remaining keys only) and `status` (from
//! the operation's row and the tombstone, in a new process; tests/tests/expire_operations.rs
//! has the row itself).
//!
//! Every archiver command here (`once`, `ls`, `verify`, `expire plan / prepare / apply /
//! status`, `sweep-orphans`) runs as production runs them: as `archiver`, a LOGIN role that is
//! only a member of `retention_archiver` ([`Cluster::archiver_url`]; docs/archiver.md: the
//! archiver needs no other privileges, except `restore`, which creates a table and is not used
//! here). The test's own setup and checks use the superuser.

use pg_retention_integration::archiver::{text, Archiver};
use pg_retention_integration::{scalar, Cluster, Seaweed};
use postgres::Client;
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Output;

/// 300 closed audit rows, 40 to 60 days old, archived by `once` in three batches of 100 (ids
/// 1-100, 101-200, 201-300) to a file store, under a policy whose archives are kept one second.
fn archived(c: &Cluster) -> (Client, Archiver, PathBuf) {
    let dir = pg_retention_integration::temp_dir("pg-retention-expire");
    let a = Archiver::new(
        &c.archiver_url("postgres"),
        &format!("file://{}", dir.display()),
    );
    (archived_by(c, &a), a, dir)
}

/// The rows of [`archived`], archived by `a`.
fn archived_by(c: &Cluster, a: &Archiver) -> Client {
    let mut db = c.connect("postgres");
    db.batch_execute(
        "CREATE TABLE audit (id bigint PRIMARY KEY, status text NOT NULL, closed_at timestamptz, note text);
         INSERT INTO audit SELECT g, 'closed', now() - make_interval(days => 40 + g % 20), 'n' || g
           FROM generate_series(1, 300) g;
         SELECT retention.add_policy(name => 'audit', relation => 'audit', kind => 'age', age_column => 'closed_at',
                older_than => '30 days', terminal => $$status = 'closed'$$, action => 'archive_then_delete',
                archive_keep => '1 second');",
    )
    .unwrap();
    let o = a.run(&["once", "--batch-rows", "100"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        scalar(&mut db, "SELECT count(*) FROM retention.archives"),
        3
    );
    std::thread::sleep(std::time::Duration::from_millis(1200));
    db
}

/// Every file under `dir` with its bytes.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut files = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let p = entry.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                files.insert(p.clone(), std::fs::read(&p).unwrap());
            }
        }
    }
    files
}

fn last_line(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .last()
        .unwrap_or_default()
        .to_owned()
}

fn sha256sum(path: &Path) -> String {
    let o = std::process::Command::new("sha256sum")
        .arg(path)
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout)
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_owned()
}

/// Plans into a new file in `dir`; returns (path, SHA-256, the plan).
fn plan(
    a: &Archiver,
    dir: &Path,
    name: &str,
    extra: &[&str],
) -> (PathBuf, String, serde_json::Value) {
    let path = dir.join(name);
    let path_text = path.display().to_string();
    let mut args = vec!["expire", "plan", "--output", path_text.as_str()];
    args.extend_from_slice(extra);
    let o = a.run(&args);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let sha = last_line(&o);
    assert_eq!(sha, sha256sum(&path), "the plan's SHA-256 is its bytes'");
    let plan = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    (path, sha, plan)
}

fn prepare(a: &Archiver, plan: &Path, sha: &str, quiescence: &str) -> String {
    let o = a.run(&[
        "expire",
        "prepare",
        "--plan",
        &plan.display().to_string(),
        "--plan-sha256",
        sha,
        "--quiescence",
        quiescence,
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    last_line(&o)
}

fn apply(a: &Archiver, op: &str, sha: &str) -> Output {
    a.run(&[
        "expire",
        "apply",
        "--operation-id",
        op,
        "--plan-sha256",
        sha,
    ])
}

/// Every object key a plan names.
fn planned_keys(plan: &serde_json::Value) -> Vec<String> {
    plan["policies"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["archives"].as_array().unwrap().iter())
        .flat_map(|a| a["objects"].as_array().unwrap().iter())
        .map(|o| o["key"].as_str().unwrap().to_owned())
        .collect()
}

fn scratch() -> PathBuf {
    let d = pg_retention_integration::temp_dir("pg-retention-plans");
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn an_expire_plan_is_deterministic_writes_nothing_and_refuses_a_held_archive() {
    let c = Cluster::start(&[]);
    let (mut db, a, store) = archived(&c);
    // One archived row (in the second archive) is held: holds cover archived rows too.
    let hold = scalar(
        &mut db,
        "SELECT retention.place_hold('audit', 'id = 150', 'case 7', 'legal')",
    );
    let held_archive = scalar(
        &mut db,
        "SELECT id FROM retention.archives ORDER BY id OFFSET 1 LIMIT 1",
    );
    let before = snapshot(&store);
    let plans = scratch();
    let (p1, sha1, plan1) = plan(&a, &plans, "p1.json", &[]);
    let (_, sha2, _) = plan(&a, &plans, "p2.json", &[]);
    assert_eq!(sha1, sha2, "two plans of the same state are the same bytes");
    assert_eq!(
        snapshot(&store),
        before,
        "planning wrote nothing to the store"
    );
    assert_eq!(
        std::fs::metadata(&p1).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let o = a.run(&["expire", "plan", "--output", &p1.display().to_string()]);
    assert_eq!(
        o.status.code(),
        Some(2),
        "an existing path is refused: {}",
        text(&o)
    );
    let policy = &plan1["policies"][0];
    assert_eq!(policy["policy"], "audit");
    assert_eq!(policy["count"], 2);
    assert_eq!(
        planned_keys(&plan1).len(),
        4,
        "a slice and a manifest per archive"
    );
    assert_eq!(plan1["refused"][0]["archive_id"], held_archive);
    assert_eq!(plan1["refused"][0]["hold_ids"], serde_json::json!([hold]));
    // Without the hold, the third archive is planned too, and the plan is other bytes.
    db.batch_execute(&format!(
        "SELECT retention.lift_hold({hold}, 'legal', 'case closed')"
    ))
    .unwrap();
    let (_, sha3, plan3) = plan(&a, &plans, "p3.json", &[]);
    assert_ne!(sha3, sha1);
    assert_eq!(plan3["policies"][0]["count"], 3);
    assert_eq!(snapshot(&store), before);
}

#[test]
fn expire_apply_waits_for_quiescence_then_deletes_exactly_the_planned_keys() {
    let c = Cluster::start(&[]);
    let (mut db, a, store) = archived(&c);
    db.batch_execute("SELECT retention.place_hold('audit', 'id = 250', 'case 8', 'legal')")
        .unwrap();
    let plans = scratch();
    let (path, sha, plan) = plan(&a, &plans, "plan.json", &[]);
    let keys = planned_keys(&plan);
    assert_eq!(keys.len(), 4);
    // A digest that is not the plan's is invalid input.
    let o = a.run(&[
        "expire",
        "prepare",
        "--plan",
        &path.display().to_string(),
        "--plan-sha256",
        &"0".repeat(64),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let op = prepare(&a, &path, &sha, "3s");
    assert!(
        store
            .join(format!("_retention/expire/{op}.tombstone.json"))
            .is_file(),
        "the tombstone is in the store"
    );
    let o = apply(&a, &op, &sha);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    assert!(text(&o).contains("not_ready"), "{}", text(&o));
    assert!(
        keys.iter().all(|k| store.join(k).is_file()),
        "nothing deleted before quiescence"
    );
    let o = a.run(&["expire", "status", "--operation-id", &op]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("prepared (not ready)"), "{}", text(&o));
    std::thread::sleep(std::time::Duration::from_millis(3200));
    let others_before: Vec<PathBuf> = snapshot(&store)
        .into_keys()
        .filter(|p| !keys.iter().any(|k| p.ends_with(k)))
        .collect();
    let o = apply(&a, &op, &sha);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        keys.iter().all(|k| !store.join(k).exists()),
        "every planned key is gone"
    );
    let others_after: Vec<PathBuf> = snapshot(&store).into_keys().collect();
    assert_eq!(
        others_after, others_before,
        "only the planned keys were deleted"
    );
    assert_eq!(
        scalar(
            &mut db,
            &format!("SELECT count(*) FROM retention.archives WHERE expired_by = '{op}'")
        ),
        2
    );
    assert_eq!(
        scalar(
            &mut db,
            "SELECT count(*) FROM retention.ledger WHERE method = 'expire_apply' AND detail->>'outcome' IN ('not_ready', 'completed')"
        ),
        2
    );
    // Applying again is idempotent; status (a new process) reads the operation's state.
    let o = apply(&a, &op, &sha);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = a.run(&["expire", "status", "--operation-id", &op]);
    assert!(text(&o).contains("\"completed\""), "{}", text(&o));
    assert!(text(&o).contains("\"keys_deleted\": 4"), "{}", text(&o));
    // The held archive survives and verifies.
    let o = a.run(&["verify", "--all"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("1 verified, 0 failed"), "{}", text(&o));
}

#[test]
fn expire_apply_refuses_a_changed_inventory_and_retries_a_partial_delete_on_the_remaining_keys() {
    let c = Cluster::start(&[]);
    let (mut db, a, store) = archived(&c);
    let plans = scratch();
    let (path, sha, plan) = plan(&a, &plans, "plan.json", &["--keys-per-request", "1"]);
    let keys = planned_keys(&plan);
    assert_eq!(keys.len(), 6);
    let op = prepare(&a, &path, &sha, "0s");
    // An object added beside a planned archive, named after its batch: refused.
    let slice = store.join(&keys[1]);
    let extra = slice.with_extension("extra");
    std::fs::write(&extra, b"x").unwrap();
    let o = apply(&a, &op, &sha);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    assert!(text(&o).contains("inventory"), "{}", text(&o));
    std::fs::remove_file(&extra).unwrap();
    // A planned object removed: refused too.
    let manifest = store.join(&keys[0]);
    let kept = std::fs::read(&manifest).unwrap();
    std::fs::remove_file(&manifest).unwrap();
    let o = apply(&a, &op, &sha);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    std::fs::write(&manifest, kept).unwrap();
    // A store failure after the first request: partial, exactly one key deleted.
    let o = a
        .clone()
        .with_env("PG_RETENTION_ARCHIVER_FAULT", "expire-partial")
        .run(&[
            "expire",
            "apply",
            "--operation-id",
            &op,
            "--plan-sha256",
            &sha,
        ]);
    assert_eq!(o.status.code(), Some(4), "{}", text(&o));
    let gone: Vec<&String> = keys.iter().filter(|k| !store.join(k).exists()).collect();
    assert_eq!(gone, vec![&keys[0]], "one request, one key");
    // An unplanned object appears: the retry deletes only the original set's remaining keys.
    let stranger = slice.with_file_name("stranger.slice");
    std::fs::write(&stranger, b"not ours to expire").unwrap();
    let o = apply(&a, &op, &sha);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(keys.iter().all(|k| !store.join(k).exists()));
    assert!(stranger.is_file(), "the retry never broadens");
    let deleted_per_apply: Vec<i64> = db
        .query(
            "SELECT jsonb_array_length(detail->'deleted_keys')::bigint FROM retention.ledger
              WHERE method = 'expire_apply' AND detail->>'outcome' IN ('partial', 'completed') ORDER BY id",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(deleted_per_apply, vec![1, 5]);
    assert_eq!(
        scalar(
            &mut db,
            "SELECT count(*) FROM retention.archives WHERE expired_at IS NOT NULL"
        ),
        3
    );
}

#[test]
fn archives_expire_on_s3() {
    let c = Cluster::start(&[]);
    let s3 = Seaweed::start("archive");
    let a = Archiver::on_s3(&c.archiver_url("postgres"), &s3.endpoint());
    let mut db = archived_by(&c, &a);
    assert_eq!(a.slice_keys().len(), 3);
    let plans = scratch();
    let (path, sha, plan) = plan(&a, &plans, "plan.json", &["--keys-per-request", "4"]);
    assert_eq!(planned_keys(&plan).len(), 6);
    let op = prepare(&a, &path, &sha, "0s");
    let o = apply(&a, &op, &sha);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(a.slice_keys().is_empty(), "no slice is left in the bucket");
    assert_eq!(
        scalar(
            &mut db,
            "SELECT count(*) FROM retention.archives WHERE expired_at IS NOT NULL"
        ),
        3
    );
    let o = a.run(&["expire", "status", "--operation-id", &op]);
    assert!(
        text(&o).contains("\"tombstone\": \"present\""),
        "{}",
        text(&o)
    );
}

/// Sets a file's modification time `ago` in the past.
fn age_file(path: &Path, ago: std::time::Duration) {
    let f = std::fs::File::options().write(true).open(path).unwrap();
    f.set_modified(std::time::SystemTime::now() - ago).unwrap();
}

#[test]
fn sweep_orphans_reports_then_removes_only_unreferenced_old_objects() {
    let c = Cluster::start(&[]);
    let (mut db, a, store) = archived(&c);
    let two_hours = std::time::Duration::from_secs(7200);
    // A live batch: claimed, its object written, not pruned yet.
    db.batch_execute("INSERT INTO audit VALUES (1000, 'closed', now() - interval '45 days', 'x')")
        .unwrap();
    // Claimed by another archiver, connected as an archiver is: the archiver role.
    let live: String = c
        .connect_as("postgres", "archiver")
        .query_one(
            "SELECT retention.claim_batch('audit', 10, '1 hour', 'another-archiver')::text",
            &[],
        )
        .unwrap()
        .get(0);
    let first: String = db
        .query_one(
            "SELECT object_key FROM retention.archives ORDER BY id LIMIT 1",
            &[],
        )
        .unwrap()
        .get(0);
    let dir = store.join(&first).parent().unwrap().to_path_buf();
    for name in [
        format!("{live}.slice"),
        "stray.slice".into(),
        "stray.manifest.json".into(),
        "fresh.slice".into(),
    ] {
        std::fs::write(dir.join(&name), b"debris").unwrap();
    }
    // Everything is old but the fresh object: only references keep the rest.
    for (path, _) in snapshot(&store) {
        if !path.ends_with("fresh.slice") {
            age_file(&path, two_hours);
        }
    }
    let before = snapshot(&store);
    let o = a.run(&["sweep-orphans", "--older-than", "1h"]);
    assert!(o.status.success(), "{}", text(&o));
    let listed: Vec<String> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| l.strip_prefix("orphan\t"))
        .map(|l| l.split('\t').next().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(listed.len(), 2, "{}", text(&o));
    assert!(listed.iter().all(|k| k.contains("/stray.")), "{listed:?}");
    assert_eq!(snapshot(&store), before, "a dry run deletes nothing");
    let o = a.run(&["sweep-orphans", "--older-than", "1h", "--apply"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(!dir.join("stray.slice").exists() && !dir.join("stray.manifest.json").exists());
    assert!(
        dir.join(format!("{live}.slice")).exists(),
        "a live batch's object stays"
    );
    assert!(dir.join("fresh.slice").exists(), "a fresh object stays");
    assert_eq!(
        snapshot(&store).len(),
        before.len() - 2,
        "exactly the listed objects went"
    );
    let (objects, keys): (i64, i64) = {
        let r = db
            .query_one(
                "SELECT (detail->>'objects')::bigint, jsonb_array_length(detail->'keys')::bigint
                   FROM retention.ledger WHERE method = 'orphan_object_sweep'",
                &[],
            )
            .unwrap();
        (r.get(0), r.get(1))
    };
    assert_eq!((objects, keys), (2, 2));
    let o = a.run(&["verify", "--all"]);
    assert!(o.status.success(), "{}", text(&o));
}
