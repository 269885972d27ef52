//! A batch's lease: an archiver resumes its own unfinished batch, extends the lease while it
//! works, or releases the batch; a lease that runs out ends the batch. Whenever a batch ends
//! without a prune its rows become claimable again.

use crate::catalog::{caller, Batch, BatchState, LedgerEntry, LedgerMethod, Policy};
use crate::error::{Result, RetentionError};
use serde_json::json;

/// Ends the live batches of `policy` whose lease ran out; their rows become claimable.
pub(super) fn expire_leases(policy: &Policy) -> Result<()> {
    for (batch, rows) in Batch::expire_leases(policy.id)? {
        LedgerEntry {
            method: LedgerMethod::LeaseExpired,
            policy: Some(policy),
            relation: None,
            rows,
            hold_ids: vec![],
            actor: &caller(),
            run_id: None,
            detail: json!({ "batch": batch }),
        }
        .append()?;
    }
    Ok(())
}

/// An archiver that restarts under the same owner name gets its own unfinished batch back
/// (even when its lease ran out, as long as nobody else claimed the rows), with a new lease, so
/// it can find its objects under the same keys instead of archiving the rows twice.
pub(super) fn resume(policy: &Policy, owner: &str, lease: &str) -> Result<Option<String>> {
    let batch = Batch::resume(policy.id, owner, lease)?;
    if let Some(batch) = &batch {
        LedgerEntry {
            method: LedgerMethod::Resume,
            policy: Some(policy),
            relation: None,
            rows: 0,
            hold_ids: vec![],
            actor: owner,
            run_id: None,
            detail: json!({ "batch": batch, "lease": lease }),
        }
        .append()?;
    }
    Ok(batch)
}

/// Extends the lease of a live batch; returns the new end of the lease.
pub fn extend(id: &str, lease: &str) -> Result<String> {
    let b = Batch::load(id, true)?;
    if b.state != BatchState::Claimed {
        return Err(RetentionError::BatchState {
            batch: b.id,
            state: b.state.to_string(),
            message: "its lease cannot be extended".into(),
        });
    }
    Batch::extend(id, lease)
}

/// Gives a batch up: its rows become claimable again. Releasing an ended batch is a no-op.
/// Why an archiver gives a batch back, as it says (`release_batch`'s `cause`): what the
/// failure counters count it under (`retention._error_reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReleaseCause {
    /// The extension refused the prune (the rows changed, a hold, the batch's state).
    Refused,
    /// The archiver failed: the store, a verification, its connection.
    Failed,
    /// Stopped before writing because another batch of its pass failed: no failure.
    Stopped,
}

impl ReleaseCause {
    /// The cause named `text`; 22023 for any other name.
    pub fn parse(text: &str) -> Result<ReleaseCause> {
        match text {
            "refused" => Ok(ReleaseCause::Refused),
            "failed" => Ok(ReleaseCause::Failed),
            "stopped" => Ok(ReleaseCause::Stopped),
            other => Err(RetentionError::invalid(
                format!("unknown release cause {other:?}"),
                "A release's cause is refused, failed or stopped.",
                "Pass cause => 'refused' (the prune was refused), 'failed' (the archiver failed) or 'stopped'.",
            )),
        }
    }

    /// The cause as the ledger records it.
    pub fn as_str(self) -> &'static str {
        match self {
            ReleaseCause::Refused => "refused",
            ReleaseCause::Failed => "failed",
            ReleaseCause::Stopped => "stopped",
        }
    }
}

/// Releases batch `id` (ledgered with `reason` and, when the archiver says it, `cause`); false
/// for a batch no longer claimed.
pub fn release(id: &str, reason: &str, cause: Option<ReleaseCause>) -> Result<bool> {
    let b = Batch::load(id, true)?;
    if b.state != BatchState::Claimed {
        return Ok(false);
    }
    Batch::finish(id, BatchState::Released, reason)?;
    let policy = Policy::by_id(b.policy_id)?;
    LedgerEntry {
        method: LedgerMethod::Release,
        policy: policy.as_ref(),
        relation: Some(&b.relation_name),
        rows: b.rows,
        hold_ids: vec![],
        actor: b.owner.as_deref().unwrap_or(&caller()),
        run_id: None,
        detail: match cause {
            Some(c) => json!({ "batch": id, "reason": reason, "cause": c.as_str() }),
            None => json!({ "batch": id, "reason": reason }),
        },
    }
    .append()?;
    Ok(true)
}
