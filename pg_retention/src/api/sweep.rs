//! The sweep protocol used by `CALL retention.run()` and the background worker: start, one
//! step per transaction, failure, finish. State travels as jsonb between the calls.

use crate::catalog::prepared;
use crate::engine::pacing;
use crate::engine::sweep::{self, SweepState};
use crate::error::{required, OrReport, Result, RetentionError};
use pgrx::prelude::*;

/// A run's state as `_sweep_start` returned it; anything else is refused (22023).
fn decode(state: pgrx::JsonB) -> Result<SweepState> {
    serde_json::from_value(state.0).map_err(|e| {
        RetentionError::invalid(
            "not a sweep state",
            format!("The state could not be read: {e}."),
            "Pass the value retention._sweep_start or the previous step returned.",
        )
    })
}

fn encode(state: SweepState) -> Result<pgrx::JsonB> {
    Ok(pgrx::JsonB(serde_json::to_value(state)?))
}

/// Starts a run of one policy.
#[pg_extern(security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn _sweep_start(
    policy_id: Option<i64>,
    actor: Option<&str>,
    cycle_remaining: Option<i64>,
) -> pgrx::JsonB {
    crate::identity::refuse_restricted().or_report();
    (|| {
        sweep::start(
            required(policy_id, "policy_id")?,
            required(actor, "actor")?,
            cycle_remaining,
        )
    })()
    .and_then(encode)
    .or_report()
}

/// Runs one step; the caller commits afterwards.
///
/// The batch's commit does not wait for its WAL to reach disk (`synchronous_commit = off` for
/// this transaction only): a batch lost to a crash loses its deletes and its ledger record
/// together, and its rows are simply swept again. The run's closing transaction commits with
/// the session's own setting, which flushes every batch before the run reports done. Waiting
/// for a flush per batch cost as much as the deletes themselves.
#[pg_extern(security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn _sweep_step(state: pgrx::JsonB) -> pgrx::JsonB {
    crate::identity::refuse_restricted().or_report();
    let before = pacing::wal_written();
    prepared::commit_unflushed()
        .and_then(|()| decode(state))
        .and_then(sweep::step)
        .map(|mut s| {
            s.step_wal_bytes = pacing::wal_written() - before;
            s.paced.step_ended();
            s
        })
        .and_then(encode)
        .or_report()
}

/// Whether the next step of a sweep must wait (`pause` seconds, then ask again with `wal_bytes`
/// 0) and why, after charging the WAL the last step wrote to the database's budget:
/// `{pause, reason, replica_lag_ms, wal_tokens}`.
#[pg_extern(security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn _pace(wal_bytes: i64) -> pgrx::JsonB {
    crate::identity::refuse_restricted().or_report();
    pacing::pace(wal_bytes)
        .and_then(|p| Ok(pgrx::JsonB(serde_json::to_value(p)?)))
        .or_report()
}

/// Records that a batch raised an error and ends the run.
#[pg_extern(security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn _sweep_failed(state: pgrx::JsonB, message: &str, sqlstate: &str) -> pgrx::JsonB {
    crate::identity::refuse_restricted().or_report();
    decode(state)
        .and_then(|s| sweep::failed(s, message, sqlstate))
        .and_then(encode)
        .or_report()
}

/// After a close that failed and was contained (the worker): lets go of this session's locks
/// on the leaves the run's last step detached (see `sweep::let_go`).
#[pg_extern(security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn _sweep_let_go(state: pgrx::JsonB) {
    crate::identity::refuse_restricted().or_report();
    decode(state).and_then(|s| sweep::let_go(&s)).or_report()
}

/// Closes a run: hold skips, cap warning, run summary.
#[pg_extern(security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn _sweep_finish(state: pgrx::JsonB) -> pgrx::JsonB {
    crate::identity::refuse_restricted().or_report();
    decode(state)
        .and_then(sweep::finish)
        .and_then(encode)
        .or_report()
}
