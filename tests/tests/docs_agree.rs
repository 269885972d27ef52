//! Claims of the docs that a reader acts on, held to the code (issue 36, item 6): each test
//! reads the sentence or list from the doc and the behaviour from a real cluster, so that the
//! two cannot drift apart unnoticed. The superuser only reads the catalog's ACLs and makes the
//! roles; everything else is done by the roles the claims are about.

use pg_retention_integration::{expect_error, scalar, Cluster};
use std::collections::BTreeSet;
use std::path::Path;

fn doc(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("docs")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The backticked names in the table row of docs/security.md that starts with `row`.
fn role_row(row: &str) -> BTreeSet<String> {
    let security = doc("security.md");
    let line = security
        .lines()
        .find(|l| l.starts_with(row))
        .unwrap_or_else(|| panic!("no row {row} in docs/security.md"));
    line.split('`')
        .skip(1)
        .step_by(2)
        .map(|name| name.trim_start_matches("retention.").to_owned())
        .collect()
}

/// "Nothing is granted to PUBLIC but version()" (docs/sql-reference.md), and PUBLIC has no USAGE
/// on the schema: a plain role reaches nothing, a retention role may call version().
#[test]
fn public_may_execute_version_only_and_reach_nothing() {
    let c = Cluster::start(&[]);
    let reference = doc("sql-reference.md");
    assert!(
        reference.contains("EXECUTE is granted to PUBLIC on `retention.version()` only"),
        "docs/sql-reference.md no longer states the PUBLIC rule this test checks"
    );
    let mut su = c.connect("postgres");
    let public: Vec<String> = su
        .query(
            "SELECT p.oid::regprocedure::text FROM pg_proc p, aclexplode(p.proacl) a
              WHERE p.pronamespace = 'retention'::regnamespace AND a.grantee = 0 ORDER BY 1",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(public, vec!["retention.version()".to_owned()]);
    let schema_public = scalar(
        &mut su,
        "SELECT count(*) FROM pg_namespace n, aclexplode(n.nspacl) a
          WHERE n.nspname = 'retention' AND a.grantee = 0",
    );
    assert_eq!(schema_public, 0, "PUBLIC has no privilege on the schema");
    c.execute("postgres", "CREATE ROLE plain LOGIN");
    let mut plain = c.connect_as("postgres", "plain");
    let (code, _) = expect_error(&mut plain, "SELECT retention.version()");
    assert_eq!(code, "42501");
    let mut admin = c.admin("postgres");
    scalar(
        &mut admin,
        "SELECT count(*) FROM (SELECT retention.version()) v",
    );
}

/// docs/security.md's row for `retention_archiver` is exactly what a role only in it may call
/// and read in schema retention (its SECURITY INVOKER wrappers' internals, `_`-prefixed, aside).
#[test]
fn the_archiver_roles_documented_rights_are_its_grants() {
    let c = Cluster::start(&[]);
    let documented = role_row("| `retention_archiver` |");
    c.archiver_url("postgres");
    let mut su = c.connect("postgres");
    let granted: BTreeSet<String> = su
        .query(
            "SELECT p.proname::text FROM pg_proc p
              WHERE p.pronamespace = 'retention'::regnamespace AND p.proname !~ '^_'
                AND has_function_privilege('archiver', p.oid, 'EXECUTE')
             UNION
             SELECT c.relname::text FROM pg_class c
              WHERE c.relnamespace = 'retention'::regnamespace
                AND has_table_privilege('archiver', c.oid, 'SELECT')",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let missing: Vec<_> = granted.difference(&documented).collect();
    assert!(
        missing.is_empty(),
        "granted to retention_archiver but not in docs/security.md: {missing:?}"
    );
    let not_granted: Vec<_> = documented
        .iter()
        .filter(|name| {
            !granted.contains(*name)
                // The row's prose names the role, the commands and its /metrics too.
                && ![
                    "retention_archiver",
                    "expire",
                    "sweep-orphans",
                    "verify --all",
                    "/metrics",
                ]
                .contains(&name.as_str())
        })
        .collect();
    assert!(
        not_granted.is_empty(),
        "in docs/security.md but not granted to retention_archiver: {not_granted:?}"
    );
}

/// "The sum of the prune, orphan_sweep and drop_partition rows of a run equals its run rows"
/// (docs/sql-reference.md), and `rows_deleted` counts exactly those methods and erasure
/// (docs/observability.md): for an orphan policy, whose deletes are ledgered `orphan_sweep`.
#[test]
fn a_runs_rows_are_the_sum_of_the_methods_the_docs_name() {
    let c = Cluster::start(&[]);
    let reference = doc("sql-reference.md");
    assert!(reference.contains(
        "The sum of the `prune`, `orphan_sweep` and `drop_partition` rows of a run equals its `run` rows."
    ));
    assert!(
        doc("observability.md").contains("(`prune`, `orphan_sweep`, `drop_partition`, `erasure`)")
    );
    c.execute(
        "postgres",
        "CREATE TABLE sessions (id int PRIMARY KEY, expires_at timestamptz NOT NULL);
         CREATE TABLE uploads (id int PRIMARY KEY, session_id int, created_at timestamptz NOT NULL);
         CREATE TABLE t (id int PRIMARY KEY, created_at timestamptz NOT NULL);",
    );
    c.grant_app_and_admin("postgres");
    let mut app = c.app("postgres");
    // Sessions 0..4 live, 5..9 dead: the uploads of dead sessions are orphans.
    app.batch_execute(
        "INSERT INTO sessions SELECT g, now() + CASE WHEN g < 5 THEN interval '1 hour' ELSE -interval '1 hour' END
           FROM generate_series(0, 9) g;
         INSERT INTO uploads SELECT g, g % 10, now() - interval '2 days' FROM generate_series(1, 40) g;
         INSERT INTO t SELECT g, now() - interval '2 days' FROM generate_series(1, 30) g;",
    )
    .unwrap();
    let mut admin = c.admin("postgres");
    admin
        .batch_execute(
            "SELECT retention.add_policy(name => 'orphans', relation => 'uploads', kind => 'orphan',
                    scope => 'true', age_column => 'created_at', older_than => '1 day',
                    lease_table => 'sessions', lease_key => ARRAY['session_id'],
                    lease_expiry => 'expires_at', batch_size => 7);
             SELECT retention.add_policy(name => 'aged', relation => 't', kind => 'age',
                    age_column => 'created_at', older_than => '1 day', batch_size => 7);",
        )
        .unwrap();
    admin.batch_execute("CALL retention.run()").unwrap();
    for policy in ["orphans", "aged"] {
        let run = scalar(
            &mut admin,
            &format!("SELECT sum(rows)::bigint FROM retention.ledger WHERE policy = '{policy}' AND method = 'run'"),
        );
        let parts = scalar(
            &mut admin,
            &format!(
                "SELECT coalesce(sum(rows), 0)::bigint FROM retention.ledger
                  WHERE policy = '{policy}' AND method IN ('prune', 'orphan_sweep', 'drop_partition')"
            ),
        );
        let deleted = scalar(
            &mut admin,
            &format!(
                "SELECT sum(rows_deleted)::bigint FROM retention.ledger WHERE policy = '{policy}'"
            ),
        );
        assert!(
            run > 0,
            "{policy}: the run deleted nothing, the test proves nothing"
        );
        assert_eq!(run, parts, "{policy}");
        assert_eq!(run, deleted, "{policy}");
    }
    assert_eq!(
        scalar(&mut admin, "SELECT count(*) FROM uploads"),
        20,
        "live sessions' uploads stay"
    );
}

/// A policy's owner needs SELECT and DELETE, archive policies included — no UPDATE
/// (docs/security.md): a role with exactly those registers an archive policy.
#[test]
fn an_archive_policy_needs_select_and_delete_only() {
    let c = Cluster::start(&[]);
    assert!(doc("security.md")
        .contains("**Registering needs SELECT and DELETE on the table** (archive policies too"));
    c.execute(
        "postgres",
        "CREATE TABLE audit (id int PRIMARY KEY, state text NOT NULL, at timestamptz);
         CREATE ROLE lean LOGIN IN ROLE retention_admin;
         GRANT SELECT, DELETE ON audit TO lean;",
    );
    let mut lean = c.connect_as("postgres", "lean");
    lean.batch_execute(
        "SELECT retention.add_policy(name => 'audit', relation => 'audit', kind => 'age',
                age_column => 'at', older_than => '1 day', terminal => $$state = 'done'$$,
                action => 'archive_then_delete')",
    )
    .unwrap();
    c.execute("postgres", "REVOKE DELETE ON audit FROM lean");
    let (code, message) = expect_error(
        &mut lean,
        "SELECT retention.alter_policy('audit', batch_size => 10)",
    );
    assert_eq!(code, "42501", "{message}");
    assert!(message.contains("DELETE is missing"), "{message}");
}
