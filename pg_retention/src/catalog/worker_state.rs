//! `retention.worker_state`: one row per database, about the worker visits to it, read by
//! `retention.workers` and `retention.health()`. The table is written only through the
//! worker's SQL functions (`sql/api/runs.sql`: `_worker_visit`, `_worker_set`, `_worker_pause`,
//! `_worker_visit_end`) and `retention.wake()`; these are their Rust callers. Each runs in the
//! worker's own transaction.

use pgrx::prelude::*;
use pgrx::spi::SpiError;

/// What the worker visiting a database is doing (`retention.workers.state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkerState {
    /// Between visits: the last visit ended and the database waits for the next one.
    Idle,
    /// In a visit (with a policy: sweeping that policy).
    Sweeping,
    /// The last visit was stopped by SIGTERM (the server or the launcher stopping it).
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

/// What registering a visit found.
pub enum Begun {
    /// The visit is this database's: it goes on with the policies an earlier visit left of
    /// the cycle (`resume`), or starts a new cycle.
    Cycle { resume: Option<Vec<i64>> },
    /// A worker of another visit to this database is still alive: this one ends.
    AlreadyVisited,
}

/// Registers a visit (ledgering a previous one that died mid-sweep).
pub fn begin_visit() -> Result<Begun, SpiError> {
    Spi::connect(|client| {
        let row = client
            .select(
                "SELECT visiting, resume FROM retention._worker_visit()",
                None,
                &[],
            )?
            .first();
        let visiting = row.get::<bool>(1)?.unwrap_or(false);
        let resume = row.get::<Vec<i64>>(2)?;
        Ok(if visiting {
            Begun::Cycle { resume }
        } else {
            Begun::AlreadyVisited
        })
    })
}

/// Records the visit's state and the policy it sweeps.
pub fn record(state: WorkerState, policy: Option<String>) -> Result<(), SpiError> {
    Spi::run_with_args(
        "SELECT retention._worker_set($1, $2)",
        &[state.as_str().into(), policy.into()],
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

/// Records the end of a visit: its state, the policies of the cycle it left (none: the cycle
/// is complete), and in how many seconds the database is due again.
pub fn end_visit(
    state: WorkerState,
    left: Option<Vec<i64>>,
    next_visit_secs: f64,
) -> Result<(), SpiError> {
    Spi::run_with_args(
        "SELECT retention._worker_visit_end($1, $2, $3)",
        &[state.as_str().into(), left.into(), next_visit_secs.into()],
    )
}
