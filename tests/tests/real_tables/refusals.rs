//! Policies refused rather than governing other than asked: row-level security that would hide
//! rows (and the documented opt-in), options that would have no effect.

use super::*;

#[test]
fn row_level_security_that_would_hide_rows_is_refused() {
    let c = Cluster::start(&[]);
    let (mut app, mut admin) = set_up(
        &c,
        "CREATE TABLE history (id int PRIMARY KEY, owner_name text NOT NULL, at timestamptz NOT NULL);
         ALTER TABLE history ENABLE ROW LEVEL SECURITY;
         CREATE POLICY own_rows ON history USING (owner_name = current_user);",
    );
    // The owner (the superuser here) sees every row; app writes through a permissive policy.
    c.execute(
        "postgres",
        "CREATE POLICY app_writes ON history TO app USING (true) WITH CHECK (true)",
    );
    app.batch_execute(
        "INSERT INTO history SELECT g, 'u' || g % 4, now() - interval '10 days' FROM generate_series(1, 20) g",
    )
    .unwrap();
    let add = "SELECT retention.add_policy(name => 'history', relation => 'history', kind => 'age',
                      age_column => 'at', older_than => '1 day')";
    let (state, message) = expect_error(&mut admin, add);
    assert_eq!(state, "42501");
    assert!(message.contains("row-level security"), "{message}");

    // The documented opt-in governs only the rows admin sees, and preview and health say so.
    app.batch_execute(
        "INSERT INTO history SELECT g, 'admin', now() - interval '10 days' FROM generate_series(101, 105) g",
    )
    .unwrap();
    admin
        .batch_execute(
            "SELECT retention.add_policy(name => 'mine', relation => 'history', kind => 'age',
                    age_column => 'at', older_than => '1 day', visible_rows_only => true)",
        )
        .unwrap();
    assert_eq!(
        text(
            &mut admin,
            "SELECT would_delete || ' of ' || eligible || ', hidden ' || hidden_rows FROM retention.preview('mine')"
        ),
        "5 of 5, hidden 20"
    );
    assert!(text(
        &mut admin,
        "SELECT array_to_string(notes, '; ') FROM retention.health() WHERE policy = 'mine'"
    )
    .contains("visible_rows_only"));
    admin.batch_execute("CALL retention.run('mine')").unwrap();
    assert_eq!(
        scalar(&mut c.connect("postgres"), "SELECT count(*) FROM history"),
        20,
        "the rows admin cannot see stay"
    );
    admin
        .batch_execute("SELECT retention.drop_policy('mine')")
        .unwrap();

    // With BYPASSRLS the policy governs every row.
    c.execute("postgres", "ALTER ROLE admin BYPASSRLS");
    let mut admin = c.admin("postgres");
    admin.batch_execute(add).unwrap();
    assert_eq!(
        scalar(
            &mut admin,
            "SELECT would_delete FROM retention.preview('history')"
        ),
        20
    );
    // Losing it later makes the run fail closed, ledgered, instead of narrowing silently.
    c.execute("postgres", "ALTER ROLE admin NOBYPASSRLS");
    let mut admin = c.admin("postgres");
    let (state, _) = expect_error(&mut admin, "CALL retention.run()");
    assert_eq!(state, "RT601", "the run reports the failed policy");
    // Counted by the table's owner: admin's own reads are filtered now.
    assert_eq!(
        scalar(&mut c.connect("postgres"), "SELECT count(*) FROM history"),
        20
    );
    assert!(text(
        &mut admin,
        "SELECT detail->>'error' FROM retention.ledger WHERE method = 'error' ORDER BY id DESC LIMIT 1"
    )
    .contains("row-level security"));
}

#[test]
fn options_that_would_have_no_effect_are_refused() {
    let c = Cluster::start(&[]);
    let (_app, mut admin) = set_up(
        &c,
        "CREATE TABLE v (id int PRIMARY KEY, doc int NOT NULL, at timestamptz NOT NULL);",
    );
    for (options, what) in [
        (
            "kind => 'versions', group_by => ARRAY['doc'], order_by => 'at', keep => 5, min_keep => 2",
            "min_keep",
        ),
        (
            "kind => 'keep_latest', group_by => ARRAY['doc'], order_by => 'at', keep => 5, age_column => 'at', older_than => '7 days'",
            "older_than",
        ),
        (
            "kind => 'age', age_column => 'at', older_than => '7 days', keep => 3",
            "keep",
        ),
        (
            "kind => 'age', age_column => 'at', older_than => '7 days', group_by => ARRAY['doc']",
            "group_by",
        ),
        (
            "kind => 'versions', group_by => ARRAY['doc'], order_by => 'at', keep => 5, window_floor => '1 day'",
            "window_floor",
        ),
    ] {
        let (state, message) = expect_error(
            &mut admin,
            &format!("SELECT retention.add_policy(name => 'p', relation => 'v', {options})"),
        );
        assert_eq!(state, "22023", "{options}: {message}");
        assert!(
            message.starts_with(what),
            "{options}: the refusal names {what}: {message}"
        );
    }
    // The combination a user means by "older than 7 days, but keep the newest 5" is one
    // versions policy, which is accepted.
    admin
        .batch_execute(
            "SELECT retention.add_policy(name => 'p', relation => 'v', kind => 'versions',
                    group_by => ARRAY['doc'], order_by => 'at', keep => 2147483647, min_keep => 5,
                    age_column => 'at', older_than => '7 days')",
        )
        .unwrap();
}
