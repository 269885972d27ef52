//! `retention.wal_budget`: the token bucket of `pg_retention.max_wal_rate`, one row per
//! database, shared by the worker and every `CALL retention.run()` of the database.

use pgrx::prelude::*;

/// Charges `bytes` to the database's bucket, refilled at `rate` bytes per second since its last
/// charge and holding at most one second of it; returns what is left (negative: owed).
pub fn charge(rate: f64, bytes: f64) -> Result<f64, pgrx::spi::SpiError> {
    Ok(Spi::get_one_with_args::<f64>(
        "INSERT INTO retention.wal_budget AS b (database, tokens, refilled_at)
         VALUES (current_database(), $1::float8 - $2::float8, clock_timestamp())
         ON CONFLICT (database) DO UPDATE
            SET tokens = least($1::float8, b.tokens + $1::float8 * extract(epoch FROM clock_timestamp() - b.refilled_at)::float8) - $2::float8,
                refilled_at = clock_timestamp()
         RETURNING tokens",
        &[rate.into(), bytes.into()],
    )?
    .unwrap_or(0.0))
}
