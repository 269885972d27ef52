//! Archive → prune → verify → restore round trips on the file:// store and on S3 (a table
//! with a primary key and one without), and restore's refusal of a manifest column type that
//! is not a type.

use super::*;

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
