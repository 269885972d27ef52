//! Pull consumers registered on a policy (`retention.consumer_registrations`): their epoch, the
//! position each has reported and the lease that makes it pin. The statements that delete read
//! the pins through `retention._consumer_pins` and `retention._consumer_positions` (sql/api/consumers.sql).

use crate::catalog::query_json;
use crate::error::{present, Result};
use pgrx::prelude::*;
use serde::Deserialize;

/// One consumer's registration.
#[derive(Debug, Clone, Deserialize)]
pub struct Registration {
    /// The registration's epoch: reports must carry it.
    pub epoch: i64,
    /// The last position accepted in this epoch (text of the order column's type); None before
    /// the first report, when the consumer pins every row.
    pub position: Option<String>,
    /// When the lease ends, as text.
    pub expires_at: String,
    /// Whether the lease is still running (the consumer pins).
    pub live: bool,
    /// The role whose members report for this consumer (oid).
    pub reporter: u32,
}

const COLUMNS: &str =
    "SELECT to_jsonb(r) FROM (SELECT epoch, position, expires_at::text AS expires_at, expires_at > now() AS live,
            reporter::oid::bigint AS reporter
       FROM retention.consumer_registrations WHERE policy_id = $1 AND consumer = $2";

impl Registration {
    /// Registers `consumer` on policy `policy_id` (or registers it again) with a lease of
    /// `lease` (interval text) from now, in a new epoch with no position yet, reported for by
    /// members of `reporter`. Returns the epoch.
    pub fn register(
        policy_id: i64,
        consumer: &str,
        lease: &str,
        by: u32,
        reporter: u32,
    ) -> Result<i64> {
        present(
            Spi::get_one_with_args::<i64>(
                "INSERT INTO retention.consumer_registrations AS c
                     (policy_id, consumer, epoch, position, lease, expires_at, registered_at, registered_by,
                      reporter)
                 VALUES ($1, $2, nextval('retention.consumer_epochs'), NULL, $3::interval,
                         now() + $3::interval, now(), $4::bigint::oid, $5::bigint::oid)
                 ON CONFLICT (policy_id, consumer) DO UPDATE
                    SET epoch = excluded.epoch, position = NULL, lease = excluded.lease,
                        expires_at = excluded.expires_at, registered_at = excluded.registered_at,
                        registered_by = excluded.registered_by, reporter = excluded.reporter,
                        reported_at = NULL
                 RETURNING c.epoch",
                &[
                    policy_id.into(),
                    consumer.into(),
                    lease.into(),
                    i64::from(by).into(),
                    i64::from(reporter).into(),
                ],
            )?,
            "a consumer registration",
        )
    }

    /// The registration, read without a lock.
    pub fn read(policy_id: i64, consumer: &str) -> Result<Option<Registration>> {
        query_json(
            &format!("{COLUMNS}) r"),
            &[policy_id.into(), consumer.into()],
        )
    }

    /// The registration, locked until the transaction ends: reports of one consumer take turns.
    pub fn lock(policy_id: i64, consumer: &str) -> Result<Option<Registration>> {
        query_json(
            &format!("{COLUMNS} FOR UPDATE) r"),
            &[policy_id.into(), consumer.into()],
        )
    }

    /// Records a report: the position becomes `position` (the caller decided it moves forward,
    /// or keeps the current one) and the lease runs again from now.
    pub fn record_report(policy_id: i64, consumer: &str, position: Option<&str>) -> Result<()> {
        Spi::run_with_args(
            "UPDATE retention.consumer_registrations
                SET position = $3, reported_at = now(), expires_at = now() + lease
              WHERE policy_id = $1 AND consumer = $2",
            &[policy_id.into(), consumer.into(), position.into()],
        )?;
        Ok(())
    }

    /// Removes the registration; false when there was none.
    pub fn remove(policy_id: i64, consumer: &str) -> Result<bool> {
        Ok(Spi::get_one_with_args::<bool>(
            "WITH gone AS (DELETE FROM retention.consumer_registrations
                            WHERE policy_id = $1 AND consumer = $2 RETURNING 1)
             SELECT EXISTS (SELECT 1 FROM gone)",
            &[policy_id.into(), consumer.into()],
        )?
        .unwrap_or(false))
    }
}
