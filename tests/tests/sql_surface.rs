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
