//! The launcher: keeps a pool of at most `pg_retention.max_workers` database workers busy
//! visiting the served databases in turn (autovacuum's shape: one launcher, a bounded pool,
//! every database visited each naptime). Each visit is one short-lived worker in one database;
//! `rotation.rs` decides which database is next, `board.rs` carries requests to the launcher.
//! It is connected to the shared catalogs only (to list databases for `'*'`), never to a
//! database, and has nothing that can fail on a bad database name: that visit simply ends.

use super::board;
use super::databases;
use super::rotation::{Rotation, Timing};
use crate::gucs;
use pgrx::bgworkers::{
    BackgroundWorker, BackgroundWorkerBuilder, BackgroundWorkerStatus, DynamicBackgroundWorker,
    SignalWakeFlags,
};
use pgrx::prelude::*;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How often the launcher looks at its schedule when nothing wakes it.
const TICK: Duration = Duration::from_secs(1);

/// Registers a worker that visits `database` once.
fn start_visit(database: &str) -> Option<DynamicBackgroundWorker> {
    // Safety: MyProcPid is set for every process before it runs extension code.
    let me = unsafe { pg_sys::MyProcPid };
    BackgroundWorkerBuilder::new(&format!("pg_retention worker {database}"))
        .set_type("pg_retention worker")
        .set_library("pg_retention")
        .set_function("pg_retention_database_main")
        .enable_spi_access()
        .set_extra(database)
        .set_notify_pid(me)
        .load_dynamic()
        .ok()
}

fn timing() -> Timing {
    Timing {
        naptime: Duration::from_secs(gucs::naptime_secs()),
        jitter: gucs::jitter(),
        listed: !gucs::all_databases(),
    }
}

/// Entry point of the launcher process.
#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn pg_retention_launcher_main(_arg: pg_sys::Datum) {
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP | SignalWakeFlags::SIGTERM);
    // The shared catalogs only: pg_database for '*', and a PGPROC others can wake.
    BackgroundWorker::connect_worker_to_spi(None, None);
    // Safety: MyProcPid is set for every process before it runs extension code.
    board::set_launcher(unsafe { pg_sys::MyProcPid });
    log!("pg_retention launcher started");
    let mut rotation = Rotation::default();
    let mut visits: HashMap<String, DynamicBackgroundWorker> = HashMap::new();
    // Whether the last start was refused (max_worker_processes): warned once per shortage.
    let mut short = false;
    while BackgroundWorker::wait_latch(Some(TICK)) {
        let timing = if BackgroundWorker::sighup_received() {
            // Safety: the documented way for a background process to reload its configuration.
            unsafe { pg_sys::ProcessConfigFile(pg_sys::GucContext::PGC_SIGHUP) };
            // A new naptime applies to the waits under way.
            let timing = timing();
            rotation.retime(timing);
            timing
        } else {
            timing()
        };
        let now = Instant::now();
        for db in rotation.sync(&databases::wanted(), now, timing) {
            if let Some(visit) = visits.remove(&db) {
                log!("pg_retention: stopping the visit to database \"{db}\", no longer served");
                visit.terminate();
            }
        }
        for (db, request) in board::drain() {
            rotation.request(&db, request, now, timing);
        }
        let ended: Vec<String> = visits
            .iter()
            .filter(|(_, visit)| matches!(visit.pid(), Err(BackgroundWorkerStatus::Stopped)))
            .map(|(db, _)| db.clone())
            .collect();
        for db in ended {
            visits.remove(&db);
            rotation.ended(&db, now, timing);
        }
        let free = gucs::max_workers().saturating_sub(visits.len());
        for db in rotation.next(now, free) {
            let Some(visit) = start_visit(&db) else {
                if !short {
                    warning!("pg_retention: could not start a worker for database \"{db}\" (max_worker_processes is reached); it waits for a free slot");
                }
                short = true;
                break;
            };
            short = false;
            rotation.started(&db);
            visits.insert(db, visit);
        }
    }
    for (_, visit) in visits.drain() {
        visit.terminate();
    }
    board::set_launcher(0);
    log!("pg_retention launcher stopped");
}
