//! Guards and refusals: keep and window floors, the replay check, the append-only ledger, bad
//! inputs with their documented SQLSTATEs, and the roles that gate the surface.

use super::*;

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
