//! Pacing: between two steps, a sweep pauses while a streaming replica's replay lags more than
//! `pg_retention.max_replica_lag`, or while the database's sweeps have written more WAL than
//! `pg_retention.max_wal_rate` allows (a token bucket in `retention.wal_budget`, shared by the
//! worker and every `CALL retention.run()` of the database). Pauses happen between steps, outside
//! their transactions; the caller sleeps, asks again, and ledgers the pause when it ends.
//!
//! Adaptive pacing (`pg_retention.adaptive_pacing`, on by default) works inside the sweep: a
//! step commits without waiting for its WAL to reach disk, and the WAL writer (or a writer's
//! commit) flushes it while the next step runs. Before each step the sweep waits until the WAL
//! of the step before the last is on disk ([`adapt`]): the sweep never runs more than one step
//! ahead of the disk, so a concurrent writer's commit never queues behind more than about two
//! steps of it. That wait is zero while the disk keeps up; while it takes longer than
//! `pg_retention.pacing_flush_target`, the sweep sleeps as long as it overran (the disk is the
//! writers' for that long) and makes its next step smaller in proportion; while it takes under
//! half the target, steps grow back to `batch_size`.

use crate::catalog::prepared;
use crate::error::Result;
use crate::gucs;
use pgrx::prelude::*;
use serde::{Deserialize, Serialize};
use std::cell::Cell;
use std::time::{Duration, Instant};

/// Why a sweep pauses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PauseReason {
    /// A streaming replica's replay lag is above `pg_retention.max_replica_lag`.
    ReplicaLag,
    /// The WAL budget of `pg_retention.max_wal_rate` is spent.
    WalRate,
    /// Adaptive pacing: the flush wait before a step overran `pg_retention.pacing_flush_target`,
    /// and the sweep yields the disk for the overrun (`adapt`).
    Adaptive,
}

impl PauseReason {
    /// Its name, as the ledger and `retention.workers` write it.
    pub fn as_str(self) -> &'static str {
        match self {
            PauseReason::ReplicaLag => "replica_lag",
            PauseReason::WalRate => "wal_rate",
            PauseReason::Adaptive => "adaptive",
        }
    }
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

/// How long a reading of the replicas' replay lag stands. A standby reports its lag every
/// `wal_receiver_status_interval` (10 s by default), so a reading taken between every two steps
/// (a few milliseconds apart) mostly reads the same figure again, at 2 % of a run's time.
const LAG_READING_LASTS: Duration = Duration::from_millis(100);

thread_local! {
    /// The last reading of the replay lag (milliseconds), and when it was taken.
    static LAG_READING: Cell<Option<(Instant, f64)>> = const { Cell::new(None) };
}

/// Charges `wal_bytes` (what the step just written wrote) to the database's WAL budget and
/// says whether the next step must wait, and why.
pub fn pace(wal_bytes: i64) -> Result<Pace> {
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
        let lag = replica_lag_ms()?;
        pace.replica_lag_ms = Some(lag);
        if lag > max_lag as f64 {
            pace.pause = pace.pause.max(LAG_POLL_SECONDS);
            pace.reason = Some(PauseReason::ReplicaLag);
        }
    }
    Ok(pace)
}

/// The largest replay lag of a streaming replica, in milliseconds (0 without one): a reading
/// younger than [`LAG_READING_LASTS`], or a new one.
fn replica_lag_ms() -> Result<f64> {
    if let Some((at, lag)) = LAG_READING.get() {
        if at.elapsed() < LAG_READING_LASTS {
            return Ok(lag);
        }
    }
    // Planned once per backend. The WAL senders' own function, not the pg_stat_replication
    // view, which joins it to every backend's activity (a copy of all of them per call: about a
    // millisecond, as long as a step's deletes).
    let plan = prepared::cached(
        "SELECT coalesce(max(extract(epoch FROM r.replay_lag)), 0)::float8 * 1000
           FROM pg_catalog.pg_stat_get_wal_senders() r WHERE r.state = 'streaming'",
        &[],
        false,
    )?;
    let lag = prepared::one::<f64>(&plan, &[])?.unwrap_or(0.0);
    LAG_READING.set(Some((Instant::now(), lag)));
    Ok(lag)
}

/// The WAL this backend has written so far, in bytes.
pub fn wal_written() -> i64 {
    // Safety: a plain read of this backend's own WAL usage counter.
    unsafe { pg_sys::pgWalUsage.wal_bytes as i64 }
}

/// The fewest rows adaptive pacing lets a step delete.
const MIN_STEP_ROWS: i64 = 100;
/// The longest adaptive pause after one step.
const MAX_ADAPTIVE_PAUSE: Duration = Duration::from_millis(100);

/// What adaptive pacing did in a run, carried in its state between steps.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Adaptive {
    /// The policy's `batch_size` when the run started: the most rows a step may delete.
    pub batch_size: i64,
    /// Rows the next step may delete (None: `batch_size`).
    pub step_rows: Option<i64>,
    /// Pauses taken after a step's flush.
    pub pauses: i64,
    /// Their total, in seconds (the flush waits included).
    pub seconds: f64,
    /// The longest flush wait seen, in milliseconds.
    pub max_flush_ms: f64,
    /// Every flush wait, in seconds (those of paused steps are in `seconds` too).
    #[serde(default)]
    pub flush_seconds: f64,
    /// Steps paced (each waited for a flush, if only to see it was done).
    #[serde(default)]
    pub steps: i64,
    /// The fewest rows a step was allowed.
    pub min_step_rows: Option<i64>,
    /// Where the last step's WAL ended (0: it wrote none).
    #[serde(default)]
    pub last_step_end: u64,
    /// Where the step before it ended: what the next step waits to see on disk.
    #[serde(default)]
    pub flush_to: u64,
}

impl Adaptive {
    /// Notes, at the end of a step (before its commit), where its WAL ends.
    pub fn step_ended(&mut self) {
        self.flush_to = self.last_step_end;
        // Safety: a plain read of this backend's own last-record position.
        self.last_step_end = unsafe { pg_sys::XactLastRecEnd };
    }
}

/// Before a step: waits for the WAL of the step before the last to reach disk; when that took
/// longer than the target, sleeps for the overrun (at most 100 ms). Sizes this step from the
/// wait. Does nothing when adaptive pacing is off (the step gets the policy's `batch_size`).
pub fn adapt(state: &mut Adaptive) {
    if !gucs::adaptive_pacing() || state.batch_size <= 0 {
        state.step_rows = None;
        return;
    }
    let began = Instant::now();
    flush_step_wal(state.flush_to);
    let flush = began.elapsed();
    let flush_ms = flush.as_secs_f64() * 1000.0;
    let target_ms = gucs::pacing_flush_target_ms();
    let rows = next_step_rows(
        state.step_rows.unwrap_or(state.batch_size),
        state.batch_size,
        flush_ms,
        target_ms,
    );
    state.step_rows = Some(rows);
    state.min_step_rows = Some(state.min_step_rows.map_or(rows, |m| m.min(rows)));
    state.max_flush_ms = state.max_flush_ms.max(flush_ms);
    state.flush_seconds += flush.as_secs_f64();
    state.steps += 1;
    if flush_ms > target_ms {
        // The disk is the writers' for as long as the flush overran the target.
        let over = flush.saturating_sub(Duration::from_secs_f64(target_ms / 1000.0));
        let pause = over.min(MAX_ADAPTIVE_PAUSE);
        std::thread::sleep(pause);
        state.pauses += 1;
        state.seconds += (flush + pause).as_secs_f64();
    }
}

/// The rows of the next step: fewer when the last flush took longer than the target (in
/// proportion, at most four times fewer at once), a quarter more when it took under half of
/// it, between 100 (or `batch_size`, if lower) and `batch_size`.
pub fn next_step_rows(current: i64, batch_size: i64, flush_ms: f64, target_ms: f64) -> i64 {
    let current = current as f64;
    let next = if flush_ms > target_ms {
        current * (target_ms / flush_ms).max(0.25)
    } else if flush_ms < target_ms / 2.0 {
        (current * 1.25).ceil()
    } else {
        current
    };
    (next.round() as i64).clamp(MIN_STEP_ROWS.min(batch_size), batch_size.max(1))
}

/// Waits until the WAL up to `upto` (the end of a step's last record, noted by
/// [`Adaptive::step_ended`]) is on disk. Not the end of this backend's last commit, which a
/// transaction that wrote no WAL (the pacing check between two steps) resets to zero; not the
/// insert position, which may name a page not yet begun.
fn flush_step_wal(upto: u64) {
    // Safety: XLogFlush is what a synchronous commit calls; `upto` ends a record this backend
    // inserted, and it is never called during recovery.
    unsafe {
        if upto != 0 && !pg_sys::RecoveryInProgress() {
            pg_sys::XLogFlush(upto);
        }
    }
}

#[cfg(any(test, feature = "pg_test"))]
#[pg_schema]
mod tests {
    use super::next_step_rows;

    #[pgrx::pg_test]
    fn a_slow_flush_shrinks_the_next_step_in_proportion() {
        assert_eq!(next_step_rows(5000, 5000, 4.0, 2.0), 2500);
        // At most four times fewer at once.
        assert_eq!(next_step_rows(5000, 5000, 100.0, 2.0), 1250);
        // Never under 100 rows, nor over the policy's batch size.
        assert_eq!(next_step_rows(120, 5000, 100.0, 2.0), 100);
        assert_eq!(next_step_rows(50, 50, 100.0, 2.0), 50);
    }

    #[pgrx::pg_test]
    fn a_fast_flush_grows_the_next_step_up_to_the_batch_size() {
        assert_eq!(next_step_rows(1000, 5000, 0.5, 2.0), 1250);
        assert_eq!(next_step_rows(4800, 5000, 0.1, 2.0), 5000);
        // Between half the target and the target: unchanged.
        assert_eq!(next_step_rows(1000, 5000, 1.5, 2.0), 1000);
    }
}
