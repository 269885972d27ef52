//! An archiver killed at each point of a batch (after the claim, mid-upload, after the upload,
//! after the verify), and the archiver that comes after it and finishes, without duplicates.

use super::*;

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
