//! The prune's proof by row version and place: table rewrites (moving rows or not), keyless
//! batches named by place, a new row in a claimed row's place.

use super::*;

/// Rows are read back where the claim found them: after a table rewrite moved them, the
/// batch's rows are not there (or other rows are), so complete refuses and deletes nothing.
#[test]
fn a_table_rewritten_after_the_claim_makes_complete_refuse() {
    let c = Cluster::start(&[]);
    let (mut app, mut admin, mut arch) = audit(&c, 100);
    let batch = claim(&mut arch, 10).unwrap();
    let (_, digest, rows, bytes) = slice(&mut arch, &batch);
    // Free the first pages, then rewrite: every row moves (VACUUM FULL is the table owner's: the
    // superuser's).
    app.batch_execute("DELETE FROM audit WHERE id <= 30")
        .unwrap();
    c.execute("postgres", "VACUUM FULL audit");
    let before = scalar(&mut admin, "SELECT count(*) FROM audit");
    let err = complete(&mut arch, &batch, &digest, rows, bytes).unwrap_err();
    let db_err = err.as_db_error().expect("a database error");
    assert_eq!(db_err.code().code(), "RT502", "{db_err:?}");
    assert_eq!(scalar(&mut admin, "SELECT count(*) FROM audit"), before);
    arch.execute(
        "SELECT retention.release_batch($1::text::uuid, 'rewritten')",
        &[&batch],
    )
    .unwrap();
    let again = claim(&mut arch, 10).unwrap();
    assert_eq!(batch_ids(&mut arch, &again).first(), Some(&31));
}

/// A table without a primary key: a batch names its rows by their claim-time places, in
/// storage order; identical rows are distinct rows. An update of a claimed row, or a rewrite
/// that moves rows (keeping their xmin), makes the prune refuse and delete nothing; claimed
/// again, the batch prunes exactly its rows.
#[test]
fn a_keyless_batch_is_named_by_place_and_its_prune_proves_the_versions() {
    let c = Cluster::start(&[]);
    let (mut app, mut admin, mut arch) = set_up(
        &c,
        "CREATE TABLE audit (status text NOT NULL, closed_at timestamptz, note text);",
    );
    // Every row twice: 40 identical pairs, all eligible.
    app.batch_execute(
        "INSERT INTO audit SELECT 'closed', now() - interval '60 days', 'n' || g
           FROM generate_series(1, 40) g, generate_series(1, 2) twice",
    )
    .unwrap();
    admin
        .batch_execute(
            "SELECT retention.add_policy(name => 'audit', relation => 'audit', kind => 'age', age_column => 'closed_at',
                older_than => '30 days', terminal => $$status = 'closed'$$, action => 'archive_then_delete');",
        )
        .unwrap();
    let batch = claim(&mut arch, 10).unwrap();
    let (bytes, digest, rows, nbytes) = slice(&mut arch, &batch);
    let keys: Vec<String> = decode_frames(&bytes)
        .unwrap()
        .iter()
        .map(|r| r.key[0].clone().unwrap())
        .collect();
    let first_places: Vec<String> = admin
        .query(
            "SELECT ctid::text AS place FROM audit ORDER BY ctid LIMIT 10",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(
        keys, first_places,
        "keys are the claimed rows' places, in order"
    );

    // A superuser bypasses the guard trigger (session_replication_role is a superuser's).
    c.execute("postgres", "SET session_replication_role = replica; UPDATE audit SET note = 'changed' WHERE ctid = '(0,3)'; RESET session_replication_role");
    let err = complete(&mut arch, &batch, &digest, rows, nbytes).unwrap_err();
    assert_eq!(err.code().map(|c| c.code()), Some("RT502"), "{err}");
    assert_eq!(scalar(&mut admin, "SELECT count(*) FROM audit"), 80);
    arch.batch_execute(&format!(
        "SELECT retention.release_batch('{batch}', 'refused: rows changed', 'refused')"
    ))
    .unwrap();

    // Rows freed ahead of the batch, then a rewrite: rows move to other places, xmin kept.
    let batch = claim(&mut arch, 10).unwrap();
    let (_, digest, rows, nbytes) = slice(&mut arch, &batch);
    app.batch_execute("DELETE FROM audit WHERE note IN ('n1', 'n2')")
        .unwrap();
    c.execute("postgres", "VACUUM FULL audit");
    let err = complete(&mut arch, &batch, &digest, rows, nbytes).unwrap_err();
    assert_eq!(err.code().map(|c| c.code()), Some("RT502"), "{err}");
    let left = scalar(&mut admin, "SELECT count(*) FROM audit");
    assert_eq!(left, 76);
    arch.batch_execute(&format!(
        "SELECT retention.release_batch('{batch}', 'rewritten', 'refused')"
    ))
    .unwrap();

    // Claimed again: the prune deletes exactly the rendered rows, duplicates counted apart.
    let batch = claim(&mut arch, 10).unwrap();
    let (bytes, digest, rows, nbytes) = slice(&mut arch, &batch);
    let notes: Vec<String> = decode_frames(&bytes)
        .unwrap()
        .iter()
        .map(|r| r.columns[2].clone().unwrap())
        .collect();
    assert_eq!(
        complete(&mut arch, &batch, &digest, rows, nbytes).unwrap(),
        10
    );
    assert_eq!(scalar(&mut admin, "SELECT count(*) FROM audit"), left - 10);
    for note in notes.iter().collect::<std::collections::BTreeSet<_>>() {
        let archived = notes.iter().filter(|n| *n == note).count() as i64;
        let stays = scalar(
            &mut admin,
            &format!("SELECT count(*) FROM audit WHERE note = '{note}'"),
        );
        assert_eq!(stays, 2 - archived, "{note}: each archived copy left once");
    }
}

/// A rewrite that leaves every row where it was (nothing to compact) still gives the table a
/// new relfilenode, and the prune refuses: the proof is by row version in the claimed storage.
#[test]
fn a_rewrite_that_moves_no_row_makes_complete_refuse() {
    let c = Cluster::start(&[]);
    let (_, mut admin, mut arch) = audit(&c, 100);
    let places = |db: &mut Client| -> Vec<String> {
        db.query(
            "SELECT ctid::text || ':' || xmin::text FROM audit ORDER BY id",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
    };
    let before = places(&mut admin);
    let batch = claim(&mut arch, 10).unwrap();
    let (_, digest, rows, bytes) = slice(&mut arch, &batch);
    // VACUUM FULL is the table owner's: the superuser's.
    c.execute("postgres", "VACUUM FULL audit");
    assert_eq!(
        places(&mut admin),
        before,
        "the rewrite moved rows; the test needs it not to"
    );
    let err = complete(&mut arch, &batch, &digest, rows, bytes).unwrap_err();
    let db_err = err.as_db_error().expect("a database error");
    assert_eq!(db_err.code().code(), "RT502", "{db_err:?}");
    assert!(db_err.message().contains("relfilenode"), "{db_err:?}");
    assert_eq!(scalar(&mut admin, "SELECT count(*) FROM audit"), 100);
}

/// A claimed row deleted and its place taken by a new row with the same key (after a vacuum
/// freed it) is another version: its xmin differs, and the prune refuses and deletes nothing.
#[test]
fn a_new_row_in_a_claimed_rows_place_with_its_key_makes_complete_refuse() {
    let c = Cluster::start(&[]);
    let (mut app, mut admin, mut arch) = audit(&c, 100);
    let batch = claim(&mut arch, 10).unwrap();
    let (_, digest, rows, bytes) = slice(&mut arch, &batch);
    let place = |db: &mut Client| -> String {
        db.query_one("SELECT ctid::text FROM audit WHERE id = 33", &[])
            .unwrap()
            .get(0)
    };
    let was = place(&mut admin);
    app.batch_execute("DELETE FROM audit WHERE id = 33")
        .unwrap();
    // VACUUM is the table owner's: the superuser's.
    c.execute("postgres", "VACUUM audit");
    app.batch_execute(
        "INSERT INTO audit SELECT 33, 'closed', closed_at, 'another row' FROM audit WHERE id = 34",
    )
    .unwrap();
    assert_eq!(
        place(&mut admin),
        was,
        "the new row went elsewhere; the test needs it in the old place"
    );
    let err = complete(&mut arch, &batch, &digest, rows, bytes).unwrap_err();
    let db_err = err.as_db_error().expect("a database error");
    assert_eq!(db_err.code().code(), "RT502", "{db_err:?}");
    assert!(
        db_err.message().contains("other row versions"),
        "{db_err:?}"
    );
    assert_eq!(scalar(&mut admin, "SELECT count(*) FROM audit"), 100);
    assert_eq!(
        scalar(
            &mut admin,
            "SELECT count(*) FROM audit WHERE note = 'another row'"
        ),
        1
    );
}
