//! The `age` kind: the window's boundary, batched sweeps by block ranges and through an age
//! index (ties, timestamp columns), and a policy's scope.

use super::*;

#[test]
fn age_expiry_boundary_just_under_and_just_over_the_window() {
    let c = Cluster::start(&[]);
    let (mut app, mut admin) = set_up(
        &c,
        "CREATE TABLE t (id int PRIMARY KEY, created_at timestamptz NOT NULL);",
    );
    app.batch_execute(
        "INSERT INTO t VALUES (1, now() - interval '30 days' + interval '1 minute'),
                              (2, now() - interval '30 days' - interval '1 minute'),
                              (3, now());",
    )
    .unwrap();
    admin
        .batch_execute(
            "SELECT retention.add_policy(name => 't', relation => 't', kind => 'age',
                age_column => 'created_at', older_than => '30 days');",
        )
        .unwrap();
    admin.batch_execute("CALL retention.run()").unwrap();
    let left: Vec<i32> = admin
        .query("SELECT id FROM t ORDER BY id", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(left, vec![1, 3], "only the row just over the window goes");
    assert_eq!(
        count(
            &mut admin,
            "SELECT sum(rows)::bigint FROM retention.ledger WHERE method = 'prune'"
        ),
        1
    );
}

#[test]
fn age_sweep_deletes_exactly_eligible_terminal_rows_in_batches() {
    age_sweep_deletes_exactly_eligible_terminal_rows(false);
}

/// The same through an index on the age column (ages fall as ids rise: index order is the
/// reverse of physical order), with every batch's age range in the ledger.
#[test]
fn age_sweep_through_an_age_index_deletes_exactly_eligible_terminal_rows_in_batches() {
    age_sweep_deletes_exactly_eligible_terminal_rows(true);
}

fn age_sweep_deletes_exactly_eligible_terminal_rows(by_index: bool) {
    let c = outbox_cluster(3000, by_index);
    let mut admin = c.admin("postgres");
    age_policy(&mut admin, ", terminal => $$status = 'sent'$$");
    let expected = count(&mut admin, "SELECT count(*) FROM outbox WHERE created_at < now() - interval '30 days' AND status = 'sent'");
    let before = count(&mut admin, "SELECT count(*) FROM outbox");
    admin.batch_execute("CALL retention.run('outbox')").unwrap();
    assert_eq!(
        count(&mut admin, "SELECT count(*) FROM outbox"),
        before - expected
    );
    assert_eq!(count(&mut admin, "SELECT count(*) FROM outbox WHERE created_at < now() - interval '30 days' AND status = 'sent'"), 0);
    assert!(count(&mut admin, "SELECT count(*) FROM outbox WHERE status = 'pending' AND created_at < now() - interval '30 days'") > 0);
    // Ledger adds up, batches are bounded, the run summary agrees.
    assert_eq!(
        count(
            &mut admin,
            "SELECT sum(rows)::bigint FROM retention.ledger WHERE method = 'prune'"
        ),
        expected
    );
    assert_eq!(
        count(
            &mut admin,
            "SELECT max(rows) FROM retention.ledger WHERE method = 'prune'"
        ),
        100
    );
    assert_eq!(
        count(
            &mut admin,
            "SELECT rows FROM retention.ledger WHERE method = 'run'"
        ),
        expected
    );
    assert_eq!(
        count(
            &mut admin,
            "SELECT rows_pruned_total FROM retention.stats WHERE policy = 'outbox'"
        ),
        expected
    );
    // Which walk the batches took, as the ledger records it.
    let walk = if by_index { "from_age" } else { "from_tid" };
    assert_eq!(
        count(
            &mut admin,
            &format!("SELECT count(*) FILTER (WHERE detail ? '{walk}') - count(*) FROM retention.ledger WHERE method = 'prune'")
        ),
        0
    );
    if by_index {
        // Consecutive batches cover adjacent age ranges: each starts where the previous ended.
        assert_eq!(
            count(
                &mut admin,
                "SELECT count(*) FROM (SELECT detail->>'from_age' AS f,
                        lag(detail->>'to_age') OVER (ORDER BY (detail->>'batch')::int) AS prev
                   FROM retention.ledger WHERE method = 'prune') b
                  WHERE prev IS NOT NULL AND prev IS DISTINCT FROM f"
            ),
            0
        );
    }
}

/// An age column without a time zone (compared with the cutoff, a timestamptz, in the session's
/// time zone) and ages that repeat across batch boundaries: exactly the eligible rows go, by age.
#[test]
fn an_index_walk_over_a_timestamp_column_deletes_exactly_the_expired_rows() {
    let c = Cluster::start(&[]);
    let (mut app, mut admin) = set_up(
        &c,
        "CREATE TABLE events (id int PRIMARY KEY, at timestamp NOT NULL);
         CREATE INDEX events_at ON events (at DESC);",
    );
    app.batch_execute(
        "INSERT INTO events SELECT g, localtimestamp - (g / 3) * interval '1 hour' FROM generate_series(1, 3000) g;",
    )
    .unwrap();
    admin
        .batch_execute(
            "SELECT retention.add_policy(name => 'events', relation => 'events', kind => 'age',
                age_column => 'at', older_than => '20 days', batch_size => 50);",
        )
        .unwrap();
    let expected = count(
        &mut admin,
        "SELECT count(*) FROM events WHERE at < now() - interval '20 days'",
    );
    assert!(expected > 500);
    admin.batch_execute("CALL retention.run()").unwrap();
    assert_eq!(
        count(&mut admin, "SELECT count(*) FROM events"),
        3000 - expected
    );
    assert_eq!(
        count(
            &mut admin,
            "SELECT count(*) FROM events WHERE at < now() - interval '20 days'"
        ),
        0
    );
    assert_eq!(
        count(
            &mut admin,
            "SELECT count(*) FILTER (WHERE detail ? 'from_age' AND rows <= 50) - count(*) FROM retention.ledger WHERE method = 'prune'"
        ),
        0
    );
}

/// More rows share one age than a batch holds: index batches cannot split them by age, so the
/// run goes on by block ranges, and every batch stays within its size.
#[test]
fn a_tie_larger_than_a_batch_moves_an_index_walk_to_block_ranges() {
    let c = Cluster::start(&[]);
    let (mut app, mut admin) = set_up(
        &c,
        "CREATE TABLE daily (id int PRIMARY KEY, day date NOT NULL);
         CREATE INDEX daily_day ON daily (day);",
    );
    app.batch_execute(
        "INSERT INTO daily SELECT g, current_date - 100 - g FROM generate_series(1, 50) g;
         INSERT INTO daily SELECT g, current_date - 60 FROM generate_series(51, 1050) g;
         INSERT INTO daily SELECT g, current_date - (g % 20) FROM generate_series(1051, 1250) g;",
    )
    .unwrap();
    admin
        .batch_execute(
            "SELECT retention.add_policy(name => 'daily', relation => 'daily', kind => 'age',
                age_column => 'day', older_than => '30 days', batch_size => 100);",
        )
        .unwrap();
    admin.batch_execute("CALL retention.run()").unwrap();
    assert_eq!(count(&mut admin, "SELECT count(*) FROM daily"), 200);
    assert_eq!(
        count(&mut admin, "SELECT count(*) FROM daily WHERE id <= 1050"),
        0
    );
    assert_eq!(
        count(
            &mut admin,
            "SELECT (1000 * count(*) + sum(rows))::bigint FROM retention.ledger WHERE method = 'prune' AND detail ? 'from_age'"
        ),
        1050,
        "the 50 older rows, by age, in one batch"
    );
    assert_eq!(
        count(
            &mut admin,
            "SELECT sum(rows)::bigint FROM retention.ledger WHERE method = 'prune' AND detail ? 'from_tid'"
        ),
        1000,
        "the 1000 tied rows, by block ranges"
    );
    assert_eq!(
        count(
            &mut admin,
            "SELECT max(rows) FROM retention.ledger WHERE method = 'prune'"
        ),
        100
    );
}

#[test]
fn scope_limits_a_policy_to_one_tenant() {
    let c = Cluster::start(&[]);
    outbox(&c, 2000);
    let mut admin = c.admin("postgres");
    age_policy(&mut admin, ", scope => 'tenant = 2'");
    admin.batch_execute("CALL retention.run()").unwrap();
    assert_eq!(count(&mut admin, "SELECT count(*) FROM outbox WHERE tenant = 2 AND created_at < now() - interval '30 days'"), 0);
    assert!(count(&mut admin, "SELECT count(*) FROM outbox WHERE tenant <> 2 AND created_at < now() - interval '30 days'") > 0);
}
