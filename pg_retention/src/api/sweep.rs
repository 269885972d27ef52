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

/// (statement token, rows accepted, last accepted tid as (block, item)).
type Quota = (i64, i64, Option<(u64, u64)>);

thread_local! {
    /// The quota of the batch statement running in this backend.
    static QUOTA: std::cell::Cell<Quota> = const { std::cell::Cell::new((i64::MIN, 0, None)) };
}

/// True for the first `limit` rows offered with the same `token`: bounds an `age` batch's
/// DELETE to `limit` rows, and remembers the last row it let through (the batch's watermark).
/// Volatile, so it is called for each row, after the row's other conditions.
#[pg_extern(volatile, parallel_unsafe)]
fn _batch_quota(limit: i64, token: i64, row: pg_sys::ItemPointerData) -> bool {
    QUOTA.with(|q| {
        let (t, used, last) = q.get();
        let (used, last) = if t == token { (used, last) } else { (0, None) };
        if used < limit {
            let (block, offset) = pgrx::itemptr::item_pointer_get_both(row);
            q.set((token, used + 1, Some((u64::from(block), u64::from(offset)))));
            true
        } else {
            q.set((token, used, last));
            false
        }
    })
}

/// The last row `_batch_quota` let through for `token`.
pub fn quota_last(token: i64) -> Option<(u64, u64)> {
    QUOTA.with(|q| {
        let (t, _, last) = q.get();
        if t == token {
            last
        } else {
            None
        }
    })
}
