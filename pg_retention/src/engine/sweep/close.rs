//! The end of a run: a failed step's error record, and the closing records (holds that kept
//! rows, the cap warning, the run summary).

use super::{Outcome, SweepState};
use crate::catalog::{active_holds, LedgerMethod, Policy, RelationInfo};
use crate::engine::eligible::{Eligibility, Guards};
use crate::engine::pacing::PauseReason;
use crate::error::Result;
use serde_json::json;

/// Records a step that raised an error and ends the run.
pub fn failed(state: SweepState, message: &str, sqlstate: &str) -> Result<SweepState> {
    let policy = Policy::by_id(state.policy_id)?;
    let note = policy.as_ref().and_then(|p| {
        crate::engine::search_path::failure_note(p.relation, sqlstate, p.search_path.as_deref())
    });
    let message = &format!("{message}{}", note.unwrap_or_default());
    state.ledger(
        LedgerMethod::Error,
        policy.as_ref(),
        0,
        vec![],
        json!({ "error": message, "sqlstate": sqlstate, "policy": state.policy }),
    )?;
    let reason = format!("{sqlstate}: {message}");
    Ok(state.stop(Outcome::Error, reason))
}

/// Closes a run: drops the leaves its last step detached (or, when it failed, attaches them
/// again), ledgers rows skipped because of holds, a cap warning, and the run summary.
pub fn finish(mut state: SweepState) -> Result<SweepState> {
    if !state.detached.is_empty() {
        state = if state.outcome == Outcome::Error {
            super::detached::put_all_back(state)?
        } else {
            super::detached::drop_all(state)?
        };
    }
    let Some(policy) = Policy::by_id(state.policy_id)? else {
        return Ok(state);
    };
    if state.outcome == Outcome::Skipped {
        return Ok(state);
    }
    let mut backlog = 0i64;
    let mut hold_detail = serde_json::Value::Null;
    let mut referenced = 0i64;
    if let Ok(rel) = RelationInfo::load(policy.relation, &policy.relation_name) {
        let holds = active_holds(policy.relation)?;
        if state.outcome != Outcome::Error {
            let elig = Eligibility::new(&policy, &rel, &holds)?;
            if !holds.is_empty() {
                hold_detail = ledger_hold_skips(&elig, &policy, &state)?;
            }
            if let Some(rows) = elig.referenced_count()?.filter(|n| *n > 0) {
                state.ledger(
                    LedgerMethod::ReferenceSkip,
                    Some(&policy),
                    rows,
                    vec![],
                    json!({ "reason": "rows that reference them through foreign keys keep them" }),
                )?;
                referenced = rows;
            }
            if state.outcome == Outcome::Cap {
                backlog = elig.count(Guards::ALL)?;
                state.ledger(
                    LedgerMethod::CapReached,
                    Some(&policy),
                    backlog,
                    vec![],
                    json!({ "warning": state.reason, "cap": state.cap, "deleted": state.deleted }),
                )?;
                pgrx::warning!(
                    "pg_retention: policy {} stopped at its cap of {} rows; {} eligible rows remain",
                    policy.name,
                    state.cap,
                    backlog
                );
            }
        }
    }
    if state.paced.pauses > 0 {
        // One record for the run's adaptive pauses (one per step would double the ledger).
        state.ledger(
            LedgerMethod::Pause,
            Some(&policy),
            0,
            vec![],
            json!({
                "reason": PauseReason::Adaptive,
                "seconds": (state.paced.seconds * 1e6).round() / 1e6,
                "pauses": state.paced.pauses,
                "max_flush_ms": (state.paced.max_flush_ms * 1000.0).round() / 1000.0,
                "min_step_rows": state.paced.min_step_rows,
            }),
        )?;
    }
    state.ledger(
        LedgerMethod::Run,
        Some(&policy),
        state.deleted,
        vec![],
        json!({
            "outcome": state.outcome,
            "reason": state.reason,
            "batches": state.steps,
            "deleted": state.deleted,
            "partitions_dropped": state.dropped,
            "backlog": backlog,
            "held": hold_detail,
            "referenced": referenced,
            "paced": state.paced,
        }),
    )?;
    Ok(state)
}

/// One `hold_skip` record per hold that kept eligible rows alive in this run.
fn ledger_hold_skips(
    elig: &Eligibility<'_>,
    policy: &Policy,
    state: &SweepState,
) -> Result<serde_json::Value> {
    let counts = elig.held_per_hold()?;
    let mut detail = serde_json::Map::new();
    for (hold_id, rows) in counts.into_iter().filter(|(_, rows)| *rows > 0) {
        detail.insert(hold_id.to_string(), json!(rows));
        state.ledger(
            LedgerMethod::HoldSkip,
            Some(policy),
            rows,
            vec![hold_id],
            json!({ "hold": hold_id }),
        )?;
    }
    Ok(serde_json::Value::Object(detail))
}
