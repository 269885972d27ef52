//! The expire operations' statements (`crate::expire` decides): the archives past their keep,
//! the holds over an archive's rows, an operation prepared, its state, each apply ledgered.

use super::{server_message, Db, Sqlstate};
use crate::error::{Error, Result};
use serde::Deserialize;
use std::time::Duration;

/// A candidate archive as the database lists it (`retention.expiry_candidates`).
pub struct Candidate {
    /// Its policy.
    pub policy: String,
    /// The policy's version.
    pub policy_version: i32,
    /// The policy's `archive_keep`, as text.
    pub archive_keep: String,
    /// The archive's id.
    pub archive_id: i64,
    /// Its batch.
    pub batch: String,
    /// Its slice's key.
    pub object_key: String,
    /// Its rows.
    pub rows: i64,
    /// When it was archived (ISO 8601).
    pub archived_at: String,
}

/// The outcome an apply is ledgered with (`retention.expire_record`'s closed set).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpireOutcome {
    /// Every planned key is deleted and the archives are marked expired.
    Completed,
    /// Some keys were deleted, not all.
    Partial,
    /// The state differs from the plan: nothing was deleted by this apply.
    Refused,
    /// The quiescence interval has not passed.
    NotReady,
}

sql_text!(ExpireOutcome {
    Completed => "completed",
    Partial => "partial",
    Refused => "refused",
    NotReady => "not_ready",
});

/// An operation as the database knows it (`retention.expire_state`: its row in
/// `retention.expire_operations`).
#[derive(Debug, Deserialize)]
pub struct ExpireState {
    /// When it was prepared.
    pub prepared_at: String,
    /// When the quiescence interval ends.
    pub ready_at: String,
    /// Whether it has.
    pub ready: bool,
    /// The SHA-256 of the plan it was prepared for.
    pub plan_sha256: String,
    /// The archives it expires.
    pub archives: Vec<i64>,
    /// Its tombstone's key.
    pub tombstone: String,
    /// Applies so far.
    pub applies: i64,
    /// Keys earlier applies deleted.
    pub deleted_keys: Vec<String>,
    /// The last apply's outcome, as recorded.
    #[serde(rename = "outcome")]
    outcome_text: Option<String>,
}

impl ExpireState {
    /// The last apply's outcome; None before the first apply.
    pub fn outcome(&self) -> Option<ExpireOutcome> {
        self.outcome_text.as_deref().and_then(ExpireOutcome::parse)
    }
}

/// An operation to ledger as prepared (`retention.expire_prepare`).
pub struct Prepare<'a> {
    /// Its id.
    pub operation_id: &'a str,
    /// The SHA-256 of its plan.
    pub plan_sha256: &'a str,
    /// How long after preparing an apply may start.
    pub quiescence: Duration,
    /// The archives it expires.
    pub archives: &'a [i64],
    /// Objects planned.
    pub objects: i64,
    /// Bytes planned.
    pub bytes: i64,
    /// Its tombstone's key.
    pub tombstone: &'a str,
    /// Who prepares it.
    pub actor: &'a str,
}

impl Db {
    /// A new operation id (`gen_random_uuid()`).
    pub async fn new_operation_id(&self) -> Result<String> {
        self.value("SELECT gen_random_uuid()::text", &[]).await
    }

    /// The archives past their policy's `archive_keep`.
    pub async fn expiry_candidates(&self) -> Result<Vec<Candidate>> {
        let rows = self
            .client
            .query(
                "SELECT policy, policy_version, archive_keep::text, archive_id, batch::text, object_key, rows,
                    to_json(archived_at) #>> '{}'
               FROM retention.expiry_candidates()",
                &[],
            )
            .await?;
        Ok(rows
            .iter()
            .map(|r| Candidate {
                policy: r.get(0),
                policy_version: r.get(1),
                archive_keep: r.get(2),
                archive_id: r.get(3),
                batch: r.get(4),
                object_key: r.get(5),
                rows: r.get(6),
                archived_at: r.get(7),
            })
            .collect())
    }

    /// The holds that match rows of archive `archive_id`, given its slice and its manifest's
    /// column names. A slice that is not the archived one is refused with
    /// [`Sqlstate::ArchiveMismatch`].
    pub async fn archive_holds(
        &self,
        archive_id: i64,
        slice: &[u8],
        columns: &[String],
    ) -> Result<Vec<i64>> {
        self.value(
            "SELECT retention.archive_holds($1, $2, $3)",
            &[&archive_id, &slice, &columns],
        )
        .await
    }

    /// Ledgers an operation as prepared; when it was. Archives no longer past their keep are
    /// an [`Error::Refusal`].
    pub async fn expire_prepare(&self, p: &Prepare<'_>) -> Result<String> {
        let prepared = self
            .client
            .query_one(
                "SELECT to_json(retention.expire_prepare($1::text::uuid, $2, make_interval(secs => $3), $4, $5, $6, $7, $8)) #>> '{}'",
                &[
                    &p.operation_id,
                    &p.plan_sha256,
                    &(p.quiescence.as_secs_f64()),
                    &p.archives,
                    &p.objects,
                    &p.bytes,
                    &p.tombstone,
                    &p.actor,
                ],
            )
            .await
            .map_err(|e| match Sqlstate::of(&e) {
                Some(Sqlstate::NotInPrerequisiteState) => Error::Refusal(server_message(&e)),
                _ => Error::Db(e),
            })?;
        Ok(prepared.get(0))
    }

    /// The operation as the database knows it; None when it was never prepared.
    pub async fn expire_state(&self, operation_id: &str) -> Result<Option<ExpireState>> {
        let row = self
            .client
            .query_one(
                "SELECT retention.expire_state($1::text::uuid)::text",
                &[&operation_id],
            )
            .await?;
        let text: Option<String> = row.get(0);
        Ok(match text {
            Some(t) => Some(serde_json::from_str(&t)?),
            None => None,
        })
    }

    /// Ledgers one apply. Completing one whose archive's object is now a rewrite it did not
    /// delete is refused with [`Sqlstate::ExpiryConflict`].
    pub async fn expire_record(
        &self,
        operation_id: &str,
        outcome: ExpireOutcome,
        deleted: &[String],
        detail: &serde_json::Value,
        actor: &str,
    ) -> Result<()> {
        self.client
            .execute(
                "SELECT retention.expire_record($1::text::uuid, $2, $3, $4::text::jsonb, $5)",
                &[
                    &operation_id,
                    &outcome.as_str(),
                    &deleted,
                    &detail.to_string(),
                    &actor,
                ],
            )
            .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_before_the_first_apply_has_no_outcome() {
        let st: ExpireState = serde_json::from_str(
            r#"{"prepared_at":"a","ready_at":"b","ready":true,"plan_sha256":"c","archives":[1],
                "tombstone":"t","applies":0,"deleted_keys":[],"outcome":null}"#,
        )
        .unwrap();
        assert_eq!(st.outcome(), None);
    }
}
