//! What stops or narrows a prune: a refused prune mid-pipeline, a foreign object at the batch
//! key, an object corrupted before read-back, a row updated between claim and complete, and a
//! hold placed mid-batch.

use super::*;

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
