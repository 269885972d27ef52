//! `retention.expire_operations`: the archiver's expire operations, one row each, and where
//! each stands (DDL and states in `sql/archive.sql`). This module is the table's one writer: a
//! row is made when an operation is prepared and moved by each apply recorded
//! (`archive/expire_operation.rs`, behind `retention.expire_prepare` and
//! `retention.expire_record`). The ledger's `expire_prepare` and `expire_apply` entries are the
//! operations' history; their state is never read from them.

use crate::catalog::query_json;
use crate::error::{present, Result};
use pgrx::datum::{Interval, TimestampWithTimeZone};
use pgrx::prelude::*;
use pgrx::Uuid;
use serde::Deserialize;

/// Where an expire operation stands (`expire_operations.state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OperationState {
    /// Prepared (its tombstone written); no apply has deleted or refused yet (an apply before
    /// the quiescence interval ended, `not_ready`, leaves it so).
    Prepared,
    /// An apply deleted some of the planned keys, not all: the next apply goes on with the rest.
    Partial,
    /// The last apply found the state changed since the plan (a held archive, a changed
    /// inventory, an archive no longer due, a rewrite recorded since: RT504) and deleted
    /// nothing more. Another apply checks again; a new plan names the objects now.
    Refused,
    /// Every planned key is deleted and the archives are marked expired. Final: a later apply
    /// is recorded, but the operation stays completed.
    Completed,
}

impl OperationState {
    /// The state's name in the table.
    pub fn as_str(self) -> &'static str {
        match self {
            OperationState::Prepared => "prepared",
            OperationState::Partial => "partial",
            OperationState::Refused => "refused",
            OperationState::Completed => "completed",
        }
    }

    /// The state after an apply whose outcome is `outcome`.
    pub fn after(self, outcome: ApplyOutcome) -> OperationState {
        match (self, outcome) {
            (OperationState::Completed, _) => OperationState::Completed,
            (state, ApplyOutcome::NotReady) => state,
            (_, ApplyOutcome::Completed) => OperationState::Completed,
            (_, ApplyOutcome::Partial) => OperationState::Partial,
            (_, ApplyOutcome::Refused) => OperationState::Refused,
        }
    }
}

/// What one apply found and did (`retention.expire_record`'s closed set of outcomes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApplyOutcome {
    /// Every planned key deleted; the archives are marked expired.
    Completed,
    /// Some keys deleted, not all.
    Partial,
    /// The state differs from the plan: nothing more deleted.
    Refused,
    /// The quiescence interval has not ended: nothing done.
    NotReady,
}

impl ApplyOutcome {
    /// The outcome named `text`, if it is one.
    pub fn parse(text: &str) -> Option<ApplyOutcome> {
        match text {
            "completed" => Some(ApplyOutcome::Completed),
            "partial" => Some(ApplyOutcome::Partial),
            "refused" => Some(ApplyOutcome::Refused),
            "not_ready" => Some(ApplyOutcome::NotReady),
            _ => None,
        }
    }

    /// The outcome's name (in the table and the ledger).
    pub fn as_str(self) -> &'static str {
        match self {
            ApplyOutcome::Completed => "completed",
            ApplyOutcome::Partial => "partial",
            ApplyOutcome::Refused => "refused",
            ApplyOutcome::NotReady => "not_ready",
        }
    }
}

/// An operation to record as prepared.
#[derive(Debug)]
pub struct NewOperation<'a> {
    /// Its id (the archiver's).
    pub operation: Uuid,
    /// SHA-256 (hex) of its plan.
    pub plan_sha256: &'a str,
    /// How long after preparing an apply may start.
    pub quiescence: Interval,
    /// The archives it expires.
    pub archive_ids: &'a [i64],
    /// Objects planned.
    pub objects: i64,
    /// Bytes planned.
    pub bytes: i64,
    /// Its tombstone's key.
    pub tombstone: &'a str,
    /// Who prepared it.
    pub actor: &'a str,
}

/// What recording an operation as prepared returns.
#[derive(Debug)]
pub struct Prepared {
    /// When it was prepared.
    pub at: TimestampWithTimeZone,
    /// Its quiescence interval as text (for the ledger).
    pub quiescence: String,
}

impl NewOperation<'_> {
    /// Records the operation as prepared; None when an operation of its id exists already.
    pub fn insert(&self) -> Result<Option<Prepared>> {
        Ok(Spi::connect_mut(|client| {
            let table = client.update(
                "INSERT INTO retention.expire_operations
                        (operation, prepared_by, plan_sha256, quiescence, archive_ids, objects, bytes, tombstone)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
                 ON CONFLICT (operation) DO NOTHING
                 RETURNING prepared_at, quiescence::text",
                Some(1),
                &[
                    self.operation.into(),
                    self.actor.into(),
                    self.plan_sha256.into(),
                    self.quiescence.into(),
                    self.archive_ids.to_vec().into(),
                    self.objects.into(),
                    self.bytes.into(),
                    self.tombstone.into(),
                ],
            )?;
            if table.is_empty() {
                return Ok::<_, pgrx::spi::SpiError>(None);
            }
            let (at, quiescence) = table
                .first()
                .get_two::<TimestampWithTimeZone, String>()?;
            Ok(at.zip(quiescence))
        })?
        .map(|(at, quiescence)| Prepared { at, quiescence }))
    }
}

/// Whether operation `operation` was prepared.
pub fn exists(operation: Uuid) -> Result<bool> {
    present(
        crate::catalog::optional_one::<bool, _>(
            "SELECT EXISTS (SELECT 1 FROM retention.expire_operations WHERE operation = $1)",
            &[operation.into()],
        )?,
        "an expire operation's existence",
    )
}

/// A prepared operation, locked until the transaction ends: its applies are recorded one at
/// a time.
#[derive(Debug, Deserialize)]
pub struct ExpireOperation {
    /// Its id.
    pub operation: String,
    /// The archives it expires.
    pub archive_ids: Vec<i64>,
    /// Where it stands.
    pub state: OperationState,
    /// The keys its applies deleted so far.
    pub deleted_keys: Vec<String>,
}

impl ExpireOperation {
    /// Operation `operation`, locked; None when it was never prepared.
    pub fn lock(operation: Uuid) -> Result<Option<ExpireOperation>> {
        query_json(
            "SELECT jsonb_build_object('operation', o.operation, 'archive_ids', to_jsonb(o.archive_ids),
                    'state', o.state, 'deleted_keys', to_jsonb(o.deleted_keys))
               FROM retention.expire_operations o
              WHERE o.operation = $1
                FOR UPDATE",
            &[operation.into()],
        )
    }

    /// Records one apply with outcome `outcome` that deleted `deleted`: the operation's state
    /// after it, one apply more, the keys deleted so far (each once, in order).
    pub fn record_apply(&self, outcome: ApplyOutcome, deleted: &[String]) -> Result<()> {
        Spi::run_with_args(
            "UPDATE retention.expire_operations
                SET state = $2, applies = applies + 1, last_outcome = $3, updated_at = clock_timestamp(),
                    deleted_keys = ARRAY(SELECT DISTINCT k FROM unnest(deleted_keys || $4::text[]) k ORDER BY k)
              WHERE operation = $1::uuid",
            &[
                self.operation.as_str().into(),
                self.state.after(outcome).as_str().into(),
                outcome.as_str().into(),
                deleted.to_vec().into(),
            ],
        )?;
        Ok(())
    }
}

/// Operation `operation` as `retention.expire_state` returns it: when it was prepared and by
/// whom, when it is ready and whether it is, its plan digest, archives, objects, bytes and
/// tombstone, its state, its applies, the keys they deleted and the last one's outcome. None
/// when it was never prepared.
pub fn state(operation: Uuid) -> Result<Option<serde_json::Value>> {
    query_json(
        "SELECT jsonb_build_object(
                'operation', o.operation, 'prepared_at', o.prepared_at, 'prepared_by', o.prepared_by,
                'ready_at', o.prepared_at + o.quiescence,
                'ready', clock_timestamp() >= o.prepared_at + o.quiescence,
                'plan_sha256', o.plan_sha256, 'archives', to_jsonb(o.archive_ids),
                'objects', o.objects, 'bytes', o.bytes, 'tombstone', o.tombstone,
                'state', o.state, 'applies', o.applies, 'deleted_keys', to_jsonb(o.deleted_keys),
                'outcome', o.last_outcome)
           FROM retention.expire_operations o
          WHERE o.operation = $1",
        &[operation.into()],
    )
}
