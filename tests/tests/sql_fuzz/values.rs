//! The candidate arguments: the value type, the value list of every SQL type, and the
//! almost-right values chosen by an argument's name.

use super::*;

/// One candidate argument: an SQL expression (without the argument's cast) and a short label
/// for the report.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct Val {
    pub(super) sql: String,
    pub(super) label: String,
}

/// A value whose label is its SQL.
pub(super) fn v(sql: impl Into<String>) -> Val {
    let sql = sql.into();
    Val {
        label: sql.clone(),
        sql,
    }
}

/// A value with a label of its own (long or computed values).
pub(super) fn labelled(sql: impl Into<String>, label: impl Into<String>) -> Val {
    Val {
        sql: sql.into(),
        label: label.into(),
    }
}

/// `s` as an SQL string literal.
pub(super) fn lit(s: &str) -> Val {
    v(format!("'{}'", s.replace('\'', "''")))
}

/// `NULL` (the argument's cast types it).
pub(super) fn null() -> Val {
    v("NULL")
}

/// The value list of every type: NULL, boundaries, garbage, and what exists.
pub(super) fn type_values(ty: &str, w: &World, rng: &mut Rng) -> Vec<Val> {
    let long_text = labelled("repeat('x', 100000)", "<100k x>");
    let odd_text = labelled(
        r#"'it''s "a\b" \\ ' || chr(1) || chr(9) || chr(10) || chr(13) || chr(27) || chr(127) || '%s%n $1 ;--'"#,
        "<quotes, backslashes, control chars>",
    );
    let relations = || {
        let mut vals = vec![
            null(),
            labelled(w.dropped_oid.to_string(), "<dropped table oid>"),
            v("0"),
            v("4294967295"),
        ];
        vals.extend(
            w.tables
                .iter()
                .map(|(name, oid)| labelled(oid.to_string(), format!("<oid of {name}>"))),
        );
        vals
    };
    match ty {
        "text" | "name" | "character varying" => vec![
            null(),
            lit(""),
            lit("x"),
            long_text,
            odd_text,
            lit(&w.policies[0].0),
            lit("fuzz_plain"),
        ],
        "integer" | "smallint" => {
            let mut vals = vec![null(), v("0"), v("-1"), v("1")];
            if ty == "integer" {
                vals.extend([v("2147483647"), v("-2147483648")]);
            } else {
                vals.extend([v("32767"), v("-32768")]);
            }
            vals
        }
        "bigint" => vec![
            null(),
            v("0"),
            v("-1"),
            v("1"),
            v("2147483647"),
            v("-2147483648"),
            v("9223372036854775807"),
            v("-9223372036854775808"),
        ],
        "double precision" | "real" | "numeric" => vec![
            null(),
            v("0"),
            v("-1"),
            lit("NaN"),
            lit("Infinity"),
            lit("-Infinity"),
            v("1e300"),
        ],
        "text[]" => vec![
            null(),
            lit("{}"),
            lit("{NULL}"),
            lit("{a,NULL}"),
            lit("{x}"),
            lit("{id}"),
            lit("{\"\"}"),
        ],
        "bigint[]" | "integer[]" => vec![
            null(),
            lit("{}"),
            lit("{NULL}"),
            lit("{1,-1}"),
            lit("{2147483647}"),
        ],
        "interval" => vec![
            null(),
            lit("0"),
            lit("-1 day"),
            lit("1000000 years"),
            lit("1 second"),
            lit("-178000000 years"),
        ],
        "regclass" | "oid" => relations(),
        "regrole" => vec![
            null(),
            v("0"),
            labelled(w.fuzzer_oid.to_string(), "<fuzzer>"),
            labelled("10", "<postgres>"),
            labelled("'retention_admin'", "<retention_admin>"),
            labelled("'pg_monitor'", "<pg_monitor>"),
            v("4294967295"),
        ],
        "uuid" => vec![
            null(),
            labelled(format!("'{}'", rng.uuid()), "<random uuid>"),
            lit("00000000-0000-0000-0000-000000000000"),
            live_batch(),
            labelled(format!("'{}'", w.done_batch), "<archived batch>"),
        ],
        "bytea" => vec![
            null(),
            lit("\\x"),
            lit("\\xdeadbeef"),
            labelled("decode(repeat('ab', 1048576), 'hex')", "<1 MiB bytea>"),
            labelled(format!("'\\x{}'", w.live_slice), "<slice of live batch>"),
            labelled(
                format!("'\\x{}'", w.done_slice),
                "<slice of archived batch>",
            ),
            labelled(
                format!("'\\x{}'", truncate_hex(&w.done_slice)),
                "<archived slice cut short>",
            ),
        ],
        "jsonb" | "json" => vec![
            null(),
            lit("null"),
            lit("{}"),
            lit("[]"),
            lit("{\"ok\":1}"),
            lit("\"x\""),
            lit("123456789012345678901234567890"),
        ],
        "boolean" => vec![null(), v("true"), v("false")],
        "timestamp with time zone" => vec![
            null(),
            v("now()"),
            lit("infinity"),
            lit("-infinity"),
            lit("4713-01-01 00:00:00+00 BC"),
        ],
        "anyelement" => vec![
            v("NULL::int"),
            v("1"),
            v("NULL::text"),
            v("'x'::text"),
            labelled(
                "(SELECT t FROM public.fuzz_plain t ORDER BY id LIMIT 1)",
                "<fuzz_plain row>",
            ),
            labelled(
                "(SELECT t FROM public.fuzz_enum t ORDER BY id LIMIT 1)",
                "<fuzz_enum row>",
            ),
        ],
        "tid" => vec![
            null(),
            lit("(0,0)"),
            lit("(0,1)"),
            lit("(4294967295,65535)"),
        ],
        t if t.ends_with("[]") => vec![null(), lit("{}")],
        _ => vec![null()],
    }
}

/// The batch kept claimed, whichever it is at the time of the call.
pub(super) fn live_batch() -> Val {
    labelled(format!("'{LIVE}'"), "<live batch>")
}

/// The token of a run of `policy` begun in the statement itself (a token names a run only in
/// the session that began it), optionally advanced once or ended.
pub(super) fn begun_run(w: &World, policy: &str, then: Then) -> Val {
    let id = w.policies.iter().find(|p| p.0 == policy).map_or(0, |p| p.1);
    // The begin is in a subquery of its own, so that it runs once (volatile: not pulled up).
    let begun = format!("(SELECT retention._run_begin({id}) AS t) b");
    match then {
        Then::Nothing => labelled(
            format!("retention._run_begin({id})"),
            format!("<run of {policy} begun here>"),
        ),
        Then::Advance => labelled(
            format!("(SELECT CASE WHEN retention._run_advance(b.t) IS NULL THEN b.t ELSE b.t END FROM {begun})"),
            format!("<run of {policy} begun and advanced here>"),
        ),
        Then::End => labelled(
            format!("(SELECT b.t FROM {begun}, LATERAL retention._run_end(b.t) e)"),
            format!("<run of {policy} begun and ended here>"),
        ),
    }
}

/// What [`begun_run`] does with the run it begins.
#[derive(Clone, Copy)]
pub(super) enum Then {
    Nothing,
    Advance,
    End,
}

/// The first half of a hex string (a truncated slice).
fn truncate_hex(hex: &str) -> &str {
    &hex[..(hex.len() / 4) * 2]
}

/// Extra values for an argument, by its name: almost-right values that reach past the first
/// validation.
pub(super) fn named_values(arg: &Arg, w: &World) -> Vec<Val> {
    let text = matches!(arg.ty.as_str(), "text" | "name");
    let ids = |ids: &[i64]| ids.iter().map(|i| v(i.to_string())).collect::<Vec<_>>();
    let policy_ids: Vec<i64> = w.policies.iter().map(|p| p.1).collect();
    let policy_names = || w.policies.iter().map(|p| lit(&p.0)).collect::<Vec<_>>();
    match (arg.name.as_str(), arg.ty.as_str()) {
        ("policy" | "name" | "producer" | "consumer", _) if text => {
            let mut vals = policy_names();
            vals.extend([lit("c1"), lit("FUZZ_AGE"), lit("fuzz_age ")]);
            vals
        }
        ("predicate" | "scope" | "terminal", _) if text => [
            "true",
            "id > 0",
            "tenant = 1",
            "pg_sleep(10) IS NULL",
            "1/0 = 1",
            "id > 0; DROP TABLE fuzz_plain",
            "(SELECT true)",
            "random() < 0.5",
            "nonexistent = 1",
            "state = 'done'",
        ]
        .iter()
        .map(|s| lit(s))
        .collect(),
        ("kind", _) if text => ["age", "keep_latest", "versions", "entity", "unreferenced"]
            .iter()
            .map(|s| lit(s))
            .collect(),
        ("action", _) if text => vec![lit("delete"), lit("archive_then_delete")],
        ("age_column" | "order_by" | "lease_expiry", _) if text => {
            ["created_at", "id", "state", "note", "ctid", "nonexistent"]
                .iter()
                .map(|s| lit(s))
                .collect()
        }
        ("change", _) if text => ["add", "alter", "enable", "disable", "drop"]
            .iter()
            .map(|s| lit(s))
            .collect(),
        ("lease" | "grace" | "window_floor" | "margin", _) if text => [
            "1 second",
            "10 minutes",
            "-1 day",
            "0",
            "garbage",
            "1000000 years",
        ]
        .iter()
        .map(|s| lit(s))
        .collect(),
        ("batch", _) if text => vec![
            live_batch(),
            lit(&w.done_batch),
            lit("00000000-0000-0000-0000-000000000000"),
        ],
        ("method", _) if text => ["prune", "error", "claim", "run", "erasure"]
            .iter()
            .map(|s| lit(s))
            .collect(),
        ("outcome", _) if text => ["completed", "partial", "refused", "not_ready"]
            .iter()
            .map(|s| lit(s))
            .collect(),
        ("sqlstate", _) if text => vec![lit("XX000"), lit("22023"), lit("P0001")],
        ("blake3" | "plan_sha256", _) if text => {
            vec![lit(&w.archive_blake3), lit(&"0".repeat(64)), lit("zz")]
        }
        ("object_key" | "replaced_key" | "tombstone" | "key" | "original" | "supersedes", _)
            if text =>
        {
            vec![lit("fuzz/archive-1"), lit("../../etc/passwd"), lit("/")]
        }
        ("owner", _) if text => vec![lit("fuzz-owner"), lit("fuzz-owner-2")],
        ("position" | "next", _) if text => {
            vec![lit("1"), lit("2025-01-01 00:00:00+00"), lit("(1)")]
        }
        ("policy_id", "bigint") => ids(&policy_ids),
        ("token", "bigint") => vec![
            begun_run(w, "fuzz_age", Then::Nothing),
            begun_run(w, "fuzz_parted", Then::Nothing),
            begun_run(w, "fuzz_age", Then::Advance),
            begun_run(w, "fuzz_parted", Then::Advance),
            begun_run(w, "fuzz_age", Then::End),
        ],
        ("hold_id", "bigint") => ids(&[w.hold_id]),
        ("archive_id", "bigint") => ids(&[w.archive_id]),
        ("rows", "bigint") => ids(&[w.archive_rows]),
        ("bytes", "bigint") => ids(&[w.archive_bytes]),
        ("max_rows" | "batch_rows" | "batch_size" | "max", "integer") => {
            vec![v("1000000"), v("1000001"), v("10")]
        }
        ("keep" | "min_keep" | "keep_floor", "integer") => vec![v("5"), v("100")],
        ("archive_ids", "bigint[]") => vec![lit(&format!("{{{}}}", w.archive_id))],
        ("columns" | "group_by" | "lease_key", "text[]") => vec![
            lit("{id,state,created_at,payload}"),
            lit("{payload,created_at,state,id}"),
            lit("{tenant}"),
            lit("{id,id}"),
        ],
        ("author" | "reporter", "oid" | "regrole") => vec![
            labelled(w.fuzzer_oid.to_string(), "<fuzzer>"),
            labelled("10", "<postgres>"),
        ],
        ("spec", "jsonb") => {
            let spec = |json: serde_json::Value, label: &str| {
                labelled(
                    format!("'{}'", json.to_string().replace('\'', "''")),
                    format!("<spec: {label}>"),
                )
            };
            let plain = w.tables.iter().find(|t| t.0 == "fuzz_plain").map(|t| t.1);
            vec![
                spec(
                    serde_json::json!({"name": format!("fz_spec_{SEQ}"), "relation": plain,
                        "kind": "age", "age_column": "created_at", "older_than": "30 days"}),
                    "valid add",
                ),
                spec(
                    serde_json::json!({"name": "fuzz_age", "relation": 99_999_999_999_i64,
                        "kind": "age", "batch_size": -5, "keep": "x"}),
                    "oid overflow, wrong types",
                ),
                spec(
                    serde_json::json!({"name": "fuzz_age", "relation": "fuzz_plain",
                        "older_than": "forever", "group_by": [null]}),
                    "strings for numbers",
                ),
            ]
        }
        _ => Vec::new(),
    }
}
