//! Partitioned tables: a policy on the partitioned table governs every leaf (also leaves added
//! later), expired range leaves are dropped whole and ledgered with their exact row counts,
//! holds on the table or on one leaf keep their rows, foreign keys and default partitions keep
//! leaves from being dropped, ranked kinds group across leaves, preview names the leaves the
//! next run drops, a drop never waits behind a long transaction, and pg_partman's trees are
//! retired while pg_partman premakes new leaves.
//!
//! Production roles throughout: tables and partitions are made by the superuser in set-up and
//! handed to `admin` (a whole leaf is dropped only by a policy owner who is a member of the
//! leaf's owner, and detached first only by one who is also a member of the partitioned
//! table's: docs/security.md; `admin` stays a member of `retention_admin` only, not a
//! superuser), application rows are written by `app` (table privileges only), every
//! `retention.*` call is made by `admin`, who also reads the results, and the archiver runs as
//! `archiver` (only in `retention_archiver`) and restores as `restorer`
//! (`Cluster::archiver_url`, `Cluster::restorer_url`). The superuser stays only where a test
//! needs it, commented: DDL mid-test, event triggers that stand in for a failing or stalled
//! `DROP TABLE`, reading `retention.retiring_leaves` (a catalog table no role is granted), and
//! pg_partman's own configuration and maintenance.

use pg_retention_integration::archiver::{self, Archiver};
use pg_retention_integration::{
    column, drops, expect_error, no_event_trigger, on_drop_table, scalar, text, Cluster,
};
use postgres::Client;
use std::time::Duration;

/// Hands each partitioned table of `parents`, with every partition under it now, to `admin`,
/// then grants every table of schema `public` to `app` and `admin` (`Cluster::grant_app_and_admin`;
/// call again after making more). Run by the superuser, who made them in set-up: in production a
/// partitioned table and its leaves belong to the role that owns their policy, or the engine
/// sweeps expired leaves row by row instead of dropping them (docs/security.md).
fn own_and_grant(c: &Cluster, parents: &[&str]) {
    c.grant_app_and_admin("postgres");
    for parent in parents {
        c.execute(
            "postgres",
            &format!(
                "DO $$
                 DECLARE r regclass;
                 BEGIN
                     FOR r IN SELECT relid FROM pg_partition_tree('{parent}') LOOP
                         EXECUTE format('ALTER TABLE %s OWNER TO admin', r);
                     END LOOP;
                 END $$;"
            ),
        );
    }
}

/// `events`, partitioned by day on `created_at`: one leaf per day from 10 days ago to tomorrow
/// (`events_m10` … `events_p1`, bounds at midnight), a default partition, and 288 rows, row i
/// created i hours ago (rows 241..288, 10 to 12 days old, land in the default partition),
/// tenant = i % 3. Made by the superuser and handed to `admin`, the rows written by `app`;
/// returns connections as `app` and as `admin`.
fn events(c: &Cluster) -> (Client, Client) {
    c.execute(
        "postgres",
        "CREATE TABLE events (id bigint NOT NULL, tenant int NOT NULL, created_at timestamptz NOT NULL,
                              payload text, PRIMARY KEY (id, created_at)) PARTITION BY RANGE (created_at);
         DO $$
         BEGIN
             FOR d IN -10..1 LOOP
                 EXECUTE format('CREATE TABLE %I PARTITION OF events FOR VALUES FROM (%L) TO (%L)',
                                'events_' || CASE WHEN d < 0 THEN 'm' || -d ELSE 'p' || d END,
                                date_trunc('day', now()) + d * interval '1 day',
                                date_trunc('day', now()) + (d + 1) * interval '1 day');
             END LOOP;
         END $$;
         CREATE TABLE events_default PARTITION OF events DEFAULT;",
    );
    own_and_grant(c, &["events"]);
    let (mut app, admin) = c.app_and_admin("postgres");
    // One row an hour, each at the hour's last second: a day's youngest row is at 23:59:59, so
    // the leaf of 5 days ago always holds a row younger than the 5-day cutoff (with rows at
    // now() - g hours, after 23:00 every row of it was older, and it went whole).
    app.batch_execute(
        "INSERT INTO events SELECT g, g % 3, date_trunc('hour', now()) - make_interval(hours => g)
                                             + interval '59 minutes 59 seconds', repeat('x', 20)
           FROM generate_series(1, 288) g;",
    )
    .unwrap();
    (app, admin)
}

fn policy(db: &mut Client, extra: &str) {
    db.batch_execute(&format!(
        "SELECT retention.add_policy(name => 'events', relation => 'events', kind => 'age',
                age_column => 'created_at', older_than => '5 days', batch_size => 50 {extra})"
    ))
    .unwrap();
}

fn count(db: &mut Client, sql: &str) -> i64 {
    scalar(db, sql)
}

fn expired(db: &mut Client) -> i64 {
    count(
        db,
        "SELECT count(*) FROM events WHERE created_at < now() - interval '5 days'",
    )
}

/// The leaves whose whole day lies before the 5-day cutoff, whatever the time of day:
/// 10 to 6 days ago.
const WHOLLY_EXPIRED: [&str; 5] = [
    "events_m10",
    "events_m9",
    "events_m8",
    "events_m7",
    "events_m6",
];

fn exists(db: &mut Client, table: &str) -> bool {
    count(
        db,
        &format!("SELECT count(*) FROM pg_class WHERE relname = '{table}'"),
    ) == 1
}

/// (partition, rows) of each wholly expired leaf now, in the ledger's naming.
fn wholly_expired_rows(db: &mut Client) -> Vec<(String, i64)> {
    WHOLLY_EXPIRED
        .iter()
        .map(|l| {
            let n = count(db, &format!("SELECT count(*) FROM ONLY {l}"));
            (format!("public.{l}"), n)
        })
        .collect()
}

/// (partition, rows) of every `drop_partition` ledger record, by partition name.
fn sorted(mut names: Vec<String>) -> Vec<String> {
    names.sort();
    names
}

fn public(leaves: &[&str]) -> Vec<String> {
    sorted(leaves.iter().map(|l| format!("public.{l}")).collect())
}

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

#[test]
fn the_default_partition_and_a_foreign_key_referenced_leaf_are_not_dropped() {
    let c = Cluster::start(&[]);
    let (mut app, mut admin) = events(&c);
    // The referencing table is partitioned too: made by the superuser, granted (the policy's
    // owner reads it for the foreign-key guard), its rows written by `app`.
    c.execute(
        "postgres",
        "CREATE TABLE refs (id int NOT NULL, ev_id bigint, ev_at timestamptz, PRIMARY KEY (id),
                            FOREIGN KEY (ev_id, ev_at) REFERENCES events) PARTITION BY HASH (id);
         CREATE TABLE refs_0 PARTITION OF refs FOR VALUES WITH (modulus 2, remainder 0);
         CREATE TABLE refs_1 PARTITION OF refs FOR VALUES WITH (modulus 2, remainder 1);",
    );
    c.grant_app_and_admin("postgres");
    app.batch_execute(
        "INSERT INTO refs SELECT 1, id, created_at FROM events WHERE id = 150;
         INSERT INTO refs SELECT 2, id, created_at FROM events WHERE id = 260;",
    )
    .unwrap();
    policy(&mut admin, "");
    assert_eq!(
        count(
            &mut admin,
            "SELECT partitions_to_drop FROM retention.preview('events')"
        ),
        0,
        "a referenced table's leaves are never dropped whole"
    );
    admin.batch_execute("CALL retention.run()").unwrap();
    assert!(drops(&mut admin).is_empty());
    assert_eq!(
        count(
            &mut admin,
            "SELECT count(*) FROM events WHERE created_at < now() - interval '5 days'"
        ),
        2,
        "only the two referenced rows are left"
    );
    assert_eq!(
        count(
            &mut admin,
            "SELECT count(*) FROM events WHERE id IN (150, 260)"
        ),
        2
    );
    assert!(exists(&mut admin, "events_default"));
    for leaf in WHOLLY_EXPIRED {
        assert!(exists(&mut admin, leaf), "{leaf} is swept, not dropped");
    }
}

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

#[test]
fn preview_partitions_to_drop_equals_what_the_next_run_drops() {
    let c = Cluster::start(&[]);
    let (_, mut admin) = events(&c);
    // A cap that leaves room for some leaves only, a scope, and a hold on one leaf's row.
    policy(
        &mut admin,
        ", scope => 'tenant >= 0', max_rows_per_run => 100",
    );
    admin
        .batch_execute("SELECT retention.place_hold('events', 'id = 170', 'case', 'legal')")
        .unwrap();
    let listed: Vec<(String, i64, String)> = admin
        .query(
            "SELECT partition, rows, proof FROM retention.preview_partitions('events')",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    let preview = admin
        .query_one(
            "SELECT would_delete, partitions_to_drop FROM retention.preview('events')",
            &[],
        )
        .unwrap();
    let (would_delete, to_drop): (i64, i64) = (preview.get(0), preview.get(1));
    assert_eq!(to_drop, listed.len() as i64);
    assert!(
        (1..4).contains(&to_drop),
        "the cap leaves room for some leaves: {listed:?}"
    );
    assert!(listed.iter().all(|(_, _, proof)| proof == "range_bound"));
    admin.batch_execute("CALL retention.run()").unwrap();
    let dropped = drops(&mut admin);
    let mut listed_drops: Vec<(String, i64)> =
        listed.iter().map(|(p, n, _)| (p.clone(), *n)).collect();
    listed_drops.sort();
    assert_eq!(
        dropped, listed_drops,
        "the run drops exactly the leaves preview listed"
    );
    let removed = count(
        &mut admin,
        "SELECT coalesce(sum(rows), 0)::bigint FROM retention.ledger WHERE method IN ('prune', 'drop_partition')",
    );
    assert_eq!(
        removed, would_delete,
        "would_delete counts dropped and swept rows"
    );
    assert!(would_delete <= 100);
}

#[test]
fn a_leaf_a_consumer_pins_is_not_dropped_and_its_pinned_rows_stay() {
    let c = Cluster::start(&[]);
    let (_, mut admin) = events(&c);
    // The stream's order is id (row i is i hours old): a consumer at 200 pins ids 200 and up,
    // the older rows of m8 (for part of the day), all of m9 and m10, and the default partition.
    policy(&mut admin, ", order_by => 'id'");
    admin.batch_execute(
        "SELECT retention.report_position('events', 'c', retention.register_consumer('events', 'c', '1 hour'), '200')",
    )
    .unwrap();
    let pinned_before = count(&mut admin, "SELECT count(*) FROM events WHERE id >= 200");
    let pinned_expired = count(
        &mut admin,
        "SELECT count(*) FROM events WHERE id >= 200 AND created_at < now() - interval '5 days'",
    );
    assert_eq!(
        count(&mut admin, "SELECT pinned FROM retention.preview('events')"),
        pinned_expired
    );
    let listed: Vec<String> = column(
        &mut admin,
        "SELECT partition FROM retention.preview_partitions('events')",
    );
    assert!(
        listed.contains(&"public.events_m6".to_owned()),
        "{listed:?}"
    );
    assert!(
        !listed.contains(&"public.events_m10".to_owned()),
        "{listed:?}"
    );
    admin.batch_execute("CALL retention.run()").unwrap();
    let dropped: Vec<String> = drops(&mut admin).into_iter().map(|(p, _)| p).collect();
    assert_eq!(dropped, sorted(listed), "the run drops what preview listed");
    assert!(!exists(&mut admin, "events_m6") && !exists(&mut admin, "events_m7"));
    assert!(exists(&mut admin, "events_m9") && exists(&mut admin, "events_m10"));
    assert_eq!(
        count(&mut admin, "SELECT count(*) FROM events WHERE id >= 200"),
        pinned_before,
        "every pinned row stays"
    );
    assert_eq!(
        count(
            &mut admin,
            "SELECT count(*) FROM events WHERE id < 200 AND created_at < now() - interval '5 days'"
        ),
        0,
        "every expired row below the position went"
    );
    // Unpinned, the wholly expired leaves go whole.
    admin
        .batch_execute("SELECT retention.unregister_consumer('events', 'c')")
        .unwrap();
    admin.batch_execute("CALL retention.run()").unwrap();
    assert!(!exists(&mut admin, "events_m9") && !exists(&mut admin, "events_m10"));
}

#[test]
fn a_drop_blocked_by_a_long_transaction_is_skipped_and_ledgered_without_blocking_inserts() {
    let c = Cluster::start(&[]);
    let (_, mut admin) = events(&c);
    policy(&mut admin, "");
    // A long transaction of the application's that has read the table: its ACCESS SHARE lock
    // stays until it ends.
    let mut long = c.app("postgres");
    long.batch_execute("BEGIN; SELECT count(*) FROM events;")
        .unwrap();
    // The application inserting all along; a blocked insert would fail its 5 s statement
    // timeout.
    let url = c.url_as("postgres", "app");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut w = Client::connect(&url, postgres::NoTls).unwrap();
            w.batch_execute("SET statement_timeout = '5s'").unwrap();
            let mut n = 0i64;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                w.execute(
                    "INSERT INTO events VALUES (100000 + $1::bigint, 0, now(), 'new')",
                    &[&n],
                )
                .expect("an insert is never blocked by a partition drop");
                n += 1;
                std::thread::sleep(Duration::from_millis(5));
            }
            n
        })
    };
    std::thread::sleep(Duration::from_millis(200));
    admin.batch_execute("CALL retention.run()").unwrap();
    std::thread::sleep(Duration::from_millis(200));
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let inserted = writer.join().expect("the writer's inserts all succeeded");
    assert!(
        inserted > 10,
        "the writer ran throughout ({inserted} inserts)"
    );
    assert!(
        drops(&mut admin).is_empty(),
        "nothing is dropped while the long transaction holds its lock"
    );
    let skipped: Vec<String> = admin
        .query(
            "SELECT detail->>'partition' FROM retention.ledger WHERE method = 'drop_skipped'",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(
        sorted(skipped),
        public(&WHOLLY_EXPIRED),
        "each put-off drop is ledgered"
    );
    for leaf in WHOLLY_EXPIRED {
        assert!(exists(&mut admin, leaf));
    }
    // The next run, with the long transaction gone, drops them.
    long.batch_execute("COMMIT").unwrap();
    admin.batch_execute("CALL retention.run()").unwrap();
    assert_eq!(
        sorted(drops(&mut admin).into_iter().map(|d| d.0).collect()),
        public(&WHOLLY_EXPIRED)
    );
    assert_eq!(expired(&mut admin), 0);
}

#[test]
fn a_leaf_locked_by_another_transaction_is_put_off_while_the_leaves_around_it_are_dropped() {
    let c = Cluster::start(&[]);
    let (_, mut admin) = events(&c);
    policy(&mut admin, "");
    // An application transaction that holds one expired leaf (not the partitioned table): the
    // run's SHARE lock on that leaf is not granted, every other lock is.
    let mut long = c.app("postgres");
    long.batch_execute("BEGIN; LOCK TABLE ONLY events_m8 IN ROW EXCLUSIVE MODE;")
        .unwrap();
    admin.batch_execute("CALL retention.run()").unwrap();
    let others: Vec<&str> = WHOLLY_EXPIRED
        .iter()
        .copied()
        .filter(|l| *l != "events_m8")
        .collect();
    assert_eq!(
        sorted(drops(&mut admin).into_iter().map(|d| d.0).collect()),
        public(&others),
        "the leaves before and after the locked one are dropped in the same run"
    );
    assert_eq!(
        text(
            &mut admin,
            "SELECT string_agg(detail->>'partition', ',') FROM retention.ledger
              WHERE method = 'drop_skipped'"
        ),
        "public.events_m8",
        "the locked leaf's drop is put off and ledgered"
    );
    assert!(exists(&mut admin, "events_m8"));
    assert_eq!(
        count(&mut admin, "SELECT count(*) FROM events_m8"),
        24,
        "its rows are all still there"
    );
    long.batch_execute("COMMIT").unwrap();
    admin.batch_execute("CALL retention.run()").unwrap();
    assert_eq!(
        sorted(drops(&mut admin).into_iter().map(|d| d.0).collect()),
        public(&WHOLLY_EXPIRED),
        "the next run drops it"
    );
    assert_eq!(expired(&mut admin), 0);
}

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

#[test]
fn a_pg_partman_managed_parent_is_retired_while_pg_partman_premakes_new_leaves() {
    let c = Cluster::start(&[]);
    // Set-up by the superuser: pg_partman and the table it manages, handed to `admin` with the
    // leaves pg_partman made.
    c.execute(
        "postgres",
        "CREATE SCHEMA partman;
         CREATE EXTENSION pg_partman SCHEMA partman;
         CREATE TABLE pm (id bigint NOT NULL, created_at timestamptz NOT NULL, PRIMARY KEY (id, created_at))
           PARTITION BY RANGE (created_at);
         SELECT partman.create_parent('public.pm', 'created_at', 'native', 'daily', p_premake := 2,
                                      p_start_partition := (now() - interval '10 days')::text);",
    );
    own_and_grant(&c, &["pm"]);
    let (mut app, mut admin) = c.app_and_admin("postgres");
    app.batch_execute(
        "INSERT INTO pm SELECT g, now() - make_interval(hours => g) FROM generate_series(1, 240) g;",
    )
    .unwrap();
    admin
        .batch_execute(
            "SELECT retention.add_policy(name => 'pm', relation => 'pm', kind => 'age',
                age_column => 'created_at', older_than => '5 days');",
        )
        .unwrap();
    let leaves = |db: &mut Client| -> Vec<String> {
        db.query(
            "SELECT relid::regclass::text FROM pg_partition_tree('pm') WHERE isleaf ORDER BY 1",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
    };
    let before = leaves(&mut admin);
    let to_drop: Vec<String> = admin
        .query(
            "SELECT partition FROM retention.preview_partitions('pm')",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(to_drop.len() >= 5, "the old daily leaves: {to_drop:?}");
    let expired_before = count(
        &mut admin,
        "SELECT count(*) FROM pm WHERE created_at < now() - interval '5 days'",
    );
    admin.batch_execute("CALL retention.run()").unwrap();
    assert_eq!(
        count(
            &mut admin,
            "SELECT count(*) FROM pm WHERE created_at < now() - interval '5 days'"
        ),
        0
    );
    let dropped: Vec<String> = drops(&mut admin).into_iter().map(|d| d.0).collect();
    assert_eq!(sorted(dropped.clone()), sorted(to_drop.clone()));
    let after = leaves(&mut admin);
    assert_eq!(after.len(), before.len() - dropped.len());
    assert!(
        after.iter().any(|l| l == "pm_default"),
        "pg_partman's default partition stays"
    );
    assert_eq!(
        count(&mut admin, "SELECT coalesce(sum(rows), 0)::bigint FROM retention.ledger WHERE method IN ('prune', 'drop_partition')"),
        expired_before
    );
    // pg_partman keeps premaking: more future leaves, which the next run leaves alone. Its
    // configuration and maintenance are pg_partman's (its background worker or a scheduled job,
    // as the role that installed it), not an application's or retention's: the superuser here.
    c.execute(
        "postgres",
        "UPDATE partman.part_config SET premake = 6 WHERE parent_table = 'public.pm';
         SELECT partman.run_maintenance('public.pm');",
    );
    let premade = leaves(&mut admin);
    assert!(
        premade.len() > after.len(),
        "pg_partman premade new leaves: {premade:?}"
    );
    admin.batch_execute("CALL retention.run()").unwrap();
    assert_eq!(
        leaves(&mut admin),
        premade,
        "future leaves are never dropped"
    );
    assert_eq!(
        count(&mut admin, "SELECT count(*) FROM pm"),
        240 - expired_before
    );
}

/// The leaves of `events`, by name.
fn leaves(db: &mut Client) -> Vec<String> {
    db.query(
        "SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
          WHERE i.inhparent = 'events'::regclass ORDER BY 1",
        &[],
    )
    .unwrap()
    .iter()
    .map(|r| r.get(0))
    .collect()
}

/// (partition, reason) of every `drop_skipped` ledger record, by partition name.
fn skips(db: &mut Client) -> Vec<(String, String)> {
    db.query(
        "SELECT detail->>'partition', detail->>'reason' FROM retention.ledger
          WHERE method = 'drop_skipped' ORDER BY 1",
        &[],
    )
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1)))
    .collect()
}

#[test]
fn a_run_that_fails_after_detaching_leaves_attaches_them_again_with_every_row() {
    let c = Cluster::start(&[]);
    let (_, mut admin) = events(&c);
    policy(&mut admin, "");
    let before = leaves(&mut admin);
    let total = count(&mut admin, "SELECT count(*) FROM events");
    // The second transaction of a retirement, the drop, fails: an event trigger, which only a
    // superuser may make.
    let mut su = c.connect("postgres");
    on_drop_table(
        &mut su,
        "RAISE EXCEPTION 'no drops today' USING ERRCODE = '55000';",
    );
    let (code, msg) = expect_error(&mut admin, "CALL retention.run()");
    assert_eq!(code, "RT601", "the run says it failed: {msg}");
    assert_eq!(
        text(
            &mut admin,
            "SELECT detail->>'error' FROM retention.ledger WHERE method = 'error'"
        ),
        "no drops today",
        "the failed drop is the run's ledgered error"
    );
    assert!(
        drops(&mut admin).is_empty(),
        "nothing is ledgered as dropped"
    );
    assert_eq!(
        leaves(&mut admin),
        before,
        "every detached leaf is a leaf again"
    );
    assert_eq!(
        count(&mut admin, "SELECT count(*) FROM events"),
        total,
        "with every row"
    );
    let skipped = skips(&mut admin);
    assert!(!skipped.is_empty());
    for (leaf, reason) in &skipped {
        assert!(
            WHOLLY_EXPIRED
                .iter()
                .any(|l| *leaf == format!("public.{l}")),
            "{leaf}"
        );
        assert_eq!(
            reason, "the run failed before the leaf was dropped; attached again",
            "{leaf}"
        );
    }
    // retention.retiring_leaves is a catalog table no role is granted: the superuser reads it.
    assert_eq!(
        count(&mut su, "SELECT count(*) FROM retention.retiring_leaves"),
        0
    );
    // With drops allowed again (the superuser's event trigger gone), the next run retires them.
    no_event_trigger(&mut su);
    admin.batch_execute("CALL retention.run()").unwrap();
    assert_eq!(
        sorted(drops(&mut admin).into_iter().map(|d| d.0).collect()),
        public(&WHOLLY_EXPIRED)
    );
    assert_eq!(expired(&mut admin), 0);
}

#[test]
fn a_leaf_left_detached_by_a_killed_run_is_attached_again_by_the_next_run_or_kept_when_it_changed()
{
    let c = Cluster::start(&[]);
    let (mut app, mut admin) = events(&c);
    policy(&mut admin, "");
    let per_leaf = wholly_expired_rows(&mut admin);
    // The run's drop waits, and its session is killed there: between the transaction that
    // detached the leaves and the one that drops them. The wait is an event trigger, which only
    // a superuser may make; the run and the kill are `admin`'s (its own session).
    let mut su = c.connect("postgres");
    on_drop_table(&mut su, "PERFORM pg_sleep(60);");
    let mut runner = c.admin("postgres");
    let pid: i32 = runner
        .query_one("SELECT pg_backend_pid()", &[])
        .unwrap()
        .get(0);
    // Dates printed day first there and read month first by the run that attaches the leaves
    // again: the bound it was detached with must read back the same.
    runner.batch_execute("SET DateStyle = 'SQL, DMY'").unwrap();
    admin.batch_execute("SET DateStyle = 'SQL, MDY'").unwrap();
    let run = std::thread::spawn(move || runner.batch_execute("CALL retention.run()"));
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while count(
        &mut admin,
        &format!(
            "SELECT count(*) FROM pg_stat_activity WHERE pid = {pid} AND wait_event = 'PgSleep'"
        ),
    ) == 0
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the drop never started"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    admin
        .batch_execute(&format!("SELECT pg_terminate_backend({pid}, 10000)"))
        .unwrap();
    assert!(run.join().unwrap().is_err(), "the killed run's CALL fails");
    no_event_trigger(&mut su);
    // retention.retiring_leaves is a catalog table no role is granted: the superuser reads it.
    let left: Vec<String> = su
        .query(
            "SELECT qualified FROM retention.retiring_leaves ORDER BY 1",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(!left.is_empty(), "the killed run left detached leaves");
    for leaf in &left {
        assert_eq!(
            count(
                &mut admin,
                &format!("SELECT count(*) FROM pg_inherits WHERE inhrelid = '{leaf}'::regclass")
            ),
            0,
            "{leaf} is detached"
        );
    }
    assert!(drops(&mut admin).is_empty());
    // With the session's lock gone, one of them is written to: a young row, which its bound
    // no longer keeps out.
    // The application still has its privileges on the detached table.
    let changed = left[0].clone();
    app.batch_execute(&format!(
        "INSERT INTO {changed} VALUES (100000, 0, now(), 'new')"
    ))
    .unwrap();
    let changed_rows = count(&mut admin, &format!("SELECT count(*) FROM {changed}"));

    admin.batch_execute("CALL retention.run()").unwrap();
    let skipped = skips(&mut admin);
    for leaf in &left {
        let reason = &skipped
            .iter()
            .find(|(l, _)| l == leaf)
            .unwrap_or_else(|| panic!("{leaf} has a drop_skipped record: {skipped:?}"))
            .1;
        let prefix = "a run detached the leaf and ended before it dropped it; ";
        if *leaf == changed {
            assert!(
                reason.starts_with(&format!("{prefix}it could not be attached again"))
                    && reason.ends_with(&format!("stays detached as {changed}")),
                "{reason}"
            );
        } else {
            assert_eq!(*reason, format!("{prefix}attached again"));
        }
    }
    // The changed leaf is kept, every row of it; the others were proven again and dropped.
    assert_eq!(
        count(&mut admin, &format!("SELECT count(*) FROM {changed}")),
        changed_rows
    );
    let mut expected: Vec<(String, i64)> = per_leaf
        .into_iter()
        .filter(|(l, _)| *l != changed)
        .collect();
    expected.sort();
    assert_eq!(drops(&mut admin), expected);
    assert_eq!(
        count(&mut su, "SELECT count(*) FROM retention.retiring_leaves"),
        0
    );
}

#[test]
fn a_whole_leaf_drop_runs_without_the_partitioned_table_locked() {
    let c = Cluster::start(&[]);
    let (_, mut admin) = events(&c);
    policy(&mut admin, "");
    // At each DROP TABLE: whether the dropping transaction holds any lock on `events`. A drop
    // removes the leaf's files at its commit, and a writer of `events` would wait for that.
    // The record table and the event trigger are the superuser's (only a superuser may make an
    // event trigger); the trigger fires in the run's DROP TABLE, which runs as the policy's
    // owner, so `admin` may insert into the record table.
    c.execute(
        "postgres",
        "CREATE TABLE drop_saw (parent_locked boolean);
         GRANT SELECT, INSERT ON drop_saw TO admin;",
    );
    on_drop_table(
        &mut c.connect("postgres"),
        "INSERT INTO public.drop_saw
             SELECT EXISTS (SELECT 1 FROM pg_locks WHERE pid = pg_backend_pid()
                               AND relation = 'public.events'::regclass);",
    );
    admin.batch_execute("CALL retention.run()").unwrap();
    assert_eq!(
        sorted(drops(&mut admin).into_iter().map(|d| d.0).collect()),
        public(&WHOLLY_EXPIRED)
    );
    assert_eq!(
        count(&mut admin, "SELECT count(*) FROM drop_saw"),
        WHOLLY_EXPIRED.len() as i64
    );
    assert_eq!(
        count(
            &mut admin,
            "SELECT count(*) FROM drop_saw WHERE parent_locked"
        ),
        0,
        "no drop's transaction holds the partitioned table"
    );
}
