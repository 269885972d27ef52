//! `retention.policy_gauges`: what `retention.metrics()` reports of each policy's table, kept
//! between scrapes (api/metrics.rs measures; this reads and writes the rows).

use pgrx::datum::TimestampWithTimeZone;
use pgrx::prelude::*;
use pgrx::spi::SpiError;

/// Keeps a measurement of policy `policy_id`.
pub fn keep(
    policy_id: i64,
    oldest_candidate: Option<TimestampWithTimeZone>,
    eligible_rows: Option<i64>,
) -> Result<(), SpiError> {
    Spi::run_with_args(
        "INSERT INTO retention.policy_gauges (policy_id, oldest_candidate, eligible_rows, measured_at)
         VALUES ($1, $2, $3, clock_timestamp())
         ON CONFLICT (policy_id) DO UPDATE
            SET oldest_candidate = EXCLUDED.oldest_candidate, eligible_rows = EXCLUDED.eligible_rows,
                measured_at = EXCLUDED.measured_at",
        &[policy_id.into(), oldest_candidate.into(), eligible_rows.into()],
    )
}

/// Drops the kept measurement of policy `policy_id`: the next scrape measures it first.
pub fn forget(policy_id: i64) -> Result<(), SpiError> {
    Spi::run_with_args(
        "DELETE FROM retention.policy_gauges WHERE policy_id = $1",
        &[policy_id.into()],
    )
}
