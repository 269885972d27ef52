//! The second transaction of a whole-leaf retirement. A step detaches the leaves it proved and
//! counted (`retire::detach_now`), records each in `retention.retiring_leaves` and keeps it
//! locked for the session; the next transaction drops them here and ledgers each drop with the
//! count made under the proof. A leaf whose proof no longer stands by then (a hold was placed,
//! the policy changed, the run failed) is attached again instead. A record that outlived its
//! run (the session ended or aborted in between, which releases its lock, so the leaf may have
//! changed since it was counted) is settled by the policy's next run: the leaf is attached
//! again, to be proven anew.

use super::SweepState;
use crate::catalog::retiring::RetiringLeaf;
use crate::catalog::{HoldFence, LedgerMethod, Policy};
use crate::engine::retire;
use crate::engine::run_context;
use crate::error::Result;
use crate::subxact::{self, Attempt};
use pgrx::prelude::*;
use serde_json::json;

/// Drops the leaves the last step detached, or attaches them again where their proof no
/// longer stands; ledgers each.
pub(super) fn drop_all(mut state: SweepState) -> Result<SweepState> {
    let oids = std::mem::take(&mut state.detached);
    let ctx = run_context::for_step(&state.run_id, state.policy_id)?;
    // The leaves were proven under this version of the policy.
    let changed = match &ctx {
        None => Some("the policy was dropped before the leaf was"),
        Some(c) if c.policy.version != state.version => {
            Some("the policy changed before the leaf was dropped")
        }
        Some(c) if !c.policy.enabled => Some("the policy was disabled before the leaf was dropped"),
        Some(_) => None,
    };
    let policy = ctx.as_ref().map(|c| &c.policy);
    for oid in oids {
        let Some(r) = RetiringLeaf::take(oid)? else {
            continue;
        };
        if !retire::still_detached_by_us(oid)? {
            // This session's lock is gone with an abort: what the leaf holds now is unproven.
            // The policy's next run attaches it again.
            continue;
        }
        let reason = match changed {
            Some(reason) => Some(reason),
            None => policy
                .map(|p| HoldFence::since(p.relation, r.hold_seen).tripped_now())
                .transpose()?
                .unwrap_or(false)
                .then_some("a hold was placed after the leaf was proven"),
        };
        match reason {
            Some(reason) => put_back(&state, policy, &r, reason)?,
            None => {
                retire::drop_detached(r.owner, oid, &r.qualified)?;
                r.forget()?;
                state.deleted += r.rows;
                state.dropped += 1;
                state.ledger(
                    LedgerMethod::DropPartition,
                    policy,
                    r.rows,
                    r.hold_ids.clone(),
                    json!({ "partition": r.qualified, "bound": r.bound, "proof": r.proof }),
                )?;
            }
        }
    }
    Ok(state)
}

/// A run that failed after its last step detached leaves: they go back, unchanged (this
/// session still holds them).
pub(super) fn put_all_back(mut state: SweepState) -> Result<SweepState> {
    let policy = Policy::by_id(state.policy_id)?;
    for oid in std::mem::take(&mut state.detached) {
        if let Some(r) = RetiringLeaf::take(oid)? {
            put_back(
                &state,
                policy.as_ref(),
                &r,
                "the run failed before the leaf was dropped",
            )?;
        }
    }
    Ok(state)
}

/// A close that failed, contained (the worker goes on): the drops and re-attachments it made
/// were rolled back with it, but this session's locks on the leaves the last step detached
/// outlive a rollback and would keep every other session's run from settling them until this
/// session ends. Lets go of them; their records stay, and the policy's next run, in any
/// session, attaches them again (as after a session that ended in between).
pub fn let_go(state: &SweepState) -> Result<()> {
    for &oid in &state.detached {
        if retire::still_detached_by_us(oid)? {
            retire::let_go(oid);
        }
    }
    Ok(())
}

/// Settles the records an earlier run of `policy` left behind (see the module); run with the
/// policy's pruner lock held, so no run of it is between its two transactions.
pub(super) fn attach_left_behind(state: &SweepState, policy: &Policy) -> Result<()> {
    for r in RetiringLeaf::left_by(policy.id)? {
        let detached = Spi::get_one_with_args::<bool>(
            "SELECT NOT c.relispartition FROM pg_catalog.pg_class c WHERE c.oid = $1::bigint::oid",
            &[i64::from(r.leaf).into()],
        )?;
        match detached {
            Some(true) => put_back(
                state,
                Some(policy),
                &r,
                "a run detached the leaf and ended before it dropped it",
            )?,
            // Dropped or attached by someone else since: nothing of ours is left to do.
            _ => {
                r.forget()?;
                state.ledger(
                    LedgerMethod::DropSkipped,
                    Some(policy),
                    0,
                    vec![],
                    json!({
                        "partition": r.qualified,
                        "bound": r.bound,
                        "reason": "a run detached the leaf and ended before it dropped it; it has since been dropped or attached again by someone else",
                    }),
                )?;
            }
        }
    }
    Ok(())
}

/// Attaches a detached leaf to its partitioned table again, with its bound, and ledgers why it
/// was not dropped and how that went: attached (the record goes), not now (locks not granted:
/// the record stays for the next run), or not at all (the bound no longer fits, say: the leaf
/// stays detached under its name for the operator, the record goes).
fn put_back(
    state: &SweepState,
    policy: Option<&Policy>,
    r: &RetiringLeaf,
    reason: &str,
) -> Result<()> {
    let attached = subxact::or_error(|| retire::attach_again(r.owner, r.leaf, r.parent, &r.bound))?;
    let outcome = match attached {
        Ok(Attempt::Done(())) => {
            r.forget()?;
            "attached again".to_owned()
        }
        Ok(Attempt::Busy | Attempt::Declined) => format!(
            "its locks were not granted within pg_retention.drop_lock_timeout ({} ms) to attach it again; the policy's next run does",
            crate::gucs::drop_lock_timeout_ms()
        ),
        Err(failure) => {
            r.forget()?;
            format!(
                "it could not be attached again ({}: {}) and stays detached as {}",
                failure.condition, failure.message, r.qualified
            )
        }
    };
    state.ledger(
        LedgerMethod::DropSkipped,
        policy,
        0,
        vec![],
        json!({
            "partition": r.qualified,
            "bound": r.bound,
            "reason": format!("{reason}; {outcome}"),
        }),
    )
}
