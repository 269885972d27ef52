//! Pacing: between two steps, a sweep pauses while a streaming replica's replay lags more than
//! `pg_retention.max_replica_lag`, or while the database's sweeps have written more WAL than
//! `pg_retention.max_wal_rate` allows (a token bucket in `retention.wal_budget`, shared by the
//! worker and every `CALL retention.run()` of the database). Pauses happen between steps, outside
//! their transactions; the caller sleeps, asks again, and ledgers the pause when it ends.

use crate::gucs;
use pgrx::prelude::*;
use serde::Serialize;

/// Why a sweep pauses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PauseReason {
    /// A streaming replica's replay lag is above `pg_retention.max_replica_lag`.
    ReplicaLag,
    /// The WAL budget of `pg_retention.max_wal_rate` is spent.
    WalRate,
}

/// What the next step must wait for.
#[derive(Debug, Clone, Serialize)]
pub struct Pace {
    /// Seconds to wait before asking again (0: go on).
    pub pause: f64,
    /// Why, when it must wait.
    pub reason: Option<PauseReason>,
    /// The largest replay lag seen, in milliseconds (when the check is on).
    pub replica_lag_ms: Option<f64>,
    /// The WAL budget left, in bytes (when the rate is limited; negative: owed).
    pub wal_tokens: Option<f64>,
}

/// How long a pause for a lagging replica lasts before the lag is read again.
const LAG_POLL_SECONDS: f64 = 0.5;

/// Charges `wal_bytes` (what the step just written wrote) to the database's WAL budget and
/// says whether the next step must wait, and why.
pub fn pace(wal_bytes: i64) -> Result<Pace, pgrx::spi::SpiError> {
    let mut pace = Pace {
        pause: 0.0,
        reason: None,
        replica_lag_ms: None,
        wal_tokens: None,
    };
    let rate = gucs::max_wal_rate_bytes();
    if rate > 0 {
        let tokens = crate::catalog::wal_budget::charge(rate as f64, wal_bytes.max(0) as f64)?;
        pace.wal_tokens = Some(tokens);
        if tokens < 0.0 {
            pace.pause = (-tokens / rate as f64).min(1.0);
            pace.reason = Some(PauseReason::WalRate);
        }
    }
    let max_lag = gucs::max_replica_lag_ms();
    if max_lag > 0 {
        let lag = Spi::get_one::<f64>(
            "SELECT coalesce(max(extract(epoch FROM r.replay_lag)), 0)::float8 * 1000
               FROM pg_catalog.pg_stat_replication r WHERE r.state = 'streaming'",
        )?
        .unwrap_or(0.0);
        pace.replica_lag_ms = Some(lag);
        if lag > max_lag as f64 {
            pace.pause = pace.pause.max(LAG_POLL_SECONDS);
            pace.reason = Some(PauseReason::ReplicaLag);
        }
    }
    Ok(pace)
}

/// The WAL this backend has written so far, in bytes.
pub fn wal_written() -> i64 {
    // Safety: a plain read of this backend's own WAL usage counter.
    unsafe { pg_sys::pgWalUsage.wal_bytes as i64 }
}
