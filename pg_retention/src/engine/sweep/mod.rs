//! Sweeps: a run of a delete-action policy, one batch per transaction.
//!
//! A run is a small state machine carried between batches as JSON (so a plpgsql procedure can
//! COMMIT between batches and the background worker can run each batch in its own transaction):
//! `start` → `batch`* → `finish`, with `failed` when a batch raised an error. Each batch plans
//! and deletes in one statement, so the eligibility predicate, the holds in force and the
//! foreign-key guard are evaluated when the batch executes.

use crate::catalog::{active_holds, prepared, HoldFence, Kind, LedgerEntry, Policy, RelationInfo};
use crate::engine::eligible::{Eligibility, Guards};
use crate::engine::quota;
use crate::engine::run_context::{self, RunContext};
use crate::error::{Result, RetentionError};
use crate::sql_text::{ident, parse_tid, tid};
use pgrx::prelude::*;
use pgrx::PgOid;
use serde::{Deserialize, Serialize};
use serde_json::json;

/// Highest block number a tid can have; used as "end of table".
const END_BLOCK: u64 = u32::MAX as u64;
/// Block ranges grow up to this many blocks when batches come back sparse.
const MAX_SPAN: u64 = 1 << 20;

/// The state of one run of one policy, carried between batches.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SweepState {
    /// Policy id.
    pub policy_id: i64,
    /// Policy name (for messages).
    pub policy: String,
    /// Policy version the run started with; a change of version stops the run.
    pub version: i32,
    /// Run id, shared by every ledger record of the run.
    pub run_id: String,
    /// Who runs it (a role, or "worker").
    pub actor: String,
    /// Watermark: batches look at rows after this tid (block, item).
    pub lo: (u64, u64),
    /// For `age`: blocks per batch range (adapts to the density of eligible rows).
    pub span: u64,
    /// For `age` on a table with a btree index on the age column: batches walk that index and
    /// take the eligible rows aged from this value on (the type's text form). None: batches walk
    /// block ranges from `lo`.
    #[serde(default)]
    pub age_from: Option<String>,
    /// Rows deleted so far.
    pub deleted: i64,
    /// Batches that deleted rows.
    pub batches: i64,
    /// Most rows this run may delete (policy cap, or less when a worker cycle cap is lower).
    pub cap: i64,
    /// Whether the run is over.
    pub done: bool,
    /// running | ok | cap | error | stopped | skipped
    pub outcome: String,
    /// Why the run stopped, when it did not simply finish.
    pub reason: Option<String>,
}

fn new_run_id() -> Result<String> {
    Ok(Spi::get_one::<String>("SELECT gen_random_uuid()::text")?.unwrap_or_default())
}

impl SweepState {
    fn stop_at_cap(self) -> Self {
        let reason = format!(
            "run cap of {} rows reached with eligible rows left",
            self.cap
        );
        self.stop("cap", reason)
    }

    fn stop(mut self, outcome: &str, reason: impl Into<String>) -> Self {
        self.done = true;
        self.outcome = outcome.into();
        self.reason = Some(reason.into());
        self
    }
}

/// Starts a run. `cycle_remaining` lowers the cap when a worker cycle has less room left.
pub fn start(policy_id: i64, actor: &str, cycle_remaining: Option<i64>) -> Result<SweepState> {
    let policy = Policy::by_id(policy_id)?;
    let mut state = SweepState {
        policy_id,
        policy: policy.as_ref().map(|p| p.name.clone()).unwrap_or_default(),
        version: policy.as_ref().map(|p| p.version).unwrap_or(0),
        run_id: new_run_id()?,
        actor: actor.to_owned(),
        lo: (0, 0),
        span: 0,
        age_from: None,
        deleted: 0,
        batches: 0,
        cap: 0,
        done: false,
        outcome: "running".into(),
        reason: None,
    };
    let Some(policy) = policy else {
        return Ok(state.stop("skipped", "policy no longer exists"));
    };
    if !policy.enabled {
        return Ok(state.stop("skipped", "policy is disabled"));
    }
    if policy.action != "delete" {
        return Ok(state.stop(
            "skipped",
            "archive_then_delete policies are pruned only by the archive protocol",
        ));
    }
    let rel = match RelationInfo::load(policy.relation, &policy.relation_name) {
        Ok(rel) => rel,
        // A policy whose table is gone is an error of that policy, not of the whole run.
        Err(e) => return failed(state, &e.to_string(), e.sqlstate()),
    };
    // A policy runs with its owner's privileges or not at all: one that lost them fails
    // closed, ledgered, and the other policies of the run go on.
    if let Err(e) = crate::author::ensure_owner_privileges(
        policy.owner,
        rel.oid,
        &rel.qualified,
        &policy.name,
        false,
    ) {
        return failed(state, &e.to_string(), e.sqlstate());
    }
    state.cap = policy
        .max_rows_per_run
        .min(cycle_remaining.unwrap_or(i64::MAX))
        .max(0);
    state.span = initial_span(&rel, policy.batch_size)?;
    if policy.kind()? == Kind::Age && has_age_index(&rel, &policy)? {
        state.age_from = Some("-infinity".into());
    }
    Ok(state)
}

/// Whether the table has a btree index that leads with the policy's age column (whole-table,
/// default operator class), so that batches can take rows in age order and stop at the cutoff
/// instead of reading every block.
fn has_age_index(rel: &RelationInfo, policy: &Policy) -> Result<bool> {
    let plan = prepared::cached(
        "SELECT EXISTS (
             SELECT 1 FROM pg_catalog.pg_index i
               JOIN pg_catalog.pg_class ic ON ic.oid = i.indexrelid
               JOIN pg_catalog.pg_am am ON am.oid = ic.relam
               JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
               JOIN pg_catalog.pg_opclass oc ON oc.oid = i.indclass[0]
              WHERE i.indrelid = $1::bigint::oid AND a.attname = $2 AND am.amname = 'btree'
                AND i.indisvalid AND i.indpred IS NULL AND oc.opcdefault)",
        &[
            PgOid::BuiltIn(pgrx::pg_sys::BuiltinOid::INT8OID),
            PgOid::BuiltIn(pgrx::pg_sys::BuiltinOid::TEXTOID),
        ],
        false,
    )?;
    let age = policy.age_column.clone().unwrap_or_default();
    Ok(prepared::one::<bool>(&plan, &[i64::from(rel.oid).into(), age.into()])?.unwrap_or(false))
}

/// Blocks per batch so that a dense range holds about one batch of rows.
fn initial_span(rel: &RelationInfo, batch_size: i32) -> Result<u64> {
    let per_block = Spi::get_one_with_args::<f64>(
        "SELECT CASE WHEN relpages > 0 AND reltuples > 0 THEN reltuples / relpages ELSE 50 END::float8
           FROM pg_class WHERE oid = $1::bigint::oid",
        &[i64::from(rel.oid).into()],
    )?
    .unwrap_or(50.0)
    .max(1.0);
    Ok(((f64::from(batch_size) / per_block).ceil() as u64).clamp(1, MAX_SPAN))
}

fn table_blocks(rel: &RelationInfo) -> Result<u64> {
    let n = Spi::get_one_with_args::<i64>(
        "SELECT (pg_relation_size($1::bigint::oid) / current_setting('block_size')::int)::bigint",
        &[i64::from(rel.oid).into()],
    )?;
    Ok(n.unwrap_or(0).max(0) as u64)
}

/// What one batch statement reports.
struct BatchResult {
    deleted: i64,
    planned: i64,
    last: Option<(u64, u64)>,
    /// The statement saw a hold placed after the batch read the holds, and deleted nothing.
    new_hold: bool,
}

fn run_batch_sql(sql: &str) -> Result<BatchResult> {
    let (deleted, planned, last, new_hold) = Spi::connect_mut(|client| {
        let row = client.update(sql, Some(1), &[])?;
        let row = row.first();
        Ok::<_, pgrx::spi::SpiError>((
            row.get::<i64>(1)?,
            row.get::<i64>(2)?,
            row.get::<String>(3)?,
            row.get::<bool>(4)?,
        ))
    })?;
    Ok(BatchResult {
        deleted: deleted.unwrap_or(0),
        planned: planned.unwrap_or(0),
        last: last.as_deref().and_then(parse_tid),
        new_hold: new_hold.unwrap_or(false),
    })
}

/// Runs one batch and returns the next state. The caller commits afterwards.
pub fn batch(mut state: SweepState) -> Result<SweepState> {
    if state.done {
        return Ok(state);
    }
    let Some(ctx) = run_context::for_batch(&state.run_id, state.policy_id)? else {
        return Ok(state.stop("stopped", "policy was dropped during the run"));
    };
    let RunContext {
        policy,
        rel,
        holds,
        fence,
    } = &ctx;
    if policy.version != state.version {
        return Ok(state.stop(
            "stopped",
            format!(
                "policy changed to version {} during the run",
                policy.version
            ),
        ));
    }
    if !policy.enabled {
        return Ok(state.stop("stopped", "policy was disabled during the run"));
    }
    let remaining = state.cap - state.deleted;
    // An age batch runs a statement planned once per run, with the cutoff as a parameter; the
    // other kinds and the checks below read the cutoff as a constant.
    let literal = || Eligibility::new(policy, rel, holds);
    let elig = if policy.kind()? == Kind::Age {
        Eligibility::with_cutoff(policy, rel, holds, CUTOFF_PARAM)?
    } else {
        literal()?
    };
    if remaining <= 0 {
        let elig = literal()?;
        return Ok(if has_more(&elig, state.lo)? {
            state.stop_at_cap()
        } else {
            state.stop("ok", "finished at the cap")
        });
    }
    let n = remaining.min(i64::from(policy.batch_size));
    if let Some(from) = state.age_from.clone() {
        return age_index_step(state, &ctx, &elig, from, n);
    }
    let (hi_block, result) = match elig.kind() {
        Kind::Entity => (
            END_BLOCK,
            elig.as_owner(|| run_batch_sql(&entity_batch(&elig, fence, state.lo, n, remaining)))?,
        ),
        Kind::Age => {
            let hi = state.lo.0.saturating_add(state.span).min(END_BLOCK);
            (
                hi,
                elig.as_owner(|| run_age_batch(&elig, fence, state.lo, hi, n))?,
            )
        }
        Kind::KeepLatest | Kind::Versions => (
            END_BLOCK,
            elig.as_owner(|| run_batch_sql(&row_batch(&elig, fence, state.lo, END_BLOCK, n)))?,
        ),
    };
    if result.new_hold {
        // Deleted nothing; the next batch reads the new hold and plans again from here.
        return Ok(state);
    }
    if result.deleted > 0 {
        let detail = json!({
            "planned": result.planned,
            "from_tid": format!("({},{})", state.lo.0, state.lo.1),
            "to_tid": result.last.map(|(b, i)| format!("({b},{i})")),
        });
        record_prune(&mut state, &ctx, result.deleted, detail)?;
    }
    let full = result.planned >= n;
    match (elig.kind(), full, result.last) {
        // The batch filled up: continue right after its last planned row.
        (_, true, Some(last)) => state.lo = last,
        // A sparse block range: move past it and widen the next one.
        (Kind::Age, _, _) => {
            state.lo = (hi_block, 0);
            if result.planned < n / 2 {
                state.span = (state.span * 2).min(MAX_SPAN);
            }
            if hi_block >= table_blocks(rel)? {
                state = state.stop("ok", "no eligible rows left");
            }
        }
        // An entity group larger than what the run has left: stop at the cap.
        (Kind::Entity, _, None)
            if remaining < i64::from(policy.batch_size) && has_more(&elig, state.lo)? =>
        {
            state = state.stop_at_cap()
        }
        // Ranked kinds and entity look at the whole rest of the table each batch.
        _ => state = state.stop("ok", "no eligible rows left"),
    }
    Ok(state)
}

/// Counts a batch that deleted `rows` and ledgers it (`detail` plus the batch number).
fn record_prune(
    state: &mut SweepState,
    ctx: &RunContext,
    rows: i64,
    mut detail: serde_json::Value,
) -> Result<()> {
    state.deleted += rows;
    state.batches += 1;
    detail["batch"] = json!(state.batches);
    LedgerEntry {
        method: "prune",
        policy: Some(&ctx.policy),
        relation: None,
        rows,
        hold_ids: ctx.holds.iter().map(|h| h.id).collect(),
        actor: &state.actor,
        run_id: Some(&state.run_id),
        detail,
    }
    .append()
}

/// Whether deletable rows remain after the watermark.
fn has_more(elig: &Eligibility<'_>, lo: (u64, u64)) -> Result<bool> {
    let sql = format!(
        "SELECT EXISTS (SELECT 1 FROM ({rows}) e WHERE e.__ctid > {lo})",
        rows = elig.rows(Guards::ALL),
        lo = tid(lo.0, lo.1),
    );
    elig.as_owner(|| Ok(Spi::get_one::<bool>(&sql)?.unwrap_or(false)))
}

/// The cutoff parameter of both age batch statements (block range and index).
const CUTOFF_PARAM: &str = "$1";

/// One batch of an `age` policy through an index on the age column: one DELETE of the eligible
/// rows aged from `from` up to (not including) the age of the first eligible row past the
/// batch's `n`, looked up once by the same statement (an index scan of `n + 1` entries, under
/// the same snapshot), so it deletes at most `n` rows and never reads a row past the cutoff.
/// Rows that share the boundary age go to the next batch whole; when more than `n` rows share
/// the age the batch starts at, the run goes on by block ranges instead. A hold placed after
/// the holds were read makes the bound NULL, and the batch deletes nothing.
fn age_index_step(
    mut state: SweepState,
    ctx: &RunContext,
    elig: &Eligibility<'_>,
    from: String,
    n: i64,
) -> Result<SweepState> {
    let RunContext {
        policy, rel, fence, ..
    } = ctx;
    let age_column = policy.age_column.as_deref().unwrap_or_default();
    let age = ident(age_column);
    let age_type = &rel.column(age_column)?.type_name;
    let eligible = elig.age_predicate(Guards::ALL);
    // `OFFSET 0` keeps `b` a subquery of its own: pulled up, the lookup of `next` would be
    // copied into each of its two uses and run twice.
    let sql = format!(
        "DELETE FROM ONLY {table} t
          WHERE t.{age} >= $2::{age_type}
            AND t.{age} < (SELECT CASE WHEN {fence} THEN NULL ELSE coalesce(b.next, 'infinity') END
                             FROM (SELECT (SELECT t.{age} FROM ONLY {table} t
                                            WHERE t.{age} >= $2::{age_type} AND {eligible}
                                            ORDER BY t.{age} OFFSET $3 LIMIT 1) AS next OFFSET 0) b
                            WHERE retention._batch_bound($4, b.next::text))
            AND {eligible}",
        table = elig.table(),
        fence = fence.tripped(),
    );
    use pgrx::pg_sys::BuiltinOid::{INT8OID, TEXTOID, TIMESTAMPTZOID};
    let token = quota::next_token();
    let deleted = elig.as_owner(|| {
        let cutoff = elig.policy_cutoff()?;
        let plan = prepared::cached(
            &sql,
            &[TIMESTAMPTZOID, TEXTOID, INT8OID, INT8OID].map(PgOid::BuiltIn),
            true,
        )?;
        Ok(prepared::run(
            &plan,
            &[cutoff.into(), from.as_str().into(), n.into(), token.into()],
        )? as i64)
    })?;
    let bound = quota::bound(token);
    if deleted == 0 && fence.tripped_now()? {
        // A hold arrived after the batch read the holds: read the same rows again with it.
        return Ok(state);
    }
    if deleted > 0 {
        let detail = json!({
            "planned": deleted,
            "from_age": from,
            "to_age": bound.clone().flatten(),
        });
        record_prune(&mut state, ctx, deleted, detail)?;
    }
    Ok(match bound {
        // The bound is computed before a row can pass the age condition: without one, no row did.
        None if deleted == 0 => state.stop("ok", "no eligible rows left"),
        None => {
            return Err(RetentionError::Internal(
                "an index batch deleted rows without computing its bound".into(),
            ))
        }
        Some(None) => state.stop("ok", "no eligible rows left"),
        Some(Some(next)) if next == from => {
            // More than a batch of rows share this age: go on by block ranges from the start.
            state.age_from = None;
            state.lo = (0, 0);
            state
        }
        Some(next) => {
            state.age_from = next;
            state
        }
    })
}

/// One batch of an `age` policy: one DELETE over one block range (a TID range scan, a page at a
/// time, as fast as a bulk DELETE per row), deleting the first `n` eligible rows in physical
/// order. `retention._batch_quota` counts the rows that passed every other condition (the CASE
/// makes it run last), refuses past `n`, and remembers the last row it let through, so the
/// statement needs no RETURNING (which would read every deleted row once more). The statement
/// is planned once for as long as its text (the policy, table, holds and fence) stays the same;
/// the range, quota and cutoff are its parameters.
fn run_age_batch(
    elig: &Eligibility<'_>,
    fence: &HoldFence,
    lo: (u64, u64),
    hi_block: u64,
    n: i64,
) -> Result<BatchResult> {
    let sql = format!(
        "DELETE FROM ONLY {table} t
          WHERE t.ctid > $2 AND t.ctid < $3
            AND CASE WHEN {eligible} AND NOT {fence} THEN retention._batch_quota($4, $5, t.ctid) ELSE false END",
        table = elig.table(),
        eligible = elig.age_predicate(Guards::ALL),
        fence = fence.tripped(),
    );
    use pgrx::pg_sys::BuiltinOid::{INT8OID, TIDOID, TIMESTAMPTZOID};
    let types = [TIMESTAMPTZOID, TIDOID, TIDOID, INT8OID, INT8OID].map(PgOid::BuiltIn);
    let plan = prepared::cached(&sql, &types, true)?;
    let token = quota::next_token();
    let cutoff = elig.policy_cutoff()?;
    let deleted = prepared::run(
        &plan,
        &[
            cutoff.into(),
            crate::tid::pointer(lo).into(),
            crate::tid::pointer((hi_block, 0)).into(),
            n.into(),
            token.into(),
        ],
    )? as i64;
    // Nothing deleted can mean a hold arrived: then the range is read again with it.
    let new_hold = deleted == 0 && fence.tripped_now()?;
    Ok(BatchResult {
        deleted,
        planned: deleted,
        last: quota::last(token),
        new_hold,
    })
}

/// One batch of row-wise kinds: plan up to `n` eligible rows after the watermark in physical
/// order and delete exactly those, in one statement.
fn row_batch(
    elig: &Eligibility<'_>,
    fence: &HoldFence,
    lo: (u64, u64),
    hi_block: u64,
    n: i64,
) -> String {
    format!(
        "WITH planned AS MATERIALIZED (
             SELECT e.__ctid FROM ({rows}) e
              WHERE e.__ctid > {lo} AND e.__ctid < {hi}
              ORDER BY e.__ctid LIMIT {n}),
         deleted AS (
             DELETE FROM ONLY {table} d
              WHERE d.ctid = ANY (ARRAY(SELECT __ctid FROM planned)) AND NOT {fence} RETURNING 1)
         SELECT (SELECT count(*) FROM deleted), (SELECT count(*) FROM planned),
                (SELECT max(__ctid)::text FROM planned), {fence}",
        fence = fence.tripped(),
        rows = elig.rows(Guards::ALL),
        lo = tid(lo.0, lo.1),
        hi = tid(hi_block, 0),
        table = elig.table(),
    )
}

/// One batch of an `entity` policy: whole expired groups in order of their first row, as many
/// as fit in the batch (at least one) and never more than the run has left.
fn entity_batch(
    elig: &Eligibility<'_>,
    fence: &HoldFence,
    lo: (u64, u64),
    n: i64,
    remaining: i64,
) -> String {
    format!(
        "WITH groups AS MATERIALIZED ({groups}),
         picked AS MATERIALIZED (
             SELECT * FROM (SELECT g.*, sum(g.__n) OVER (ORDER BY g.__first) AS __cum
                              FROM groups g WHERE g.__first > {lo}) x
              WHERE x.__cum - x.__n < {n} AND x.__cum <= {remaining}),
         deleted AS (
             DELETE FROM ONLY {table} t USING picked g WHERE {join} AND {scope} AND NOT {fence} RETURNING 1)
         SELECT (SELECT count(*) FROM deleted), (SELECT coalesce(sum(__n), 0)::bigint FROM picked),
                (SELECT max(__first)::text FROM picked), {fence}",
        fence = fence.tripped(),
        groups = elig.entity_groups(Guards::ALL),
        lo = tid(lo.0, lo.1),
        table = elig.table(),
        join = elig.entity_join(),
        scope = elig.scope_sql(),
    )
}

/// Records a batch that raised an error and ends the run.
pub fn failed(state: SweepState, message: &str, sqlstate: &str) -> Result<SweepState> {
    let policy = Policy::by_id(state.policy_id)?;
    LedgerEntry {
        method: "error",
        policy: policy.as_ref(),
        relation: None,
        rows: 0,
        hold_ids: vec![],
        actor: &state.actor,
        run_id: Some(&state.run_id),
        detail: json!({ "error": message, "sqlstate": sqlstate, "policy": state.policy }),
    }
    .append()?;
    let reason = format!("{sqlstate}: {message}");
    Ok(state.stop("error", reason))
}

/// Closes a run: ledgers rows skipped because of holds, a cap warning, and the run summary.
pub fn finish(state: SweepState) -> Result<SweepState> {
    let Some(policy) = Policy::by_id(state.policy_id)? else {
        return Ok(state);
    };
    if state.outcome == "skipped" {
        return Ok(state);
    }
    let mut backlog = 0i64;
    let mut hold_detail = serde_json::Value::Null;
    if let Ok(rel) = RelationInfo::load(policy.relation, &policy.relation_name) {
        let holds = active_holds(policy.relation)?;
        if state.outcome != "error" {
            let elig = Eligibility::new(&policy, &rel, &holds)?;
            if !holds.is_empty() {
                hold_detail = ledger_hold_skips(&elig, &policy, &state)?;
            }
            if state.outcome == "cap" {
                backlog = elig.count(Guards::ALL)?;
                LedgerEntry {
                    method: "cap_reached",
                    policy: Some(&policy),
                    relation: None,
                    rows: backlog,
                    hold_ids: vec![],
                    actor: &state.actor,
                    run_id: Some(&state.run_id),
                    detail: json!({ "warning": state.reason, "cap": state.cap, "deleted": state.deleted }),
                }
                .append()?;
                pgrx::warning!(
                    "pg_retention: policy {} stopped at its cap of {} rows; {} eligible rows remain",
                    policy.name,
                    state.cap,
                    backlog
                );
            }
        }
    }
    LedgerEntry {
        method: "run",
        policy: Some(&policy),
        relation: None,
        rows: state.deleted,
        hold_ids: vec![],
        actor: &state.actor,
        run_id: Some(&state.run_id),
        detail: json!({
            "outcome": state.outcome,
            "reason": state.reason,
            "batches": state.batches,
            "deleted": state.deleted,
            "backlog": backlog,
            "held": hold_detail,
        }),
    }
    .append()?;
    Ok(state)
}

/// One `hold_skip` record per hold that kept eligible rows alive in this run.
fn ledger_hold_skips(
    elig: &Eligibility<'_>,
    policy: &Policy,
    state: &SweepState,
) -> Result<serde_json::Value> {
    let counts = crate::engine::preview::held_per_hold(elig)?;
    let mut detail = serde_json::Map::new();
    for (hold_id, rows) in counts.into_iter().filter(|(_, rows)| *rows > 0) {
        detail.insert(hold_id.to_string(), json!(rows));
        LedgerEntry {
            method: "hold_skip",
            policy: Some(policy),
            relation: None,
            rows,
            hold_ids: vec![hold_id],
            actor: &state.actor,
            run_id: Some(&state.run_id),
            detail: json!({ "hold": hold_id }),
        }
        .append()?;
    }
    Ok(serde_json::Value::Object(detail))
}
