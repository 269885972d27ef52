//! The sweep protocol used by `CALL retention.run()` and the background worker: start, one
//! batch per transaction, failure, finish. State travels as jsonb between the calls.

use crate::engine::sweep::{self, SweepState};
use crate::error::{OrReport, Result};
use pgrx::prelude::*;

fn decode(state: pgrx::JsonB) -> Result<SweepState> {
    Ok(serde_json::from_value(state.0)?)
}

fn encode(state: SweepState) -> Result<pgrx::JsonB> {
    Ok(pgrx::JsonB(serde_json::to_value(state)?))
}

/// Starts a run of one policy.
#[pg_extern(security_definer)]
#[search_path(pg_catalog, public, pg_temp)]
fn _sweep_start(policy_id: i64, actor: &str, cycle_remaining: Option<i64>) -> pgrx::JsonB {
    sweep::start(policy_id, actor, cycle_remaining)
        .and_then(encode)
        .or_report()
}

/// Runs one batch; the caller commits afterwards.
#[pg_extern(security_definer)]
#[search_path(pg_catalog, public, pg_temp)]
fn _sweep_batch(state: pgrx::JsonB) -> pgrx::JsonB {
    decode(state)
        .and_then(sweep::batch)
        .and_then(encode)
        .or_report()
}

/// Records that a batch raised an error and ends the run.
#[pg_extern(security_definer)]
#[search_path(pg_catalog, public, pg_temp)]
fn _sweep_failed(state: pgrx::JsonB, message: &str, sqlstate: &str) -> pgrx::JsonB {
    decode(state)
        .and_then(|s| sweep::failed(s, message, sqlstate))
        .and_then(encode)
        .or_report()
}

/// Closes a run: hold skips, cap warning, run summary.
#[pg_extern(security_definer)]
#[search_path(pg_catalog, public, pg_temp)]
fn _sweep_finish(state: pgrx::JsonB) -> pgrx::JsonB {
    decode(state)
        .and_then(sweep::finish)
        .and_then(encode)
        .or_report()
}
