//! Foreign keys and linked windows: referenced rows survive (also under a key added mid-run),
//! children and producers are swept first, and links refuse a violating alter.

use super::*;

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
