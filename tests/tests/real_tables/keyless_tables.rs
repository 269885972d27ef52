//! Tables without a primary key (pgbench's history, with identical rows), swept exactly by age
//! and by keep_latest, and governed by an archive policy.

use super::*;

#[test]
fn tables_without_a_primary_key_are_swept_exactly() {
    let c = Cluster::start(&[]);
    // pgbench's history table, as pgbench creates it, and a keyless audit copy.
    let (mut app, mut admin) = set_up(
        &c,
        "CREATE TABLE pgbench_history (tid int, bid int, aid int, delta int, mtime timestamp, filler char(22));",
    );
    app.batch_execute(
        "INSERT INTO pgbench_history (tid, bid, aid, delta, mtime)
         SELECT g % 10, 1, g, g % 7, now() - make_interval(mins => g) FROM generate_series(1, 3000) g;
         -- Duplicates: rows with no distinguishing column at all.
         INSERT INTO pgbench_history (tid, bid, aid, delta, mtime)
         SELECT 1, 1, 1, 1, now() - interval '3 days' FROM generate_series(1, 50);",
    )
    .unwrap();
    admin
        .batch_execute(
            "SELECT retention.add_policy(name => 'history', relation => 'pgbench_history',
                    kind => 'age', age_column => 'mtime', older_than => '1 day', batch_size => 250)",
        )
        .unwrap();
    let expected: i64 = scalar(
        &mut admin,
        "SELECT count(*) FROM pgbench_history WHERE mtime < now() - interval '1 day'",
    );
    assert_eq!(
        scalar(
            &mut admin,
            "SELECT would_delete FROM retention.preview('history')"
        ),
        expected
    );
    admin.batch_execute("CALL retention.run()").unwrap();
    assert_eq!(
        scalar(&mut admin, "SELECT count(*) FROM pgbench_history"),
        3050 - expected
    );
    assert_eq!(
        scalar(
            &mut admin,
            "SELECT sum(rows_deleted)::bigint FROM retention.ledger WHERE policy = 'history'"
        ),
        expected
    );
    // keep_latest ranks keyless rows too (ties by their place); it governs the table alone.
    admin
        .batch_execute("SELECT retention.drop_policy('history')")
        .unwrap();
    admin
        .batch_execute(
            "SELECT retention.add_policy(name => 'per_teller', relation => 'pgbench_history',
                    kind => 'keep_latest', group_by => ARRAY['tid'], order_by => 'mtime', keep => 10)",
        )
        .unwrap();
    admin
        .batch_execute("CALL retention.run('per_teller')")
        .unwrap();
    assert_eq!(
        scalar(
            &mut admin,
            "SELECT max(n) FROM (SELECT count(*) n FROM pgbench_history GROUP BY tid) x"
        ),
        10
    );
    // An archive policy governs it too: its batches name rows by place
    // (tests/tests/archiver/round_trips.rs archives and restores such a table).
    admin
        .batch_execute("SELECT retention.drop_policy('per_teller')")
        .unwrap();
    admin
        .batch_execute(
            "SELECT retention.add_policy(name => 'a', relation => 'pgbench_history', kind => 'age',
                    age_column => 'mtime', older_than => '1 day', terminal => 'true',
                    action => 'archive_then_delete')",
        )
        .unwrap();
}
