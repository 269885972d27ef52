//! The database worker: one per served database. Each cycle sweeps every enabled delete
//! policy, children first, each under the policy's advisory lock taken on this backend, one
//! transaction per sweep step. SIGTERM is honoured between steps; the cycle cap stops the cycle.

use super::schedule::{jitter_offset, next_delay};
use crate::catalog::worker_state::{self, WorkerState};
use crate::engine::sweep::{runs, Outcome};
use crate::gucs;
use pgrx::bgworkers::{BackgroundWorker, SignalWakeFlags};
use pgrx::prelude::*;
use serde_json::Value;
use std::ffi::CString;
use std::time::{Duration, Instant};

/// How often a worker looks for the extension in a database that does not have it yet.
const EXTENSION_POLL: Duration = Duration::from_secs(5);
/// Longest sleep without looking for a wake() request, in case its latch was consumed.
const WAKE_POLL: Duration = Duration::from_secs(1);
/// After a latch wake-up with no wake() request visible yet, look again this soon.
const WAKE_RECHECK: Duration = Duration::from_millis(50);

/// Runs `f` in its own transaction.
fn tx<R>(
    f: impl FnOnce() -> Result<R, pgrx::spi::SpiError>
        + std::panic::UnwindSafe
        + std::panic::RefUnwindSafe,
) -> Result<R, pgrx::spi::SpiError> {
    BackgroundWorker::transaction(f)
}

fn set_activity(database: &str, policy: Option<&str>) {
    let title = match policy {
        Some(p) => format!("pg_retention: sweeping {p}"),
        None => format!("pg_retention: idle ({database})"),
    };
    if let Ok(c) = CString::new(title.clone()) {
        // Safety: both copy the string; the CString outlives the calls.
        unsafe {
            pg_sys::set_ps_display(c.as_ptr());
            pg_sys::pgstat_report_appname(c.as_ptr());
        }
    }
}

fn extension_installed() -> bool {
    tx(|| {
        Spi::get_one::<bool>(
            "SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_retention')",
        )
    })
    .ok()
    .flatten()
    .unwrap_or(false)
}

fn set_state(state: WorkerState, policy: Option<&str>, next_wake_secs: Option<f64>) {
    let policy = policy.map(str::to_owned);
    let r = tx(move || worker_state::record(state, policy, next_wake_secs));
    if let Err(e) = r {
        warning!("pg_retention: could not record worker state: {e}");
    }
}

/// Whether `retention.wake()` asked for a cycle since the last one started.
fn wake_requested() -> bool {
    tx(worker_state::wake_pending)
        .ok()
        .flatten()
        .unwrap_or(false)
}

/// Runs one sweep step (`SELECT <function>(...)` returning jsonb) in its own transaction.
fn step(
    what: &str,
    f: impl FnOnce() -> Result<Option<pgrx::JsonB>, pgrx::spi::SpiError>
        + std::panic::UnwindSafe
        + std::panic::RefUnwindSafe,
) -> Option<Value> {
    match tx(f) {
        Ok(v) => v.map(|j| j.0).filter(|v| !v.is_null()),
        Err(e) => {
            warning!("pg_retention: {what}: {e}");
            None
        }
    }
}

fn step_with_state(function: &str, state: Value) -> Option<Value> {
    let sql = format!("SELECT retention.{function}($1)");
    let what = function.to_owned();
    step(&what, move || {
        Spi::get_one_with_args::<pgrx::JsonB>(&sql, &[pgrx::JsonB(state).into()])
    })
}

fn is_done(state: &Value) -> bool {
    state.get("done").and_then(Value::as_bool).unwrap_or(true)
}

/// What `retention._run_pace` says of the run's next step: seconds to wait (0: go on) and why.
/// The first call after a step charges the step's WAL; the call that says go on after a pause
/// ledgers the pause (the same pacing as `CALL retention.run()`'s).
fn pace_now(state: &Value) -> (f64, Option<String>) {
    let state = pgrx::JsonB(state.clone());
    let answer = step("_run_pace", move || {
        Spi::get_one_with_args::<pgrx::JsonB>("SELECT retention._run_pace($1)", &[state.into()])
    });
    let Some(answer) = answer else {
        // Pacing could not be read (logged): go on rather than stall the sweep on it.
        return (0.0, None);
    };
    let pause = answer.get("pause").and_then(Value::as_f64).unwrap_or(0.0);
    let reason = answer
        .get("reason")
        .and_then(Value::as_str)
        .map(str::to_owned);
    (pause, reason)
}

/// Waits between two steps of the sweep of policy `name` (its run's `state`) for as long as
/// pacing asks, visible in `retention.workers` meanwhile. False when SIGTERM came meanwhile.
fn pace(name: &str, state: &Value) -> bool {
    let (mut pause, reason) = pace_now(state);
    if pause <= 0.0 {
        return true;
    }
    let why = reason.unwrap_or_else(|| "pacing".into());
    let policy = name.to_owned();
    if let Err(e) = tx(move || worker_state::record_pause(policy, why)) {
        warning!("pg_retention: could not record the pause: {e}");
    }
    while pause > 0.0 {
        let waited = BackgroundWorker::wait_latch(Some(Duration::from_secs_f64(pause.min(1.0))));
        if !waited || BackgroundWorker::sigterm_received() {
            return false;
        }
        pause = pace_now(state).0;
    }
    set_state(WorkerState::Sweeping, Some(name), None);
    true
}

/// Sweeps one policy (see `retention._run_begin` for the protocol `CALL retention.run()`
/// shares); returns rows deleted, or None when the worker must stop.
fn sweep_policy(id: i64, name: &str, database: &str, cycle_remaining: i64) -> Option<i64> {
    let Some(mut state) = step("_run_begin", move || {
        Spi::get_one_with_args::<pgrx::JsonB>(
            "SELECT retention._run_begin($1, 'worker', $2, true)",
            &[id.into(), cycle_remaining.into()],
        )
    }) else {
        log!("pg_retention: policy {name} skipped: another pruner holds its lock, or its run could not start (see retention.ledger)");
        return Some(0);
    };
    set_activity(database, Some(name));
    set_state(WorkerState::Sweeping, Some(name), None);
    let mut stopping = false;
    let token = state.get("token").and_then(Value::as_u64).unwrap_or(0);
    // Ends the run between steps; `_run_end` closes it below.
    let stop = |outcome: Outcome, reason: &str| {
        if let Err(e) = runs::stop(token, outcome, reason) {
            warning!("pg_retention: policy {name}: {e}");
        }
    };
    while !is_done(&state) {
        if BackgroundWorker::sigterm_received() {
            stopping = true;
            stop(
                Outcome::Stopped,
                "worker received SIGTERM; stopped between batches",
            );
            break;
        }
        match step_with_state("_sweep_step_safe", state.clone()) {
            Some(next) => state = next,
            // The step's own transaction failed (a policy error is ledgered by the step and
            // ends the run; this is not one): close the run as failed.
            None => {
                stop(
                    Outcome::Error,
                    "a step's transaction failed; see the server log",
                );
                break;
            }
        }
        if !is_done(&state) && !pace(name, &state) {
            stopping = true;
            stop(
                Outcome::Stopped,
                "worker received SIGTERM while paused between batches",
            );
            break;
        }
    }
    let deleted = state.get("deleted").and_then(Value::as_i64).unwrap_or(0);
    let closed = step("_run_end", move || {
        Spi::get_one_with_args::<pgrx::JsonB>(
            "SELECT retention._run_end($1, true)",
            &[pgrx::JsonB(state).into()],
        )
    });
    if closed.is_none() {
        warning!("pg_retention: the run of policy {name} was not closed; its lock is released when this worker exits");
    }
    set_activity(database, None);
    if stopping {
        None
    } else {
        Some(deleted)
    }
}

/// One cycle over every enabled delete policy. Returns false when the worker must stop.
fn run_cycle(database: &str) -> bool {
    set_state(WorkerState::Sweeping, None, None);
    let rows = tx(|| {
        Spi::connect(|client| {
            client
                .select("SELECT id, name FROM retention._run_order(NULL)", None, &[])?
                .map(|row| Ok((row.get::<i64>(1)?, row.get::<String>(2)?)))
                .collect::<Result<Vec<_>, pgrx::spi::SpiError>>()
        })
    })
    .unwrap_or_else(|e| {
        warning!("pg_retention: could not list policies: {e}");
        Vec::new()
    });
    // Both columns are NOT NULL in the catalog: a row without them is not swept, loudly.
    let order: Vec<(i64, String)> = rows
        .into_iter()
        .filter_map(|row| match row {
            (Some(id), Some(name)) => Some((id, name)),
            _ => {
                warning!("pg_retention: retention._run_order returned a policy without id or name; it is not swept");
                None
            }
        })
        .collect();
    let mut remaining = gucs::max_rows_per_cycle();
    for (i, (id, name)) in order.iter().enumerate() {
        if remaining <= 0 {
            let skipped: Vec<String> = order[i..].iter().map(|(_, n)| n.clone()).collect();
            let cap = gucs::max_rows_per_cycle();
            let _ = tx(move || {
                Spi::run_with_args(
                    "SELECT retention._worker_cycle_cap($1, $2)",
                    &[cap.into(), skipped.into()],
                )
            });
            warning!("pg_retention: cycle cap of {cap} rows reached; {} policies wait for the next cycle", order.len() - i);
            break;
        }
        match sweep_policy(*id, name, database, remaining) {
            Some(deleted) => remaining -= deleted,
            None => return false,
        }
    }
    true
}

/// Entry point of a database worker. `bgw_extra` is the database; the argument counts restarts.
#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn pg_retention_database_main(arg: pg_sys::Datum) {
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP | SignalWakeFlags::SIGTERM);
    super::IN_WORKER.store(true, std::sync::atomic::Ordering::Relaxed);
    let database = BackgroundWorker::get_extra().to_owned();
    let restarts = arg.value() as i64;
    let role = gucs::role();
    BackgroundWorker::connect_worker_to_spi(Some(&database), role.as_deref());
    log!("pg_retention worker started for database \"{database}\"");
    let mut registered = false;
    let mut next_cycle = Instant::now();
    let mut last_end: Option<Instant> = None;
    let mut wait = Duration::ZERO;
    let mut recheck = false;
    loop {
        let slept_from = Instant::now();
        let limit = if recheck {
            WAKE_RECHECK
        } else {
            wait.min(WAKE_POLL)
        };
        if !BackgroundWorker::wait_latch(Some(limit)) {
            break;
        }
        let woken_early = slept_from.elapsed() + Duration::from_millis(5) < limit;
        let naptime = Duration::from_secs(gucs::naptime_secs());
        let mut changed = false;
        if BackgroundWorker::sighup_received() {
            // Safety: the documented way for a background process to reload its configuration.
            unsafe { pg_sys::ProcessConfigFile(pg_sys::GucContext::PGC_SIGHUP) };
            // A new naptime applies to the wait already under way.
            let naptime = Duration::from_secs(gucs::naptime_secs());
            if let Some(end) = last_end {
                next_cycle = end + next_delay(&database, naptime, gucs::jitter());
            }
            changed = true;
        }
        if !extension_installed() {
            // Look again soon: CREATE EXTENSION may come any moment.
            wait = naptime.min(EXTENSION_POLL);
            continue;
        }
        if !registered {
            let r = tx(move || worker_state::record_start(restarts));
            if let Err(e) = r {
                warning!("pg_retention: could not register the worker: {e}");
            }
            registered = true;
            changed = true;
            // The first cycle waits only for this database's jitter offset.
            next_cycle = Instant::now() + jitter_offset(&database, naptime, gucs::jitter());
        }
        // The latch can be consumed inside a cycle's own waits, so a wake() is also looked up
        // in the table, here and at every poll.
        let requested = wake_requested();
        // wake() sets the latch before its transaction commits: a latch with no request behind
        // it yet is looked at again shortly, when the request is visible.
        recheck = woken_early && !requested && !recheck;
        if Instant::now() >= next_cycle || requested {
            if !run_cycle(&database) {
                break;
            }
            let end = Instant::now();
            last_end = Some(end);
            let naptime = Duration::from_secs(gucs::naptime_secs());
            next_cycle = end + next_delay(&database, naptime, gucs::jitter());
            changed = true;
        }
        wait = next_cycle.saturating_duration_since(Instant::now());
        if changed {
            set_state(WorkerState::Idle, None, Some(wait.as_secs_f64()));
        }
    }
    set_state(WorkerState::Stopped, None, None);
    log!("pg_retention worker for database \"{database}\" stopped");
}
