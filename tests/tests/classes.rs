//! Retention classes (`retention.classify`): every table can be declared what it is for
//! retention; a `source_of_truth` takes no policy; the class is in `retention.tables`, in the
//! table's comment, and survives pg_dump / restore.
//!
//! Production roles: tables by the superuser, classes and policies by `admin` (a member of
//! `retention_admin` with SELECT and DELETE on the tables).

use pg_retention_integration::{expect_error, scalar, succeed, text, Cluster};
use std::process::Command;

/// relation, retention_class, class, policies
type TableRow = (String, Option<String>, Option<String>, Vec<String>);

#[test]
fn classes_are_declared_listed_commented_and_a_source_of_truth_takes_no_policy() {
    let c = Cluster::start(&[]);
    c.execute(
        "postgres",
        "CREATE TABLE accounts (id int PRIMARY KEY, at timestamptz NOT NULL);
         COMMENT ON TABLE accounts IS 'Customer accounts.';
         CREATE TABLE outbox (id int PRIMARY KEY, at timestamptz NOT NULL);
         CREATE TABLE loose (id int);
         CREATE TABLE events (id int, at date NOT NULL) PARTITION BY RANGE (at);
         CREATE TABLE events_2026 PARTITION OF events FOR VALUES FROM ('2026-01-01') TO ('2027-01-01');",
    );
    c.grant_app_and_admin("postgres");
    let mut admin = c.admin("postgres");
    admin
        .batch_execute(
            "SELECT retention.classify('accounts', 'source_of_truth', 'the ledger of record');
             SELECT retention.classify('outbox', 'transport', 'delivered messages');
             SELECT retention.classify('events', 'source_of_truth', 'billing evidence');
             SELECT retention.add_policy(name => 'outbox', relation => 'outbox', kind => 'age',
                    age_column => 'at', older_than => '7 days');",
        )
        .unwrap();
    // A policy on a source of truth, or on a partition of one, is refused with why.
    for (table, column) in [("accounts", "at"), ("events_2026", "at")] {
        let (state, message) = expect_error(
            &mut admin,
            &format!(
                "SELECT retention.add_policy(name => 'x', relation => '{table}', kind => 'age',
                        age_column => '{column}', older_than => '1 day')"
            ),
        );
        assert_eq!(state, "RT103", "{table}: {message}");
    }
    // So is declaring a governed table a source of truth; an unknown class is 22023.
    let (state, _) = expect_error(
        &mut admin,
        "SELECT retention.classify('outbox', 'source_of_truth', 'oops')",
    );
    assert_eq!(state, "RT103");
    let (state, _) = expect_error(
        &mut admin,
        "SELECT retention.classify('outbox', 'precious', 'x')",
    );
    assert_eq!(state, "22023");
    let (state, _) = expect_error(
        &mut admin,
        "SELECT retention.classify('outbox', 'transport', ' ')",
    );
    assert_eq!(state, "22023");
    // An unclassified table still takes policies.
    admin
        .batch_execute(
            "SELECT retention.add_policy(name => 'loose', relation => 'loose', kind => 'age',
                    age_expression => 'now() - interval ''1 year''', older_than => '1 day')",
        )
        .unwrap_or_else(|e| panic!("{e:?}"));

    // Every table is listed, with its class and policies.
    let rows: Vec<TableRow> = admin
        .query(
            "SELECT relation::text, retention_class, class, policies FROM retention.tables ORDER BY 1",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
        .collect();
    assert_eq!(
        rows,
        vec![
            (
                "accounts".into(),
                Some("source_of_truth".into()),
                None,
                vec![]
            ),
            (
                "events".into(),
                Some("source_of_truth".into()),
                None,
                vec![]
            ),
            (
                "loose".into(),
                None,
                Some("delete".into()),
                vec!["loose".into()]
            ),
            (
                "outbox".into(),
                Some("transport".into()),
                Some("delete".into()),
                vec!["outbox".into()]
            ),
        ]
    );
    // The comment keeps what it said and carries the class.
    assert_eq!(
        text(
            &mut admin,
            "SELECT obj_description('accounts'::regclass, 'pg_class')"
        ),
        "Customer accounts.\npg_retention class: source_of_truth (the ledger of record)"
    );
    admin
        .batch_execute("SELECT retention.classify('accounts', 'audit', 'kept seven years')")
        .unwrap();
    assert_eq!(
        text(
            &mut admin,
            "SELECT obj_description('accounts'::regclass, 'pg_class')"
        ),
        "Customer accounts.\npg_retention class: audit (kept seven years)"
    );
    assert_eq!(
        scalar(
            &mut admin,
            "SELECT count(*) FROM retention.tables WHERE relation = 'accounts'::regclass AND retention_class = 'audit'"
        ),
        1
    );

    // pg_dump / restore keeps the declarations.
    let dump = std::env::temp_dir().join(format!("pg-retention-classes-{}.dump", c.port()));
    succeed(Command::new(Cluster::program("pg_dump")).args([
        "-Fc",
        "-d",
        &c.url("postgres"),
        "-f",
        &dump.to_string_lossy(),
    ]));
    let other = Cluster::start(&[]);
    // Roles are the cluster's, not the database's: made again, as an operator would.
    drop(other.app_and_admin("postgres"));
    other.execute(
        "postgres",
        "DROP EXTENSION pg_retention CASCADE; DROP SCHEMA IF EXISTS retention CASCADE",
    );
    succeed(Command::new(Cluster::program("pg_restore")).args([
        "--exit-on-error",
        "-d",
        &other.url("postgres"),
        &dump.to_string_lossy(),
    ]));
    let _ = std::fs::remove_file(dump);
    let mut restored = other.connect("postgres");
    assert_eq!(
        text(
            &mut restored,
            "SELECT string_agg(relation::text || '=' || retention_class, ',' ORDER BY relation::text)
               FROM retention.tables WHERE retention_class IS NOT NULL"
        ),
        "accounts=audit,events=source_of_truth,outbox=transport"
    );
}
