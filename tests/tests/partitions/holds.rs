//! Holds: a leaf with a held row is swept row by row, not dropped; a hold on the partitioned
//! table reaches every leaf, a hold on a leaf only that leaf.

use super::*;

#[test]
fn a_leaf_with_one_held_row_is_row_swept_and_its_held_row_survives() {
    let c = Cluster::start(&[]);
    let (_, mut admin) = events(&c);
    policy(&mut admin, "");
    // Row 200 is 200 hours (8+ days) old: in events_m9 or events_m8, depending on the hour.
    let leaf: String = text(
        &mut admin,
        "SELECT tableoid::regclass::text FROM events WHERE id = 200",
    );
    let hold: i64 = scalar(
        &mut admin,
        &format!("SELECT retention.place_hold('{leaf}', 'id = 200', 'case 7', 'legal')"),
    );
    let held_leaf_rows = count(&mut admin, &format!("SELECT count(*) FROM ONLY {leaf}"));
    admin.batch_execute("CALL retention.run()").unwrap();
    assert!(
        exists(&mut admin, &leaf),
        "a leaf holding a held row is never dropped"
    );
    assert_eq!(
        count(&mut admin, &format!("SELECT count(*) FROM ONLY {leaf}")),
        1
    );
    assert_eq!(
        count(&mut admin, "SELECT count(*) FROM events WHERE id = 200"),
        1,
        "the held row survives"
    );
    assert_eq!(expired(&mut admin), 1, "every other expired row is gone");
    let others: Vec<&str> = WHOLLY_EXPIRED
        .iter()
        .copied()
        .filter(|l| *l != leaf)
        .collect();
    assert_eq!(
        sorted(drops(&mut admin).into_iter().map(|d| d.0).collect()),
        public(&others)
    );
    assert_eq!(
        count(&mut admin, &format!("SELECT rows FROM retention.ledger WHERE method = 'hold_skip' AND hold_ids = ARRAY[{hold}::bigint]")),
        1
    );
    assert!(held_leaf_rows > 1);
}

#[test]
fn a_hold_on_the_parent_protects_rows_in_every_leaf_and_a_hold_on_a_leaf_only_that_leaf() {
    let c = Cluster::start(&[]);
    let (_, mut admin) = events(&c);
    // Placed by someone else than the policy's owner: evaluated as its placer, row by row.
    // `legal` is made by the superuser in set-up (roles are the cluster's).
    c.execute(
        "postgres",
        "CREATE ROLE legal LOGIN; GRANT retention_admin TO legal; GRANT SELECT ON events, events_m7 TO legal;",
    );
    policy(&mut admin, "");
    let mut legal = c.connect_as("postgres", "legal");
    legal
        .batch_execute(
            "SELECT retention.place_hold('events', 'tenant = 1', 'parent hold', 'legal')",
        )
        .unwrap();
    legal
        .batch_execute(
            "SELECT retention.place_hold('events_m7', 'tenant = 2', 'leaf hold', 'legal')",
        )
        .unwrap();
    let tenant1 = count(
        &mut admin,
        "SELECT count(*) FROM events WHERE tenant = 1 AND created_at < now() - interval '5 days'",
    );
    let m7_tenant2 = count(
        &mut admin,
        "SELECT count(*) FROM ONLY events_m7 WHERE tenant = 2",
    );
    assert!(tenant1 > 0 && m7_tenant2 > 0);
    let preview = admin
        .query_one(
            "SELECT held, partitions_to_drop FROM retention.preview('events')",
            &[],
        )
        .unwrap();
    assert_eq!(preview.get::<_, i64>(0), tenant1 + m7_tenant2);
    assert_eq!(preview.get::<_, i64>(1), 0, "every leaf has held rows");
    admin.batch_execute("CALL retention.run()").unwrap();
    assert!(
        drops(&mut admin).is_empty(),
        "no leaf with held rows is dropped"
    );
    assert_eq!(
        expired(&mut admin),
        tenant1 + m7_tenant2,
        "exactly the held rows remain: tenant 1 everywhere, tenant 2 only in events_m7"
    );
    assert_eq!(
        count(&mut admin, "SELECT count(*) FROM events WHERE tenant = 2 AND created_at < now() - interval '5 days' AND tableoid <> 'events_m7'::regclass"),
        0,
        "the leaf hold does not reach other leaves"
    );
    assert_eq!(
        count(
            &mut admin,
            "SELECT sum(rows)::bigint FROM retention.ledger WHERE method = 'hold_skip'"
        ),
        tenant1 + m7_tenant2
    );
}
