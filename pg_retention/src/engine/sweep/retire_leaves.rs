//! Retiring leaves of a partitioned table whole within a step: an `age` run proves each leaf at
//! the front of its list has only eligible rows, then detaches or drops the proven ones and
//! ledgers them (or ledgers them as put off when their locks were not granted in time). The
//! proofs themselves are in `engine/retire.rs`; this is the step's side of it, which decides
//! how many leaves one step takes and what the step does next.

use super::{leaves_swept, SweepState};
use crate::catalog::retiring::RetiringLeaf;
use crate::catalog::{partition, Leaf, LedgerMethod};
use crate::engine::eligible::Eligibility;
use crate::engine::retire::{self, Proving};
use crate::engine::run_context::RunContext;
use crate::error::Result;
use crate::subxact::Attempt;
use serde_json::json;

/// What [`retire_leaves`] leaves the step to do.
pub(super) enum Retiring {
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
pub(super) fn retire_leaves(mut state: SweepState, ctx: &RunContext) -> Result<Retiring> {
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
