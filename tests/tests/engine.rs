//! The policy engine against a real cluster: every kind, guards, holds, caps, preview accuracy,
//! refusals. Runs commit per batch, so these live here rather than in #[pg_test]s.
//!
//! Production roles throughout: tables are made by the superuser in set-up, application rows
//! are written by `app` (table privileges only) and every `retention.*` call is made by `admin`
//! (a member of `retention_admin`, not a superuser), who also reads the results
//! (`Cluster::app_and_admin`).

use pg_retention_integration::{expect_error, scalar, Cluster};
use postgres::Client;

/// An outbox-like table: `n` rows, row i created i hours ago, every 10th row 'pending'. Made by
/// the superuser, granted to `app` and `admin`; the rows are written by `app`.
fn outbox(c: &Cluster, n: i64) {
    c.execute(
        "postgres",
        "CREATE TABLE outbox (id bigserial PRIMARY KEY, tenant int NOT NULL, status text NOT NULL,
                              created_at timestamptz NOT NULL, payload jsonb);",
    );
    c.grant_app_and_admin("postgres");
    c.app("postgres")
        .batch_execute(&format!(
            "INSERT INTO outbox (tenant, status, created_at, payload)
             SELECT g % 3, CASE WHEN g % 10 = 0 THEN 'pending' ELSE 'sent' END,
                    now() - make_interval(hours => g), jsonb_build_object('n', g)
               FROM generate_series(1, {n}) g;"
        ))
        .unwrap();
}

fn age_policy(db: &mut Client, extra: &str) {
    db.batch_execute(&format!(
        "SELECT retention.add_policy(name => 'outbox', relation => 'outbox', kind => 'age',
                age_column => 'created_at', older_than => '30 days', batch_size => 100 {extra})"
    ))
    .unwrap();
}

fn count(db: &mut Client, sql: &str) -> i64 {
    scalar(db, sql)
}

/// Set-up by the superuser (`ddl`: tables, indexes, functions), then grants to `app` and
/// `admin`; returns connections as `app` and as `admin`.
fn set_up(c: &Cluster, ddl: &str) -> (Client, Client) {
    c.execute("postgres", ddl);
    c.grant_app_and_admin("postgres");
    c.app_and_admin("postgres")
}

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
    let c = Cluster::start(&[]);
    outbox(&c, 3000);
    if by_index {
        c.execute(
            "postgres",
            "CREATE INDEX outbox_created_at ON outbox (created_at)",
        );
    }
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
fn scope_limits_a_policy_to_one_tenant() {
    let c = Cluster::start(&[]);
    outbox(&c, 2000);
    let mut admin = c.admin("postgres");
    age_policy(&mut admin, ", scope => 'tenant = 2'");
    admin.batch_execute("CALL retention.run()").unwrap();
    assert_eq!(count(&mut admin, "SELECT count(*) FROM outbox WHERE tenant = 2 AND created_at < now() - interval '30 days'"), 0);
    assert!(count(&mut admin, "SELECT count(*) FROM outbox WHERE tenant <> 2 AND created_at < now() - interval '30 days'") > 0);
}

#[test]
fn hold_blocks_and_lift_releases_on_the_next_run() {
    hold_blocks_and_lift_releases(false);
}

#[test]
fn hold_blocks_an_index_walk_and_lift_releases_on_the_next_run() {
    hold_blocks_and_lift_releases(true);
}

fn hold_blocks_and_lift_releases(by_index: bool) {
    let c = Cluster::start(&[]);
    outbox(&c, 2000);
    if by_index {
        c.execute(
            "postgres",
            "CREATE INDEX outbox_created_at ON outbox (created_at)",
        );
    }
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

/// Table `q`: 1000 expired rows (ids in physical order, tenant = id % 2) whose deletes each take
/// 3 ms and are logged in `del_log` (id, tenant, deleting transaction, time); an `age` policy of
/// 50-row batches. `by_index`: the rows' ages rise with their ids and an index on the age column
/// makes batches walk it (else every row has the same age and no such index exists, and batches
/// walk block ranges). The rows are `app`'s, the policy `admin`'s. Starts `CALL retention.run()`
/// as `admin` in another session and returns (with an `admin` connection) once more than 100
/// rows are gone, so the run is mid-way through its batches.
fn slow_run_under_way(c: &Cluster, by_index: bool) -> (std::thread::JoinHandle<()>, Client) {
    let (mut app, mut admin) = set_up(
        c,
        if by_index {
            "CREATE TABLE q (id int PRIMARY KEY, tenant int NOT NULL, created_at timestamptz NOT NULL);
             CREATE INDEX q_created_at ON q (created_at);"
        } else {
            "CREATE TABLE q (id int PRIMARY KEY, tenant int NOT NULL, created_at timestamptz NOT NULL);"
        },
    );
    app.batch_execute(if by_index {
        "INSERT INTO q SELECT g, g % 2, now() - interval '90 days' + g * interval '1 second'
           FROM generate_series(1, 1000) g;"
    } else {
        "INSERT INTO q SELECT g, g % 2, now() - interval '90 days' FROM generate_series(1, 1000) g;"
    })
    .unwrap();
    c.execute(
        "postgres",
        "
         CREATE TABLE del_log (id int, tenant int, xid xid8, at timestamptz);
         -- Sweeps run user code with search_path = pg_catalog, pg_temp (docs/security.md):
         -- a trigger that names a table in public says where to find it.
         CREATE FUNCTION log_del() RETURNS trigger LANGUAGE plpgsql SET search_path = public AS $$
         BEGIN INSERT INTO del_log VALUES (OLD.id, OLD.tenant, pg_current_xact_id(), clock_timestamp()); PERFORM pg_sleep(0.003); RETURN OLD; END $$;
         CREATE TRIGGER log_del AFTER DELETE ON q FOR EACH ROW EXECUTE FUNCTION log_del();
         -- The trigger fires as the policy's owner (docs/security.md), who writes the log.
         GRANT SELECT, INSERT ON del_log TO admin;",
    );
    admin
        .batch_execute(
            "SELECT retention.add_policy(name => 'q', relation => 'q', kind => 'age', age_column => 'created_at',
                    older_than => '30 days', batch_size => 50);",
        )
        .unwrap();
    let url = c.url_as("postgres", "admin");
    let runner = std::thread::spawn(move || {
        let mut admin = Client::connect(&url, postgres::NoTls).unwrap();
        admin.batch_execute("CALL retention.run()").unwrap();
    });
    assert!(c.wait_until(std::time::Duration::from_secs(30), || count(
        &mut admin,
        "SELECT count(*) FROM del_log"
    ) > 100));
    (runner, admin)
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

/// Batches keep what they know about the table between batches of a run; a foreign key added
/// mid-run must still protect the rows it references from then on (a key that refuses deletes,
/// as declared by default: missing it, a batch would fail on the first referenced row).
#[test]
fn a_foreign_key_added_mid_run_protects_referenced_rows_from_the_next_batch() {
    foreign_key_added_mid_run_protects(false);
}

#[test]
fn a_foreign_key_added_mid_run_protects_referenced_rows_through_an_age_index() {
    foreign_key_added_mid_run_protects(true);
}

fn foreign_key_added_mid_run_protects(by_index: bool) {
    let c = Cluster::start(&[]);
    // The referencing rows are the application's, written before the run; the key is the
    // superuser's DDL, added mid-run.
    let (mut app, _) = set_up(&c, "CREATE TABLE refs (q_id int);");
    app.batch_execute("INSERT INTO refs SELECT g FROM generate_series(901, 1000) g;")
        .unwrap();
    let (runner, mut admin) = slow_run_under_way(&c, by_index);
    // Takes its lock between two batches; rows 901..1000 come last in physical order.
    c.execute(
        "postgres",
        "ALTER TABLE refs ADD FOREIGN KEY (q_id) REFERENCES q;",
    );
    runner.join().unwrap();
    assert_eq!(
        count(&mut admin, "SELECT count(*) FROM refs"),
        100,
        "the referencing rows stay"
    );
    assert_eq!(
        count(&mut admin, "SELECT count(*) FROM q WHERE id > 900"),
        100,
        "referenced rows survive"
    );
    assert_eq!(
        count(&mut admin, "SELECT count(*) FROM q WHERE id <= 900"),
        0,
        "unreferenced rows all go"
    );
}

#[test]
fn keep_below_the_floor_is_refused_and_lowering_the_floor_is_ledgered() {
    let c = Cluster::start(&[]);
    let (_, mut admin) = set_up(
        &c,
        "CREATE TABLE runs (id int PRIMARY KEY, src int NOT NULL, at timestamptz NOT NULL);
         CREATE TABLE feed (id int PRIMARY KEY, at timestamptz NOT NULL);",
    );
    admin.batch_execute(
        "SELECT retention.add_policy(name => 'kl', relation => 'runs', kind => 'keep_latest', group_by => ARRAY['src'],
                order_by => 'at', keep => 10, keep_floor => 5);
         SELECT retention.add_policy(name => 'feed', relation => 'feed', kind => 'age', age_column => 'at',
                older_than => '30 days', window_floor => '14 days');",
    )
    .unwrap();
    let refused = |admin: &mut Client, sql: &str, words: &str| {
        let (state, message) = expect_error(admin, sql);
        assert_eq!(state, "22023", "{sql}: {message}");
        assert!(message.contains(words), "{sql}: {message}");
    };
    refused(
        &mut admin,
        "SELECT retention.alter_policy('kl', keep => 4)",
        "below the policy's keep_floor 5",
    );
    refused(
        &mut admin,
        "SELECT retention.alter_policy('feed', older_than => '7 days')",
        "below the policy's window_floor 14 days",
    );
    refused(
        &mut admin,
        "SELECT retention.add_policy(name => 'v', relation => 'runs', kind => 'versions', group_by => ARRAY['src'],
                order_by => 'at', keep => 5, min_keep => 2, keep_floor => 3, age_column => 'at', older_than => '30 days')",
        "min_keep 2 is below the policy's keep_floor 3",
    );
    refused(
        &mut admin,
        "SELECT retention.add_policy(name => 'k2', relation => 'runs', kind => 'keep_latest', group_by => ARRAY['src'],
                order_by => 'at', keep => 5, min_keep => 2)",
        "min_keep applies to versions policies",
    );
    // alter raises a floor, never lowers it.
    refused(
        &mut admin,
        "SELECT retention.alter_policy('kl', keep_floor => 3)",
        "only lowered by retention.lower_floor",
    );
    refused(
        &mut admin,
        "SELECT retention.alter_policy('feed', window_floor => '7 days')",
        "only lowered by retention.lower_floor",
    );
    admin
        .batch_execute("SELECT retention.alter_policy('kl', keep_floor => 8)")
        .unwrap();
    refused(
        &mut admin,
        "SELECT retention.alter_policy('kl', keep => 7)",
        "keep_floor 8",
    );
    // lower_floor lowers, with who and why, and nothing else.
    refused(
        &mut admin,
        "SELECT retention.lower_floor('kl', 9, NULL, 'dpo@example.com', 'ticket 9')",
        "cannot raise keep_floor",
    );
    refused(
        &mut admin,
        "SELECT retention.lower_floor('kl', 2, NULL, 'dpo@example.com', ' ')",
        "reason must not be empty",
    );
    refused(
        &mut admin,
        "SELECT retention.lower_floor('kl', NULL, '1 day', 'dpo@example.com', 'x')",
        "no window_floor to lower",
    );
    admin
        .batch_execute(
            "SELECT retention.lower_floor('kl', 2, NULL, 'dpo@example.com', 'ticket 9');
         SELECT retention.lower_floor('feed', NULL, '0 seconds', 'dpo@example.com', 'ticket 10');",
        )
        .unwrap();
    let (actor, detail): (String, String) = admin
        .query_one(
            "SELECT actor, detail::text FROM retention.ledger WHERE method = 'lower_floor' AND policy = 'kl'",
            &[],
        )
        .map(|r| (r.get(0), r.get(1)))
        .unwrap();
    let detail: serde_json::Value = serde_json::from_str(&detail).unwrap();
    assert_eq!(actor, "dpo@example.com");
    assert_eq!(
        detail["keep_floor"],
        serde_json::json!({ "from": 8, "to": 2 })
    );
    assert_eq!(detail["reason"], "ticket 9");
    assert_eq!(
        count(
            &mut admin,
            "SELECT count(*) FROM retention.policies WHERE name = 'kl' AND keep_floor = 2"
        ),
        1
    );
    assert_eq!(
        count(
            &mut admin,
            "SELECT count(*) FROM retention.policies WHERE name = 'feed' AND window_floor IS NULL"
        ),
        1,
        "a zero window_floor removes the floor"
    );
    admin
        .batch_execute(
            "SELECT retention.alter_policy('kl', keep => 4);
         SELECT retention.alter_policy('feed', older_than => '7 days');",
        )
        .unwrap();
}

#[test]
fn a_linked_producer_is_swept_before_its_consumer() {
    let c = Cluster::start(&[]);
    // By name the inbox would go first; the link puts the outbox (the producer) first.
    let (mut app, mut admin) = set_up(
        &c,
        "CREATE TABLE outbox (id int PRIMARY KEY, at timestamptz NOT NULL);
         CREATE TABLE inbox (id int PRIMARY KEY, at timestamptz NOT NULL);
         CREATE TABLE zlog (id int PRIMARY KEY, at timestamptz NOT NULL);",
    );
    app.batch_execute(
        "INSERT INTO outbox SELECT g, now() - interval '90 days' FROM generate_series(1, 10) g;
         INSERT INTO inbox SELECT g, now() - interval '90 days' FROM generate_series(1, 10) g;
         INSERT INTO zlog SELECT g, now() - interval '90 days' FROM generate_series(1, 10) g;",
    )
    .unwrap();
    admin.batch_execute(
        "SELECT retention.add_policy(name => 'inbox', relation => 'inbox', kind => 'age', age_column => 'at', older_than => '31 days');
         SELECT retention.add_policy(name => 'outbox', relation => 'outbox', kind => 'age', age_column => 'at', older_than => '30 days');
         SELECT retention.add_policy(name => 'zlog', relation => 'zlog', kind => 'age', age_column => 'at', older_than => '40 days');
         SELECT retention.link_windows('outbox', 'inbox', '1 day');
         -- a chain: the inbox feeds a log that must outlive it
         SELECT retention.link_windows('inbox', 'zlog', '1 day');",
    )
    .unwrap();
    let order: Vec<String> = admin
        .query("SELECT name FROM retention._run_order(NULL)", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(order, vec!["outbox", "inbox", "zlog"]);
    admin.batch_execute("CALL retention.run()").unwrap();
    // The ledger shows the order: each policy's run entry after its producer's.
    let ledgered: Vec<String> = admin
        .query(
            "SELECT policy FROM retention.ledger WHERE method = 'run' ORDER BY id",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(ledgered, vec!["outbox", "inbox", "zlog"]);
    assert_eq!(count(&mut admin, "SELECT (SELECT count(*) FROM outbox) + (SELECT count(*) FROM inbox) + (SELECT count(*) FROM zlog)"), 0);
}

#[test]
fn referenced_parent_rows_survive_and_children_run_first() {
    let c = Cluster::start(&[]);
    let (mut app, mut admin) = set_up(
        &c,
        "CREATE TABLE parent (id int PRIMARY KEY, at timestamptz NOT NULL);
         CREATE TABLE child (id int PRIMARY KEY, parent_id int REFERENCES parent, at timestamptz NOT NULL);",
    );
    app.batch_execute(
        "INSERT INTO parent SELECT g, now() - interval '90 days' FROM generate_series(1, 10) g;
         -- children of parents 1..5 are old (will go), children of 6..7 are young (stay).
         INSERT INTO child SELECT g, g, now() - interval '90 days' FROM generate_series(1, 5) g;
         INSERT INTO child SELECT g, g, now() FROM generate_series(6, 7) g;",
    )
    .unwrap();
    admin.batch_execute(
        "-- registered parent first, so only the FK ordering can put the child first
         SELECT retention.add_policy(name => 'a_parent', relation => 'parent', kind => 'age', age_column => 'at', older_than => '30 days');
         SELECT retention.add_policy(name => 'b_child', relation => 'child', kind => 'age', age_column => 'at', older_than => '30 days');",
    )
    .unwrap();
    let order: Vec<String> = admin
        .query("SELECT name FROM retention._run_order(NULL)", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(order, vec!["b_child", "a_parent"]);
    admin.batch_execute("CALL retention.run()").unwrap();
    let parents: Vec<i32> = admin
        .query("SELECT id FROM parent ORDER BY id", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(
        parents,
        vec![6, 7],
        "parents of surviving children stay; the rest go in the same run"
    );
}

#[test]
fn run_cap_stops_and_ledgers_a_warning() {
    run_cap_stops(false);
}

#[test]
fn run_cap_stops_an_index_walk_and_ledgers_a_warning() {
    run_cap_stops(true);
}

fn run_cap_stops(by_index: bool) {
    let c = Cluster::start(&[]);
    outbox(&c, 2000);
    if by_index {
        c.execute(
            "postgres",
            "CREATE INDEX outbox_created_at ON outbox (created_at)",
        );
    }
    let mut admin = c.admin("postgres");
    age_policy(&mut admin, ", max_rows_per_run => 250");
    let eligible = count(
        &mut admin,
        "SELECT count(*) FROM outbox WHERE created_at < now() - interval '30 days'",
    );
    admin.batch_execute("CALL retention.run()").unwrap();
    assert_eq!(
        count(
            &mut admin,
            "SELECT sum(rows)::bigint FROM retention.ledger WHERE method = 'prune'"
        ),
        250
    );
    assert_eq!(
        count(
            &mut admin,
            "SELECT rows FROM retention.ledger WHERE method = 'cap_reached'"
        ),
        eligible - 250
    );
    assert_eq!(
        count(&mut admin, "SELECT backlog FROM retention.stats"),
        eligible - 250
    );
}

#[test]
fn preview_equals_the_next_run_for_every_kind() {
    let c = Cluster::start(&[]);
    outbox(&c, 3000);
    let (mut app, mut admin) = set_up(
        &c,
        "CREATE TABLE child (id int PRIMARY KEY, outbox_id bigint REFERENCES outbox);
         CREATE TABLE runs (id int PRIMARY KEY, src int NOT NULL, at timestamptz NOT NULL);
         CREATE TABLE ver (id int PRIMARY KEY, k int NOT NULL, at timestamptz NOT NULL);
         CREATE TABLE ent (id int PRIMARY KEY, e int NOT NULL, at timestamptz NOT NULL);",
    );
    app.batch_execute(
        "INSERT INTO child SELECT g, g * 7 FROM generate_series(100, 200) g;
         INSERT INTO runs SELECT g, g % 7, now() - make_interval(mins => g) FROM generate_series(1, 700) g;
         INSERT INTO ver SELECT g, g % 5, now() - make_interval(days => g) FROM generate_series(1, 500) g;
         INSERT INTO ent SELECT g, g % 40, now() - make_interval(days => 10 + (g % 40) * 3) FROM generate_series(1, 800) g;",
    )
    .unwrap();
    admin.batch_execute(
        "SELECT retention.add_policy(name => 'age', relation => 'outbox', kind => 'age', age_column => 'created_at',
                older_than => '30 days', terminal => $$status = 'sent'$$, batch_size => 333, max_rows_per_run => 1500);
         SELECT retention.place_hold('outbox', 'id % 11 = 0', 'sample', 'tester');
         SELECT retention.add_policy(name => 'kl', relation => 'runs', kind => 'keep_latest', group_by => ARRAY['src'],
                order_by => 'at', keep => 20, batch_size => 50);
         SELECT retention.add_policy(name => 'ver', relation => 'ver', kind => 'versions', group_by => ARRAY['k'],
                order_by => 'at', keep => 50, min_keep => 10, age_column => 'at', older_than => '100 days', batch_size => 40);
         SELECT retention.add_policy(name => 'ent', relation => 'ent', kind => 'entity', group_by => ARRAY['e'],
                age_column => 'at', older_than => '60 days', batch_size => 30, max_rows_per_run => 300);",
    )
    .unwrap();
    let previews: Vec<(String, i64, i64)> = admin
        .query(
            "SELECT policy, would_delete, backlog FROM retention.preview() ORDER BY policy",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    admin.batch_execute("CALL retention.run()").unwrap();
    for (policy, would_delete, _) in &previews {
        let deleted = count(&mut admin, &format!("SELECT coalesce(sum(rows), 0)::bigint FROM retention.ledger WHERE method = 'prune' AND policy = '{policy}'"));
        assert_eq!(
            deleted, *would_delete,
            "policy {policy}: preview said {would_delete}, run deleted {deleted}"
        );
        assert!(*would_delete > 0, "policy {policy} should have had work");
    }
    let age_backlog = previews.iter().find(|p| p.0 == "age").unwrap().2;
    assert!(
        age_backlog > 0,
        "the age policy is capped, so preview reports a backlog"
    );
}

#[test]
fn linked_windows_refuse_a_violating_alter() {
    let c = Cluster::start(&[]);
    let (_, mut admin) = set_up(
        &c,
        "CREATE TABLE outbox (id int PRIMARY KEY, at timestamptz NOT NULL);
         CREATE TABLE inbox (id int PRIMARY KEY, at timestamptz NOT NULL);",
    );
    admin.batch_execute(
        "SELECT retention.add_policy(name => 'outbox', relation => 'outbox', kind => 'age', age_column => 'at', older_than => '30 days');
         SELECT retention.add_policy(name => 'inbox', relation => 'inbox', kind => 'age', age_column => 'at', older_than => '31 days');
         SELECT retention.link_windows('outbox', 'inbox', '1 day');",
    )
    .unwrap();
    let (code, msg) = expect_error(
        &mut admin,
        "SELECT retention.alter_policy('inbox', older_than => '30 days 12 hours')",
    );
    assert_eq!(code, "RT201");
    assert!(
        msg.contains("outbox") && msg.contains("inbox") && msg.contains("31 days"),
        "{msg}"
    );
    let (code, _) = expect_error(
        &mut admin,
        "SELECT retention.alter_policy('outbox', older_than => '31 days')",
    );
    assert_eq!(code, "RT201");
    assert_eq!(
        count(&mut admin, "SELECT count(*) FROM retention.policy_history"),
        2,
        "refused alters leave no version"
    );
    admin
        .batch_execute("SELECT retention.alter_policy('inbox', older_than => '40 days')")
        .unwrap();
    assert_eq!(
        count(
            &mut admin,
            "SELECT version::bigint FROM retention.policies WHERE name = 'inbox'"
        ),
        2
    );
    let (code, _) = expect_error(
        &mut admin,
        "SELECT retention.link_windows('inbox', 'outbox', '0')",
    );
    assert_eq!(code, "RT201");
}

#[test]
fn replay_check_raises_with_the_boundary_in_the_message() {
    let c = Cluster::start(&[]);
    let (_, mut admin) = set_up(
        &c,
        "CREATE TABLE outbox (id int PRIMARY KEY, at timestamptz NOT NULL);",
    );
    admin.batch_execute(
        "SELECT retention.add_policy(name => 'outbox', relation => 'outbox', kind => 'age', age_column => 'at', older_than => '30 days');",
    )
    .unwrap();
    let floor: String = admin
        .query_one("SELECT retention.replay_floor('outbox')::text", &[])
        .unwrap()
        .get(0);
    admin
        .batch_execute("SELECT retention.check_replay('outbox', now() - interval '29 days')")
        .unwrap();
    let (code, msg) = expect_error(
        &mut admin,
        "SELECT retention.check_replay('outbox', now() - interval '31 days')",
    );
    assert_eq!(code, "RT301");
    assert!(
        msg.contains(&floor[..16]),
        "message {msg} should name the boundary {floor}"
    );
}

#[test]
fn ledger_and_holds_refuse_update_delete_truncate() {
    let c = Cluster::start(&[]);
    let (_, mut admin) = set_up(
        &c,
        "CREATE TABLE t (id int PRIMARY KEY, at timestamptz NOT NULL);",
    );
    // Superuser kept for the tampering: not even a superuser may rewrite the history.
    let mut su = c.connect("postgres");
    admin.batch_execute(
        "SELECT retention.place_hold('t', 'id = 1', 'r', 'a');
         SELECT retention.add_policy(name => 't', relation => 't', kind => 'age', age_column => 'at', older_than => '1 day');",
    )
    .unwrap();
    for sql in [
        "UPDATE retention.ledger_entries SET rows = 0",
        "DELETE FROM retention.ledger_entries",
        "TRUNCATE retention.ledger_entries",
        "UPDATE retention.hold_records SET reason = 'x'",
        "DELETE FROM retention.hold_records",
        "TRUNCATE retention.hold_lifts",
        "DELETE FROM retention.policy_versions",
    ] {
        let (code, _) = expect_error(&mut su, sql);
        assert_eq!(code, "RT401", "{sql}");
    }
    assert_eq!(
        count(&mut admin, "SELECT count(*) FROM retention.ledger"),
        1
    );
    assert_eq!(
        count(&mut admin, "SELECT count(*) FROM retention.policy_history"),
        1
    );
}

#[test]
fn bad_inputs_are_refused_with_documented_sqlstates_and_leave_the_catalog_unchanged() {
    let c = Cluster::start(&[]);
    let (_, mut admin) = set_up(
        &c,
        "CREATE TABLE t (id int PRIMARY KEY, status text, at timestamptz NOT NULL, tenant int);
         CREATE TABLE victim (id int);",
    );
    let base =
        "name => 'p', relation => 't', kind => 'age', age_column => 'at', older_than => '30 days'";
    let cases = [
        ("name => 'p', relation => 't', kind => 'age', age_column => 'nope', older_than => '30 days'", "42703"),
        ("name => 'p', relation => 't', kind => 'age', age_column => 'status', older_than => '30 days'", "42804"),
        ("name => 'p', relation => 't', kind => 'keep_latest', group_by => ARRAY['tenant'], order_by => 'at', keep => 0", "22023"),
        ("name => 'p', relation => 't', kind => 'versions', group_by => ARRAY['tenant'], order_by => 'at', keep => 2, min_keep => 3", "22023"),
        ("name => 'p', relation => 't', kind => 'keep_latest', group_by => ARRAY['tenant'], keep => 2", "22023"),
        ("name => 'p', relation => 't', kind => 'sometimes', age_column => 'at', older_than => '30 days'", "22023"),
        ("name => 'p', relation => 't', kind => 'age', age_column => 'at', older_than => '-1 day'", "22023"),
        (&format!("{base}, scope => 'id IN (SELECT id FROM victim)'"), "RT101"),
        (&format!("{base}, scope => 'random() < 0.5'"), "RT101"),
        (&format!("{base}, scope => 'tenant'"), "RT101"),
        (&format!("{base}, scope => 'count(*) > 1'"), "RT101"),
        (&format!("{base}, scope => $$true); DROP TABLE victim; SELECT (true$$"), "RT101"),
        (&format!("{base}, terminal => $$status = 'x' -- $$"), ""),
        (&format!("{base}, scope => 'no_such_column = 1'"), "RT101"),
        ("name => 'p', relation => 't', kind => 'age', age_column => 'at\"; DROP TABLE victim; --', older_than => '30 days'", "42703"),
        (&format!("{base}, action => 'archive_then_delete'"), "22023"),
        (&format!("{base}, batch_size => 0"), "22023"),
    ];
    for (args, expected) in cases {
        let sql = format!("SELECT retention.add_policy({args})");
        if expected.is_empty() {
            // A trailing comment cannot swallow the closing parenthesis: accepted, then dropped.
            admin.batch_execute(&sql).unwrap();
            admin
                .batch_execute("SELECT retention.drop_policy('p')")
                .unwrap();
            continue;
        }
        let (code, msg) = expect_error(&mut admin, &sql);
        assert_eq!(code, expected, "{sql}: {msg}");
    }
    assert_eq!(
        count(&mut admin, "SELECT count(*) FROM retention.policies"),
        0
    );
    assert_eq!(
        count(
            &mut admin,
            "SELECT count(*) FROM retention.policy_history WHERE change = 'add'"
        ),
        1
    );
    assert_eq!(
        count(&mut admin, "SELECT count(*) FROM victim"),
        0,
        "victim table still exists"
    );
    let (code, _) = expect_error(
        &mut admin,
        "SELECT retention.place_hold('t', '1; DELETE FROM t', 'r', 'a')",
    );
    assert_eq!(code, "RT101");
    let (code, _) = expect_error(
        &mut admin,
        "SELECT retention.place_hold('t', 'id = 1', '', 'a')",
    );
    assert_eq!(code, "22023");
    let (code, _) = expect_error(&mut admin, "SELECT retention.drop_policy('nope')");
    assert_eq!(code, "42704");
    admin
        .batch_execute(&format!("SELECT retention.add_policy({base})"))
        .unwrap();
    let (code, _) = expect_error(&mut admin, &format!("SELECT retention.add_policy({base})"));
    assert_eq!(code, "42710");
}

#[test]
fn roles_gate_the_surface_and_nothing_is_granted_to_public() {
    let c = Cluster::start(&[]);
    // Superuser kept: this test is about privileges; it makes its roles and takes each in turn.
    let mut db = c.connect("postgres");
    db.batch_execute(
        "CREATE TABLE t (id int PRIMARY KEY, at timestamptz NOT NULL);
         CREATE ROLE app LOGIN; CREATE ROLE archiver LOGIN IN ROLE retention_archiver;
         CREATE ROLE admin LOGIN IN ROLE retention_admin;
         GRANT SELECT, DELETE ON t TO admin;",
    )
    .unwrap();
    let add = "SELECT retention.add_policy(name => 'p', relation => 't', kind => 'age', age_column => 'at', older_than => '1 day')";
    for role in ["app", "archiver"] {
        db.batch_execute(&format!("SET ROLE {role}")).unwrap();
        let (code, _) = expect_error(&mut db, add);
        assert_eq!(code, "42501", "{role} must not add policies");
        let (code, _) = expect_error(
            &mut db,
            "SELECT retention.place_hold('t', 'true', 'r', 'a')",
        );
        assert_eq!(code, "42501", "{role} must not place holds");
        let (code, _) = expect_error(&mut db, "SELECT count(*) FROM retention.ledger");
        assert_eq!(code, "42501", "{role} must not read the ledger");
        db.batch_execute("RESET ROLE").unwrap();
    }
    db.batch_execute("SET ROLE archiver").unwrap();
    let (code, _) = expect_error(&mut db, "DELETE FROM t");
    assert_eq!(
        code, "42501",
        "the archiver role has no rights on the table itself"
    );
    db.batch_execute("RESET ROLE; SET ROLE admin").unwrap();
    db.batch_execute(add).unwrap();
    db.batch_execute("CALL retention.run()").unwrap();
    assert_eq!(
        count(
            &mut db,
            "SELECT count(*) FROM retention.ledger WHERE method = 'run' AND actor = 'admin'"
        ),
        1
    );
    db.batch_execute("RESET ROLE; CREATE TABLE other (id int PRIMARY KEY, at timestamptz NOT NULL); SET ROLE admin").unwrap();
    let (code, _) = expect_error(
        &mut db,
        "SELECT retention.add_policy(name => 'q', relation => 'other', kind => 'age', age_column => 'at', older_than => '1 day')",
    );
    assert_eq!(
        code, "42501",
        "an admin may only govern tables it may delete from"
    );
}

#[test]
fn manual_run_skips_a_policy_whose_lock_is_held() {
    let c = Cluster::start(&[]);
    outbox(&c, 1000);
    let mut admin = c.admin("postgres");
    age_policy(&mut admin, "");
    // Superuser kept: it stands in for another pruner by taking the policy's lock itself.
    let mut other = c.connect("postgres");
    other
        .batch_execute("SELECT pg_advisory_lock(retention._lock_key(id)) FROM retention.policies")
        .unwrap();
    let before = count(&mut admin, "SELECT count(*) FROM outbox");
    admin.batch_execute("CALL retention.run()").unwrap();
    assert_eq!(
        count(&mut admin, "SELECT count(*) FROM outbox"),
        before,
        "no double prune"
    );
    assert_eq!(
        count(&mut admin, "SELECT skipped_locked FROM retention.stats"),
        1
    );
    other
        .batch_execute("SELECT pg_advisory_unlock_all()")
        .unwrap();
    admin.batch_execute("CALL retention.run()").unwrap();
    assert!(count(&mut admin, "SELECT count(*) FROM outbox") < before);
}

#[test]
fn a_run_error_is_ledgered_and_other_policies_still_run() {
    let c = Cluster::start(&[]);
    outbox(&c, 1000);
    let (_, mut admin) = set_up(
        &c,
        "CREATE TABLE gone (id int PRIMARY KEY, at timestamptz NOT NULL);",
    );
    admin.batch_execute(
        "SELECT retention.add_policy(name => 'gone', relation => 'gone', kind => 'age', age_column => 'at', older_than => '1 day');",
    )
    .unwrap();
    c.execute("postgres", "DROP TABLE gone;");
    age_policy(&mut admin, "");
    // The run goes on past the failed policy, then says it failed (RT601).
    let (code, message) = expect_error(&mut admin, "CALL retention.run()");
    assert_eq!(code, "RT601", "{message}");
    assert_eq!(
        count(
            &mut admin,
            "SELECT count(*) FROM outbox WHERE created_at < now() - interval '30 days'"
        ),
        0
    );
    let err: Option<String> = admin
        .query_one(
            "SELECT last_error FROM retention.stats WHERE policy = 'gone'",
            &[],
        )
        .unwrap()
        .get(0);
    assert!(err.unwrap_or_default().contains("no longer exists"));
}

/// A stream table: seq 1..100, row `s` created `100.5 - s` days ago, so under a 30-day window
/// rows 1..70 are eligible; the policy orders the stream by seq. Returns the admin's
/// connection.
fn stream(c: &Cluster) -> Client {
    let (mut app, mut admin) = set_up(
        c,
        "CREATE TABLE stream (seq bigint PRIMARY KEY, created_at timestamptz NOT NULL);",
    );
    app.batch_execute(
        "INSERT INTO stream SELECT s, now() - make_interval(days => (101 - s)::int) + interval '12 hours'
                              FROM generate_series(1, 100) s;",
    )
    .unwrap();
    admin
        .batch_execute(
            "SELECT retention.add_policy(name => 'stream', relation => 'stream', kind => 'age',
                    age_column => 'created_at', older_than => '30 days', order_by => 'seq', batch_size => 7);",
        )
        .unwrap();
    admin
}

/// (eligible, pinned, would_delete) of a policy's preview.
fn eligible_pinned_deleted(db: &mut Client, policy: &str) -> (i64, i64, i64) {
    let row = db
        .query_one(
            "SELECT eligible, pinned, would_delete FROM retention.preview($1)",
            &[&policy],
        )
        .unwrap();
    (row.get(0), row.get(1), row.get(2))
}

/// (pinned, would_delete) of the stream policy's preview.
fn pins(db: &mut Client) -> (i64, i64) {
    let (_, pinned, would_delete) = eligible_pinned_deleted(db, "stream");
    (pinned, would_delete)
}

fn report(db: &mut Client, consumer: &str, epoch: i64, position: &str) -> String {
    db.query_one(
        "SELECT retention.report_position('stream', $1, $2, $3)",
        &[&consumer, &epoch, &position],
    )
    .unwrap()
    .get(0)
}

fn run_stream(db: &mut Client) -> (i64, i64) {
    db.batch_execute("CALL retention.run('stream')").unwrap();
    let row = db
        .query_one("SELECT count(*), min(seq) FROM stream", &[])
        .unwrap();
    (row.get(0), row.get(1))
}

#[test]
fn consumer_floors_pin_rows_refuse_stale_epochs_unpin_on_lapse_and_report_bootstrap() {
    let c = Cluster::start(&[]);
    let mut admin = stream(&c);
    let register = |admin: &mut Client, consumer: &str, lease: &str| -> i64 {
        admin
            .query_one(
                "SELECT retention.register_consumer('stream', $1, $2::text::interval)",
                &[&consumer, &lease],
            )
            .unwrap()
            .get(0)
    };
    assert_eq!(pins(&mut admin), (0, 70), "no consumer: the window alone");

    // Registered and not yet reported: every row stays.
    let e1 = register(&mut admin, "c1", "1 hour");
    assert_eq!(pins(&mut admin), (70, 0));
    assert_eq!(
        run_stream(&mut admin),
        (100, 1),
        "nothing deleted before the first report"
    );

    // A report pins from its position on; the rows before it go.
    assert_eq!(report(&mut admin, "c1", e1, "40"), "40");
    assert_eq!(pins(&mut admin), (31, 39));
    assert_eq!(run_stream(&mut admin), (61, 40));

    // A lower or duplicate report never moves progress back.
    assert_eq!(report(&mut admin, "c1", e1, "35"), "40");
    assert_eq!(report(&mut admin, "c1", e1, "40"), "40");
    assert_eq!(
        scalar(
            &mut admin,
            "SELECT position::bigint FROM retention.consumers WHERE consumer = 'c1'"
        ),
        40
    );

    // Registering again is a new epoch: the old one is fenced off, an unissued one refused,
    // and until the new epoch's first report every row stays.
    let e2 = register(&mut admin, "c1", "1 hour");
    assert!(e2 > e1);
    let refused = |admin: &mut Client, sql: &str, state: &str, words: &str| {
        let (s, message) = expect_error(admin, sql);
        assert_eq!(s, state, "{sql}: {message}");
        assert!(message.contains(words), "{sql}: {message}");
    };
    refused(
        &mut admin,
        &format!("SELECT retention.report_position('stream', 'c1', {e1}, '60')"),
        "RT311",
        &format!("epoch {e1} is stale"),
    );
    refused(
        &mut admin,
        &format!(
            "SELECT retention.report_position('stream', 'c1', {}, '60')",
            e2 + 100
        ),
        "RT311",
        "never issued",
    );
    assert_eq!(pins(&mut admin), (31, 0));
    // Past the head (the newest row, 100) is refused; so is a value of another type.
    refused(
        &mut admin,
        &format!("SELECT retention.report_position('stream', 'c1', {e2}, '101')"),
        "RT312",
        "past the head 100",
    );
    refused(
        &mut admin,
        &format!("SELECT retention.report_position('stream', 'c1', {e2}, 'ten')"),
        "22P02",
        "bigint",
    );

    // Two consumers: the lowest live position pins; the window still applies on top.
    assert_eq!(report(&mut admin, "c1", e2, "95"), "95");
    let e3 = register(&mut admin, "c2", "4 seconds");
    assert_eq!(report(&mut admin, "c2", e3, "45"), "45");
    assert_eq!(pins(&mut admin), (26, 5));
    assert_eq!(run_stream(&mut admin), (56, 45));

    // A lapsed lease stops pinning, and the lapsed consumer's reports are refused.
    std::thread::sleep(std::time::Duration::from_millis(4500));
    assert_eq!(
        pins(&mut admin),
        (0, 26),
        "c1 at 95 pins nothing inside the window"
    );
    refused(
        &mut admin,
        &format!("SELECT retention.report_position('stream', 'c2', {e3}, '50')"),
        "RT313",
        "lease lapsed",
    );
    assert_eq!(run_stream(&mut admin), (30, 71), "the window keeps 71..100");

    // Below the oldest surviving row, a consumer must bootstrap.
    let status = |admin: &mut Client, consumer: &str| -> (i64, Option<String>, bool, bool) {
        let r = admin
            .query_one(
                "SELECT epoch, floor, requires_bootstrap, pinning FROM retention.consumer_status('stream', $1)",
                &[&consumer],
            )
            .unwrap();
        (r.get(0), r.get(1), r.get(2), r.get(3))
    };
    assert_eq!(
        status(&mut admin, "c2"),
        (e3, Some("45".into()), true, false)
    );
    assert_eq!(
        status(&mut admin, "c1"),
        (e2, Some("95".into()), false, true)
    );

    // Unregistered, a consumer pins nothing; the ledger has every registration.
    admin
        .batch_execute(
            "SELECT retention.unregister_consumer('stream', 'c1');
         SELECT retention.unregister_consumer('stream', 'c2');",
        )
        .unwrap();
    refused(
        &mut admin,
        "SELECT retention.unregister_consumer('stream', 'c1')",
        "42704",
        "not registered",
    );
    refused(
        &mut admin,
        &format!("SELECT retention.report_position('stream', 'c1', {e2}, '96')"),
        "42704",
        "not registered",
    );
    assert_eq!(
        scalar(&mut admin, "SELECT count(*) FROM retention.ledger WHERE method = 'consumer_register' AND policy = 'stream'"),
        3
    );
    assert_eq!(
        scalar(&mut admin, "SELECT count(*) FROM retention.ledger WHERE method = 'consumer_unregister' AND policy = 'stream'"),
        2
    );

    // Refusals at registration: no order_by, a delete policy only, a positive lease.
    set_up(
        &c,
        "CREATE TABLE plain (id int PRIMARY KEY, at timestamptz NOT NULL);",
    );
    admin
        .batch_execute(
            "SELECT retention.add_policy(name => 'plain', relation => 'plain', kind => 'age',
                age_column => 'at', older_than => '1 day');",
        )
        .unwrap();
    refused(
        &mut admin,
        "SELECT retention.register_consumer('plain', 'c', '1 hour')",
        "22023",
        "has no order_by",
    );
    refused(
        &mut admin,
        "SELECT retention.register_consumer('stream', 'c', '0 seconds')",
        "22023",
        "lease must be a positive interval",
    );

    // Reporting needs the right to read the order column (and to be the consumer's reporter).
    c.execute(
        "postgres",
        "CREATE ROLE reader LOGIN IN ROLE retention_consumer;",
    );
    admin
        .batch_execute("SELECT retention.register_consumer('stream', 'c4', '1 hour', 'reader');")
        .unwrap();
    let e4: i64 = admin
        .query_one(
            "SELECT epoch FROM retention.consumers WHERE consumer = 'c4'",
            &[],
        )
        .unwrap()
        .get(0);
    let mut reader = c.connect_as("postgres", "reader");
    refused(
        &mut reader,
        &format!("SELECT retention.report_position('stream', 'c4', {e4}, '80')"),
        "42501",
        "SELECT on column seq",
    );
    c.execute("postgres", "GRANT SELECT (seq) ON stream TO reader");
    assert_eq!(report(&mut reader, "c4", e4, "80"), "80");
    assert_eq!(pins(&mut admin), (0, 0));
}

#[test]
fn consumer_floors_pin_keep_latest_and_entity_groups() {
    let c = Cluster::start(&[]);
    // Two sources of 10 runs each (seq 1..20, source = seq % 2); keep the newest 2 per source.
    let (mut app, mut admin) = set_up(
        &c,
        "CREATE TABLE runs (seq bigint PRIMARY KEY, src int NOT NULL, at timestamptz NOT NULL);
         CREATE TABLE docs (seq bigint PRIMARY KEY, doc int NOT NULL, at timestamptz NOT NULL);",
    );
    app.batch_execute(
        "INSERT INTO runs SELECT s, s % 2, now() - make_interval(days => (21 - s)::int) FROM generate_series(1, 20) s;
         INSERT INTO docs SELECT s, (s - 1) / 5, now() - make_interval(days => (101 - s)::int) FROM generate_series(1, 100) s;",
    )
    .unwrap();
    admin.batch_execute(
        "SELECT retention.add_policy(name => 'runs', relation => 'runs', kind => 'keep_latest',
                group_by => ARRAY['src'], order_by => 'seq', keep => 2);
         SELECT retention.add_policy(name => 'docs', relation => 'docs', kind => 'entity',
                group_by => ARRAY['doc'], age_column => 'at', older_than => '30 days', order_by => 'seq');
         SELECT retention.report_position('runs', 'r', retention.register_consumer('runs', 'r', '1 hour'), '9');
         SELECT retention.report_position('docs', 'd', retention.register_consumer('docs', 'd', '1 hour'), '33');",
    )
    .unwrap();
    // keep_latest: 16 rows past the newest 2 per source, of which 1..8 are below the floor.
    assert_eq!(eligible_pinned_deleted(&mut admin, "runs"), (16, 8, 8));
    // entity: docs 0..13 (seq 1..70) expired; the group holding seq 33 (doc 6, seq 31..35) and
    // every later one stay whole.
    assert_eq!(eligible_pinned_deleted(&mut admin, "docs"), (70, 40, 30));
    admin.batch_execute("CALL retention.run()").unwrap();
    assert_eq!(scalar(&mut admin, "SELECT min(seq) FROM runs"), 9);
    assert_eq!(scalar(&mut admin, "SELECT count(*) FROM runs"), 12);
    assert_eq!(scalar(&mut admin, "SELECT min(seq) FROM docs"), 31);
    assert_eq!(scalar(&mut admin, "SELECT count(*) FROM docs"), 70);
}

#[test]
fn max_wal_rate_paces_a_run_and_ledgers_its_pauses() {
    let c = Cluster::start(&[
        "pg_retention.max_wal_rate = '256kB'",
        "pg_retention.max_replica_lag = 0",
        // Only the WAL budget's pauses here (adaptive pacing has its own test).
        "pg_retention.adaptive_pacing = off",
    ]);
    let (mut app, mut admin) = set_up(
        &c,
        "CREATE TABLE feed (id bigserial PRIMARY KEY, at timestamptz NOT NULL, body text);",
    );
    app.batch_execute(
        "INSERT INTO feed (at, body) SELECT now() - interval '40 days', repeat('x', 100) FROM generate_series(1, 8000);",
    )
    .unwrap();
    admin.batch_execute(
        "SELECT retention.add_policy(name => 'feed', relation => 'feed', kind => 'age', age_column => 'at',
                older_than => '30 days', batch_size => 500);",
    )
    .unwrap();
    c.execute("postgres", "CHECKPOINT;");
    let lsn_before: String = admin
        .query_one("SELECT pg_current_wal_lsn()::text", &[])
        .unwrap()
        .get(0);
    let started = std::time::Instant::now();
    admin.batch_execute("CALL retention.run('feed')").unwrap();
    let elapsed = started.elapsed().as_secs_f64();
    assert_eq!(count(&mut admin, "SELECT count(*) FROM feed"), 0);
    let wal: f64 = admin
        .query_one(
            "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::text::pg_lsn)::float8",
            &[&lsn_before],
        )
        .unwrap()
        .get(0);
    // The budget allows a second of burst and then 256 kB a second; the last step is not paced
    // (nothing follows it), so at least (WAL - burst - a step's WAL) / rate seconds passed.
    let rate = 256.0 * 1024.0;
    let floor = (wal - rate) / rate - 1.0;
    assert!(
        elapsed >= floor,
        "{wal} bytes of WAL in {elapsed:.2} s at {rate} B/s (expected at least {floor:.2} s)"
    );
    let (pauses, seconds): (i64, f64) = {
        let r = admin
            .query_one(
                "SELECT count(*), coalesce(sum((detail->>'seconds')::float8), 0) FROM retention.ledger
                  WHERE method = 'pause' AND detail->>'reason' = 'wal_rate'",
                &[],
            )
            .unwrap();
        (r.get(0), r.get(1))
    };
    assert!(pauses >= 1 && seconds > 0.0, "{pauses} pauses, {seconds} s");
    assert_eq!(
        count(
            &mut admin,
            "SELECT pauses_total FROM retention.stats WHERE policy = 'feed'"
        ),
        pauses
    );
}

/// `detail.paced` of the last run of policy `feed`: what adaptive pacing did in it.
fn last_run_paced(db: &mut Client) -> serde_json::Value {
    serde_json::from_str(
        db.query_one(
            "SELECT detail->>'paced' FROM retention.ledger WHERE method = 'run' AND policy = 'feed'
              ORDER BY id DESC LIMIT 1",
            &[],
        )
        .unwrap()
        .get(0),
    )
    .unwrap()
}

#[test]
fn adaptive_pacing_shrinks_steps_whose_flush_is_slow_and_ledgers_its_pauses_once_per_run() {
    // A flush target below any fsync (one of 8 kB takes about 0.15 ms on this machine), steps
    // of about 20 MB of WAL (their first change of each page after the checkpoint below logs
    // the whole page), and neither the WAL writer nor the background writer flushing the
    // sweep's commits first: each step after the first waits for its own flush (the WAL since
    // the last full segment), pauses and shrinks the next.
    let c = Cluster::start(&[
        // The fixture turns fsync off for speed; here flushes are what is measured.
        "fsync = on",
        "pg_retention.pacing_flush_target = 0.1",
        "pg_retention.max_replica_lag = 0",
        "wal_writer_delay = '10s'",
        "wal_writer_flush_after = '1GB'",
        "bgwriter_lru_maxpages = 0",
    ]);
    let (mut app, mut admin) = set_up(
        &c,
        "CREATE TABLE feed (id bigserial PRIMARY KEY, at timestamptz NOT NULL, body text);",
    );
    app.batch_execute(
        "INSERT INTO feed (at, body) SELECT now() - interval '40 days', repeat(md5(g::text), 30)
           FROM generate_series(1, 100000) g;",
    )
    .unwrap();
    admin.batch_execute(
        "SELECT retention.add_policy(name => 'feed', relation => 'feed', kind => 'age', age_column => 'at',
                older_than => '30 days', batch_size => 20000);",
    )
    .unwrap();
    c.execute("postgres", "CHECKPOINT;");
    admin.batch_execute("CALL retention.run('feed')").unwrap();
    assert_eq!(count(&mut admin, "SELECT count(*) FROM feed"), 0);
    let paced = last_run_paced(&mut admin);
    let pauses = paced["pauses"].as_i64().unwrap();
    assert!(pauses >= 1, "{paced}");
    assert!(paced["max_flush_ms"].as_f64().unwrap() > 0.1, "{paced}");
    assert!(paced["min_step_rows"].as_i64().unwrap() < 20000, "{paced}");
    // The steps shrank: some prune deleted fewer rows than batch_size before the last one.
    assert!(
        count(
            &mut admin,
            "SELECT count(*) FROM (SELECT rows, lead(id) OVER (ORDER BY id) AS next
                                     FROM retention.ledger WHERE method = 'prune') b
              WHERE rows < 20000 AND next IS NOT NULL"
        ) >= 1
    );
    // One pause record for the run, with the run's count and seconds, counted by the stats.
    let (records, ledgered, seconds): (i64, i64, f64) = {
        let r = admin
            .query_one(
                "SELECT count(*), sum((detail->>'pauses')::bigint)::bigint, sum((detail->>'seconds')::float8)
                   FROM retention.ledger WHERE method = 'pause' AND detail->>'reason' = 'adaptive'",
                &[],
            )
            .unwrap();
        (r.get(0), r.get(1), r.get(2))
    };
    assert_eq!((records, ledgered), (1, pauses));
    assert!(seconds > 0.0);
    assert_eq!(
        count(
            &mut admin,
            "SELECT pauses_total FROM retention.stats WHERE policy = 'feed'"
        ),
        pauses
    );

    // Off: steps of batch_size back to back, no pause.
    app.batch_execute(
        "INSERT INTO feed (at, body) SELECT now() - interval '40 days', repeat(md5(g::text), 30)
           FROM generate_series(1, 60000) g;",
    )
    .unwrap();
    // Superuser-settable only (docs/configuration.md): the superuser sets it for the admin's
    // sessions, and the admin connects again.
    c.execute(
        "postgres",
        "ALTER ROLE admin SET pg_retention.adaptive_pacing = off",
    );
    let mut admin = c.admin("postgres");
    admin.batch_execute("CALL retention.run('feed')").unwrap();
    assert_eq!(count(&mut admin, "SELECT count(*) FROM feed"), 0);
    let last = last_run_paced(&mut admin);
    assert_eq!(last["pauses"], 0, "{last}");
    assert!(last["step_rows"].is_null(), "{last}");
    assert_eq!(
        count(
            &mut admin,
            "SELECT count(*) FROM retention.ledger WHERE method = 'pause'"
        ),
        1
    );
    assert_eq!(
        count(
            &mut admin,
            "SELECT count(*) FROM (SELECT rows FROM retention.ledger WHERE method = 'prune' ORDER BY id DESC LIMIT 3) b
              WHERE rows = 20000"
        ),
        3
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

/// A `CALL retention.run()` cancelled mid-run (its statement timeout) leaves its pruner lock in
/// the session, as any session lock outlives an error; the session's next run of the policy lets
/// go of it first, so after that run no lock is left and other sessions run the policy again.
#[test]
fn an_interrupted_run_does_not_keep_its_lock_past_the_sessions_next_run() {
    let c = Cluster::start(&[]);
    let (mut app, mut admin) = set_up(
        &c,
        "CREATE FUNCTION public.slow(int) RETURNS boolean LANGUAGE plpgsql IMMUTABLE AS $$
         BEGIN PERFORM pg_catalog.pg_sleep(0.2); RETURN true; END $$;
         CREATE TABLE t (id int PRIMARY KEY, created_at timestamptz NOT NULL);",
    );
    app.batch_execute(
        "INSERT INTO t SELECT g, now() - interval '90 days' FROM generate_series(1, 50) g;",
    )
    .unwrap();
    admin
        .batch_execute(
            "SELECT retention.add_policy(name => 't', relation => 't', kind => 'age',
                age_column => 'created_at', older_than => '30 days', scope => 'public.slow(id)');",
        )
        .unwrap();
    let mut a = c.admin("postgres");
    a.batch_execute("SET statement_timeout = '500ms'").unwrap();
    let (code, _) = expect_error(&mut a, "CALL retention.run('t')");
    assert_eq!(code, "57014");
    let held =
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid <> pg_backend_pid()";
    assert_eq!(scalar(&mut admin, held), 1, "the interrupted run's lock");
    admin
        .batch_execute("SELECT retention.alter_policy(name => 't', scope => 'true')")
        .unwrap();
    a.batch_execute("RESET statement_timeout").unwrap();
    a.batch_execute("CALL retention.run('t')").unwrap();
    assert_eq!(scalar(&mut admin, "SELECT count(*) FROM t"), 0);
    assert_eq!(scalar(&mut admin, held), 0, "no lock left in the session");
}

/// Issue 36: a run that failed does not look like success. `good` is swept and committed,
/// `bad` (its DELETE trigger raises) ends in error, and `CALL retention.run()` raises RT601 at
/// its end naming `bad` with the ledger id of its failed run.
#[test]
fn a_run_with_a_failed_policy_raises_rt601_after_committing_the_others() {
    let c = Cluster::start(&[]);
    let (mut app, mut admin) = set_up(
        &c,
        "CREATE TABLE good (id int PRIMARY KEY, created_at timestamptz NOT NULL);
         CREATE TABLE bad (id int PRIMARY KEY, created_at timestamptz NOT NULL);
         CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN RAISE EXCEPTION 'refused by the application'; END $$;
         CREATE TRIGGER refuse BEFORE DELETE ON bad FOR EACH ROW EXECUTE FUNCTION refuse();",
    );
    app.batch_execute(
        "INSERT INTO good SELECT g, now() - interval '2 days' FROM generate_series(1, 10) g;
         INSERT INTO bad SELECT g, now() - interval '2 days' FROM generate_series(1, 10) g;",
    )
    .unwrap();
    for t in ["good", "bad"] {
        admin
            .batch_execute(&format!(
                "SELECT retention.add_policy(name => '{t}', relation => '{t}', kind => 'age',
                        age_column => 'created_at', older_than => '1 day')"
            ))
            .unwrap();
    }
    let (code, message) = expect_error(&mut admin, "CALL retention.run()");
    assert_eq!(code, "RT601", "{message}");
    let failed_run = scalar(
        &mut admin,
        "SELECT max(id) FROM retention.ledger WHERE policy = 'bad' AND method = 'run'
            AND detail->>'outcome' = 'error'",
    );
    assert!(
        message.contains(&format!("bad (ledger id {failed_run})")) && !message.contains("good"),
        "{message}"
    );
    assert_eq!(
        count(&mut admin, "SELECT count(*) FROM good"),
        0,
        "good's sweep is committed"
    );
    assert_eq!(count(&mut admin, "SELECT count(*) FROM bad"), 10);
    // Only the good policy: no error.
    admin.batch_execute("CALL retention.run('good')").unwrap();
}

/// Issue 36: a policy whose lock another session keeps is skipped run after run; health()
/// names it once it was skipped three times in a row since its last run.
#[test]
fn health_names_a_policy_skipped_as_locked_three_runs_in_a_row() {
    let c = Cluster::start(&[]);
    let (mut app, mut admin) = set_up(
        &c,
        "CREATE TABLE t (id int PRIMARY KEY, created_at timestamptz NOT NULL);",
    );
    app.batch_execute("INSERT INTO t VALUES (1, now() - interval '2 days')")
        .unwrap();
    admin
        .batch_execute(
            "SELECT retention.add_policy(name => 't', relation => 't', kind => 'age',
                    age_column => 'created_at', older_than => '1 day')",
        )
        .unwrap();
    // The superuser plays the other pruner: retention._lock_key is the engine's, granted to
    // no admin, and a session advisory lock on it is what a stuck pooled session would hold.
    let mut other = c.connect("postgres");
    other
        .batch_execute(
            "SELECT pg_advisory_lock(retention._lock_key(id)) FROM retention.policies WHERE name = 't'",
        )
        .unwrap();
    let reasons = |admin: &mut Client| -> String {
        admin
            .query_one(
                "SELECT array_to_string(reasons, '; ') FROM retention.health() WHERE policy = 't'",
                &[],
            )
            .unwrap()
            .get(0)
    };
    for _ in 0..2 {
        admin.batch_execute("CALL retention.run()").unwrap();
    }
    assert!(
        !reasons(&mut admin).contains("skipped"),
        "two skips are not yet a pattern"
    );
    admin.batch_execute("CALL retention.run()").unwrap();
    let now = reasons(&mut admin);
    assert!(
        now.contains("skipped 3 times in a row since its last run"),
        "{now}"
    );
    other
        .batch_execute("SELECT pg_advisory_unlock_all()")
        .unwrap();
    admin.batch_execute("CALL retention.run()").unwrap();
    assert!(!reasons(&mut admin).contains("skipped"), "a run clears it");
    assert_eq!(count(&mut admin, "SELECT count(*) FROM t"), 0);
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
