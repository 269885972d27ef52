//! The argument combinations of a routine: its "sensible" defaults, each argument varied
//! alone, and random draws; and how a value is cast to its argument's type.

use super::*;

/// The "sensible" value of an argument when another one is being varied.
fn default_value(routine: &Routine, index: usize, w: &World) -> Val {
    let arg = &routine.args[index];
    let text = matches!(arg.ty.as_str(), "text" | "name");
    let oid_of = |name: &str| {
        let oid = w.tables.iter().find(|t| t.0 == name).map_or(0, |t| t.1);
        labelled(oid.to_string(), format!("<oid of {name}>"))
    };
    match (arg.name.as_str(), arg.ty.as_str()) {
        // A fresh name, or every call of add_policy fails as a duplicate.
        ("name", _) if text && routine.name.ends_with("add_policy") => {
            labelled(format!("'fz_{SEQ}'"), "<fresh name>")
        }
        ("policy", _) if text && routine.name.contains("claim") => lit("fuzz_archive"),
        ("policy" | "name" | "producer", _) if text => lit("fuzz_age"),
        ("consumer", _) if text => lit("c1"),
        ("kind", _) if text => lit("age"),
        ("age_column" | "order_by", _) if text => lit("created_at"),
        ("predicate", _) if text => lit("tenant = 2"),
        ("actor", _) if text => lit("fuzzer"),
        ("reason", _) if text => lit("fuzz"),
        ("request_ref", _) if text => lit("req-1"),
        ("change", _) if text => lit("add"),
        ("lease" | "grace" | "margin", _) if text => lit("10 minutes"),
        ("batch", _) if text => live_batch(),
        ("owner", _) if text => lit("fuzz-owner-2"),
        ("older_than", "interval") => lit("30 days"),
        ("relation" | "rel", "regclass" | "oid") => oid_of("fuzz_plain"),
        ("author" | "reporter", "oid" | "regrole") => {
            labelled(w.fuzzer_oid.to_string(), "<fuzzer>")
        }
        ("policy_id", "bigint") => v(w.policies[0].1.to_string()),
        ("hold_id", "bigint") => v(w.hold_id.to_string()),
        ("archive_id", "bigint") => v(w.archive_id.to_string()),
        ("rows", "bigint") => v(w.archive_rows.to_string()),
        ("bytes", "bigint") => v(w.archive_bytes.to_string()),
        ("blake3", _) if text => lit(&w.archive_blake3),
        ("slice", "bytea") => labelled(
            format!("'\\x{}'", w.done_slice),
            "<slice of archived batch>",
        ),
        ("columns", "text[]") => lit("{id,state,created_at,payload}"),
        ("batch", "uuid") => live_batch(),
        ("token", "bigint") => begun_run(w, "fuzz_age", Then::Nothing),
        _ if index + routine.defaults.len() >= routine.args.len() => {
            let expr = &routine.defaults[index + routine.defaults.len() - routine.args.len()];
            labelled(expr.clone(), format!("DEFAULT {expr}"))
        }
        (_, ty) => match ty {
            "text" | "name" => lit("fuzz"),
            "integer" | "smallint" | "bigint" => v("10"),
            "double precision" | "real" | "numeric" => v("1.5"),
            "boolean" => v("true"),
            "interval" => lit("1 hour"),
            "regclass" | "oid" => oid_of("fuzz_plain"),
            "uuid" => live_batch(),
            "bytea" => lit("\\xdeadbeef"),
            "jsonb" | "json" => lit("{}"),
            "timestamp with time zone" => v("now()"),
            "text[]" => lit("{id}"),
            "bigint[]" | "integer[]" => lit("{1}"),
            "tid" => lit("(0,1)"),
            "anyelement" => labelled(
                "(SELECT t FROM public.fuzz_plain t ORDER BY id LIMIT 1)",
                "<fuzz_plain row>",
            ),
            _ => null(),
        },
    }
}

/// `value` as an argument of type `ty` (anyelement values carry their own type).
pub(super) fn typed(value: &Val, ty: &str) -> String {
    if ty == "anyelement" {
        value.sql.clone()
    } else {
        format!("({})::{ty}", value.sql)
    }
}

/// The argument combinations of one routine, deduplicated, in a repeatable order.
pub(super) fn combinations(
    routine: &Routine,
    w: &World,
    rng: &mut Rng,
    random: usize,
) -> Vec<Vec<Val>> {
    let n = routine.args.len();
    if n == 0 {
        return vec![Vec::new()];
    }
    let pools: Vec<Vec<Val>> = routine
        .args
        .iter()
        .map(|a| {
            let mut pool = type_values(&a.ty, w, rng);
            for extra in named_values(a, w) {
                if !pool.contains(&extra) {
                    pool.push(extra);
                }
            }
            pool
        })
        .collect();
    let defaults: Vec<Val> = (0..n).map(|i| default_value(routine, i, w)).collect();
    let mut all = vec![
        routine
            .args
            .iter()
            .map(|a| {
                if a.ty == "anyelement" {
                    v("NULL::int")
                } else {
                    null()
                }
            })
            .collect(),
        defaults.clone(),
    ];
    for (i, pool) in pools.iter().enumerate() {
        for value in pool {
            let mut combo = defaults.clone();
            combo[i] = value.clone();
            all.push(combo);
        }
    }
    if n >= 2 {
        for _ in 0..random {
            all.push(
                pools
                    .iter()
                    .map(|p| p[rng.below(p.len())].clone())
                    .collect(),
            );
        }
    }
    let mut seen = HashSet::new();
    all.retain(|combo| seen.insert(combo.iter().map(|val| val.sql.clone()).collect::<Vec<_>>()));
    all
}
