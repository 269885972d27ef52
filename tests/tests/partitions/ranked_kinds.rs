//! Ranked kinds on partitioned tables: keep_latest, versions and entity groups span leaves,
//! and no leaf is dropped whole by them.

use super::*;

#[test]
fn keep_latest_versions_and_entity_groups_span_leaves() {
    let c = Cluster::start(&[]);
    c.execute(
        "postgres",
        "CREATE TABLE runs (id int NOT NULL, src int NOT NULL, at timestamptz NOT NULL, PRIMARY KEY (id, at))
           PARTITION BY RANGE (at);
         CREATE TABLE runs_old PARTITION OF runs FOR VALUES FROM (MINVALUE) TO (now() - interval '50 hours');
         CREATE TABLE runs_new PARTITION OF runs FOR VALUES FROM (now() - interval '50 hours') TO (MAXVALUE);
         CREATE TABLE ver (id int NOT NULL, k int NOT NULL, at timestamptz NOT NULL, PRIMARY KEY (id, k))
           PARTITION BY LIST (k);
         CREATE TABLE ver_a PARTITION OF ver FOR VALUES IN (0, 1);
         CREATE TABLE ver_b PARTITION OF ver FOR VALUES IN (2) PARTITION BY RANGE (id);
         CREATE TABLE ver_b1 PARTITION OF ver_b FOR VALUES FROM (0) TO (50);
         CREATE TABLE ver_b2 PARTITION OF ver_b FOR VALUES FROM (50) TO (1000);
         CREATE TABLE ent (id int NOT NULL, e int NOT NULL, at timestamptz NOT NULL, PRIMARY KEY (id, at))
           PARTITION BY RANGE (at);
         CREATE TABLE ent_old PARTITION OF ent FOR VALUES FROM (MINVALUE) TO (now() - interval '45 days');
         CREATE TABLE ent_new PARTITION OF ent FOR VALUES FROM (now() - interval '45 days') TO (MAXVALUE);",
    );
    // Owned by `admin` too, so that only the kind keeps a leaf from being dropped whole.
    own_and_grant(&c, &["runs", "ver", "ent"]);
    let (mut app, mut admin) = c.app_and_admin("postgres");
    app.batch_execute(
        "INSERT INTO runs SELECT g, g % 4, now() - make_interval(hours => g) FROM generate_series(1, 100) g;
         INSERT INTO ver SELECT g, g % 3, now() - make_interval(days => g) FROM generate_series(1, 300) g;
         -- Group e has rows aged 40 + e and 50 + e days: across both leaves. Groups 0..9 expire
         -- (newest row older than 30 + 10 days... see below), the others keep a young row.
         INSERT INTO ent SELECT e * 10 + 1, e, now() - make_interval(days => 50 + e) FROM generate_series(0, 19) e;
         INSERT INTO ent SELECT e * 10 + 2, e, now() - make_interval(days => 31 + e) FROM generate_series(0, 19) e;",
    )
    .unwrap();
    admin
        .batch_execute(
            "SELECT retention.add_policy(name => 'kl', relation => 'runs', kind => 'keep_latest',
                group_by => ARRAY['src'], order_by => 'at', keep => 15, batch_size => 4);
         SELECT retention.add_policy(name => 'ver', relation => 'ver', kind => 'versions', group_by => ARRAY['k'],
                order_by => 'at', keep => 40, min_keep => 10, age_column => 'at', older_than => '100 days',
                batch_size => 9);
         SELECT retention.add_policy(name => 'ent', relation => 'ent', kind => 'entity', group_by => ARRAY['e'],
                age_column => 'at', older_than => '40 days', batch_size => 3);",
        )
        .unwrap();
    let preview: Vec<(String, i64)> = admin
        .query(
            "SELECT policy, would_delete FROM retention.preview() ORDER BY policy",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    admin.batch_execute("CALL retention.run()").unwrap();
    let per_group: Vec<i64> = admin
        .query("SELECT count(*) FROM runs GROUP BY src ORDER BY src", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(
        per_group,
        vec![15; 4],
        "keep_latest keeps exactly 15 per group across both leaves"
    );
    assert_eq!(
        count(&mut admin, "SELECT count(*) FROM (SELECT src, at, row_number() OVER (PARTITION BY src ORDER BY at DESC) rn FROM runs) x WHERE rn <= 15"),
        60,
        "the kept rows are each group's newest"
    );
    // versions: keep 40, or 10 when older than 100 days; k = 0..2 have 100 rows each.
    let kept: Vec<i64> = admin
        .query("SELECT count(*) FROM ver GROUP BY k ORDER BY k", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let expected: Vec<i64> = (0..3)
        .map(|k| {
            // Rows of k, newest first: days k', k'+3, ...; the 11th..40th survive only when younger than 100 days.
            let ages: Vec<i64> = (1..=300).filter(|g| g % 3 == k).collect();
            ages.iter()
                .enumerate()
                .filter(|(rank, age)| *rank < 10 || (*rank < 40 && **age < 100))
                .count() as i64
        })
        .collect();
    assert_eq!(
        kept, expected,
        "versions ranks each group across its leaves"
    );
    // entity: group e's newest row is 31 + e days old, so groups 9..19 are expired, whole.
    let groups: Vec<i32> = admin
        .query("SELECT DISTINCT e FROM ent ORDER BY e", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(
        groups,
        (0..=8).collect::<Vec<i32>>(),
        "expired groups go whole, from both leaves"
    );
    assert_eq!(
        count(&mut admin, "SELECT count(*) FROM ent"),
        18,
        "live groups keep both their rows"
    );
    for (policy, would_delete) in preview {
        let deleted = count(&mut admin, &format!("SELECT coalesce(sum(rows), 0)::bigint FROM retention.ledger WHERE method = 'prune' AND policy = '{policy}'"));
        assert_eq!(
            deleted, would_delete,
            "policy {policy}: preview equals the run"
        );
        assert!(deleted > 0, "{policy} had work");
    }
    assert!(
        drops(&mut admin).is_empty(),
        "only age policies drop leaves"
    );
}
