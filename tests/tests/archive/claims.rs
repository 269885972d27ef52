//! Claiming batches: the walk forward and back for released rows, the gaps between live batches,
//! concurrent claims, expired leases, a predicate failing mid-claim.

use super::*;

/// Claims continue after the policy's last batch, and rows behind it (a released batch) are
/// claimed once a claim from there finds nothing: every eligible row is claimed exactly once.
#[test]
fn claims_walk_forward_and_come_back_for_released_rows() {
    let c = Cluster::start(&[]);
    let (_, mut admin, mut arch) = audit(&c, 100); // ids 31..100 not multiple of 5: 56 eligible rows
    let eligible = scalar(
        &mut admin,
        "SELECT count(*) FROM audit WHERE status = 'closed' AND closed_at < now() - interval '30 days'",
    );
    assert_eq!(eligible, 56);
    let a = claim(&mut arch, 20).unwrap();
    let b = claim(&mut arch, 20).unwrap();
    let (ids_a, ids_b) = (batch_ids(&mut arch, &a), batch_ids(&mut arch, &b));
    assert!(
        ids_a.iter().max() < ids_b.iter().min(),
        "b continues after a"
    );
    arch.execute(
        "SELECT retention.release_batch($1::text::uuid, 'test')",
        &[&a],
    )
    .unwrap();
    let mut seen = ids_b.clone();
    while let Some(next) = claim(&mut arch, 20) {
        seen.extend(batch_ids(&mut arch, &next));
        assert!(seen.len() <= 56, "no row claimed twice: {seen:?}");
    }
    seen.sort();
    let mut want = ids_a;
    want.extend(ids_b);
    want.extend(
        admin.query(
            "SELECT id FROM audit WHERE status = 'closed' AND closed_at < now() - interval '30 days'",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get::<_, i64>(0)),
    );
    want.sort();
    want.dedup();
    assert_eq!(seen, want, "every eligible row claimed exactly once");
}

/// A claim starts after the policy's previous batch even when it was pruned: a row behind it
/// that became eligible later waits until a claim from there finds nothing, then is claimed.
#[test]
fn a_claim_starts_after_the_last_batch_and_reaches_rows_behind_it_last() {
    let c = Cluster::start(&[]);
    let (mut app, _, mut arch) = audit(&c, 100);
    let first = claim(&mut arch, 10).unwrap();
    assert_eq!(batch_ids(&mut arch, &first).last(), Some(&42));
    let (_, digest, rows, bytes) = slice(&mut arch, &first);
    assert_eq!(
        complete(&mut arch, &first, &digest, rows, bytes).unwrap(),
        10
    );
    // Row 35 (open until now) closes long ago: eligible, but behind the last batch.
    app.batch_execute(
        "UPDATE audit SET status = 'closed', closed_at = now() - interval '35 days' WHERE id = 35",
    )
    .unwrap();
    let next = claim(&mut arch, 10).unwrap();
    let ids = batch_ids(&mut arch, &next);
    assert_eq!(
        ids.first(),
        Some(&43),
        "continues after the pruned batch: {ids:?}"
    );
    let mut later = Vec::new();
    while let Some(b) = claim(&mut arch, 10) {
        later.push(batch_ids(&mut arch, &b));
    }
    assert_eq!(
        later.last(),
        Some(&vec![35]),
        "row 35 comes last, once: {later:?}"
    );
    assert!(later[..later.len() - 1]
        .iter()
        .flatten()
        .all(|&id| id != 35));
}

/// With a hundred live batches, a claim that starts over from the lowest key walks the gaps
/// between them: it takes exactly the rows of a released batch in the middle, stops at the next
/// live batch (a batch never spans one), and says there may be more.
#[test]
fn a_claim_among_a_hundred_live_batches_takes_the_gap_between_them() {
    let c = Cluster::start(&[]);
    let (_, _, mut arch) = audit(&c, 2000);
    let batches: Vec<String> = (0..100).map(|_| claim(&mut arch, 10).unwrap()).collect();
    let middle = batch_ids(&mut arch, &batches[49]);
    for b in [&batches[49], &batches[99]] {
        arch.execute(
            "SELECT retention.release_batch($1::text::uuid, 'test')",
            &[b],
        )
        .unwrap();
    }
    // The latest batch was released: the next claim starts from the lowest key.
    let row = arch
        .query_one(
            "SELECT c.batch::text, c.more FROM retention.claim_slice('audit', 1000, '10 minutes', NULL, false) c",
            &[],
        )
        .unwrap();
    let (again, more): (String, bool) = (row.get(0), row.get(1));
    assert_eq!(batch_ids(&mut arch, &again), middle, "exactly the gap");
    assert!(more, "a live batch bounded the gap");
    let next = claim(&mut arch, 1000).unwrap();
    let after: Vec<i64> = batch_ids(&mut arch, &next);
    let last_live = *batch_ids(&mut arch, &batches[98]).last().unwrap();
    assert!(
        after.iter().all(|&id| id > last_live),
        "then the rows after every live batch"
    );
    // retention.batches is a catalog table no role is granted: the superuser reads it.
    assert_eq!(
        scalar(
            &mut c.connect("postgres"),
            "SELECT count(*) FROM retention.batches WHERE state = 'claimed'"
        ),
        100
    );
}

#[test]
fn concurrent_claims_never_overlap() {
    let c = Cluster::start(&[]);
    let (_, mut admin, mut arch) = audit(&c, 200);
    let mut a = archiver(&c);
    let mut ta = a.transaction().unwrap();
    let first: Option<String> = ta
        .query_one("SELECT retention.claim_batch('audit', 20)::text", &[])
        .unwrap()
        .get(0);
    // The first claim is not committed yet: the second waits for its turn, then starts after
    // the first batch.
    let url = c.archiver_url("postgres");
    let second = std::thread::spawn(move || {
        let mut b = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        let mut tb = b.transaction().unwrap();
        let second: Option<String> = tb
            .query_one("SELECT retention.claim_batch('audit', 20)::text", &[])
            .unwrap()
            .get(0);
        tb.commit().unwrap();
        second
    });
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert!(!second.is_finished(), "the second claim did not wait");
    assert_eq!(
        scalar(
            &mut admin,
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
        ),
        1
    );
    ta.commit().unwrap();
    let second = second.join().unwrap();
    let (first, second) = (first.unwrap(), second.unwrap());
    let x = batch_ids(&mut arch, &first);
    let y = batch_ids(&mut arch, &second);
    assert_eq!((x.len(), y.len()), (20, 20));
    assert!(
        x.iter().all(|id| !y.contains(id)),
        "batches overlap: {x:?} / {y:?}"
    );
    let third = claim(&mut arch, 1000).unwrap();
    let z = batch_ids(&mut arch, &third);
    assert!(z.iter().all(|id| !x.contains(id) && !y.contains(id)));
    // A claim needs to see the batches committed while it waited: not in REPEATABLE READ.
    let (code, _) = expect_error(
        &mut arch,
        "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT retention.claim_batch('audit', 20); COMMIT",
    );
    arch.batch_execute("ROLLBACK").unwrap();
    assert_eq!(code, "55000");
}

#[test]
fn an_expired_lease_is_claimable_again_and_its_old_batch_cannot_complete() {
    let c = Cluster::start(&[]);
    let (_, mut admin, mut arch) = audit(&c, 100);
    let old: String = arch
        .query_one(
            "SELECT retention.claim_batch('audit', 10, '1 second', 'archiver-a')::text",
            &[],
        )
        .unwrap()
        .get(0);
    let (_, digest, rows, bytes) = slice(&mut arch, &old);
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let new: String = arch
        .query_one(
            "SELECT retention.claim_batch('audit', 10, '1 minute', 'archiver-b')::text",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(
        batch_ids(&mut arch, &new),
        vec![31, 32, 33, 34, 36, 37, 38, 39, 41, 42],
        "the same rows, re-claimed"
    );
    let err = complete(&mut arch, &old, &digest, rows, bytes).unwrap_err();
    assert_eq!(err.code().map(|c| c.code()), Some("RT503"), "{err}");
    let err = arch
        .query_one(
            "SELECT retention.complete_batch($1::text::uuid, 'k', $2, $3, $4, 'archiver-a')",
            &[&new, &digest, &rows, &bytes],
        )
        .unwrap_err();
    assert_eq!(
        err.code().map(|c| c.code()),
        Some("RT503"),
        "another owner cannot complete it"
    );
    assert_eq!(complete(&mut arch, &new, &digest, rows, bytes).unwrap(), 10);
    assert_eq!(
        scalar(
            &mut admin,
            "SELECT count(*) FROM retention.ledger WHERE method = 'lease_expired'"
        ),
        1
    );
}

/// A claim renders its rows as the executor produces them: a predicate that fails on a row in
/// the middle of the batch (after earlier rows were rendered) fails the claim with its own
/// error, claims nothing, and the session claims normally once the predicate is mended.
#[test]
fn a_predicate_failing_mid_claim_fails_the_claim_with_its_error_and_claims_nothing() {
    let c = Cluster::start(&[]);
    let (mut app, _, mut arch) = set_up(
        &c,
        "CREATE FUNCTION audit_ok(bigint) RETURNS boolean LANGUAGE sql IMMUTABLE AS 'SELECT true';
         CREATE TABLE audit (id bigint PRIMARY KEY, status text NOT NULL, closed_at timestamptz, note text);",
    );
    app.batch_execute(
        "INSERT INTO audit SELECT g, 'closed', now() - make_interval(days => 100 + g), 'note ' || g
           FROM generate_series(1, 50) g;",
    )
    .unwrap();
    // A terminal predicate calling a user function is the table owner's (or a superuser's) to
    // register: for anyone else it would run in every writer's CHECK (RT101, docs/security.md,
    // "The fixpoint CHECK constraint"). So the superuser, who owns the table, adds this policy.
    c.execute(
        "postgres",
        "SELECT retention.add_policy(name => 'audit', relation => 'audit', kind => 'age', age_column => 'closed_at',
                older_than => '30 days', terminal => $$status = 'closed' AND public.audit_ok(id)$$,
                action => 'archive_then_delete');",
    );
    // Replacing the function is its owner's: the superuser's.
    c.execute(
        "postgres",
        "CREATE OR REPLACE FUNCTION audit_ok(bigint) RETURNS boolean LANGUAGE plpgsql AS $$
         BEGIN
             IF $1 = 20 THEN RAISE EXCEPTION 'no row 20' USING ERRCODE = '22012'; END IF;
             RETURN true;
         END $$;",
    );
    let claim = "SELECT c.batch FROM retention.claim_slice('audit', 30, '10 minutes', 'a', true) c";
    let (state, message) = expect_error(&mut arch, claim);
    assert_eq!((state.as_str(), message.as_str()), ("22012", "no row 20"));
    // retention.batches is a catalog table no role is granted: the superuser reads it.
    let mut su = c.connect("postgres");
    assert_eq!(scalar(&mut su, "SELECT count(*) FROM retention.batches"), 0);
    c.execute(
        "postgres",
        "CREATE OR REPLACE FUNCTION audit_ok(bigint) RETURNS boolean LANGUAGE sql IMMUTABLE AS 'SELECT true'",
    );
    let row = arch
        .query_one(
            "SELECT c.batch::text, length(c.slice) FROM retention.claim_slice('audit', 30, '10 minutes', 'a', true) c",
            &[],
        )
        .unwrap();
    let (batch, bytes): (Option<String>, Option<i32>) = (row.get(0), row.get(1));
    assert!(bytes.unwrap_or(0) > 0);
    assert_eq!(
        scalar(
            &mut su,
            &format!(
                "SELECT rows FROM retention.batches WHERE id = '{}'",
                batch.unwrap_or_default()
            )
        ),
        30
    );
}
