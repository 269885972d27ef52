//! The digest-checked prune: complete deletes exactly its batch and records the archive, refuses
//! a wrong digest or count and changed rows, honours holds and a widened window, and undoes its
//! own deletes when it refuses.

use super::*;

#[test]
fn claim_frames_complete_deletes_exactly_the_batch_and_records_the_archive() {
    let c = Cluster::start(&[]);
    let (_, mut admin, mut arch) = audit(&c, 100);
    let batch = claim(&mut arch, 10).unwrap();
    let ids = batch_ids(&mut arch, &batch);
    assert_eq!(
        ids,
        vec![31, 32, 33, 34, 36, 37, 38, 39, 41, 42],
        "eligible rows in key order"
    );
    let (_, digest, rows, bytes) = slice(&mut arch, &batch);
    let manifest = manifest_of(&mut arch, &batch, true);
    assert_eq!(manifest["blake3"].as_str(), Some(digest.as_str()));
    assert_eq!(
        (manifest["rows"].as_i64(), manifest["bytes"].as_i64()),
        (Some(rows), Some(bytes))
    );
    assert_eq!(manifest["key_columns"], serde_json::json!(["id"]));
    assert_eq!(
        complete(&mut arch, &batch, &digest, rows, bytes).unwrap(),
        10
    );
    let left: Vec<i64> = admin
        .query(
            "SELECT id FROM audit WHERE id BETWEEN 30 AND 43 ORDER BY id",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(left, vec![30, 35, 40, 43]);
    assert_eq!(
        scalar(&mut admin, "SELECT deleted FROM retention.archives"),
        10
    );
    assert_eq!(
        scalar(
            &mut admin,
            "SELECT archive_id FROM retention.ledger WHERE method = 'prune'"
        ),
        scalar(&mut admin, "SELECT id FROM retention.archives")
    );
    // Completing again is a no-op and cannot delete anything else.
    assert_eq!(
        complete(&mut arch, &batch, &digest, rows, bytes).unwrap(),
        0
    );
    assert_eq!(
        scalar(&mut admin, "SELECT count(*) FROM retention.archives"),
        1
    );
    // The archive index refuses changes even from a superuser (no other role may write it).
    let (code, _) = expect_error(
        &mut c.connect("postgres"),
        "UPDATE retention.archive_records SET rows = 0",
    );
    assert_eq!(code, "RT401");
}

#[test]
fn an_update_between_claim_and_complete_makes_complete_refuse_and_delete_nothing() {
    let c = Cluster::start(&[]);
    let (_, mut admin, mut arch) = audit(&c, 100);
    let batch = claim(&mut arch, 10).unwrap();
    let (_, digest, rows, bytes) = slice(&mut arch, &batch);
    // A superuser bypasses the guard trigger (session_replication_role is a superuser's).
    c.execute("postgres", "SET session_replication_role = replica; UPDATE audit SET note = 'sneaky' WHERE id = 33; RESET session_replication_role");
    let before = scalar(&mut admin, "SELECT count(*) FROM audit");
    let err = complete(&mut arch, &batch, &digest, rows, bytes).unwrap_err();
    assert_eq!(err.code().map(|c| c.code()), Some("RT502"), "{err}");
    assert_eq!(scalar(&mut admin, "SELECT count(*) FROM audit"), before);
    assert_eq!(
        scalar(&mut admin, "SELECT count(*) FROM retention.archives"),
        0
    );
    // The archiver gives the batch up; the refusal is ledgered and the rows are claimable again.
    // An unknown cause is refused (22023) and releases nothing.
    let unknown = arch
        .batch_execute(&format!(
            "SELECT retention.release_batch('{batch}', 'refused: rows changed', 'because')"
        ))
        .unwrap_err();
    assert_eq!(pg_retention_integration::sqlstate(&unknown), "22023");
    arch.batch_execute(&format!(
        "SELECT retention.release_batch('{batch}', 'refused: rows changed', 'refused')"
    ))
    .unwrap();
    assert_eq!(scalar(&mut admin, "SELECT count(*) FROM retention.ledger WHERE method = 'release' AND detail->>'cause' = 'refused'"), 1);
    // Counted by its cause, whatever its reason says.
    assert_eq!(
        scalar(
            &mut admin,
            "SELECT coalesce((errors_total->>'archive_refused')::bigint, 0) FROM retention.stats"
        ),
        1
    );
    assert!(claim(&mut arch, 10).is_some());
}

#[test]
fn a_wrong_digest_or_count_is_refused() {
    let c = Cluster::start(&[]);
    let (mut app, mut admin, mut arch) = audit(&c, 100);
    let batch = claim(&mut arch, 10).unwrap();
    let (_, digest, rows, bytes) = slice(&mut arch, &batch);
    let wrong = blake3::hash(b"something else").to_hex().to_string();
    for (d, r, b) in [
        (wrong.as_str(), rows, bytes),
        (digest.as_str(), rows - 1, bytes),
        (digest.as_str(), rows, bytes + 1),
    ] {
        let err = complete(&mut arch, &batch, d, r, b).unwrap_err();
        assert_eq!(err.code().map(|c| c.code()), Some("RT502"), "{err}");
    }
    assert_eq!(scalar(&mut admin, "SELECT count(*) FROM audit"), 100);
    // A vanished row is refused too.
    app.batch_execute("DELETE FROM audit WHERE id = 31")
        .unwrap();
    let err = complete(&mut arch, &batch, &digest, rows, bytes).unwrap_err();
    assert!(
        err.to_string().contains("vanished")
            || err
                .as_db_error()
                .is_some_and(|e| e.message().contains("vanished")),
        "{err}"
    );
}

#[test]
fn a_hold_placed_after_the_claim_blocks_only_its_rows() {
    let c = Cluster::start(&[]);
    let (_, mut admin, mut arch) = audit(&c, 100);
    let batch = claim(&mut arch, 10).unwrap();
    let (_, digest, rows, bytes) = slice(&mut arch, &batch);
    let hold = scalar(
        &mut admin,
        "SELECT retention.place_hold('audit', 'id IN (32, 37)', 'subpoena', 'legal')",
    );
    assert_eq!(
        complete(&mut arch, &batch, &digest, rows, bytes).unwrap(),
        8
    );
    assert_eq!(
        scalar(
            &mut admin,
            "SELECT count(*) FROM audit WHERE id IN (32, 37)"
        ),
        2
    );
    assert_eq!(
        scalar(
            &mut admin,
            "SELECT count(*) FROM audit WHERE id IN (31, 33, 34, 36, 38, 39, 41, 42)"
        ),
        0
    );
    assert_eq!(scalar(&mut admin, &format!("SELECT rows FROM retention.ledger WHERE method = 'hold_skip' AND {hold} = ANY (hold_ids)")), 2);
}

/// A window widened between the claim and the prune keeps the rows it no longer covers: they
/// are in the slice (archived) and stay in the table, ledgered as kept; the application may
/// then change or delete them like any row not yet eligible. (The chaos run found its checker
/// counting such a row as deleted by retention.)
#[test]
fn a_window_widened_after_the_claim_keeps_the_rows_it_no_longer_covers() {
    let c = Cluster::start(&[]);
    let (mut app, mut admin, mut arch) = audit(&c, 100);
    let batch = claim(&mut arch, 10).unwrap();
    assert_eq!(
        batch_ids(&mut arch, &batch),
        vec![31, 32, 33, 34, 36, 37, 38, 39, 41, 42]
    );
    let (_, digest, rows, bytes) = slice(&mut arch, &batch);
    admin
        .batch_execute("SELECT retention.alter_policy('audit', older_than => '36 days 12 hours')")
        .unwrap();
    assert_eq!(
        complete(&mut arch, &batch, &digest, rows, bytes).unwrap(),
        5
    );
    assert_eq!(
        scalar(
            &mut admin,
            "SELECT count(*) FROM audit WHERE id IN (31, 32, 33, 34, 36)"
        ),
        5
    );
    assert_eq!(
        scalar(
            &mut admin,
            "SELECT count(*) FROM audit WHERE id IN (37, 38, 39, 41, 42)"
        ),
        0
    );
    assert_eq!(
        scalar(
            &mut admin,
            "SELECT rows * 100 + deleted FROM retention.archives"
        ),
        1005
    );
    assert_eq!(
        scalar(
            &mut admin,
            "SELECT rows FROM retention.ledger WHERE method = 'hold_skip'"
        ),
        5
    );
    assert_eq!(
        scalar(
            &mut admin,
            "SELECT rows FROM retention.ledger WHERE method = 'prune'"
        ),
        5
    );
    // Kept, not frozen: the application's own writes go through.
    assert_eq!(
        app.execute("UPDATE audit SET note = 'again' WHERE id = 32", &[])
            .unwrap(),
        1
    );
    assert_eq!(
        app.execute("DELETE FROM audit WHERE id = 31", &[]).unwrap(),
        1
    );
}

/// The prune deletes first and checks after, in one transaction: a changed row among the rows
/// a hold keeps (rendered after the deletes) still refuses the batch, and the refusal undoes
/// the deletes of the other rows.
#[test]
fn a_changed_row_among_the_held_ones_refuses_the_batch_and_deletes_nothing() {
    let c = Cluster::start(&[]);
    let (_, mut admin, mut arch) = audit(&c, 100);
    let batch = claim(&mut arch, 10).unwrap();
    let (_, digest, rows, bytes) = slice(&mut arch, &batch);
    scalar(
        &mut admin,
        "SELECT retention.place_hold('audit', 'id IN (32, 37)', 'subpoena', 'legal')",
    );
    // A superuser bypasses the guard trigger (session_replication_role is a superuser's).
    c.execute("postgres", "SET session_replication_role = replica; UPDATE audit SET note = 'sneaky' WHERE id = 37; RESET session_replication_role");
    let err = complete(&mut arch, &batch, &digest, rows, bytes).unwrap_err();
    assert_eq!(err.code().map(|c| c.code()), Some("RT502"), "{err}");
    assert_eq!(scalar(&mut admin, "SELECT count(*) FROM audit"), 100);
    assert_eq!(
        scalar(&mut admin, "SELECT count(*) FROM retention.archives"),
        0
    );
    assert_eq!(
        scalar(
            &mut admin,
            "SELECT count(*) FROM retention.ledger WHERE method IN ('prune', 'hold_skip')"
        ),
        0
    );
}

/// A refused prune is an error raised by the function itself (no result value to ignore): a
/// caller that catches it and commits commits none of its deletes.
#[test]
fn a_refused_prune_undoes_its_own_deletes_even_when_its_caller_catches_the_refusal() {
    let c = Cluster::start(&[]);
    let (_, mut admin, mut arch) = audit(&c, 200);
    let batch = claim(&mut arch, 50).expect("a batch");
    let (_, digest, rows, bytes) = slice(&mut arch, &batch);
    let before = scalar(&mut admin, "SELECT count(*) FROM audit");
    // The caller catches the refusal (a PL/pgSQL handler, as a scheduler's wrapper would) and
    // the transaction commits. The archiver may not read the table, so the count inside its
    // transaction needs a superuser's session that calls as `archiver` (SET LOCAL ROLE), then
    // reads as itself.
    let mut su = c.connect("postgres");
    let mut tx = su.transaction().unwrap();
    tx.batch_execute("SET LOCAL ROLE archiver").unwrap();
    tx.batch_execute(&format!(
        "CREATE TEMP TABLE caught (state text);
         DO $$ BEGIN
             PERFORM retention._complete_batch('{batch}', 'test/x', '{digest}00', {rows}, {bytes}, NULL);
         EXCEPTION WHEN OTHERS THEN
             INSERT INTO caught VALUES (SQLSTATE);
         END $$;"
    ))
    .unwrap();
    let result: String = tx
        .query_one("SELECT string_agg(state, ',') FROM caught", &[])
        .unwrap()
        .get(0);
    assert_eq!(result, "RT502", "refused");
    tx.batch_execute("RESET ROLE").unwrap();
    let inside: i64 = tx
        .query_one("SELECT count(*) FROM audit", &[])
        .unwrap()
        .get(0);
    assert_eq!(
        inside, before,
        "the deletes are already undone inside the transaction"
    );
    tx.commit().unwrap();
    assert_eq!(scalar(&mut admin, "SELECT count(*) FROM audit"), before);
    assert_eq!(
        scalar(&mut admin, "SELECT count(*) FROM retention.archives"),
        0
    );
    // The batch is still claimed and completes with the right digest.
    assert_eq!(
        complete(&mut arch, &batch, &digest, rows, bytes).unwrap(),
        rows
    );
}
