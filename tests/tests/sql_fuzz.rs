//! A fuzzer for the SQL surface: every function and procedure of the `retention` schema, public
//! or internal (`_`-prefixed), is called as an unprivileged member of every retention role with
//! many combinations of hostile, boundary and almost-right arguments. Any typed error is fine;
//! an internal error (SQLSTATE class XX), a panic surfacing in a message, a FATAL or PANIC, a
//! lost connection, a crashed or restarted server, or a call that ignores its statement timeout
//! is a failure. Every failure of the run is collected and printed as one table before the test
//! fails, so one run reports them all.
//!
//! The combinations are drawn with a fixed-seed PRNG, so a run is repeatable (set
//! `PG_RETENTION_FUZZ_SEED` to explore others): per routine all-NULL, all "sensible"
//! defaults, each argument alone through its whole value list with the others at their
//! defaults, and [`RANDOM_COMBINATIONS`] random draws (`PG_RETENTION_FUZZ_RANDOM` to change
//! that). `PG_RETENTION_FUZZ_VERBOSE=1` prints the answers of every routine by SQLSTATE.
//!
//! Run: `cargo test -p pg_retention_integration --test sql_fuzz -- --nocapture`.

use pg_retention_integration::{column, scalar, Cluster};
use postgres::{Client, Config, NoTls};
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Random argument combinations per routine with two or more arguments (unless
/// `PG_RETENTION_FUZZ_RANDOM` says otherwise).
const RANDOM_COMBINATIONS: usize = 20;
/// Server-side limit of one call.
const STATEMENT_TIMEOUT: &str = "5s";
/// How long a call may go unanswered before it counts as a hang (it was given
/// [`STATEMENT_TIMEOUT`]).
const HANG_AFTER: Duration = Duration::from_secs(20);
/// Wall-clock budget of one routine's calls; the rest are skipped (and reported) past it, so
/// one routine whose every call waits out its timeout cannot stall the run.
const ROUTINE_BUDGET: Duration = Duration::from_secs(40);
/// The seed when `PG_RETENTION_FUZZ_SEED` is not set.
const DEFAULT_SEED: u64 = 0x5EED_F022_2026_0001;
/// The unprivileged role every call runs as.
const FUZZER: &str = "fuzzer";
/// Stands for the call's sequence number in a value's SQL (fresh names).
const SEQ: &str = "{seq}";
/// Stands for the batch kept claimed (re-claimed after the calls that end it) in a value's SQL.
const LIVE: &str = "{live}";

/// xorshift64*: a tiny deterministic PRNG (no dependency).
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `0..n` (`n > 0`).
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// A well-formed UUID no server made.
    fn uuid(&mut self) -> String {
        let (a, b) = (self.next(), self.next());
        format!(
            "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
            a >> 32,
            (a >> 16) & 0xffff,
            a & 0xfff,
            b >> 52,
            b & 0xffff_ffff_ffff
        )
    }
}

/// One candidate argument: an SQL expression (without the argument's cast) and a short label
/// for the report.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Val {
    sql: String,
    label: String,
}

/// A value whose label is its SQL.
fn v(sql: impl Into<String>) -> Val {
    let sql = sql.into();
    Val {
        label: sql.clone(),
        sql,
    }
}

/// A value with a label of its own (long or computed values).
fn labelled(sql: impl Into<String>, label: impl Into<String>) -> Val {
    Val {
        sql: sql.into(),
        label: label.into(),
    }
}

/// `s` as an SQL string literal.
fn lit(s: &str) -> Val {
    v(format!("'{}'", s.replace('\'', "''")))
}

/// `NULL` (the argument's cast types it).
fn null() -> Val {
    v("NULL")
}

/// A function or procedure of the schema.
struct Routine {
    name: String,
    /// `pg_get_function_identity_arguments`, for the report.
    identity: String,
    procedure: bool,
    /// Input arguments (IN, INOUT, VARIADIC) in order.
    args: Vec<Arg>,
    /// The SQL default expressions of the trailing arguments that have one.
    defaults: Vec<String>,
}

/// One input argument.
struct Arg {
    name: String,
    /// `format_type` of its type.
    ty: String,
}

/// Every function and procedure of `retention`, internals included.
fn routines(db: &mut Client) -> Vec<Routine> {
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

/// A policy made in setup and restored after every routine.
struct Policy {
    name: &'static str,
    /// The arguments of `add_policy` after `name`.
    add: &'static str,
}

const POLICIES: [Policy; 4] = [
    Policy {
        name: "fuzz_age",
        add: "relation => 'public.fuzz_plain', kind => 'age', age_column => 'created_at',
              older_than => '30 days', scope => 'tenant <> 3', order_by => 'created_at',
              batch_size => 50",
    },
    Policy {
        name: "fuzz_latest",
        add: "relation => 'public.fuzz_ranked', kind => 'keep_latest', group_by => '{tenant}',
              order_by => 'created_at', keep => 5",
    },
    Policy {
        name: "fuzz_parted",
        add: "relation => 'public.fuzz_parted', kind => 'age', age_column => 'created_at',
              older_than => '30 days'",
    },
    Policy {
        name: "fuzz_archive",
        add: "relation => 'public.fuzz_enum', kind => 'age', age_column => 'created_at',
              older_than => '30 days', terminal => 'state = ''done''',
              action => 'archive_then_delete'",
    },
];

/// The application tables, owned by the superuser; `fuzzer` may read, update and delete.
const SCHEMA: &str = "
    CREATE ROLE fuzzer LOGIN
        IN ROLE retention_admin, retention_archiver, retention_consumer, retention_eraser;
    CREATE TYPE fuzz_state AS ENUM ('open', 'done', 'it''s \\ odd');
    CREATE TABLE fuzz_plain (id int PRIMARY KEY, tenant int NOT NULL,
                             created_at timestamptz NOT NULL, note text);
    CREATE INDEX ON fuzz_plain (created_at);
    -- A ranked policy governs its table alone.
    CREATE TABLE fuzz_ranked (LIKE fuzz_plain INCLUDING ALL);
    CREATE TABLE fuzz_parted (id int NOT NULL, created_at timestamptz NOT NULL, note text,
                              PRIMARY KEY (id, created_at)) PARTITION BY RANGE (created_at);
    CREATE TABLE fuzz_parted_old PARTITION OF fuzz_parted
        FOR VALUES FROM (MINVALUE) TO ('2020-01-01');
    CREATE TABLE fuzz_parted_new PARTITION OF fuzz_parted
        FOR VALUES FROM ('2020-01-01') TO ('2100-01-01');
    CREATE TABLE fuzz_parted_default PARTITION OF fuzz_parted DEFAULT;
    CREATE TABLE fuzz_enum (id bigint PRIMARY KEY, state fuzz_state NOT NULL,
                            created_at timestamptz, payload jsonb);
    GRANT SELECT, UPDATE, DELETE ON fuzz_plain, fuzz_ranked, fuzz_parted, fuzz_enum TO fuzzer;
    CREATE TABLE fuzz_gone (id int PRIMARY KEY);";

/// Refills the application tables (rows the fuzzing deleted come back; existing rows stay).
const REFILL: &str = "
    INSERT INTO fuzz_plain
         SELECT g, g % 4, timestamptz '2026-01-01' - g * interval '12 hours', repeat('n', g % 7)
           FROM generate_series(1, 200) g ON CONFLICT DO NOTHING;
    INSERT INTO fuzz_ranked SELECT * FROM fuzz_plain ON CONFLICT DO NOTHING;
    INSERT INTO fuzz_parted
         SELECT g, timestamptz '2019-06-01' + g * interval '5 days', 'p' || g
           FROM generate_series(1, 200) g ON CONFLICT DO NOTHING;
    INSERT INTO fuzz_enum
         SELECT g, CASE WHEN g % 3 = 0 THEN 'open' WHEN g % 3 = 1 THEN 'done'
                        ELSE 'it''s \\ odd' END::fuzz_state,
                timestamptz '2025-01-01' + g * interval '1 day', jsonb_build_object('g', g)
           FROM generate_series(1, 200) g ON CONFLICT DO NOTHING;";

/// What setup made, which the value lists point at.
struct World {
    /// (name, id) of each policy.
    policies: Vec<(String, i64)>,
    /// (name, oid) of tables worth passing as a relation.
    tables: Vec<(String, u32)>,
    /// A table that existed and was dropped.
    dropped_oid: u32,
    fuzzer_oid: u32,
    hold_id: i64,
    /// The batch claimed in setup and left live (values name the current one, [`LIVE`]).
    live_batch: String,
    /// A batch archived (completed) and its archive.
    done_batch: String,
    archive_id: i64,
    archive_rows: i64,
    archive_bytes: i64,
    archive_blake3: String,
    /// Hex of the slices of the live and the archived batch.
    live_slice: String,
    done_slice: String,
}

/// Connects as `role` with the fuzzing limits; `seq` names the session (application_name).
fn fuzz_session(c: &Cluster, role: &str, seq: usize) -> Result<Client, postgres::Error> {
    let mut config: Config = format!("{} user={role}", c.url("postgres"))
        .parse()
        .expect("connection string");
    config
        .application_name(&format!("fuzz-{seq}"))
        .options(&format!(
            "-c statement_timeout={STATEMENT_TIMEOUT} -c lock_timeout=2s \
             -c idle_in_transaction_session_timeout=10s"
        ))
        .connect_timeout(Duration::from_secs(10));
    config.connect(NoTls)
}

/// Creates the role, the tables, the policies, a hold, a consumer, an archived and a live
/// batch, and a sweep state.
fn setup(c: &Cluster) -> World {
    let mut db = c.connect("postgres");
    db.batch_execute(SCHEMA).unwrap();
    db.batch_execute(REFILL).unwrap();
    let dropped_oid: u32 = db
        .query_one("SELECT 'fuzz_gone'::regclass::oid", &[])
        .unwrap()
        .get(0);
    db.batch_execute("DROP TABLE fuzz_gone").unwrap();

    let mut f = c.connect_as("postgres", FUZZER);
    for p in &POLICIES {
        f.batch_execute(&format!(
            "SELECT retention.add_policy(name => '{}', {})",
            p.name, p.add
        ))
        .unwrap_or_else(|e| panic!("add policy {}: {e}", p.name));
    }
    let policies = db
        .query(
            "SELECT name::text, id FROM retention.policies ORDER BY id",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let hold_id: i64 = f
        .query_one(
            "SELECT retention.place_hold('fuzz_plain', 'tenant = 1', 'fuzz case', 'fuzzer')",
            &[],
        )
        .unwrap()
        .get(0);
    f.batch_execute("SELECT retention.register_consumer('fuzz_age', 'c1', '1 hour')")
        .unwrap();

    // One batch archived end to end (its digest from its own manifest), one left claimed.
    let row = f
        .query_one(
            "SELECT batch::text, encode(slice, 'hex')
               FROM retention.claim_slice('fuzz_archive', 5, '1 hour', 'fuzz-owner')",
            &[],
        )
        .unwrap();
    let (done_batch, done_slice): (String, String) = (row.get(0), row.get(1));
    let manifest: String = f
        .query_one(
            "SELECT retention.batch_manifest($1::text::uuid, true)::text",
            &[&done_batch],
        )
        .unwrap()
        .get(0);
    let manifest: serde_json::Value = serde_json::from_str(&manifest).unwrap();
    let archive_blake3 = manifest["blake3"].as_str().unwrap().to_owned();
    let archive_rows = manifest["rows"].as_i64().unwrap();
    let archive_bytes = manifest["bytes"].as_i64().unwrap();
    f.execute(
        "SELECT retention.complete_batch($1::text::uuid, 'fuzz/archive-1', $2, $3, $4, 'fuzz-owner')",
        &[&done_batch, &archive_blake3, &archive_rows, &archive_bytes],
    )
    .unwrap();
    let archive_id = scalar(&mut db, "SELECT max(id) FROM retention.archives");
    let row = f
        .query_one(
            "SELECT batch::text, encode(slice, 'hex')
               FROM retention.claim_slice('fuzz_archive', 5, '1 hour', 'fuzz-owner-2')",
            &[],
        )
        .unwrap();
    let (live_batch, live_slice): (String, String) = (row.get(0), row.get(1));

    let tables = db
        .query(
            "SELECT c.relname::text, c.oid FROM pg_class c
              WHERE c.relname IN ('fuzz_plain', 'fuzz_parted', 'fuzz_parted_old', 'fuzz_enum',
                                  'pg_class', 'pg_authid', 'policy_versions', 'ledger_entries')
              ORDER BY 1",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let fuzzer_oid: u32 = db
        .query_one("SELECT 'fuzzer'::regrole::oid", &[])
        .unwrap()
        .get(0);
    World {
        policies,
        tables,
        dropped_oid,
        fuzzer_oid,
        hold_id,
        live_batch,
        done_batch,
        archive_id,
        archive_rows,
        archive_bytes,
        archive_blake3,
        live_slice,
        done_slice,
    }
}

/// Brings back what earlier calls may have dropped, disabled, deleted or ended, so later
/// routines still find policies, rows and a claimed batch (best effort: errors are ignored).
/// Returns the batch kept claimed now.
fn restore(c: &Cluster, seq: usize, live: &str) -> String {
    if let Ok(mut db) = fuzz_session(c, "postgres", seq) {
        let _ = db.batch_execute(REFILL);
    }
    let Ok(mut f) = fuzz_session(c, FUZZER, seq) else {
        return live.to_owned();
    };
    for p in &POLICIES {
        let _ = f.batch_execute(&format!(
            "SELECT retention.add_policy(name => '{0}', {1})
              WHERE NOT EXISTS (SELECT FROM retention.policies WHERE name = '{0}');
             SELECT retention.enable_policy(name) FROM retention.policies
              WHERE name = '{0}' AND NOT enabled;",
            p.name, p.add
        ));
    }
    let still_claimed = f
        .execute(
            "SELECT retention.extend_lease($1::text::uuid, '1 hour')",
            &[&live],
        )
        .is_ok();
    if still_claimed {
        return live.to_owned();
    }
    f.query_one(
        "SELECT batch::text FROM retention.claim_slice('fuzz_archive', 5, '1 hour', 'fuzz-owner-2')",
        &[],
    )
    .ok()
    .and_then(|r| r.get::<_, Option<String>>(0))
    .unwrap_or_else(|| live.to_owned())
}

/// The value list of every type: NULL, boundaries, garbage, and what exists.
fn type_values(ty: &str, w: &World, rng: &mut Rng) -> Vec<Val> {
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
fn live_batch() -> Val {
    labelled(format!("'{LIVE}'"), "<live batch>")
}

/// The token of a run of `policy` begun in the statement itself (a token names a run only in
/// the session that began it), optionally advanced once or ended.
fn begun_run(w: &World, policy: &str, then: Then) -> Val {
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
enum Then {
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
fn named_values(arg: &Arg, w: &World) -> Vec<Val> {
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
fn typed(value: &Val, ty: &str) -> String {
    if ty == "anyelement" {
        value.sql.clone()
    } else {
        format!("({})::{ty}", value.sql)
    }
}

/// The argument combinations of one routine, deduplicated, in a repeatable order.
fn combinations(routine: &Routine, w: &World, rng: &mut Rng, random: usize) -> Vec<Vec<Val>> {
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

/// How one call ended.
enum Answer {
    Ok,
    /// A typed error from the server.
    Error {
        code: String,
        severity: String,
        message: String,
    },
    /// The connection failed or was lost (no server error).
    Lost(String),
    /// No answer within [`HANG_AFTER`].
    Hang,
}

/// Runs `sql` as the fuzzer in a session of its own, cancelling and then terminating it when
/// it hangs.
fn call(c: &Cluster, sql: &str, seq: usize, monitor: &mut Option<Client>) -> Answer {
    let mut session = match fuzz_session(c, FUZZER, seq) {
        Ok(s) => s,
        Err(e) => return Answer::Lost(format!("connect: {e}")),
    };
    let cancel = session.cancel_token();
    let (tx, rx) = mpsc::channel();
    let owned = sql.to_owned();
    std::thread::spawn(move || {
        let result = session.batch_execute(&owned);
        let _ = tx.send(result);
    });
    let result = match rx.recv_timeout(HANG_AFTER) {
        Ok(r) => r,
        Err(_) => {
            let _ = cancel.cancel_query(NoTls);
            if rx.recv_timeout(Duration::from_secs(5)).is_err() {
                if let Some(m) = monitor.as_mut() {
                    let _ = m.execute(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                          WHERE application_name = $1",
                        &[&format!("fuzz-{seq}")],
                    );
                }
                // Give it a moment to go; a thread that never returns is left behind.
                let _ = rx.recv_timeout(Duration::from_secs(5));
            }
            return Answer::Hang;
        }
    };
    match result {
        Ok(()) => Answer::Ok,
        Err(e) => match e.as_db_error() {
            Some(db) => Answer::Error {
                code: db.code().code().to_owned(),
                severity: db.severity().to_owned(),
                message: db.message().to_owned(),
            },
            None => Answer::Lost(e.to_string()),
        },
    }
}

/// What identifies one life of the server: the postmaster's start time (a restart) and the
/// checkpointer's pid (a crash and reinitialisation: the postmaster's start time stays).
fn server_epoch(monitor: &mut Client) -> Option<(String, i32)> {
    monitor
        .query_one(
            "SELECT pg_postmaster_start_time()::text,
                    (SELECT pid FROM pg_stat_activity WHERE backend_type = 'checkpointer')",
            &[],
        )
        .ok()
        .map(|r| (r.get(0), r.get::<_, Option<i32>>(1).unwrap_or(0)))
}

/// A superuser session once the server accepts connections again (up to a minute).
fn reconnect(c: &Cluster) -> Option<Client> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(mut m) = fuzz_session(c, "postgres", 0) {
            if m.batch_execute("SET statement_timeout = 0").is_ok() {
                return Some(m);
            }
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Substrings of a message that mean a Rust panic or an assertion got through.
const PANIC_WORDS: [&str; 8] = [
    "panicked",
    "panic",
    "unwrap()",
    "index out of bounds",
    "attempt to add with overflow",
    "attempt to subtract with overflow",
    "attempt to multiply with overflow",
    "RUST_BACKTRACE",
];

/// One failing call.
struct Failure {
    function: String,
    args: String,
    sqlstate: String,
    message: String,
}

/// The first line of `message`, cut to 200 characters.
fn first_line(message: &str) -> String {
    let line = message.lines().next().unwrap_or_default();
    match line.char_indices().nth(200) {
        Some((end, _)) => format!("{}…", &line[..end]),
        None => line.to_owned(),
    }
}

/// Why an answer is a failure, if it is one: (sqlstate column, message column).
fn judge(answer: &Answer) -> Option<(String, String)> {
    match answer {
        Answer::Ok => None,
        Answer::Error {
            code,
            severity,
            message,
        } => {
            let first = first_line(message);
            let lower = message.to_lowercase();
            if code.starts_with("XX") {
                Some((code.clone(), first))
            } else if severity == "FATAL" || severity == "PANIC" {
                Some((code.clone(), format!("{severity}: {first}")))
            } else if PANIC_WORDS
                .iter()
                .any(|w| lower.contains(&w.to_lowercase()))
            {
                Some((code.clone(), format!("panic-like: {first}")))
            } else {
                None
            }
        }
        Answer::Lost(e) => Some((
            "(lost)".into(),
            format!("connection lost: {}", first_line(e)),
        )),
        Answer::Hang => Some((
            "(hang)".into(),
            format!(
                "no answer within {}s despite statement_timeout = {STATEMENT_TIMEOUT}",
                HANG_AFTER.as_secs()
            ),
        )),
    }
}

/// Lines of the server log that tell of a crash.
fn crash_lines(log: &str) -> Vec<String> {
    log.lines()
        .filter(|l| {
            l.contains("terminated by signal")
                || l.contains("PANIC:")
                || l.contains("TRAP:")
                || l.contains("was terminated by exception")
        })
        .map(str::to_owned)
        .collect()
}

/// Prints the failures as one table, grouped by function.
fn print_failures(failures: &[Failure], routines: &[Routine]) {
    let mut by_function: BTreeMap<&str, Vec<&Failure>> = BTreeMap::new();
    for f in failures {
        by_function.entry(&f.function).or_default().push(f);
    }
    println!(
        "\n{} failing calls in {} functions:",
        failures.len(),
        by_function.len()
    );
    println!("| function | args | sqlstate | message |");
    println!("|---|---|---|---|");
    for (function, list) in &by_function {
        let identity = routines
            .iter()
            .find(|r| r.name == *function)
            .map_or("", |r| r.identity.as_str());
        println!(
            "| **{function}**({identity}) | {} failures | | |",
            list.len()
        );
        for f in list {
            println!(
                "| {} | {} | {} | {} |",
                f.function,
                f.args.replace('|', "\\|"),
                f.sqlstate,
                f.message.replace('|', "\\|")
            );
        }
    }
}

/// The fuzzing run: its cluster, what it found so far, and how the server is doing.
struct Fuzz<'a> {
    c: &'a Cluster,
    /// A superuser session watching the server's epoch (and terminating hung calls).
    monitor: Option<Client>,
    epoch: Option<(String, i32)>,
    /// The batch kept claimed ([`LIVE`]).
    live: String,
    calls: usize,
    failures: Vec<Failure>,
    /// Answers of the whole run by SQLSTATE.
    codes: BTreeMap<String, usize>,
    verbose: bool,
}

impl Fuzz<'_> {
    /// Calls `routine` with every combination, within [`ROUTINE_BUDGET`]; returns how many
    /// combinations the budget left uncalled.
    fn routine(&mut self, routine: &Routine, combos: &[Vec<Val>]) -> usize {
        let started = Instant::now();
        let mut answers: BTreeMap<(String, String), usize> = BTreeMap::new();
        let mut left = 0;
        for (k, combo) in combos.iter().enumerate() {
            if started.elapsed() > ROUTINE_BUDGET {
                left = combos.len() - k;
                break;
            }
            self.calls += 1;
            let fill = |sql: &str| {
                sql.replace(SEQ, &self.calls.to_string())
                    .replace(LIVE, &self.live)
            };
            let args: Vec<String> = combo
                .iter()
                .zip(&routine.args)
                .map(|(value, arg)| fill(&typed(value, &arg.ty)))
                .collect();
            let sql = format!(
                "{} retention.{}({})",
                if routine.procedure { "CALL" } else { "SELECT" },
                routine.name,
                args.join(", ")
            );
            let label = combo
                .iter()
                .map(|val| fill(&val.label))
                .collect::<Vec<_>>()
                .join(", ");
            let answer = call(self.c, &sql, self.calls, &mut self.monitor);
            let (code, line) = match &answer {
                Answer::Ok => ("ok".to_owned(), String::new()),
                Answer::Error { code, message, .. } => (code.clone(), first_line(message)),
                Answer::Lost(e) => ("(lost)".to_owned(), first_line(e)),
                Answer::Hang => ("(hang)".to_owned(), String::new()),
            };
            *self.codes.entry(code.clone()).or_default() += 1;
            *answers.entry((code, line)).or_default() += 1;
            if let Some((sqlstate, message)) = judge(&answer) {
                self.fail(&routine.name, &label, sqlstate, message);
            }
            self.check_server(&routine.name, &label);
        }
        if self.verbose {
            println!("{}({}):", routine.name, routine.identity);
            for ((code, message), n) in &answers {
                println!("    {n:4} {code} {message}");
            }
        }
        self.live = restore(self.c, self.calls, &self.live);
        left
    }

    fn fail(&mut self, function: &str, args: &str, sqlstate: String, message: String) {
        self.failures.push(Failure {
            function: function.to_owned(),
            args: args.to_owned(),
            sqlstate,
            message,
        });
    }

    /// Records a crash or restart of the server after the last call (a lost monitor session,
    /// another postmaster start time or another checkpointer) and waits for it to come back.
    fn check_server(&mut self, function: &str, args: &str) {
        let now = self.monitor.as_mut().and_then(server_epoch);
        if now.is_some() && now == self.epoch {
            return;
        }
        let message = format!(
            "the server crashed or restarted: {:?} -> {now:?}",
            self.epoch
        );
        self.fail(function, args, "(crash)".into(), message);
        self.monitor = reconnect(self.c);
        self.epoch = self.monitor.as_mut().and_then(server_epoch);
        assert!(
            self.monitor.is_some(),
            "the server did not come back after a crash"
        );
    }
}

#[test]
fn every_routine_survives_fuzzed_arguments_as_an_unprivileged_member_of_every_role() {
    let started = Instant::now();
    let env = |name: &str| std::env::var(name).ok().and_then(|s| s.parse().ok());
    let seed = env("PG_RETENTION_FUZZ_SEED").unwrap_or(DEFAULT_SEED);
    let random = env("PG_RETENTION_FUZZ_RANDOM").map_or(RANDOM_COMBINATIONS, |n| n as usize);
    let mut rng = Rng::new(seed);
    let c = Cluster::start(&[]);
    let world = setup(&c);
    let mut monitor = reconnect(&c).expect("the server is up");
    let all = routines(&mut monitor);
    assert!(all.len() > 40, "found {} routines", all.len());
    let superuser: Vec<String> = column(
        &mut monitor,
        "SELECT rolname::text FROM pg_roles WHERE rolsuper AND rolname = 'fuzzer'",
    );
    assert!(superuser.is_empty(), "the fuzzer must not be a superuser");
    let epoch = server_epoch(&mut monitor);
    let mut fuzz = Fuzz {
        c: &c,
        monitor: Some(monitor),
        epoch,
        live: world.live_batch.clone(),
        calls: 0,
        failures: Vec::new(),
        codes: BTreeMap::new(),
        verbose: std::env::var_os("PG_RETENTION_FUZZ_VERBOSE").is_some(),
    };
    let mut skipped = Vec::new();
    for routine in &all {
        let combos = combinations(routine, &world, &mut rng, random);
        let left = fuzz.routine(routine, &combos);
        if left > 0 {
            skipped.push(format!("{}: {left} of {}", routine.name, combos.len()));
        }
    }

    // The application tables the fuzzer could never drop are still there.
    let mut db = reconnect(&c).expect("the server is up");
    for table in ["fuzz_plain", "fuzz_enum", "fuzz_parted"] {
        let sql = format!("SELECT count(*) FROM pg_class WHERE relname = '{table}'");
        if scalar(&mut db, &sql) != 1 {
            let message = format!("table {table} no longer exists");
            fuzz.fail("(after the run)", "", "(gone)".into(), message);
        }
    }
    let crashes = crash_lines(&c.log());

    let functions: BTreeSet<&str> = all.iter().map(|r| r.name.as_str()).collect();
    println!(
        "fuzzed {} functions with {} calls in {:.0?} (seed {seed:#x})",
        functions.len(),
        fuzz.calls,
        started.elapsed()
    );
    println!("answers by SQLSTATE: {:?}", fuzz.codes);
    if !skipped.is_empty() {
        println!(
            "calls skipped past the {}s budget of a routine: {}",
            ROUTINE_BUDGET.as_secs(),
            skipped.join("; ")
        );
    }
    if !crashes.is_empty() {
        println!("server log crash lines:\n{}", crashes.join("\n"));
    }
    if !fuzz.failures.is_empty() {
        print_failures(&fuzz.failures, &all);
    }
    assert!(
        fuzz.failures.is_empty() && crashes.is_empty(),
        "{} failing calls and {} crash lines in the server log (table above)",
        fuzz.failures.len(),
        crashes.len()
    );
}
