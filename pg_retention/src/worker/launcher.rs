//! The launcher: starts one database worker per served database, restarts one that died (with
//! a growing pause, so a database that cannot be served does not spin), stops workers when
//! retention is disabled or a database leaves the list. It never connects to a database and
//! has nothing that can fail on a bad database name: the worker for it simply exits.

use crate::gucs;
use pgrx::bgworkers::{
    BackgroundWorker, BackgroundWorkerBuilder, DynamicBackgroundWorker, SignalWakeFlags,
};
use pgrx::prelude::*;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How often the launcher looks at its workers when nothing wakes it.
const TICK: Duration = Duration::from_secs(1);
/// Longest pause before restarting a worker that keeps dying.
const MAX_BACKOFF: Duration = Duration::from_secs(60);

struct Tracked {
    handle: Option<DynamicBackgroundWorker>,
    restarts: u32,
    not_before: Instant,
}

fn start_worker(database: &str, restarts: u32) -> Option<DynamicBackgroundWorker> {
    // Safety: MyProcPid is set for every process before it runs extension code.
    let me = unsafe { pg_sys::MyProcPid };
    BackgroundWorkerBuilder::new(&format!("pg_retention worker {database}"))
        .set_type("pg_retention worker")
        .set_library("pg_retention")
        .set_function("pg_retention_database_main")
        .enable_spi_access()
        .set_extra(database)
        .set_argument(Some(pg_sys::Datum::from(restarts as usize)))
        .set_notify_pid(me)
        .load_dynamic()
        .map_err(|_| {
            warning!("pg_retention: could not register a worker for database \"{database}\" (max_worker_processes?)")
        })
        .ok()
}

/// Entry point of the launcher process.
#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn pg_retention_launcher_main(_arg: pg_sys::Datum) {
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP | SignalWakeFlags::SIGTERM);
    log!("pg_retention launcher started");
    let mut workers: HashMap<String, Tracked> = HashMap::new();
    while BackgroundWorker::wait_latch(Some(TICK)) {
        if BackgroundWorker::sighup_received() {
            // Safety: the documented way for a background process to reload its configuration.
            unsafe { pg_sys::ProcessConfigFile(pg_sys::GucContext::PGC_SIGHUP) };
        }
        let wanted: Vec<String> = if gucs::enabled() {
            gucs::databases()
        } else {
            Vec::new()
        };
        workers.retain(|db, tracked| {
            let keep = wanted.contains(db);
            if !keep {
                if let Some(handle) = tracked.handle.take() {
                    log!("pg_retention: stopping the worker for database \"{db}\"");
                    handle.terminate();
                }
            }
            keep
        });
        let now = Instant::now();
        for db in &wanted {
            let tracked = workers.entry(db.clone()).or_insert(Tracked {
                handle: None,
                restarts: 0,
                not_before: now,
            });
            let alive = tracked.handle.as_ref().is_some_and(|h| {
                !matches!(
                    h.pid(),
                    Err(pgrx::bgworkers::BackgroundWorkerStatus::Stopped)
                )
            });
            if alive || now < tracked.not_before {
                continue;
            }
            if tracked.handle.take().is_some() {
                tracked.restarts += 1;
                let pause = Duration::from_secs(1u64 << tracked.restarts.min(6)).min(MAX_BACKOFF);
                tracked.not_before = now + pause;
                warning!(
                    "pg_retention: the worker for database \"{db}\" exited; restarting it in {} s (restart {})",
                    pause.as_secs(),
                    tracked.restarts
                );
                continue;
            }
            tracked.handle = start_worker(db, tracked.restarts);
        }
    }
    for (_, tracked) in workers.drain() {
        if let Some(handle) = tracked.handle {
            handle.terminate();
        }
    }
    log!("pg_retention launcher stopped");
}
