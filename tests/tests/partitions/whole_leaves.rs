//! Whole leaves: an expired range leaf is dropped whole and ledgered with its exact row count,
//! and a policy on the partitioned table governs leaves created or attached after registration.

use super::*;

#[test]
fn an_expired_range_leaf_is_dropped_whole_and_ledgered_with_its_exact_row_count() {
    let c = Cluster::start(&[]);
    let (_, mut admin) = events(&c);
    policy(&mut admin, "");
    let expired_before = expired(&mut admin);
    let per_leaf = wholly_expired_rows(&mut admin);
    let in_default = count(&mut admin, "SELECT count(*) FROM ONLY events_default");
    assert!(
        in_default > 0,
        "rows older than the oldest leaf are in the default partition"
    );
    admin.batch_execute("CALL retention.run()").unwrap();

    let mut expected = per_leaf.clone();
    expected.sort();
    assert_eq!(
        drops(&mut admin),
        expected,
        "each wholly expired leaf dropped, with its exact row count"
    );
    for leaf in WHOLLY_EXPIRED {
        assert!(!exists(&mut admin, leaf), "{leaf} is dropped");
    }
    assert_eq!(expired(&mut admin), 0, "every expired row is gone");
    assert!(
        exists(&mut admin, "events_default"),
        "the default partition is never dropped"
    );
    assert_eq!(
        count(&mut admin, "SELECT count(*) FROM ONLY events_default"),
        0,
        "its rows are swept"
    );
    assert!(
        exists(&mut admin, "events_m5"),
        "the partly expired leaf stays"
    );
    let dropped: i64 = per_leaf.iter().map(|(_, n)| n).sum();
    let pruned = count(
        &mut admin,
        "SELECT coalesce(sum(rows), 0)::bigint FROM retention.ledger WHERE method = 'prune'",
    );
    assert_eq!(
        dropped + pruned,
        expired_before,
        "dropped and swept rows add up to the expired rows"
    );
    let run = admin
        .query_one(
            "SELECT rows, (detail->>'partitions_dropped')::int FROM retention.ledger WHERE method = 'run'",
            &[],
        )
        .unwrap();
    assert_eq!(run.get::<_, i64>(0), expired_before);
    assert_eq!(run.get::<_, i32>(1), 5);
    let detail: String = text(
        &mut admin,
        "SELECT detail->>'bound' FROM retention.ledger WHERE method = 'drop_partition' LIMIT 1",
    );
    assert!(detail.starts_with("FOR VALUES FROM ("), "{detail}");
    let proof: String = text(
        &mut admin,
        "SELECT detail->>'proof' FROM retention.ledger WHERE method = 'drop_partition' LIMIT 1",
    );
    assert_eq!(proof, "range_bound");
    assert_eq!(
        count(&mut admin, "SELECT count(*) FROM events"),
        288 - expired_before
    );
}

#[test]
fn a_policy_on_a_parent_sweeps_leaves_created_after_registration() {
    let c = Cluster::start(&[]);
    c.execute(
        "postgres",
        "CREATE TABLE m (id bigint NOT NULL, kind text NOT NULL, at timestamptz NOT NULL,
                         PRIMARY KEY (id, kind)) PARTITION BY LIST (kind);
         CREATE TABLE m_a PARTITION OF m FOR VALUES IN ('a');",
    );
    own_and_grant(&c, &["m"]);
    let (mut app, mut admin) = c.app_and_admin("postgres");
    admin
        .batch_execute(
            "SELECT retention.add_policy(name => 'm', relation => 'm', kind => 'age',
                age_column => 'at', older_than => '1 day', batch_size => 7);",
        )
        .unwrap();
    // After registration, by the superuser (DDL): one leaf created, one table attached, one
    // sub-partitioned leaf; handed to `admin` like the rest of the tree.
    c.execute(
        "postgres",
        "CREATE TABLE m_b PARTITION OF m FOR VALUES IN ('b');
         CREATE TABLE m_c (id bigint NOT NULL, kind text NOT NULL, at timestamptz NOT NULL,
                           PRIMARY KEY (id, kind));
         ALTER TABLE m ATTACH PARTITION m_c FOR VALUES IN ('c');
         CREATE TABLE m_d PARTITION OF m FOR VALUES IN ('d') PARTITION BY HASH (id);
         CREATE TABLE m_d0 PARTITION OF m_d FOR VALUES WITH (modulus 2, remainder 0);
         CREATE TABLE m_d1 PARTITION OF m_d FOR VALUES WITH (modulus 2, remainder 1);",
    );
    own_and_grant(&c, &["m"]);
    app.batch_execute(
        "INSERT INTO m SELECT g, k, now() - make_interval(hours => g) - interval '30 minutes'
           FROM generate_series(1, 60) g, unnest(ARRAY['a', 'b', 'c', 'd']) k;",
    )
    .unwrap();
    let expired = count(
        &mut admin,
        "SELECT count(*) FROM m WHERE at < now() - interval '1 day'",
    );
    assert_eq!(expired, 4 * 37);
    admin.batch_execute("CALL retention.run()").unwrap();
    assert_eq!(
        count(
            &mut admin,
            "SELECT count(*) FROM m WHERE at < now() - interval '1 day'"
        ),
        0
    );
    for leaf in ["m_a", "m_b", "m_c", "m_d0", "m_d1"] {
        assert!(
            exists(&mut admin, leaf),
            "{leaf}: a partly expired leaf is swept, not dropped"
        );
        assert!(
            count(
                &mut admin,
                &format!("SELECT count(*) FROM ONLY {leaf} WHERE at >= now() - interval '1 day'")
            ) > 0,
            "{leaf} keeps its young rows"
        );
    }
    assert_eq!(count(&mut admin, "SELECT count(*) FROM m"), 4 * 23);
    assert_eq!(
        count(
            &mut admin,
            "SELECT sum(rows)::bigint FROM retention.ledger WHERE method = 'prune'"
        ),
        expired
    );
    // A list leaf whose rows are all expired is dropped whole: every row was checked.
    c.execute(
        "postgres",
        "CREATE TABLE m_e PARTITION OF m FOR VALUES IN ('e');",
    );
    own_and_grant(&c, &["m"]);
    app.batch_execute(
        "INSERT INTO m SELECT g, 'e', now() - interval '3 days' FROM generate_series(1, 10) g;",
    )
    .unwrap();
    admin.batch_execute("CALL retention.run()").unwrap();
    assert!(!exists(&mut admin, "m_e"));
    assert_eq!(
        drops(&mut admin),
        vec![("public.m_e".to_owned(), 10)],
        "only the wholly expired list leaf is dropped"
    );
    let proof: String = text(
        &mut admin,
        "SELECT detail->>'proof' FROM retention.ledger WHERE method = 'drop_partition'",
    );
    assert_eq!(proof, "every_row");
}
