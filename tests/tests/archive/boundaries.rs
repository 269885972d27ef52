//! What each path and role may do: the delete path never touches archive-policy rows, and the
//! archiver role runs the protocol and nothing else.

use super::*;

#[test]
fn the_delete_path_never_touches_archive_policy_rows() {
    let c = Cluster::start(&[]);
    let (_, mut admin, mut arch) = audit(&c, 100);
    let preview = admin
        .query_one(
            "SELECT would_delete, backlog, archive_bytes_estimate FROM retention.preview('audit')",
            &[],
        )
        .unwrap();
    assert_eq!(preview.get::<_, i64>(0), 0);
    let backlog: i64 = preview.get(1);
    assert!(backlog > 0);
    // The estimate comes from real frames: close to the real slice of all deletable rows.
    let estimate: i64 = preview.get::<_, Option<i64>>(2).unwrap();
    let batch = claim(&mut arch, 1000).unwrap();
    let (_, _, rows, bytes) = slice(&mut arch, &batch);
    assert_eq!(rows, backlog);
    assert!(
        (estimate - bytes).abs() * 10 < bytes,
        "estimate {estimate} vs real {bytes}"
    );
    arch.batch_execute(&format!(
        "SELECT retention.release_batch('{batch}', 'test')"
    ))
    .unwrap();
    admin.batch_execute("CALL retention.run()").unwrap();
    assert_eq!(scalar(&mut admin, "SELECT count(*) FROM audit"), 100);
}

#[test]
fn the_archiver_role_runs_the_protocol_and_nothing_else() {
    let c = Cluster::start(&[]);
    let (mut app, mut admin, mut arch) = audit(&c, 100);
    let batch = claim(&mut arch, 5).unwrap();
    let (_, digest, rows, bytes) = slice(&mut arch, &batch);
    assert_eq!(
        complete(&mut arch, &batch, &digest, rows, bytes).unwrap(),
        5
    );
    for sql in [
        "SELECT retention.add_policy(name => 'x', relation => 'audit', kind => 'age', age_column => 'closed_at', older_than => '1 day')",
        "SELECT retention.place_hold('audit', 'true', 'r', 'a')",
        "DELETE FROM audit",
        "SELECT count(*) FROM audit",
        "CALL retention.run()",
    ] {
        let (code, _) = expect_error(&mut arch, sql);
        assert_eq!(code, "42501", "{sql}");
    }
    // Neither the application nor a retention administrator may claim.
    for db in [&mut app, &mut admin] {
        let (code, _) = expect_error(db, "SELECT retention.claim_batch('audit')");
        assert_eq!(code, "42501", "only the archiver role may claim");
    }
}
