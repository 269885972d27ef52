//! The run protocol of `CALL retention.run()`: `_run_begin`, `_run_advance` per transaction,
//! `_run_end`, thin entries to the run driver (`engine/sweep/driver.rs`), which the background
//! worker calls directly. SQL holds only a run's token, a plain integer; the run's state stays
//! in this backend. `_run_progress` reads it, for tests that drive a run part by part.
//!
//! None is SECURITY DEFINER: each goes through `identity::entry`, which refuses a call from a
//! security-restricted operation, notes the role in force (the actor of a run `_run_begin`
//! starts) and runs the driver with the extension owner's privileges, as SECURITY DEFINER
//! would. A token this backend did not give names no run and is refused (22023).

use crate::engine::sweep::driver::{self, Advance};
use crate::engine::sweep::runs::Next;
use crate::engine::sweep::SweepState;
use crate::error::{required, OrReport};
use crate::identity::entry;
use pgrx::prelude::*;

/// Starts a run of policy `policy_id` by the role in force and takes its pruner lock; returns
/// its token, or NULL, holding nothing, when another pruner holds the lock (ledgered). A failed
/// start raises its error, the lock released.
#[pg_extern]
#[search_path(pg_catalog, pg_temp)]
fn _run_begin(policy_id: Option<i64>) -> Option<i64> {
    entry(|| driver::begin(required(policy_id, "policy_id")?, None, false)).or_report()
}

/// Runs the next part of run `token` in the caller's transaction, which the caller commits
/// afterwards: NULL when the run is over (nothing ran: `_run_end` next); 0 when a part ran (a
/// step, or the pacing check after one); more than 0 when pacing holds the next step back:
/// that many seconds to wait (at most), then commit and call again.
#[pg_extern]
#[search_path(pg_catalog, pg_temp)]
fn _run_advance(token: Option<i64>) -> Option<f64> {
    let advanced = entry(|| driver::advance(required(token, "token")?)).or_report();
    match advanced {
        Advance::Done => None,
        Advance::Go => Some(0.0),
        Advance::Wait { seconds, .. } => Some(seconds),
    }
}

/// How a run goes: outcome, rows deleted, batches, leaves dropped, why it stopped.
type Summary = (String, i64, i64, i64, Option<String>);

fn summary(state: &SweepState) -> Summary {
    (
        state.outcome.as_str().to_owned(),
        state.deleted,
        state.steps,
        state.dropped,
        state.reason.clone(),
    )
}

/// Run `token` as it stands: how it goes, its counts so far, whether it is over, and its next
/// part (`step`, `pace`, or `end` once it is over).
// pgrx needs the named tuple spelled out in the signature to name the result columns.
#[allow(clippy::type_complexity)]
#[pg_extern]
#[search_path(pg_catalog, pg_temp)]
fn _run_progress(
    token: Option<i64>,
) -> TableIterator<
    'static,
    (
        name!(outcome, String),
        name!(deleted, i64),
        name!(batches, i64),
        name!(dropped, i64),
        name!(reason, Option<String>),
        name!(done, bool),
        name!(next, String),
    ),
> {
    let (state, next) = entry(|| driver::progress(required(token, "token")?)).or_report();
    let (outcome, deleted, batches, dropped, reason) = summary(&state);
    let next = match next {
        _ if state.done => "end",
        Next::Step => "step",
        Next::Pace => "pace",
    };
    TableIterator::once((
        outcome,
        deleted,
        batches,
        dropped,
        reason,
        state.done,
        next.to_owned(),
    ))
}

/// Closes run `token` (hold skips, cap warning, run summary) and releases its lock; returns how
/// it went. A failed close raises, the lock released.
#[pg_extern]
#[search_path(pg_catalog, pg_temp)]
fn _run_end(
    token: Option<i64>,
) -> TableIterator<
    'static,
    (
        name!(outcome, String),
        name!(deleted, i64),
        name!(batches, i64),
        name!(dropped, i64),
        name!(reason, Option<String>),
    ),
> {
    let closed = entry(|| driver::end(required(token, "token")?, false)).or_report();
    TableIterator::once(summary(&closed))
}
