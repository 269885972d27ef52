//! Sweeps: a run of a delete-action policy, one step per transaction. A step deletes up to
//! `batch_size` rows; "batch" alone means an archive batch (`archive/`).
//!
//! A run is a small state machine kept in the backend that runs it (`runs.rs`), each step in a
//! transaction of its own (a plpgsql procedure COMMITs between steps, the background worker
//! runs each in its own transaction; `driver.rs` is the one definition of a run both use):
//! `start` → `step`* → `finish`, with `failed` when a step raised an error. Each step plans
//! and deletes in one statement (`statements.rs`), so the eligibility predicate, the holds in
//! force and the foreign-key guard are evaluated when the step executes.
//!
//! On a partitioned table a run sweeps its leaves one after another (those there when the run
//! starts); an `age` run first tries to retire each leaf whole (`engine/retire.rs`) and sweeps
//! its rows only when it cannot.
//!
//! This module holds the step dispatch: starting a run, moving from leaf to leaf, and choosing
//! each step's statement by the policy's kind. The run's state is in `state.rs`, the retirement
//! of whole leaves in `retire_leaves.rs`, the statements in `statements.rs`.

mod close;
mod detached;
pub mod driver;
pub(crate) mod plan;
mod retire_leaves;
pub mod runs;
mod state;
mod statements;

pub use close::{failed, finish};
pub use detached::let_go;
use plan::{has_age_index, initial_span, leaves_to_sweep};
use retire_leaves::{retire_leaves, Retiring};
use state::new_run_id;
pub use state::{Outcome, SweepState};
use statements::{age_index_step, age_range_step, entity_step, row_step, run_step_sql};

use crate::catalog::{partition, Action, Kind, Leaf, LedgerMethod, Policy, RelationInfo};
use crate::engine::eligible::{keeps_every_referenced_row, Eligibility, Guards};
use crate::engine::pacing::{self, Adaptive};
use crate::engine::references::Dependents;
use crate::engine::retire;
use crate::engine::run_context::{self, RunContext};
use crate::error::{present, Result, RetentionError};
use crate::tid;
use pgrx::prelude::*;
use serde_json::json;

/// Highest block number a tid can have; used as "end of table".
const END_BLOCK: u64 = u32::MAX as u64;
/// Block ranges grow up to this many blocks when steps come back sparse.
const MAX_SPAN: u64 = 1 << 20;

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
        steps: 0,
        cap: 0,
        done: false,
        outcome: Outcome::Running,
        reason: None,
        leaves: vec![],
        retire: false,
        dropped: 0,
        detached: vec![],
        paced: Adaptive::default(),
        dependents: None,
    };
    let Some(policy) = policy else {
        return Ok(state.stop(Outcome::Skipped, "policy no longer exists"));
    };
    if !policy.enabled {
        return Ok(state.stop(Outcome::Skipped, "policy is disabled"));
    }
    if policy.action != Action::Delete {
        return Ok(state.stop(
            Outcome::Skipped,
            "archive_then_delete policies are pruned only by the archive protocol",
        ));
    }
    let rel = match RelationInfo::load(policy.relation, &policy.relation_name) {
        Ok(rel) => rel,
        // A policy whose table is gone is an error of that policy, not of the whole run.
        Err(e) => return failed(state, &e.to_string(), &e.sqlstate()),
    };
    // A policy runs with its owner's privileges or not at all: one that lost them fails
    // closed, ledgered, and the other policies of the run go on.
    if let Err(e) = crate::author::ensure_owner_privileges(
        policy.owner,
        rel.oid,
        &rel.qualified,
        &policy.name,
        policy.visible_rows_only(),
    ) {
        return failed(state, &e.to_string(), &e.sqlstate());
    }
    state.paced.batch_size = i64::from(policy.batch_size);
    state.cap = policy
        .max_rows_per_run
        .min(cycle_remaining.unwrap_or(i64::MAX))
        .max(0);
    if rel.partitioned() {
        detached::attach_left_behind(&state, &policy)?;
        let all = partition::leaves(rel.oid, policy.age_column.as_deref())?;
        let none = all.is_empty();
        state.leaves = leaves_to_sweep(&policy, &rel, all)?;
        return match state.leaves.first() {
            Some(&first) => begin_leaf(state, &policy, first),
            None if none => Ok(state.stop(Outcome::Ok, "the table has no partitions")),
            None => Ok(state.stop(Outcome::Ok, "no eligible rows left")),
        };
    }
    state.span = initial_span(rel.oid, policy.batch_size)?;
    if policy.kind.by_age() && has_age_index(rel.oid, &policy)? {
        state.age_from = Some("-infinity".into());
    }
    Ok(state)
}

/// Starts on leaf `oid` of a partitioned table: from its first row, tried for a whole drop
/// first when the policy is an `age` policy.
fn begin_leaf(mut state: SweepState, policy: &Policy, oid: u32) -> Result<SweepState> {
    state.lo = (0, 0);
    state.span = match initial_span(oid, policy.batch_size) {
        Ok(span) => span,
        // Dropped or detached meanwhile: the next step sees it is no leaf and moves on.
        Err(RetentionError::WrongState { .. }) => 1,
        Err(e) => return Err(e),
    };
    state.age_from =
        (policy.kind.by_age() && has_age_index(oid, policy)?).then(|| "-infinity".into());
    state.retire = policy.kind.by_age();
    Ok(state)
}

/// The current leaf (or the table) has no eligible rows left: go on with the next leaf, or
/// finish.
pub(super) fn leaf_swept(state: SweepState, policy: &Policy) -> Result<SweepState> {
    leaves_swept(state, policy, 1)
}

/// The first `n` leaves of the run's list (at least the current one) are done with: go on
/// with the next leaf, or finish.
fn leaves_swept(mut state: SweepState, policy: &Policy, n: usize) -> Result<SweepState> {
    state.leaves.drain(..n.min(state.leaves.len()));
    match state.leaves.first() {
        Some(&next) => begin_leaf(state, policy, next),
        None => Ok(state.stop(Outcome::Ok, "no eligible rows left")),
    }
}

/// Runs one step and returns the next state. The caller commits afterwards. A step after one
/// that detached leaves only drops them.
pub fn step(state: SweepState) -> Result<SweepState> {
    let next = if state.detached.is_empty() {
        step_rows_or_leaves(state)?
    } else {
        detached::drop_all(state)?
    };
    // Last, when nothing of the step can fail any more (see `retire::keep_detached`).
    for &oid in &next.detached {
        retire::keep_detached(oid);
    }
    Ok(next)
}

fn step_rows_or_leaves(mut state: SweepState) -> Result<SweepState> {
    if state.done {
        return Ok(state);
    }
    // Before anything is read or locked: the sleep holds nothing a writer or DDL waits for.
    if state.steps > 0 {
        pacing::adapt(&mut state.paced);
    }
    let Some(ctx) = run_context::for_step(&state.run_id, state.policy_id)? else {
        return Ok(state.stop(Outcome::Stopped, "policy was dropped during the run"));
    };
    let RunContext {
        policy,
        rel,
        holds,
        fence,
    } = &ctx;
    if policy.version != state.version {
        return Ok(state.stop(
            Outcome::Stopped,
            format!(
                "policy changed to version {} during the run",
                policy.version
            ),
        ));
    }
    if !policy.enabled {
        return Ok(state.stop(Outcome::Stopped, "policy was disabled during the run"));
    }
    crate::engine::references::check_keys_at_once(rel)?;
    let dependents = Dependents::of(rel, keeps_every_referenced_row(policy))?;
    state.dependents = if dependents.is_empty() {
        None
    } else {
        let before = dependents.counts()?;
        Some((dependents, before))
    };
    if state.retire && state.cap > state.deleted {
        match retire_leaves(state, &ctx)? {
            Retiring::Done(next) => return Ok(next),
            Retiring::SweepRows(next) => state = next,
        }
    }
    // The leaf this step works on, for a partitioned table.
    let current = match state.leaves.first() {
        None => None,
        Some(&oid) => match partition::leaf(rel.oid, oid, policy.age_column.as_deref())? {
            Some(leaf) => Some(leaf),
            // Detached or dropped since the run started: no longer the policy's to sweep.
            None => return leaf_swept(state, policy),
        },
    };
    let leaf: Option<&Leaf> = current.as_ref();
    let remaining = state.cap - state.deleted;
    // An age step runs a statement planned once per run, with the cutoff as a parameter; the
    // other kinds and the checks below read the cutoff as a constant.
    let literal = || Eligibility::new(policy, rel, holds).map(|e| on(e, leaf));
    let elig = if policy.kind.by_age() {
        on(
            Eligibility::with_cutoff(policy, rel, holds, CUTOFF_PARAM)?,
            leaf,
        )
    } else {
        literal()?
    };
    if remaining <= 0 {
        return Ok(if has_more(&ctx, &state)? {
            state.stop_at_cap()
        } else {
            state.stop(Outcome::Ok, "finished at the cap")
        });
    }
    let n = remaining
        .min(i64::from(policy.batch_size))
        .min(state.paced.step_rows.unwrap_or(i64::MAX));
    if let Some(from) = state.age_from.clone() {
        return age_index_step(state, &ctx, &elig, from, n);
    }
    let (hi_block, result) = match elig.kind() {
        Kind::Entity => (
            END_BLOCK,
            elig.as_owner(|| run_step_sql(&entity_step(&elig, fence, state.lo, n, remaining)))?,
        ),
        Kind::Age | Kind::Unreferenced | Kind::Orphan => {
            let hi = state.lo.0.saturating_add(state.span).min(END_BLOCK);
            (
                hi,
                elig.as_owner(|| age_range_step(&elig, fence, state.lo, hi, n))?,
            )
        }
        Kind::KeepLatest | Kind::Versions => (
            END_BLOCK,
            elig.as_owner(|| run_step_sql(&row_step(&elig, fence, state.lo, END_BLOCK, n)))?,
        ),
    };
    if result.new_hold {
        // Deleted nothing; the next step reads the new hold and plans again from here.
        return Ok(state);
    }
    if result.deleted > 0 {
        let mut detail = json!({
            "planned": result.planned,
            "from_tid": format!("({},{})", state.lo.0, state.lo.1),
            "to_tid": result.last.map(|(b, i)| format!("({b},{i})")),
        });
        if let Some(keys) = result.keys {
            detail["keys"] = keys;
        }
        record_prune(&mut state, &ctx, result.deleted, detail)?;
    }
    let full = result.planned >= n;
    match (elig.kind(), full, result.last) {
        // The step filled up: continue right after its last planned row.
        (_, true, Some(last)) => state.lo = last,
        // A sparse block range: move past it and widen the next one.
        (kind, _, _) if kind.by_age() => {
            state.lo = (hi_block, 0);
            if result.planned < n / 2 {
                state.span = (state.span * 2).min(MAX_SPAN);
            }
            if hi_block >= RelationInfo::blocks(leaf.map_or(rel.oid, |l| l.oid))? {
                state = leaf_swept(state, policy)?;
            }
        }
        // An entity group larger than what the run has left: stop at the cap.
        (Kind::Entity, _, None)
            if remaining < i64::from(policy.batch_size) && has_more(&ctx, &state)? =>
        {
            state = state.stop_at_cap()
        }
        // Ranked kinds and entity look at the whole rest of the table (leaf) each step.
        _ => state = leaf_swept(state, policy)?,
    }
    Ok(state)
}

/// `elig` on `leaf`, when there is one.
fn on<'a>(elig: Eligibility<'a>, leaf: Option<&'a Leaf>) -> Eligibility<'a> {
    match leaf {
        Some(l) => elig.on_leaf(l),
        None => elig,
    }
}

/// Counts a step that deleted `rows` and ledgers it (`detail` plus the step number).
fn record_prune(
    state: &mut SweepState,
    ctx: &RunContext,
    rows: i64,
    mut detail: serde_json::Value,
) -> Result<()> {
    state.deleted += rows;
    state.steps += 1;
    detail["batch"] = json!(state.steps);
    if let Some((dependents, before)) = state.dependents.take() {
        // The rows the step's cascades deleted and its SET NULL / SET DEFAULT keys updated.
        let (changed, after) = dependents.since(&before)?;
        if let Some(changed) = changed {
            detail["dependents"] = changed;
        }
        state.dependents = Some((dependents, after));
    }
    if ctx.policy.kind == Kind::Unreferenced {
        // The decision: every row deleted was referenced by no row of these tables, checked
        // in the deleting statement.
        let checked: Vec<&str> = ctx
            .rel
            .referenced_by
            .iter()
            .map(|r| r.child.as_str())
            .collect();
        detail["references_checked"] = json!(checked);
    }
    let method = match ctx.policy.kind {
        Kind::Orphan => LedgerMethod::OrphanSweep,
        _ => LedgerMethod::Prune,
    };
    state.ledger(
        method,
        Some(&ctx.policy),
        rows,
        ctx.holds.iter().map(|h| h.id).collect(),
        detail,
    )
}

/// Whether deletable rows remain after the watermark (on a partitioned table: after it in the
/// current leaf, or in any other leaf).
fn has_more(ctx: &RunContext, state: &SweepState) -> Result<bool> {
    let elig = Eligibility::new(&ctx.policy, &ctx.rel, &ctx.holds)?;
    let after = match state.leaves.first() {
        Some(leaf) => format!("e.__rel <> {leaf} OR e.__ctid > {}", tid::literal(state.lo)),
        None => format!("e.__ctid > {}", tid::literal(state.lo)),
    };
    let sql = format!(
        "SELECT EXISTS (SELECT 1 FROM ({rows}) e WHERE {after})",
        rows = elig.rows(Guards::ALL),
    );
    elig.as_owner(|| present(Spi::get_one::<bool>(&sql)?, "EXISTS"))
}

/// The cutoff parameter of both age step statements (block range and index).
const CUTOFF_PARAM: &str = "$1";
