//! The one definition of a run, for `CALL retention.run()` and the background worker alike:
//! [`begin`] (the pruner lock, the start, the keeping of the run), [`advance`] (the next part:
//! a step, after the pacing check that follows the step before it), [`end`] (the close, the
//! lock let go of, the table's gauges). Each part runs in a transaction of its own, which the
//! caller commits: the procedure with COMMIT, the worker with a transaction per part. The run's state stays a
//! [`SweepState`] in this backend from start to end (`runs.rs`); callers hold only its token.
//!
//! Every part runs with the extension owner's privileges, taken by its caller: the SQL entry
//! points (`api/sweep.rs`) and the worker go through `identity::entry` (the worker through
//! `identity::direct_entry`, which also pins the search_path as the SQL functions' `SET` does).
//! The actor is who runs the run: the worker, or the role in force at `_run_begin`
//! (`identity.rs`). So nothing a client passes decides what a run deletes, counts, or writes
//! to the ledger.

use super::runs::{self, Next, Run};
use super::{Outcome, SweepState};
use crate::api::table_gauges;
use crate::catalog::prepared;
use crate::engine::pacing;
use crate::error::Result;
use crate::subxact;
use pgrx::prelude::*;
use serde_json::json;
use std::time::Instant;

/// What the caller does after a part of a run.
#[derive(Debug, Clone, PartialEq)]
pub enum Advance {
    /// The run is over (nothing ran): [`end`] it.
    Done,
    /// A step ran (with the pacing check before it, after the first): commit, then advance
    /// again.
    Go,
    /// Pacing holds the next step back: commit, wait up to `seconds`, then advance again (which
    /// checks again). `reason` says why (`replica_lag`, `wal_rate`).
    Wait {
        /// Seconds to wait before asking again.
        seconds: f64,
        /// Why the step waits.
        reason: String,
    },
}

/// Who runs a run started now: the worker, or the role in force.
fn run_actor() -> String {
    if crate::worker::in_worker() {
        "worker".into()
    } else {
        crate::identity::caller()
    }
}

/// Runs one part of a run (its start, a step, its close) in a subtransaction whose error comes
/// back as a value. In the worker, under `pg_retention.step_timeout` (and `statement_timeout`):
/// a part past it is cancelled, and the cancel comes back as its error (57014).
fn bounded<T>(
    f: impl FnOnce() -> Result<T>,
    unkept: Unkept,
) -> Result<std::result::Result<T, subxact::Failure>> {
    if !crate::worker::in_worker() {
        return match unkept {
            Unkept::Yes => subxact::or_error_or_cancel(f),
            Unkept::No => subxact::or_error(f),
        };
    }
    let ms = crate::gucs::step_timeout_ms();
    if ms <= 0 {
        return subxact::or_error_or_cancel(f);
    }
    crate::timeout::within(ms, || subxact::or_error_or_cancel(f))
}

/// Whether the pruner lock is held while the run is not kept in this backend (its start and
/// its close): a cancel there is caught too, so the lock is let go of before it is raised
/// again. Between them a cancelled step leaves a kept run, whose lock the session's next run
/// of the policy releases.
#[derive(Clone, Copy)]
enum Unkept {
    Yes,
    No,
}

/// Takes the policy's pruner lock (a session lock: it outlives the commits between steps).
fn try_lock(policy_id: i64) -> Result<bool> {
    crate::error::present(
        Spi::get_one_with_args::<bool>(
            "SELECT pg_catalog.pg_try_advisory_lock(retention._lock_key($1))",
            &[policy_id.into()],
        )?,
        "pg_try_advisory_lock",
    )
}

fn unlock(policy_id: i64) -> Result<()> {
    Spi::run_with_args(
        "SELECT pg_catalog.pg_advisory_unlock(retention._lock_key($1))",
        &[policy_id.into()],
    )?;
    Ok(())
}

/// Begins a run of policy `policy_id` and takes its pruner lock; returns its token, or None,
/// holding nothing, when another pruner holds the lock (ledgered `skip_locked`) or, contained
/// (the worker), when the start failed (ledgered). Not contained, a failed start raises its
/// error, the lock released. `cycle_remaining` lowers the run's cap to what a worker cycle has
/// left.
pub fn begin(policy_id: i64, cycle_remaining: Option<i64>, contained: bool) -> Result<Option<i64>> {
    let actor = run_actor();
    // A run of this policy that this session began and never ended (interrupted before its
    // end) still holds the pruner lock, and a session lock stacks: let go of it first, or the
    // lock would outlive every later run of this session.
    for stale in runs::abandoned(policy_id) {
        if let Err(e) = super::let_go(&stale) {
            warning!(
                "pg_retention: policy {}: could not let go of the detached leaves of an interrupted run: {e}",
                stale.policy
            );
        }
        unlock(policy_id)?;
    }
    if !try_lock(policy_id)? {
        Spi::run_with_args(
            "SELECT retention._ledger_skip_locked($1, $2)",
            &[policy_id.into(), actor.as_str().into()],
        )?;
        return Ok(None);
    }
    match bounded(
        || super::start(policy_id, &actor, cycle_remaining),
        Unkept::Yes,
    )? {
        Ok(state) => Ok(Some(runs::keep(state))),
        Err(failure) => {
            // A rollback does not release a session lock: let go of it on every way out.
            unlock(policy_id)?;
            if !contained {
                return Err(failure.again());
            }
            Spi::run_with_args(
                "SELECT retention._ledger_append('error', $1, $2, $3)",
                &[
                    actor.as_str().into(),
                    pgrx::JsonB(json!({
                        "error": failure.message, "sqlstate": failure.condition, "step": "start"
                    }))
                    .into(),
                    policy_id.into(),
                ],
            )?;
            Ok(None)
        }
    }
}

/// Runs the next part of run `token`: [`Advance::Done`] when it is over, else a step, or,
/// after a step, the pacing check that decides whether the next one must wait, and the next
/// step with it when it need not: a step and the check before it share a transaction, so a
/// run commits once per step.
pub fn advance(token: i64) -> Result<Advance> {
    let run = runs::get(token)?;
    if run.state.done {
        return Ok(Advance::Done);
    }
    match run.next {
        Next::Step => step(token, run),
        Next::Pace => match pace(token, run)? {
            Advance::Go => step(token, runs::get(token)?),
            wait => Ok(wait),
        },
    }
}

/// One step; an error in it is caught (its writes rolled back), ledgered, and ends the run.
///
/// The step's commit does not wait for its WAL to reach disk (`synchronous_commit = off` for
/// this transaction only): a step lost to a crash loses its deletes and its ledger record
/// together, and its rows are simply swept again. The run's closing transaction commits with
/// the session's own setting, which flushes every step before the run reports done. Waiting
/// for a flush per step cost as much as the deletes themselves.
fn step(token: i64, mut run: Run) -> Result<Advance> {
    let before = pacing::wal_written();
    prepared::commit_unflushed()?;
    let state = run.state.clone();
    run.state = match bounded(|| super::step(state), Unkept::No)? {
        Ok(mut next) => {
            run.step_wal_bytes = pacing::wal_written() - before;
            next.paced.step_ended();
            next
        }
        Err(failure) => super::failed(run.state, &failure.message, &failure.condition)?,
    };
    run.next = Next::Pace;
    runs::put(token, run);
    Ok(Advance::Go)
}

/// Between two steps: charges the last step's WAL (the first check after it) and says whether
/// the next step must wait, and why. A pause is timed from its first check and ledgered by the
/// check that ends it.
fn pace(token: i64, mut run: Run) -> Result<Advance> {
    let pace = pacing::pace(std::mem::take(&mut run.step_wal_bytes))?;
    let answer = if pace.pause > 0.0 {
        let reason = pace.reason.map_or("pacing", |r| r.as_str()).to_owned();
        if run.pause.is_none() {
            run.pause = Some((Instant::now(), reason.clone()));
        }
        Advance::Wait {
            seconds: pace.pause,
            reason,
        }
    } else {
        if let Some((started, reason)) = run.pause.take() {
            Spi::run_with_args(
                "SELECT retention._ledger_pause($1, $2, $3, $4)",
                &[
                    run.state.policy_id.into(),
                    reason.into(),
                    started.elapsed().as_secs_f64().into(),
                    run.state.actor.as_str().into(),
                ],
            )?;
        }
        run.next = Next::Step;
        Advance::Go
    };
    runs::put(token, run);
    Ok(answer)
}

/// Ends run `token` between two parts (the worker's SIGTERM or visit bound, a part whose own
/// transaction failed) with `outcome` and why, unless it is over already (then false);
/// [`end`] closes it.
pub fn stop(token: i64, outcome: Outcome, reason: &str) -> Result<bool> {
    runs::stop(token, outcome, reason)
}

/// The state of run `token` as it stands (what iso specs and the worker read between parts).
pub fn progress(token: i64) -> Result<(SweepState, Next)> {
    let run = runs::get(token)?;
    Ok((run.state, run.next))
}

/// Closes run `token` (hold skips, cap warning, run summary) and releases its lock; returns
/// its last state. Contained (the worker), a failed close is a warning; otherwise it raises,
/// the lock released either way.
pub fn end(token: i64, contained: bool) -> Result<SweepState> {
    let state = runs::take(token)?.state;
    let policy_id = state.policy_id;
    let closed = match bounded(|| super::finish(state.clone()), Unkept::Yes)? {
        Ok(closed) => closed,
        Err(failure) => {
            // The close's drops went with its rollback; this session's locks on the leaves
            // the last step detached did not (session locks outlive a rollback): let go of
            // them, so that the policy's next run, in any session, attaches them again.
            if let Err(e) = super::let_go(&state) {
                warning!(
                    "pg_retention: policy {}: could not let go of its detached leaves: {e}",
                    state.policy
                );
            }
            unlock(policy_id)?;
            if !contained {
                return Err(failure.again());
            }
            warning!(
                "pg_retention: could not close the run of policy {}: {}",
                state.policy,
                failure.message
            );
            state
        }
    };
    unlock(policy_id)?;
    // Its table changed: its gauges are measured again, bounded as a step is in the worker (a
    // slow predicate's measurement is cut short there), from where its index walk ended; a
    // failed run leaves it to scrapes.
    let measured = closed.outcome != Outcome::Error
        && matches!(
            bounded(
                || {
                    table_gauges::after_run(policy_id, closed.age_from.as_deref());
                    Ok(())
                },
                Unkept::No
            ),
            Ok(Ok(()))
        );
    if !measured {
        table_gauges::after_unmeasured_run(policy_id);
    }
    Ok(closed)
}
