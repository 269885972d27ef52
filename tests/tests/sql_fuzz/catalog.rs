//! The routines under test: every function and procedure of `retention`, read from the
//! catalog with their input arguments and defaults.

use super::*;

/// A function or procedure of the schema.
pub(super) struct Routine {
    pub(super) name: String,
    /// `pg_get_function_identity_arguments`, for the report.
    pub(super) identity: String,
    pub(super) procedure: bool,
    /// Input arguments (IN, INOUT, VARIADIC) in order.
    pub(super) args: Vec<Arg>,
    /// The SQL default expressions of the trailing arguments that have one.
    pub(super) defaults: Vec<String>,
}

/// One input argument.
pub(super) struct Arg {
    pub(super) name: String,
    /// `format_type` of its type.
    pub(super) ty: String,
}

/// Every function and procedure of `retention`, internals included.
pub(super) fn routines(db: &mut Client) -> Vec<Routine> {
    db.query(
        "SELECT p.proname::text, pg_get_function_identity_arguments(p.oid), p.prokind = 'p',
                coalesce(pg_get_expr(p.proargdefaults, 0), ''),
                coalesce((SELECT array_agg(format_type(t, NULL) ORDER BY i)
                            FROM unnest(p.proargtypes::oid[]) WITH ORDINALITY a(t, i)), '{}'),
                coalesce((SELECT array_agg(coalesce(n, '') ORDER BY i)
                            FROM unnest(p.proargnames) WITH ORDINALITY a(n, i)
                           WHERE coalesce(p.proargmodes[i::int], 'i') IN ('i', 'b', 'v')), '{}')
           FROM pg_proc p
          WHERE p.pronamespace = 'retention'::regnamespace AND p.prokind IN ('f', 'p')
          ORDER BY 1, 2",
        &[],
    )
    .unwrap()
    .iter()
    .map(|r| {
        let types: Vec<String> = r.get(4);
        let names: Vec<String> = r.get(5);
        let defaults: String = r.get(3);
        Routine {
            name: r.get(0),
            identity: r.get(1),
            procedure: r.get(2),
            defaults: split_top_level(&defaults),
            args: types
                .into_iter()
                .enumerate()
                .map(|(i, ty)| Arg {
                    name: names.get(i).cloned().unwrap_or_default(),
                    ty,
                })
                .collect(),
        }
    })
    .collect()
}

/// `list` split at its top-level commas (not those in quotes or parentheses), trimmed.
fn split_top_level(list: &str) -> Vec<String> {
    let (mut parts, mut current) = (Vec::new(), String::new());
    let (mut depth, mut quoted) = (0i32, false);
    for ch in list.chars() {
        match ch {
            '\'' => quoted = !quoted,
            '(' if !quoted => depth += 1,
            ')' if !quoted => depth -= 1,
            ',' if !quoted && depth == 0 => {
                parts.push(current.trim().to_owned());
                current.clear();
                continue;
            }
            _ => {}
        }
        current.push(ch);
    }
    if !current.trim().is_empty() {
        parts.push(current.trim().to_owned());
    }
    parts
}
