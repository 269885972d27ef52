//! The run protocol used by `CALL retention.run()` and the background worker: `_run_begin`,
//! `_sweep_step_safe` per transaction (and `_run_pace` between steps in `run()`), `_run_end`.
//!
//! A run's state is kept in this backend (`engine/sweep/runs.rs`); SQL holds only its token,
//! and a read-only copy to read `done` and the counts from. The actor is who runs it: the
//! worker, or the role in force (`identity.rs`). So nothing a client passes decides what a run
//! deletes, counts, or writes to the ledger.

use crate::api::table_gauges;
use crate::catalog::prepared;
use crate::engine::pacing;
use crate::engine::sweep::{self, runs, Outcome, SweepState};
use crate::error::{required, OrReport, Result, RetentionError};
use crate::subxact;
use pgrx::prelude::*;
use serde_json::json;

/// The state as SQL sees it: a copy, of which only `token` is ever read back.
fn view(state: &SweepState) -> Result<pgrx::JsonB> {
    Ok(pgrx::JsonB(serde_json::to_value(state)?))
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

fn begin(
    policy_id: i64,
    actor: &str,
    cycle_remaining: Option<i64>,
    contained: bool,
) -> Result<Option<pgrx::JsonB>> {
    let expected = run_actor();
    if actor != expected {
        return Err(RetentionError::Privilege {
            message: format!("a run's actor is who runs it ({expected}), not {actor}"),
            hint: "Pass current_user (the worker passes 'worker').".into(),
        });
    }
    // A run of this policy that this session began and never ended (interrupted before its
    // `_run_end`) still holds the pruner lock, and a session lock stacks: let go of it first,
    // or the lock would outlive every later run of this session.
    for stale in runs::abandoned(policy_id) {
        if let Err(e) = sweep::let_go(&stale) {
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
            &[policy_id.into(), expected.as_str().into()],
        )?;
        return Ok(None);
    }
    match bounded(
        || sweep::start(policy_id, &expected, cycle_remaining),
        Unkept::Yes,
    )? {
        Ok(state) => Ok(Some(view(&runs::keep(state))?)),
        Err(failure) => {
            // A rollback does not release a session lock: let go of it on every way out.
            unlock(policy_id)?;
            if !contained {
                return Err(failure.again());
            }
            Spi::run_with_args(
                "SELECT retention._ledger_append('error', $1, $2, $3)",
                &[
                    expected.as_str().into(),
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

/// Starts a run of policy `policy_id` by `actor` (the caller's role, or `'worker'` in the
/// worker) and takes its pruner lock; NULL, holding nothing, when another pruner holds the lock
/// (ledgered) or, contained, when the start failed (ledgered). Not contained, a failed start
/// raises its error, the lock released.
#[pg_extern]
#[search_path(pg_catalog, pg_temp)]
fn _run_begin(
    policy_id: Option<i64>,
    actor: Option<&str>,
    cycle_remaining: Option<i64>,
    contained: Option<bool>,
) -> Option<pgrx::JsonB> {
    crate::identity::entry(|| {
        begin(
            required(policy_id, "policy_id")?,
            required(actor, "actor")?,
            cycle_remaining,
            required(contained, "contained")?,
        )
    })
    .or_report()
}

/// Runs one step of a run; an error in it is caught (its writes rolled back), ledgered, and
/// ends the run. The caller commits afterwards.
///
/// The batch's commit does not wait for its WAL to reach disk (`synchronous_commit = off` for
/// this transaction only): a batch lost to a crash loses its deletes and its ledger record
/// together, and its rows are simply swept again. The run's closing transaction commits with
/// the session's own setting, which flushes every batch before the run reports done. Waiting
/// for a flush per batch cost as much as the deletes themselves.
fn step_safe(token: u64) -> Result<SweepState> {
    let state = runs::get(token)?;
    if state.done {
        return Ok(state);
    }
    let before = pacing::wal_written();
    prepared::commit_unflushed()?;
    let next = match bounded(|| sweep::step(state.clone()), Unkept::No)? {
        Ok(mut next) => {
            next.step_wal_bytes = pacing::wal_written() - before;
            next.paced.step_ended();
            next
        }
        Err(failure) => sweep::failed(state, &failure.message, &failure.condition)?,
    };
    Ok(runs::put(next))
}

/// One step of the run whose state (its token) is given; returns the new state.
#[pg_extern(security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn _sweep_step_safe(state: pgrx::JsonB) -> pgrx::JsonB {
    crate::identity::refuse_restricted().or_report();
    runs::token_of(&state.0)
        .and_then(step_safe)
        .and_then(|s| view(&s))
        .or_report()
}

/// Between two steps of `CALL retention.run()`: seconds to wait before asking again (0: go
/// on) and why. The first call after a step charges the step's WAL; the pause is timed here
/// and ledgered when it is over.
fn run_pace(token: u64) -> Result<pgrx::JsonB> {
    let mut state = runs::get(token)?;
    let pace = pacing::pace(std::mem::take(&mut state.step_wal_bytes))?;
    if pace.pause > 0.0 {
        if state.pause.is_none() {
            let reason = match &pace.reason {
                Some(r) => serde_json::to_value(r)?
                    .as_str()
                    .unwrap_or("pacing")
                    .to_owned(),
                None => "pacing".to_owned(),
            };
            state.pause = Some((std::time::Instant::now(), reason));
        }
    } else if let Some((started, reason)) = state.pause.take() {
        Spi::run_with_args(
            "SELECT retention._ledger_pause($1, $2, $3, $4)",
            &[
                state.policy_id.into(),
                reason.into(),
                started.elapsed().as_secs_f64().into(),
                state.actor.as_str().into(),
            ],
        )?;
    }
    runs::put(state);
    Ok(pgrx::JsonB(serde_json::to_value(pace)?))
}

/// Pacing of the run whose state is given, for `CALL retention.run()` and the worker alike:
/// `{pause, reason, replica_lag_ms, wal_tokens}` (`engine/pacing.rs::pace`).
#[pg_extern(security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn _run_pace(state: pgrx::JsonB) -> pgrx::JsonB {
    crate::identity::refuse_restricted().or_report();
    runs::token_of(&state.0).and_then(run_pace).or_report()
}

fn end(token: u64, contained: bool) -> Result<pgrx::JsonB> {
    let state = runs::take(token)?;
    let policy_id = state.policy_id;
    let closed = bounded(|| sweep::finish(state.clone()), Unkept::Yes)?;
    let closed = match closed {
        Ok(closed) => closed,
        Err(failure) => {
            // The close's drops went with its rollback; this session's locks on the leaves
            // the last step detached did not (session locks outlive a rollback): let go of
            // them, so that the policy's next run, in any session, attaches them again.
            if let Err(e) = sweep::let_go(&state) {
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
    // slow predicate's measurement is cut short there); a failed run leaves it to scrapes.
    let measured = closed.outcome != Outcome::Error
        && matches!(
            bounded(
                || {
                    table_gauges::after_run(policy_id);
                    Ok(())
                },
                Unkept::No
            ),
            Ok(Ok(()))
        );
    if !measured {
        table_gauges::after_unmeasured_run(policy_id);
    }
    view(&closed)
}

/// Closes the run whose state is given (hold skips, cap warning, run summary) and releases
/// its lock. Contained (the worker), a failed close is a warning; otherwise it raises, the
/// lock released either way.
#[pg_extern(security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn _run_end(state: pgrx::JsonB, contained: bool) -> pgrx::JsonB {
    crate::identity::refuse_restricted().or_report();
    runs::token_of(&state.0)
        .and_then(|token| end(token, contained))
        .or_report()
}
