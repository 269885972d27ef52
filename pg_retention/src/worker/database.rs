//! A database worker: one visit to one database, then it exits. A visit sweeps every enabled
//! delete policy of the database's cycle, children first, each under the policy's advisory
//! lock taken on this backend, one transaction per sweep step — or, when the visit bound
//! (`pg_retention.max_visit_time`) comes first, stops between two steps and leaves the rest of
//! the cycle (the policy under way included) to the next visit, which the launcher gives after
//! every database that waited longer. SIGTERM is honoured between steps; the cycle cap stops
//! the cycle.

use super::board::{self, Request};
use super::schedule::next_delay;
use crate::catalog::worker_state::{self, WorkerState};
use crate::engine::sweep::driver::{self, Advance};
use crate::engine::sweep::Outcome;
use crate::{gucs, identity, subxact};
use pgrx::bgworkers::{BackgroundWorker, SignalWakeFlags};
use pgrx::prelude::*;
use std::ffi::CString;
use std::time::{Duration, Instant};

/// Runs `f` in its own transaction (committed whatever `f` returns).
pub(super) fn tx<R>(
    f: impl FnOnce() -> R + std::panic::UnwindSafe + std::panic::RefUnwindSafe,
) -> R {
    BackgroundWorker::transaction(f)
}

fn set_activity(database: &str, policy: Option<&str>) {
    let title = match policy {
        Some(p) => format!("pg_retention: sweeping {p}"),
        None => format!("pg_retention: visiting {database}"),
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

fn set_state(state: WorkerState, policy: Option<&str>) {
    let policy = policy.map(str::to_owned);
    let r = tx(move || worker_state::record(state, policy));
    if let Err(e) = r {
        warning!("pg_retention: could not record worker state: {e}");
    }
}

/// How one policy's sweep in a visit ended.
enum Swept {
    /// The run closed; rows deleted.
    Rows(i64),
    /// The visit bound came first: the run stopped between steps, the policy goes on next visit.
    Cut,
    /// SIGTERM: the worker stops.
    Terminated,
}

/// The visit under way: its database and when it must end.
struct Visit {
    database: String,
    deadline: Instant,
}

impl Visit {
    fn over(&self) -> bool {
        Instant::now() >= self.deadline
    }
}

/// Runs one part of a run (`engine/sweep/driver.rs`) in its own transaction, with the
/// extension owner's privileges as the SQL entry points take them (`identity::direct_entry`:
/// the worker's own role may be a mere member of retention_worker). An error the part returns
/// rolls back what it wrote and is logged: None.
fn part<T>(
    what: &str,
    f: impl FnOnce() -> crate::error::Result<T> + std::panic::UnwindSafe + std::panic::RefUnwindSafe,
) -> Option<T> {
    match tx(|| subxact::atomically(|| identity::direct_entry(f))) {
        Ok(v) => Some(v),
        Err(e) => {
            warning!("pg_retention: {what}: {e}");
            None
        }
    }
}

/// Why the wait between two steps ended early.
enum Interrupted {
    Terminated,
    VisitOver,
}

/// Waits up to `seconds` (at most a second at a time: pacing is asked again after it) between
/// two steps, unless SIGTERM or the visit bound comes first.
fn wait(visit: &Visit, seconds: f64) -> Result<(), Interrupted> {
    let waited = BackgroundWorker::wait_latch(Some(Duration::from_secs_f64(seconds.min(1.0))));
    if !waited || BackgroundWorker::sigterm_received() {
        return Err(Interrupted::Terminated);
    }
    if visit.over() {
        return Err(Interrupted::VisitOver);
    }
    Ok(())
}

const CUT: &str = "the visit bound (pg_retention.max_visit_time) was reached; the database's next visit goes on with this policy";

/// Sweeps one policy: the run driver's begin, its parts one transaction each (pauses waited
/// out here, visible in `retention.workers`), and its end — the run `CALL retention.run()`
/// makes, with the worker's stops between parts.
fn sweep_policy(visit: &Visit, id: i64, name: &str, cycle_remaining: i64) -> Swept {
    let begun = part("beginning a run", move || {
        driver::begin(id, Some(cycle_remaining), true)
    });
    let Some(token) = begun.flatten() else {
        log!("pg_retention: policy {name} skipped: another pruner holds its lock, or its run could not start (see retention.ledger)");
        return Swept::Rows(0);
    };
    set_activity(&visit.database, Some(name));
    set_state(WorkerState::Sweeping, Some(name));
    let mut end = None;
    // Ends the run between parts, unless its last step ended it (then the policy had its
    // turn: false); `driver::end` closes it below.
    let stop = |outcome: Outcome, reason: &str| {
        driver::stop(token, outcome, reason).unwrap_or_else(|e| {
            warning!("pg_retention: policy {name}: {e}");
            true
        })
    };
    let mut paused = false;
    loop {
        if BackgroundWorker::sigterm_received() {
            let stopped = stop(
                Outcome::Stopped,
                "worker received SIGTERM; stopped between batches",
            );
            end = stopped.then_some(Swept::Terminated);
            break;
        }
        if visit.over() {
            end = stop(Outcome::Stopped, CUT).then_some(Swept::Cut);
            break;
        }
        match part("a step", move || driver::advance(token)) {
            Some(Advance::Done) => break,
            Some(Advance::Go) => {
                if std::mem::take(&mut paused) {
                    set_state(WorkerState::Sweeping, Some(name));
                }
            }
            Some(Advance::Wait { seconds, reason }) => {
                if !std::mem::replace(&mut paused, true) {
                    let policy = name.to_owned();
                    if let Err(e) = tx(move || worker_state::record_pause(policy, reason)) {
                        warning!("pg_retention: could not record the pause: {e}");
                    }
                }
                match wait(visit, seconds) {
                    Ok(()) => {}
                    Err(Interrupted::Terminated) => {
                        stop(
                            Outcome::Stopped,
                            "worker received SIGTERM while paused between batches",
                        );
                        end = Some(Swept::Terminated);
                        break;
                    }
                    Err(Interrupted::VisitOver) => {
                        stop(Outcome::Stopped, CUT);
                        end = Some(Swept::Cut);
                        break;
                    }
                }
            }
            // The part's own transaction failed (a policy error is ledgered by the step and
            // ends the run; this is not one): close the run as failed.
            None => {
                stop(
                    Outcome::Error,
                    "a step's transaction failed; see the server log",
                );
                break;
            }
        }
    }
    let deleted = driver::progress(token).map_or(0, |(state, _)| state.deleted);
    if part("closing a run", move || driver::end(token, true)).is_none() {
        warning!("pg_retention: the run of policy {name} was not closed; its lock is released when this worker exits");
    }
    set_activity(&visit.database, None);
    end.unwrap_or(Swept::Rows(deleted))
}

/// The policies of this visit, in run order: the rest of a cycle an earlier visit left
/// (`resume`), or every enabled delete policy.
fn policies(resume: Option<&[i64]>) -> Vec<(i64, String)> {
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
    rows.into_iter()
        .filter_map(|row| match row {
            (Some(id), Some(name)) => Some((id, name)),
            _ => {
                warning!("pg_retention: retention._run_order returned a policy without id or name; it is not swept");
                None
            }
        })
        .filter(|(id, _)| resume.is_none_or(|ids| ids.contains(id)))
        .collect()
}

/// How a visit's cycle ended.
enum CycleEnd {
    /// Every policy of the cycle had its turn.
    Complete,
    /// The visit bound came first: these policies are left for the next visit.
    Unfinished(Vec<i64>),
    /// SIGTERM: these policies were not reached.
    Terminated(Vec<i64>),
}

/// Sweeps this visit's share of the database's cycle.
fn run_cycle(visit: &Visit, order: &[(i64, String)]) -> CycleEnd {
    let mut remaining = gucs::max_rows_per_cycle();
    let rest = |i: usize| order[i..].iter().map(|(id, _)| *id).collect::<Vec<i64>>();
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
            return CycleEnd::Complete;
        }
        if BackgroundWorker::sigterm_received() {
            return CycleEnd::Terminated(rest(i));
        }
        if visit.over() {
            return CycleEnd::Unfinished(rest(i));
        }
        match sweep_policy(visit, *id, name, remaining) {
            Swept::Rows(deleted) => remaining -= deleted,
            Swept::Cut => return CycleEnd::Unfinished(rest(i)),
            Swept::Terminated => return CycleEnd::Terminated(rest(i)),
        }
    }
    CycleEnd::Complete
}

/// One visit: registers it (ledgering a previous visit that died mid-sweep), sweeps, and
/// records how it ended and when the database is next due.
fn visit(database: &str) {
    let resume = match tx(worker_state::begin_visit) {
        Ok(worker_state::Begun::Cycle { resume }) => resume,
        Ok(worker_state::Begun::AlreadyVisited) => {
            log!(
                "pg_retention: another worker is visiting database \"{database}\"; this visit ends"
            );
            return;
        }
        Err(e) => {
            warning!("pg_retention: could not register the visit to database \"{database}\": {e}");
            return;
        }
    };
    let visit = Visit {
        database: database.to_owned(),
        deadline: Instant::now() + Duration::from_secs(gucs::max_visit_time_secs()),
    };
    set_activity(database, None);
    let order = policies(resume.as_deref());
    let ended = run_cycle(&visit, &order);
    if matches!(ended, CycleEnd::Complete) {
        super::vacuum::scrub_erasures(|| !visit.over());
    }
    let naptime = Duration::from_secs(gucs::naptime_secs());
    let (state, left, next) = match ended {
        CycleEnd::Complete => (
            WorkerState::Idle,
            None,
            next_delay(database, naptime, gucs::jitter()),
        ),
        CycleEnd::Unfinished(left) => (WorkerState::Idle, Some(left), Duration::ZERO),
        CycleEnd::Terminated(left) => (WorkerState::Stopped, Some(left), Duration::ZERO),
    };
    let unfinished = left.is_some();
    let secs = next.as_secs_f64();
    if let Err(e) = tx(move || worker_state::end_visit(state, left, secs)) {
        warning!("pg_retention: could not record the end of the visit: {e}");
    }
    // A wake() during the visit is on the launcher's board already (it posts there itself).
    if unfinished && state != WorkerState::Stopped && !board::post(database, Request::Unfinished) {
        warning!("pg_retention: the launcher's board is full; database \"{database}\" waits for its naptime");
    }
}

/// Entry point of a database worker. `bgw_extra` is the database.
#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn pg_retention_database_main(_arg: pg_sys::Datum) {
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP | SignalWakeFlags::SIGTERM);
    super::IN_WORKER.store(true, std::sync::atomic::Ordering::Relaxed);
    let database = BackgroundWorker::get_extra().to_owned();
    let role = gucs::role();
    BackgroundWorker::connect_worker_to_spi(Some(&database), role.as_deref());
    if !extension_installed() {
        // The launcher looks again later (soon when the database is listed by name).
        board::post(&database, Request::NoExtension);
        return;
    }
    visit(&database);
}
