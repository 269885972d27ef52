//! Archiving partitioned tables: a delete policy cannot sit above an archive policy's leaf, and
//! archive_then_delete archives leaf by leaf, drops whole leaves, and restores every row gone.

use super::*;

#[test]
fn a_delete_policy_on_a_partitioned_table_with_an_archive_policy_on_a_leaf_is_refused() {
    let c = Cluster::start(&[]);
    let (_, mut admin) = events(&c);
    // An archive policy on one leaf, then a delete policy on the table above it: refused, the
    // delete policy could drop audit rows before they are archived; and the other way round.
    admin.batch_execute(
        "SELECT retention.add_policy(name => 'a', relation => 'events_m3', kind => 'age', age_column => 'created_at',
                older_than => '5 days', action => 'archive_then_delete', terminal => 'true')",
    )
    .unwrap();
    let (code, msg) = expect_error(
        &mut admin,
        "SELECT retention.add_policy(name => 'd', relation => 'events', kind => 'age', age_column => 'created_at',
                older_than => '5 days')",
    );
    assert_eq!(code, "RT102", "{msg}");
    admin
        .batch_execute("SELECT retention.drop_policy('a')")
        .unwrap();
    policy(&mut admin, "");
    let (code, msg) = expect_error(
        &mut admin,
        "SELECT retention.add_policy(name => 'a', relation => 'events_m3', kind => 'age', age_column => 'created_at',
                older_than => '5 days', action => 'archive_then_delete', terminal => 'true')",
    );
    assert_eq!(code, "RT102", "{msg}");
}

/// `events` under an archive policy (terminal: all rows but tenant 2's from 5 days ago at
/// midnight on, which are open), with `expected` a copy of the eligible rows; archived by `once` with batches of
/// `batch_rows` rows, then every slice verified and restored: the restored rows are exactly
/// the rows gone from the table. Returns the leaves dropped whole and the rows deleted one by
/// one (pruned).
fn archive_partitioned(batch_rows: &str) -> (Vec<String>, i64) {
    let c = Cluster::start(&[]);
    let (mut app, mut admin) = events(&c);
    app.batch_execute(
        "UPDATE events SET payload = 'open' WHERE tenant = 2 AND created_at >= date_trunc('day', now()) - interval '5 days';",
    )
    .unwrap();
    admin
        .batch_execute(
            "SELECT retention.add_policy(name => 'ev', relation => 'events', kind => 'age', age_column => 'created_at',
                older_than => '5 days', terminal => $$payload <> 'open'$$, action => 'archive_then_delete');",
        )
        .unwrap();
    // The test's own copy of the eligible rows: made by the superuser in set-up, granted.
    c.execute(
        "postgres",
        "CREATE TABLE expected AS SELECT * FROM events
          WHERE payload <> 'open' AND created_at < now() - interval '5 days';",
    );
    c.grant_app_and_admin("postgres");
    let want = count(&mut admin, "SELECT count(*) FROM expected");
    assert!(want > 100);
    // The fixpoint guard reaches every leaf: an eligible row cannot change.
    let (code, msg) = expect_error(
        &mut app,
        "UPDATE events SET payload = 'changed' WHERE id = 200",
    );
    assert_eq!(code, "RT501", "{msg}");
    let dir = pg_retention_integration::temp_dir("pg-retention-partitions");
    let a = Archiver::new(
        &c.archiver_url("postgres"),
        &format!("file://{}", dir.display()),
    );
    let o = a.run(&["once", "--batch-rows", batch_rows]);
    assert!(o.status.success(), "{}", archiver::text(&o));
    assert_eq!(
        count(&mut admin, "SELECT count(*) FROM events WHERE payload <> 'open' AND created_at < now() - interval '5 days'"),
        0,
        "every eligible row is archived and gone"
    );
    assert_eq!(
        count(
            &mut admin,
            "SELECT sum(deleted)::bigint FROM retention.archives"
        ),
        want
    );
    assert_eq!(
        count(&mut admin, "SELECT count(*) FROM events WHERE payload = 'open'"),
        count(&mut admin, "SELECT count(*) FROM events WHERE tenant = 2 AND created_at >= date_trunc('day', now()) - interval '5 days'"),
        "rows that are not terminal stay"
    );
    let o = a.run(&["verify", "--all"]);
    assert!(o.status.success(), "{}", archiver::text(&o));
    // Restores create tables: the restorer, not the archiver role; the restored tables are then
    // granted for the checks.
    let restored = a
        .clone()
        .with_database_url(&c.restorer_url("postgres"))
        .restore_all();
    c.grant_app_and_admin("postgres");
    assert_eq!(
        count(&mut admin, &format!("SELECT count(*) FROM ({restored}) r")),
        want
    );
    assert_eq!(
        count(
            &mut admin,
            &format!("SELECT count(*) FROM (SELECT * FROM expected EXCEPT ALL ({restored})) d")
        ),
        0,
        "the restored rows are exactly the rows archived and gone"
    );
    let dropped: Vec<(String, i64, bool)> = admin
        .query(
            "SELECT l.detail->>'partition', l.rows, a.deleted = l.rows
               FROM retention.ledger l JOIN retention.archives a ON a.id = l.archive_id
              WHERE l.method = 'drop_partition' ORDER BY 1",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    for (leaf, rows, same) in &dropped {
        assert!(
            same,
            "{leaf}: the drop rests on an archive of exactly its {rows} rows"
        );
        assert!(
            !exists(&mut admin, leaf.trim_start_matches("public.")),
            "{leaf} is dropped"
        );
    }
    assert!(
        exists(&mut admin, "events_default"),
        "the default partition is never dropped"
    );
    let pruned = count(
        &mut admin,
        "SELECT coalesce(sum(rows), 0)::bigint FROM retention.ledger WHERE method = 'prune'",
    );
    let dropped_rows: i64 = dropped.iter().map(|d| d.1).sum();
    assert_eq!(
        pruned + dropped_rows,
        want,
        "each archived row went by a prune or a drop"
    );
    let _ = std::fs::remove_dir_all(&dir);
    (dropped.into_iter().map(|d| d.0).collect(), pruned)
}

#[test]
fn archive_then_drop_restores_equal_to_the_dropped_rows() {
    // Batches of up to 100 rows hold a whole day's leaf (24 rows): every wholly expired leaf is
    // archived in one batch and dropped.
    let (dropped, pruned) = archive_partitioned("100");
    assert_eq!(sorted(dropped), public(&WHOLLY_EXPIRED));
    assert!(
        pruned > 0,
        "the partly expired leaf and the default partition are pruned by rows"
    );
}

#[test]
fn archive_then_delete_on_a_partitioned_table_archives_leaf_by_leaf() {
    // Batches of 10 rows: a leaf's first two batches are archived and deleted, and the leaf goes
    // with the batch that holds its last 4 rows.
    let (dropped, pruned) = archive_partitioned("10");
    assert_eq!(sorted(dropped), public(&WHOLLY_EXPIRED));
    assert!(
        pruned >= 5 * 20,
        "each expired leaf's first 20 rows were deleted ({pruned})"
    );
}
