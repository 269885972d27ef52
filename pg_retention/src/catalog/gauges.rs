//! `retention.policy_gauges`: what `retention.metrics()` reports of each policy's table, kept
//! between scrapes (api/metrics.rs measures; this reads and writes the rows).

use pgrx::datum::TimestampWithTimeZone;
use pgrx::prelude::*;
use pgrx::spi::SpiError;

/// One policy and its kept gauges.
pub struct Kept {
    pub policy_id: i64,
    /// Whether the policy has gauges: enabled, of a kind whose rows are deletable by age.
    pub measurable: bool,
    /// The policy's window (`older_than`) in seconds.
    pub window: Option<f64>,
    /// Seconds since the oldest candidate row's age-column value (now, the transaction's time).
    pub candidate_age: Option<f64>,
    pub eligible_rows: Option<i64>,
    /// Seconds since the measurement; None when never measured.
    pub staleness: Option<f64>,
}

/// Every live policy with its kept gauges, the least recently measured first.
pub fn all() -> Result<Vec<Kept>, SpiError> {
    Spi::connect(|client| {
        client
            .select(
                "SELECT p.id, p.enabled AND p.kind IN ('age', 'unreferenced', 'orphan')
                              AND p.age_column IS NOT NULL,
                        extract(epoch FROM p.older_than)::float8,
                        extract(epoch FROM now() - g.oldest_candidate)::float8, g.eligible_rows,
                        extract(epoch FROM clock_timestamp() - g.measured_at)::float8
                   FROM retention.policies p
                   LEFT JOIN retention.policy_gauges g ON g.policy_id = p.id
                  ORDER BY g.measured_at NULLS FIRST, p.id",
                None,
                &[],
            )?
            .map(|row| {
                Ok(Kept {
                    policy_id: row.get::<i64>(1)?.unwrap_or_default(),
                    measurable: row.get::<bool>(2)?.unwrap_or(false),
                    window: row.get(3)?,
                    candidate_age: row.get(4)?,
                    eligible_rows: row.get(5)?,
                    staleness: row.get(6)?,
                })
            })
            .collect()
    })
}

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
