//! `retention.worker_state`: one row per database worker, read by `retention.workers` and
//! `retention.health()`. The table is written only through the worker's SQL functions
//! (`sql/api.sql`: `_worker_started`, `_worker_set`, `_worker_wake_pending`); these are their
//! Rust callers. Each runs in the worker's own transaction.

use pgrx::prelude::*;
use pgrx::spi::SpiError;

/// What a database worker is doing (`retention.workers.state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkerState {
    /// Between cycles.
    Idle,
    /// In a cycle (with a policy: sweeping that policy).
    Sweeping,
    /// Stopped cleanly (SIGTERM, or the extension's worker was turned off).
    Stopped,
}

impl WorkerState {
    /// The state's name in `retention.worker_state.state`.
    pub fn as_str(self) -> &'static str {
        match self {
            WorkerState::Idle => "idle",
            WorkerState::Sweeping => "sweeping",
            WorkerState::Stopped => "stopped",
        }
    }
}

/// Registers a worker that started (ledgering the crash of a previous one that did not stop).
pub fn record_start(restarts: i64) -> Result<(), SpiError> {
    Spi::run_with_args("SELECT retention._worker_started($1)", &[restarts.into()])
}

/// Records the worker's state, the policy it sweeps, and how long it will sleep.
pub fn record(
    state: WorkerState,
    policy: Option<String>,
    next_wake_secs: Option<f64>,
) -> Result<(), SpiError> {
    Spi::run_with_args(
        "SELECT retention._worker_set($1, $2, $3)",
        &[state.as_str().into(), policy.into(), next_wake_secs.into()],
    )
}

/// Records that the sweep of `policy` waits between steps, and why: state `paused` (set only
/// here), with `paused_since` (the first call of a pause) and `pause_reason`.
pub fn record_pause(policy: String, reason: String) -> Result<(), SpiError> {
    Spi::run_with_args(
        "SELECT retention._worker_pause($1, $2)",
        &[policy.into(), reason.into()],
    )
}

/// Whether `retention.wake()` asked for a cycle since the last one started.
pub fn wake_pending() -> Result<Option<bool>, SpiError> {
    Spi::get_one::<bool>("SELECT retention._worker_wake_pending()")
}
