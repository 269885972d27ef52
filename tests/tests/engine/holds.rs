//! Holds: a hold blocks its rows and a lift releases them, also when placed or lifted (or the
//! policy changed) in the middle of a run.

use super::*;

#[test]
fn hold_blocks_and_lift_releases_on_the_next_run() {
    hold_blocks_and_lift_releases(false);
}

#[test]
fn hold_blocks_an_index_walk_and_lift_releases_on_the_next_run() {
    hold_blocks_and_lift_releases(true);
}

fn hold_blocks_and_lift_releases(by_index: bool) {
    let c = outbox_cluster(2000, by_index);
    let mut admin = c.admin("postgres");
    age_policy(&mut admin, "");
    let hold = scalar(
        &mut admin,
        "SELECT retention.place_hold('outbox', 'tenant = 1', 'litigation 42', 'legal@example')",
    );
    let held = count(
        &mut admin,
        "SELECT count(*) FROM outbox WHERE tenant = 1 AND created_at < now() - interval '30 days'",
    );
    let preview = admin
        .query_one(
            "SELECT held, hold_ids FROM retention.preview('outbox')",
            &[],
        )
        .unwrap();
    assert_eq!(preview.get::<_, i64>(0), held);
    assert_eq!(preview.get::<_, Vec<i64>>(1), vec![hold]);
    admin.batch_execute("CALL retention.run()").unwrap();
    assert_eq!(count(&mut admin, "SELECT count(*) FROM outbox WHERE tenant = 1 AND created_at < now() - interval '30 days'"), held);
    assert_eq!(count(&mut admin, &format!("SELECT rows FROM retention.ledger WHERE method = 'hold_skip' AND hold_ids = ARRAY[{hold}::bigint]")), held);
    admin
        .batch_execute(&format!(
            "SELECT retention.lift_hold({hold}, 'legal@example', 'case closed')"
        ))
        .unwrap();
    admin.batch_execute("CALL retention.run()").unwrap();
    assert_eq!(
        count(
            &mut admin,
            "SELECT count(*) FROM outbox WHERE created_at < now() - interval '30 days'"
        ),
        0
    );
    assert_eq!(
        count(
            &mut admin,
            "SELECT count(*) FROM retention.holds WHERE NOT active"
        ),
        1
    );
    let (code, _) = expect_error(
        &mut admin,
        &format!("SELECT retention.lift_hold({hold}, 'x', 'again')"),
    );
    assert_eq!(code, "55000");
}

#[test]
fn hold_placed_mid_run_wins_for_every_later_batch() {
    hold_placed_mid_run_wins(false);
}

#[test]
fn hold_placed_mid_run_wins_for_every_later_batch_through_an_age_index() {
    hold_placed_mid_run_wins(true);
}

fn hold_placed_mid_run_wins(by_index: bool) {
    let c = Cluster::start(&[]);
    let (runner, mut admin) = slow_run_under_way(&c, by_index);
    // The run is under way: place the hold from another session.
    let mut tx = admin.transaction().unwrap();
    tx.execute(
        "SELECT retention.place_hold('q', 'tenant = 1', 'late hold', 'tester')",
        &[],
    )
    .unwrap();
    tx.commit().unwrap();
    let committed: String = admin
        .query_one("SELECT clock_timestamp()::text", &[])
        .unwrap()
        .get(0);
    runner.join().unwrap();
    assert!(
        count(&mut admin, "SELECT count(*) FROM q WHERE tenant = 1") > 0,
        "held rows survive"
    );
    assert_eq!(
        count(&mut admin, "SELECT count(*) FROM q WHERE tenant = 0"),
        0,
        "unheld rows all go"
    );
    let after = format!("'{committed}'::timestamptz + interval '100 ms'");
    assert!(
        count(
            &mut admin,
            &format!("SELECT count(*) FROM del_log WHERE at > {after}")
        ) > 0,
        "the run went on after the hold"
    );
    // Every batch (one transaction) that began deleting after the hold had committed must have
    // left held rows alone. 100 ms covers the planning between a batch's snapshot and its first
    // deletion; each batch then takes ~150 ms (50 rows x 3 ms).
    let violating = count(
        &mut admin,
        &format!(
            "SELECT count(*) FROM del_log WHERE tenant = 1 AND xid IN (
                 SELECT xid FROM del_log GROUP BY xid HAVING min(at) > {after})"
        ),
    );
    assert_eq!(
        violating, 0,
        "no batch that started after the hold deleted a held row"
    );
}

/// A run keeps what its steps plan with (policy, table, holds) while its backend receives no
/// invalidation: a lift or a policy change committed between two steps of one run must send
/// one, or the rest of the run would go on with the old context. Each `_run_advance` below is a
/// transaction of its own, as in `CALL retention.run()`.
#[test]
fn a_lift_and_a_policy_change_between_two_steps_of_one_run_apply_from_the_next_step() {
    let c = Cluster::start(&[]);
    let (mut app, mut admin) = set_up(
        &c,
        "CREATE TABLE notes (id int PRIMARY KEY, created_at timestamptz NOT NULL);
         CREATE INDEX notes_created_at ON notes (created_at);",
    );
    app.batch_execute(
        "INSERT INTO notes SELECT g, now() - interval '90 days' + g * interval '1 minute'
           FROM generate_series(1, 40) g;",
    )
    .unwrap();
    admin
        .batch_execute(
            "SELECT retention.add_policy(name => 'notes', relation => 'notes', kind => 'age',
                age_column => 'created_at', older_than => '30 days', batch_size => 10);",
        )
        .unwrap();
    let hold = scalar(
        &mut admin,
        "SELECT retention.place_hold('notes', 'id > 20', 'case 7', 'legal@example')",
    );
    let id = scalar(
        &mut admin,
        "SELECT id FROM retention.policies WHERE name = 'notes'",
    );
    let mut other = c.admin("postgres");
    let advance = |admin: &mut Client, token: i64| -> (i64, bool, String) {
        admin
            .batch_execute(&format!("SELECT retention._run_advance({token})"))
            .unwrap();
        let row = admin
            .query_one(
                &format!("SELECT deleted, done, coalesce(reason, '') FROM retention._run_progress({token})"),
                &[],
            )
            .unwrap();
        (row.get(0), row.get(1), row.get(2))
    };

    // The lift: the first step plans with the hold, the steps after the lift without it.
    let token = scalar(&mut admin, &format!("SELECT retention._run_begin({id})"));
    assert_eq!(advance(&mut admin, token).0, 10);
    other
        .batch_execute(&format!(
            "SELECT retention.lift_hold({hold}, 'legal@example', 'case closed')"
        ))
        .unwrap();
    let mut last = (0, false, String::new());
    for _ in 0..10 {
        last = advance(&mut admin, token);
        if last.1 {
            break;
        }
    }
    admin
        .batch_execute(&format!("SELECT * FROM retention._run_end({token})"))
        .unwrap();
    assert!(last.1, "the run ended: {last:?}");
    assert_eq!(last.0, 40, "the held rows went once the lift committed");
    assert_eq!(count(&mut admin, "SELECT count(*) FROM notes"), 0);

    // The policy change: disabled between two steps, the run stops at the next one.
    app.batch_execute(
        "INSERT INTO notes SELECT g, now() - interval '90 days' + g * interval '1 minute'
           FROM generate_series(1, 40) g;",
    )
    .unwrap();
    let token = scalar(&mut admin, &format!("SELECT retention._run_begin({id})"));
    assert_eq!(advance(&mut admin, token).0, 10);
    other
        .batch_execute("SELECT retention.disable_policy('notes')")
        .unwrap();
    let (deleted, done, reason) = advance(&mut admin, token);
    admin
        .batch_execute(&format!("SELECT * FROM retention._run_end({token})"))
        .unwrap();
    assert!(done);
    assert_eq!(deleted, 10);
    // Disabling a policy is a new version of it.
    assert!(reason.contains("version 2 during the run"), "{reason}");
    assert_eq!(count(&mut admin, "SELECT count(*) FROM notes"), 30);
}
