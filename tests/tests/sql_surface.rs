//! Hostile input at the SQL boundary: every function and procedure of the `retention` schema,
//! public or internal, called with NULLs and with garbage, answers with a result or a
//! documented SQLSTATE — never XX000, never a crashed backend.

use pg_retention_integration::{sqlstate, Cluster};
use postgres::Client;

/// A value of `ty` that is well-formed SQL but means nothing (or, for text, garbage).
fn garbage(ty: &str) -> String {
    match ty {
        "text" | "name" => "'garbage'".into(),
        "bigint" | "integer" | "smallint" | "double precision" | "real" | "numeric" => {
            format!("(-1)::{ty}")
        }
        "oid" | "regclass" | "regrole" => format!("0::{ty}"),
        "jsonb" | "json" => format!("'{{\"garbage\": true}}'::{ty}"),
        "uuid" => "'00000000-0000-0000-0000-000000000000'::uuid".into(),
        "interval" => "'-1 day'::interval".into(),
        "timestamp with time zone" => "'infinity'::timestamptz".into(),
        "boolean" => "false".into(),
        "text[]" => "'{garbage}'::text[]".into(),
        "bytea" => "'\\x00ff'::bytea".into(),
        "tid" => "'(0,0)'::tid".into(),
        "anyelement" => "1::int".into(),
        other => format!("NULL::{other}"),
    }
}

fn null_of(ty: &str) -> String {
    match ty {
        "anyelement" => "NULL::int".into(),
        other => format!("NULL::{other}"),
    }
}

struct Routine {
    name: String,
    procedure: bool,
    args: Vec<String>,
}

fn routines(db: &mut Client) -> Vec<Routine> {
    db.query(
        "SELECT p.proname::text, p.prokind = 'p',
                coalesce((SELECT array_agg(format_type(t, NULL) ORDER BY i)
                            FROM unnest(p.proargtypes::oid[]) WITH ORDINALITY a(t, i)), '{}')
           FROM pg_proc p WHERE p.pronamespace = 'retention'::regnamespace ORDER BY 1",
        &[],
    )
    .unwrap()
    .iter()
    .map(|r| Routine {
        name: r.get(0),
        procedure: r.get(1),
        args: r.get(2),
    })
    .collect()
}

/// The SQLSTATEs docs/sql-reference.md lists.
fn documented() -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/sql-reference.md");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn every_function_answers_nulls_and_garbage_with_a_documented_sqlstate() {
    let c = Cluster::start(&[]);
    let mut db = c.connect("postgres");
    let docs = documented();
    let all = routines(&mut db);
    assert!(all.len() > 40, "found {} routines", all.len());
    let mut calls = 0;
    let mut problems = Vec::new();
    for r in &all {
        for values in [
            r.args.iter().map(|t| null_of(t)).collect::<Vec<_>>(),
            r.args.iter().map(|t| garbage(t)).collect::<Vec<_>>(),
        ] {
            let sql = if r.procedure {
                format!("CALL retention.{}({})", r.name, values.join(", "))
            } else {
                format!("SELECT * FROM retention.{}({})", r.name, values.join(", "))
            };
            calls += 1;
            if let Err(e) = db.batch_execute(&sql) {
                let code = sqlstate(&e);
                let message = e
                    .as_db_error()
                    .map(|d| d.message().to_owned())
                    .unwrap_or_else(|| e.to_string());
                if code.is_empty() || code == "XX000" || !docs.contains(&format!("`{code}`")) {
                    problems.push(format!("{sql}\n    -> {code:?} {message}"));
                }
                if db.is_closed() || code.is_empty() {
                    db = c.connect("postgres");
                }
            }
        }
    }
    assert!(calls > 80, "made {calls} calls");
    assert!(
        problems.is_empty(),
        "{} of {calls} calls answered with an undocumented SQLSTATE, XX000 or a crash:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

/// Refusals come straight from the function called, with their own SQLSTATE (ours, of class
/// RT, too), message, detail and hint, and no PL/pgSQL frame: the wrappers that are one SELECT
/// of their internal are inlined, so their errors carry no context at all; the archive
/// protocol's wrappers (which pin output settings) show only their own SQL frame.
#[test]
fn refusals_raise_their_own_sqlstate_without_a_plpgsql_frame() {
    let c = Cluster::start(&[]);
    c.execute(
        "postgres",
        "CREATE TABLE ledgerish (id bigint PRIMARY KEY, at timestamptz NOT NULL);
         CREATE TABLE accounts (id bigint PRIMARY KEY, at timestamptz NOT NULL);",
    );
    c.grant_app_and_admin("postgres");
    let mut admin = c.admin("postgres");
    admin
        .batch_execute(
            "SELECT retention.classify('accounts', 'source_of_truth', 'the customer record')",
        )
        .unwrap();
    let cases: &[(&str, &str, bool)] = &[
        // (call, SQLSTATE, inlined: no context at all)
        (
            "SELECT retention.place_hold('ledgerish', 'no_such_column = 1', 'audit', 'legal')",
            "RT101",
            true,
        ),
        (
            "SELECT retention.add_policy('acc', 'accounts', 'age', age_column => 'at', older_than => '1 day')",
            "RT103",
            true,
        ),
        (
            "SELECT retention.add_policy('l', 'ledgerish', 'age', age_column => 'nope', older_than => '1 day')",
            "42703",
            true,
        ),
        ("SELECT retention.lift_hold(424242, 'legal', 'done')", "42704", true),
        ("SELECT retention.enable_policy('nope')", "42704", true),
        ("SELECT retention.link_windows('a', 'b', '1 day')", "42704", true),
        (
            "SELECT retention.lower_floor('nope', 1, NULL, 'a', 'r')",
            "42704",
            true,
        ),
        ("SELECT retention.prune('nope', '[]')", "42704", true),
        (
            "SELECT retention.register_consumer('nope', 'c', '1 minute')",
            "42704",
            true,
        ),
        ("SELECT * FROM retention.consumer_status('nope', 'c')", "42704", false),
    ];
    let mut problems = Vec::new();
    for (sql, code, inlined) in cases {
        let err = match admin.batch_execute(sql) {
            Ok(()) => {
                problems.push(format!("{sql}: succeeded"));
                continue;
            }
            Err(e) => e,
        };
        let Some(db) = err.as_db_error() else {
            problems.push(format!("{sql}: {err}"));
            continue;
        };
        if db.code().code() != *code {
            problems.push(format!(
                "{sql}: {} ({}), not {code}",
                db.code().code(),
                db.message()
            ));
        }
        let context = db.where_().unwrap_or("");
        if context.contains("PL/pgSQL") || (*inlined && !context.is_empty()) {
            problems.push(format!("{sql}: context {context:?}"));
        }
    }
    // Ours keep their detail and hint.
    let err = admin
        .batch_execute("SELECT retention.place_hold('ledgerish', 'no_such_column = 1', 'a', 'b')")
        .unwrap_err();
    let db = err.as_db_error().unwrap();
    assert!(db.hint().is_some(), "RT101 without its hint: {db:?}");
    // The archive protocol, as the superuser: a batch nobody claimed.
    let mut su = c.connect("postgres");
    let err = su
        .batch_execute(
            "SELECT retention.complete_batch('00000000-0000-0000-0000-000000000001', 'k', 'b', 1, 1)",
        )
        .unwrap_err();
    let db = err.as_db_error().unwrap();
    if db.code().code() != "42704" || db.where_().unwrap_or("").contains("PL/pgSQL") {
        problems.push(format!("complete_batch: {db:?}"));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
