//! Background workers: a launcher and a bounded pool of database workers that visit every
//! served database in turn, as autovacuum's do.
//!
//! The launcher is registered at postmaster start (so the library must be preloaded) and is
//! connected to no database. Each visit is a worker of its own: it connects to its database,
//! sweeps the policies of the database's cycle through the same run driver as
//! `CALL retention.run()` (`engine/sweep/driver.rs`) for at most `pg_retention.max_visit_time`,
//! then (when its cycle is complete) checks and vacuums the tables erasures deleted from
//! (`vacuum.rs`), and exits; the launcher gives the next free worker to the database that has
//! waited longest.

pub mod board;
mod database;
mod databases;
mod launcher;
mod rotation;
mod schedule;
mod vacuum;

use pgrx::bgworkers::{BackgroundWorkerBuilder, BgWorkerStartTime};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Set when the library was loaded by shared_preload_libraries (in the postmaster, so every
/// backend forked from it sees it set); a library loaded later by a backend leaves it unset.
static PRELOADED: AtomicBool = AtomicBool::new(false);

/// Set in a pg_retention database worker (its own process): a run started there is the
/// worker's, not a role's.
static IN_WORKER: AtomicBool = AtomicBool::new(false);

/// Whether this process is one of pg_retention's database workers.
pub fn in_worker() -> bool {
    IN_WORKER.load(Ordering::Relaxed)
}

/// Whether the library was preloaded, so the launcher runs (`retention.health()` says so when not).
pub fn preloaded() -> bool {
    PRELOADED.load(Ordering::Relaxed)
}

/// Registers the launcher. Called from `_PG_init` only while shared_preload_libraries loads.
pub fn init() {
    // Safety: reading a postmaster-global flag during library load.
    if !unsafe { pgrx::pg_sys::process_shared_preload_libraries_in_progress } {
        return;
    }
    PRELOADED.store(true, Ordering::Relaxed);
    board::init();
    BackgroundWorkerBuilder::new("pg_retention launcher")
        .set_type("pg_retention launcher")
        .set_library("pg_retention")
        .set_function("pg_retention_launcher_main")
        .enable_spi_access()
        .set_start_time(BgWorkerStartTime::RecoveryFinished)
        .set_restart_time(Some(Duration::from_secs(5)))
        .load();
}
