//! Sweeps: a run of a delete-action policy, one step per transaction. A step deletes up to
//! `batch_size` rows; "batch" alone means an archive batch (`archive/`).
//!
//! A run is a small state machine carried between steps as JSON (so a plpgsql procedure can
//! COMMIT between steps and the background worker can run each step in its own transaction):
//! `start` → `step`* → `finish`, with `failed` when a step raised an error. Each step plans
//! and deletes in one statement (`statements.rs`), so the eligibility predicate, the holds in
//! force and the foreign-key guard are evaluated when the step executes.
//!
//! On a partitioned table a run sweeps its leaves one after another (those there when the run
//! starts); an `age` run first tries to retire each leaf whole (`engine/retire.rs`) and sweeps
//! its rows only when it cannot.

mod close;
mod detached;
mod plan;
pub mod runs;
mod statements;

pub use close::{failed, finish};
pub use detached::let_go;
use plan::{has_age_index, initial_span, leaves_to_sweep, table_blocks};
use statements::{age_index_step, age_range_step, entity_step, row_step, run_step_sql};

use crate::catalog::retiring::RetiringLeaf;
use crate::catalog::{
    partition, Action, Kind, Leaf, LedgerEntry, LedgerMethod, Policy, RelationInfo,
};
use crate::engine::eligible::{keeps_every_referenced_row, Eligibility, Guards};
use crate::engine::pacing::{self, Adaptive};
use crate::engine::references::Dependents;
use crate::engine::retire::{self, Proving};
use crate::engine::run_context::{self, RunContext};
use crate::error::{present, Result, RetentionError};
use crate::subxact::Attempt;
use crate::tid;
use pgrx::prelude::*;
use serde::{Deserialize, Serialize};
use serde_json::json;

/// Highest block number a tid can have; used as "end of table".
const END_BLOCK: u64 = u32::MAX as u64;
/// Block ranges grow up to this many blocks when steps come back sparse.
const MAX_SPAN: u64 = 1 << 20;

/// How a run went (`detail.outcome` of its `run` ledger record).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// Not over yet.
    Running,
    /// No eligible rows left (or none left at the cap).
    Ok,
    /// Stopped at the run's cap with eligible rows left.
    Cap,
    /// A step failed; ledgered.
    Error,
    /// The policy changed, was disabled or dropped during the run.
    Stopped,
    /// Nothing to run (disabled, gone, or an archive policy).
    Skipped,
}

/// The state of one run of one policy, carried between steps.
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
    /// Watermark: steps look at rows after this tid (block, item).
    pub lo: (u64, u64),
    /// For `age`: blocks per step range (adapts to the density of eligible rows).
    pub span: u64,
    /// For `age` on a table with a btree index on the age column: steps walk that index and
    /// take the eligible rows aged from this value on (the type's text form). None: steps walk
    /// block ranges from `lo`.
    #[serde(default)]
    pub age_from: Option<String>,
    /// Rows deleted so far.
    pub deleted: i64,
    /// Steps that deleted rows (`batches` in the state and the ledger, as documented).
    #[serde(rename = "batches")]
    pub steps: i64,
    /// Most rows this run may delete (policy cap, or less when a worker cycle cap is lower).
    pub cap: i64,
    /// Whether the run is over.
    pub done: bool,
    /// How the run went.
    pub outcome: Outcome,
    /// Why the run stopped, when it did not simply finish.
    pub reason: Option<String>,
    /// For a partitioned table: the leaves not yet swept, the one being swept first (empty for
    /// a table that is not partitioned).
    #[serde(default)]
    pub leaves: Vec<u32>,
    /// Whether the current leaf is still to be tried for a whole drop.
    #[serde(default)]
    pub retire: bool,
    /// Leaves dropped whole.
    #[serde(default)]
    pub dropped: i64,
    /// Leaves the last step detached to retire whole, which the next transaction drops (the
    /// next step, or `finish`); each has a `retention.retiring_leaves` row and this session's
    /// lock.
    #[serde(default)]
    pub detached: Vec<u32>,
    /// WAL the last step wrote, in bytes: what pacing charges to the database's budget.
    #[serde(default)]
    pub step_wal_bytes: i64,
    /// Adaptive pacing: the next step's size and the pauses so far.
    #[serde(default)]
    pub paced: Adaptive,
    /// The run's token in this backend ([`runs`]): what SQL hands back between steps.
    #[serde(default)]
    pub token: u64,
    /// When a pause of `CALL retention.run()` between two steps began, and why (see
    /// `retention._run_pace`); the worker times its own pauses.
    #[serde(skip)]
    pub pause: Option<(std::time::Instant, String)>,
    /// Within a step: the tables its deletes change through foreign keys, and their rows
    /// changed in this transaction before it (engine/references.rs), for its ledger entry.
    #[serde(skip)]
    pub dependents: Option<(Dependents, Vec<i64>)>,
}

fn new_run_id() -> Result<String> {
    present(
        Spi::get_one::<String>("SELECT gen_random_uuid()::text")?,
        "gen_random_uuid()",
    )
}

impl SweepState {
    fn stop_at_cap(self) -> Self {
        let reason = format!(
            "run cap of {} rows reached with eligible rows left",
            self.cap
        );
        self.stop(Outcome::Cap, reason)
    }

    /// Appends a ledger entry of this run (its actor and run id) about `policy`.
    fn ledger(
        &self,
        method: LedgerMethod,
        policy: Option<&Policy>,
        rows: i64,
        hold_ids: Vec<i64>,
        detail: serde_json::Value,
    ) -> Result<()> {
        LedgerEntry {
            method,
            policy,
            relation: None,
            rows,
            hold_ids,
            actor: &self.actor,
            run_id: Some(&self.run_id),
            detail,
        }
        .append()
    }

    /// Ends the run with `outcome` and why.
    pub(crate) fn stop(mut self, outcome: Outcome, reason: impl Into<String>) -> Self {
        self.done = true;
        self.outcome = outcome;
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
        steps: 0,
        cap: 0,
        done: false,
        outcome: Outcome::Running,
        reason: None,
        leaves: vec![],
        retire: false,
        dropped: 0,
        detached: vec![],
        step_wal_bytes: 0,
        paced: Adaptive::default(),
        token: 0,
        pause: None,
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
            if hi_block >= table_blocks(leaf.map_or(rel.oid, |l| l.oid))? {
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

/// What [`retire_leaves`] leaves the step to do.
enum Retiring {
    /// The step is over (leaves dropped, one put off, or a new hold to read).
    Done(SweepState),
    /// The current leaf cannot go whole: the step sweeps its rows.
    SweepRows(SweepState),
}

/// Most leaves one step drops (one commit, which waits for its WAL flush, serves them all).
const MAX_LEAVES_PER_STEP: usize = 16;

/// What became of a leaf at the front of the run's list in [`retire_leaves`].
enum Fate {
    /// Detached or dropped since the run started: no longer the policy's to sweep.
    Gone,
    /// Proven and counted under its SHARE lock: to drop.
    Proven {
        leaf: Leaf,
        rows: i64,
        proof: retire::Proof,
    },
    /// Its lock was not granted in time: ledgered as put off, retried next run.
    Busy(Leaf),
}

/// Retires the current leaf whole if it can go whole, and the leaves after it that can, in two
/// phases within this step's transaction. First each leaf is locked in SHARE mode, proven and
/// counted, one after another for as long as `pg_retention.drop_lock_timeout`: this locks
/// nothing a writer of the other leaves waits for. Then the proven leaves are detached (see
/// `retire::detach_now`; the next transaction drops them) or, when the policy's owner cannot
/// detach them, dropped; either takes the partitioned table's ACCESS EXCLUSIVE lock, held for
/// the rest of the step and its commit.
fn retire_leaves(mut state: SweepState, ctx: &RunContext) -> Result<Retiring> {
    let policy = &ctx.policy;
    let budget = std::time::Duration::from_millis(crate::gucs::drop_lock_timeout_ms() as u64);
    let began = std::time::Instant::now();
    let mut fates: Vec<Fate> = vec![];
    let mut remaining = state.cap - state.deleted;
    // One catalog read for the leaves this step may retire.
    let ahead = &state.leaves[..state.leaves.len().min(MAX_LEAVES_PER_STEP)];
    let mut described = partition::these(ctx.rel.oid, ahead, policy.age_column.as_deref())?;
    // The leaf after the fated ones is to be swept by rows (it cannot go whole).
    let mut not_whole = false;
    while state.retire && remaining > 0 && fates.len() < MAX_LEAVES_PER_STEP {
        let Some(&oid) = state.leaves.get(fates.len()) else {
            break;
        };
        let Some(at) = described.iter().position(|l| l.oid == oid) else {
            fates.push(Fate::Gone);
            continue;
        };
        let leaf = described.swap_remove(at);
        let elig = Eligibility::new(policy, &ctx.rel, &ctx.holds)?.on_leaf(&leaf);
        match retire::prove(&elig, &ctx.rel, &leaf, remaining, || {
            ctx.fence.tripped_now()
        })? {
            Proving::Proven { rows, proof } => {
                remaining -= rows;
                fates.push(Fate::Proven { leaf, rows, proof });
                if began.elapsed() >= budget {
                    break;
                }
            }
            Proving::Busy => {
                fates.push(Fate::Busy(leaf));
                break;
            }
            // Nothing is dropped: the next step reads the new hold and plans again.
            Proving::NewHold => return Ok(Retiring::Done(state)),
            Proving::NotWhole => {
                not_whole = true;
                break;
            }
        }
    }
    let proven = fates.iter().any(|f| matches!(f, Fate::Proven { .. }));
    // A hold placed while the leaves were proven wins over all of them.
    if proven && ctx.fence.tripped_now()? {
        return Ok(Retiring::Done(state));
    }
    let mut parent_busy = false;
    for fate in &fates {
        match fate {
            Fate::Gone => {}
            Fate::Proven { leaf, rows, proof } => {
                // Once the partitioned table's lock was not granted, the other leaves would
                // each wait out the timeout as well.
                parent_busy = parent_busy || !retire_one(&mut state, ctx, leaf, *rows, *proof)?;
                if parent_busy {
                    record_drop_skipped(&state, ctx, leaf)?;
                }
            }
            Fate::Busy(leaf) => record_drop_skipped(&state, ctx, leaf)?,
        }
    }
    let swept = fates.len();
    if swept > 0 {
        state = leaves_swept(state, policy, swept)?;
    }
    if not_whole {
        // Its rows go by rows: in this step when nothing was retired, otherwise in the next,
        // once this step's leaves are gone.
        state.retire = false;
        if !proven {
            return Ok(Retiring::SweepRows(state));
        }
    }
    Ok(if swept > 0 {
        Retiring::Done(state)
    } else {
        Retiring::SweepRows(state)
    })
}

/// Detaches a proven leaf (recorded in `retention.retiring_leaves`, dropped by the next
/// transaction) or, when the policy's owner cannot detach it, drops and ledgers it; false when
/// the partitioned table's lock was not granted in time.
fn retire_one(
    state: &mut SweepState,
    ctx: &RunContext,
    leaf: &Leaf,
    rows: i64,
    proof: retire::Proof,
) -> Result<bool> {
    let owner = ctx.policy.owner;
    if !retire::may_detach(owner, leaf)? {
        if !matches!(retire::drop_now(owner, leaf)?, Attempt::Done(())) {
            return Ok(false);
        }
        record_drop(state, ctx, leaf, rows, proof)?;
        return Ok(true);
    }
    // Printed before the detach, which clears it.
    let bound = retire::portable_bound(leaf.oid)?;
    if !matches!(retire::detach_now(owner, leaf)?, Attempt::Done(())) {
        return Ok(false);
    }
    RetiringLeaf {
        leaf: leaf.oid,
        policy_id: ctx.policy.id,
        owner,
        parent: leaf.parent_oid.unwrap_or_default(),
        qualified: leaf.qualified.clone(),
        bound,
        rows,
        proof: proof.as_str().to_owned(),
        hold_ids: ctx.holds.iter().map(|h| h.id).collect(),
        hold_seen: ctx.fence.seen(),
    }
    .record(&state.run_id)?;
    state.detached.push(leaf.oid);
    Ok(true)
}

/// `elig` on `leaf`, when there is one.
fn on<'a>(elig: Eligibility<'a>, leaf: Option<&'a Leaf>) -> Eligibility<'a> {
    match leaf {
        Some(l) => elig.on_leaf(l),
        None => elig,
    }
}

/// Counts and ledgers a leaf dropped whole.
fn record_drop(
    state: &mut SweepState,
    ctx: &RunContext,
    leaf: &Leaf,
    rows: i64,
    proof: retire::Proof,
) -> Result<()> {
    state.deleted += rows;
    state.dropped += 1;
    state.ledger(
        LedgerMethod::DropPartition,
        Some(&ctx.policy),
        rows,
        ctx.holds.iter().map(|h| h.id).collect(),
        json!({ "partition": leaf.qualified, "bound": leaf.bound, "proof": proof.as_str() }),
    )
}

/// Ledgers a leaf whose drop was put off because its locks were not granted in time.
fn record_drop_skipped(state: &SweepState, ctx: &RunContext, leaf: &Leaf) -> Result<()> {
    state.ledger(
        LedgerMethod::DropSkipped,
        Some(&ctx.policy),
        0,
        vec![],
        json!({
            "partition": leaf.qualified,
            "bound": leaf.bound,
            "reason": format!("locks not granted within pg_retention.drop_lock_timeout ({} ms); retried next run",
                              crate::gucs::drop_lock_timeout_ms()),
        }),
    )
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
