//! The other kinds: `keep_latest`, `versions`, `entity`, `unreferenced` and `orphan`, each
//! deleting exactly what it should and nothing of a group it must keep.

use super::*;

#[test]
fn keep_latest_never_deletes_a_non_terminal_row_and_never_crosses_groups() {
    let c = Cluster::start(&[]);
    let (mut app, mut admin) = set_up(
        &c,
        "CREATE TABLE runs (id int PRIMARY KEY, source int NOT NULL, state text NOT NULL, started_at timestamptz NOT NULL);",
    );
    app.batch_execute(
        "-- source 1: 10 runs, the 3 oldest still running; source 2: only 2 runs.
         INSERT INTO runs SELECT g, 1, CASE WHEN g <= 3 THEN 'running' ELSE 'done' END, now() - make_interval(days => 100 - g)
           FROM generate_series(1, 10) g;
         INSERT INTO runs VALUES (11, 2, 'done', now() - interval '900 days'), (12, 2, 'done', now() - interval '800 days');",
    )
    .unwrap();
    admin.batch_execute(
        "SELECT retention.add_policy(name => 'runs', relation => 'runs', kind => 'keep_latest',
                group_by => ARRAY['source'], order_by => 'started_at', keep => 4, terminal => $$state = 'done'$$);",
    )
    .unwrap();
    admin.batch_execute("CALL retention.run()").unwrap();
    let left: Vec<i32> = admin
        .query("SELECT id FROM runs ORDER BY id", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    // Newest 4 of source 1 are 7..10; 4..6 are terminal and ranked past 4; 1..3 are running.
    assert_eq!(left, vec![1, 2, 3, 7, 8, 9, 10, 11, 12]);
}

#[test]
fn versions_honours_min_keep_and_max_versions_and_is_deterministic_on_ties() {
    let c = Cluster::start(&[]);
    let (mut app, mut admin) = set_up(
        &c,
        "CREATE TABLE v (tenant int, artifact text, seq int, recorded_at timestamptz NOT NULL, PRIMARY KEY (tenant, artifact, seq));",
    );
    app.batch_execute(
        "-- tenant 1/a: 6 versions, all old; tenant 2/a: 3 versions, all old, two share recorded_at.
         INSERT INTO v SELECT 1, 'a', g, now() - make_interval(days => 100 - g) FROM generate_series(1, 6) g;
         INSERT INTO v VALUES (2, 'a', 1, now() - interval '50 days'), (2, 'a', 2, now() - interval '40 days'),
                              (2, 'a', 3, now() - interval '40 days');",
    )
    .unwrap();
    admin.batch_execute(
        "SELECT retention.add_policy(name => 'v', relation => 'v', kind => 'versions', group_by => ARRAY['tenant', 'artifact'],
                order_by => 'recorded_at', keep => 4, min_keep => 2, age_column => 'recorded_at', older_than => '10 days');",
    )
    .unwrap();
    admin.batch_execute("CALL retention.run()").unwrap();
    let left: Vec<(i32, i32)> = admin
        .query("SELECT tenant, seq FROM v ORDER BY 1, 2", &[])
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    // Everything is past the window, so each key keeps exactly min_keep = 2 versions; on the
    // recorded_at tie the primary key decides (higher seq is newer).
    assert_eq!(left, vec![(1, 5), (1, 6), (2, 2), (2, 3)]);
}

#[test]
fn versions_without_window_keeps_at_most_keep() {
    let c = Cluster::start(&[]);
    let (mut app, mut admin) = set_up(
        &c,
        "CREATE TABLE v (id int PRIMARY KEY, k int NOT NULL, at timestamptz NOT NULL);",
    );
    app.batch_execute(
        "INSERT INTO v SELECT g, g % 2, now() - make_interval(mins => g) FROM generate_series(1, 20) g;",
    )
    .unwrap();
    admin.batch_execute(
        "SELECT retention.add_policy(name => 'v', relation => 'v', kind => 'versions', group_by => ARRAY['k'],
                order_by => 'at', keep => 3);",
    )
    .unwrap();
    admin.batch_execute("CALL retention.run()").unwrap();
    assert_eq!(count(&mut admin, "SELECT count(*) FROM v"), 6);
    assert_eq!(
        count(&mut admin, "SELECT max(id)::bigint FROM v"),
        6,
        "the newest (smallest age) versions stay"
    );
}

#[test]
fn entity_never_deletes_part_of_a_group() {
    let c = Cluster::start(&[]);
    let (mut app, mut admin) = set_up(
        &c,
        "CREATE TABLE doc (id int PRIMARY KEY, entity int NOT NULL, at timestamptz NOT NULL);",
    );
    app.batch_execute(
        "-- entity 1: all old; entity 2: old but one recent row; entity 3: all old, one row held.
         INSERT INTO doc SELECT g, 1, now() - interval '100 days' FROM generate_series(1, 5) g;
         INSERT INTO doc SELECT g, 2, now() - interval '100 days' FROM generate_series(6, 9) g;
         INSERT INTO doc VALUES (10, 2, now());
         INSERT INTO doc SELECT g, 3, now() - interval '100 days' FROM generate_series(11, 14) g;",
    )
    .unwrap();
    admin.batch_execute(
        "SELECT retention.add_policy(name => 'doc', relation => 'doc', kind => 'entity', group_by => ARRAY['entity'],
                age_column => 'at', older_than => '30 days', batch_size => 2);
         SELECT retention.place_hold('doc', 'id = 12', 'audit', 'tester');",
    )
    .unwrap();
    admin.batch_execute("CALL retention.run()").unwrap();
    assert_eq!(
        count(&mut admin, "SELECT count(*) FROM doc WHERE entity = 1"),
        0
    );
    assert_eq!(
        count(&mut admin, "SELECT count(*) FROM doc WHERE entity = 2"),
        5
    );
    assert_eq!(
        count(&mut admin, "SELECT count(*) FROM doc WHERE entity = 3"),
        4
    );
    // The group larger than batch_size went in one batch, whole.
    assert_eq!(
        count(
            &mut admin,
            "SELECT count(*) FROM retention.ledger WHERE method = 'prune'"
        ),
        1
    );
}

#[test]
fn a_shared_chunk_goes_only_with_its_last_reference_and_the_ledger_records_the_check() {
    let c = Cluster::start(&[]);
    // Chunk 1 is shared by both sources, chunk 2 used by src_a only, chunk 3 by nobody, chunk 4
    // by nobody but still inside the grace.
    let (mut app, mut admin) = set_up(
        &c,
        "CREATE TABLE chunks (id int PRIMARY KEY, created_at timestamptz NOT NULL);
         CREATE TABLE src_a (id int PRIMARY KEY, chunk_id int NOT NULL REFERENCES chunks);
         CREATE TABLE src_b (id int PRIMARY KEY, chunk_id int NOT NULL REFERENCES chunks ON DELETE RESTRICT);",
    );
    app.batch_execute(
        "INSERT INTO chunks VALUES (1, now() - interval '3 days'), (2, now() - interval '3 days'),
                                   (3, now() - interval '3 days'), (4, now());
         INSERT INTO src_a VALUES (1, 1), (2, 2);
         INSERT INTO src_b VALUES (1, 1);",
    )
    .unwrap();
    admin.batch_execute(
        "SELECT retention.add_policy(name => 'chunks', relation => 'chunks', kind => 'unreferenced',
                age_column => 'created_at', older_than => '1 day');",
    )
    .unwrap();
    let chunks = |admin: &mut Client| -> Vec<i32> {
        admin
            .query("SELECT id FROM chunks ORDER BY id", &[])
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect()
    };
    let run = |admin: &mut Client| admin.batch_execute("CALL retention.run('chunks')").unwrap();
    assert_eq!(
        count(
            &mut admin,
            "SELECT would_delete FROM retention.preview('chunks')"
        ),
        1
    );
    run(&mut admin);
    assert_eq!(
        chunks(&mut admin),
        vec![1, 2, 4],
        "only the old unreferenced chunk went"
    );
    // One source expires its rows: the chunk only it used goes, the shared one stays.
    app.batch_execute("DELETE FROM src_a").unwrap();
    run(&mut admin);
    assert_eq!(chunks(&mut admin), vec![1, 4]);
    // Both did: the shared chunk goes too; the fresh one stays inside its grace.
    app.batch_execute("DELETE FROM src_b").unwrap();
    run(&mut admin);
    assert_eq!(chunks(&mut admin), vec![4]);
    let checked: Vec<String> = admin
        .query(
            "SELECT DISTINCT jsonb_array_elements_text(detail->'references_checked') FROM retention.ledger
              WHERE method = 'prune' AND policy = 'chunks' ORDER BY 1",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(checked, vec!["public.src_a", "public.src_b"]);
    assert_eq!(
        count(
            &mut admin,
            "SELECT count(*) FROM retention.ledger WHERE method = 'prune' AND policy = 'chunks'"
        ),
        3
    );
    // Refused: a table nothing references, and a key that would cascade.
    set_up(
        &c,
        "CREATE TABLE lonely (id int PRIMARY KEY, at timestamptz NOT NULL);
         CREATE TABLE blobs (id int PRIMARY KEY, at timestamptz NOT NULL);
         CREATE TABLE users_of_blobs (id int PRIMARY KEY, blob int REFERENCES blobs ON DELETE CASCADE);",
    );
    for (table, words) in [
        ("lonely", "no foreign key references public.lonely"),
        ("blobs", "does not refuse deletes"),
    ] {
        let (state, message) = expect_error(
            &mut admin,
            &format!(
                "SELECT retention.add_policy(name => '{table}', relation => '{table}', kind => 'unreferenced',
                        age_column => 'at', older_than => '1 day')"
            ),
        );
        assert_eq!(state, "22023", "{message}");
        assert!(message.contains(words), "{message}");
    }
}

#[test]
fn the_orphan_kind_removes_only_dead_provisional_rows_past_the_ttl() {
    let c = Cluster::start(&[]);
    let (mut app, mut admin) = set_up(
        &c,
        "CREATE TABLE sessions (id int PRIMARY KEY, expires_at timestamptz NOT NULL);
         CREATE TABLE uploads (id int PRIMARY KEY, session_id int, state text NOT NULL, created_at timestamptz NOT NULL);",
    );
    app.batch_execute(
        "INSERT INTO sessions VALUES (1, now() + interval '1 hour'), (2, now() - interval '1 hour');
         INSERT INTO uploads VALUES
             (1, 1, 'provisional', now() - interval '3 hours'),  -- live lease: stays
             (2, 2, 'provisional', now() - interval '3 hours'),  -- dead lease, past the TTL: goes
             (3, 2, 'provisional', now()),                       -- dead lease, fresh: stays
             (4, 2, 'committed',   now() - interval '3 hours'),  -- not provisional: stays
             (5, 9, 'provisional', now() - interval '3 hours'),  -- no lease at all: goes
             (6, NULL, 'provisional', now() - interval '3 hours'); -- owned by nothing: goes",
    )
    .unwrap();
    admin.batch_execute(
        "SELECT retention.add_policy(name => 'orphans', relation => 'uploads', kind => 'orphan',
                scope => $$state = 'provisional'$$, age_column => 'created_at', older_than => '1 hour',
                lease_table => 'sessions', lease_key => ARRAY['session_id'], lease_expiry => 'expires_at');",
    )
    .unwrap();
    assert_eq!(
        count(
            &mut admin,
            "SELECT would_delete FROM retention.preview('orphans')"
        ),
        3
    );
    admin
        .batch_execute("CALL retention.run('orphans')")
        .unwrap();
    let left: Vec<i32> = admin
        .query("SELECT id FROM uploads ORDER BY id", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(left, vec![1, 3, 4]);
    assert_eq!(
        count(&mut admin, "SELECT coalesce(sum(rows), 0)::bigint FROM retention.ledger WHERE method = 'orphan_sweep'"),
        3
    );
    assert_eq!(
        count(
            &mut admin,
            "SELECT rows_pruned_total FROM retention.stats WHERE policy = 'orphans'"
        ),
        3
    );
    // The lease is checked when the rows are deleted: once session 1 ends, its upload goes.
    app.batch_execute("UPDATE sessions SET expires_at = now() - interval '1 second' WHERE id = 1")
        .unwrap();
    admin
        .batch_execute("CALL retention.run('orphans')")
        .unwrap();
    assert_eq!(
        count(&mut admin, "SELECT count(*) FROM uploads WHERE id = 1"),
        0
    );
    // Refusals: a lease key of the wrong arity, no provisional predicate, a lease on another kind.
    for (sql, words) in [
        ("kind => 'orphan', scope => 'true', age_column => 'created_at', older_than => '1 hour',
          lease_table => 'sessions', lease_key => ARRAY['session_id', 'id'], lease_expiry => 'expires_at'",
         "lease_key names 2 columns"),
        ("kind => 'orphan', age_column => 'created_at', older_than => '1 hour',
          lease_table => 'sessions', lease_key => ARRAY['session_id'], lease_expiry => 'expires_at'",
         "orphan policies require scope"),
        ("kind => 'age', age_column => 'created_at', older_than => '1 hour', lease_table => 'sessions'",
         "apply to orphan policies"),
    ] {
        let (state, message) = expect_error(
            &mut admin,
            &format!("SELECT retention.add_policy(name => 'x', relation => 'uploads', {sql})"),
        );
        assert_eq!(state, "22023", "{message}");
        assert!(message.contains(words), "{message}");
    }
}
