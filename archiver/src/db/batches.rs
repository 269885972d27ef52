//! The archive protocol proper: list the archive policies, claim a batch (the extension renders
//! its slice), extend its lease, release it, or ask the extension to verify and prune it.

use super::{server_message, Db, Sqlstate};
use crate::error::{Error, Result};
use futures::TryStreamExt;
use std::time::Duration;

/// A claimed batch.
pub struct Claim {
    /// The batch id.
    pub batch: String,
    /// Its slice's length (the slice itself: [`Db::claimed_slice`]).
    pub bytes: i64,
    /// Its manifest (JSON) without the digest and sizes: the pipeline computes those from the
    /// frames.
    pub manifest: String,
    /// Whether claiming again at once may find more (the batch is full, or the table is
    /// partitioned and leaves after this one are left): a pass that claims nothing with more
    /// has caught up.
    pub more: bool,
}

/// Why a batch is given back: the cause the extension counts failures by (`release_batch`'s
/// `cause`; `retention._error_reason` in `sql/ledger.sql`), and a reason for
/// people, which still starts with a word of its own per cause (an extension before 0.5.0
/// counted by that word). This enum is the only place that writes either.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Release {
    /// The extension refused the prune (its message).
    Refused(String),
    /// The archiver failed: the store, a verification, the connection (its message).
    Failed(String),
    /// Stopped before writing because another batch of its pass failed: no failure of its
    /// own, and not counted as one.
    Stopped,
}

impl Release {
    /// The cause as `release_batch` takes it.
    pub fn cause(&self) -> &'static str {
        match self {
            Release::Refused(_) => "refused",
            Release::Failed(_) => "failed",
            Release::Stopped => "stopped",
        }
    }

    /// The reason as it is ledgered.
    pub fn reason(&self) -> String {
        match self {
            Release::Refused(why) => format!("refused: {why}"),
            Release::Failed(why) => format!("archiver: {why}"),
            Release::Stopped => "stopped before writing: another batch of the pass failed".into(),
        }
    }
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

impl Db {
    /// Enabled archive policies.
    pub async fn archive_policies(&self) -> Result<Vec<String>> {
        let rows = self
            .client
            .query("SELECT p FROM retention.archive_policies() p", &[])
            .await?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    /// Claims a batch (or, with `resume`, takes back this owner's unfinished one). The claim
    /// renders the batch's slice from the rows it read and keeps it in its backend for
    /// [`Db::claimed_slice`]; the manifest comes with the claim.
    pub async fn claim(
        &self,
        policy: &str,
        rows: i32,
        lease: Duration,
        owner: &str,
        resume: bool,
    ) -> Result<Option<Claim>> {
        let row = self
            .client
            .query_one(
                "SELECT c.batch::text, c.bytes, c.more, c.manifest::text FROM retention.claim_next($1, $2, make_interval(secs => $3), $4, $5) c",
                &[&policy, &rows, &secs(lease), &owner, &resume],
            )
            .await?;
        Ok(row.get::<_, Option<String>>(0).map(|batch| Claim {
            batch,
            bytes: row.get::<_, Option<i64>>(1).unwrap_or(0),
            // Never NULL beside a batch; if it were, going on is the safe reading.
            more: row.get::<_, Option<bool>>(2).unwrap_or(true),
            manifest: row.get::<_, Option<String>>(3).unwrap_or_default(),
        }))
    }

    /// The slice of the batch this connection just claimed, `bytes` long. `claimed_slice` hands
    /// it over in pieces (through the claim's SQL wrapper every layer copied it whole), each
    /// appended to the slice as it arrives (collecting the pieces first held the slice twice);
    /// should it not be there, the batch is rendered again from its key set.
    pub async fn claimed_slice(&self, batch: &str, bytes: i64) -> Result<Vec<u8>> {
        let pieces = self
            .client
            .query_raw("SELECT retention.claimed_slice($1::text::uuid)", [batch])
            .await?;
        let mut pieces = std::pin::pin!(pieces);
        let mut slice: Option<Vec<u8>> = None;
        while let Some(piece) = pieces.try_next().await? {
            slice
                .get_or_insert_with(|| Vec::with_capacity(usize::try_from(bytes).unwrap_or(0)))
                .extend_from_slice(piece.try_get::<_, &[u8]>(0)?);
        }
        match slice {
            Some(slice) => Ok(slice),
            None => Ok(self
                .client
                .query_one("SELECT retention.batch_slice($1::text::uuid)", &[&batch])
                .await?
                .get::<_, Option<Vec<u8>>>(0)
                .unwrap_or_default()),
        }
    }

    /// Extends the batch's lease.
    pub async fn extend_lease(&self, batch: &str, lease: Duration) -> Result<()> {
        self.client
            .execute(
                "SELECT retention.extend_lease($1::text::uuid, make_interval(secs => $2))",
                &[&batch, &secs(lease)],
            )
            .await?;
        Ok(())
    }

    /// Gives a batch up (ledgered with the reason of its [`Release`]).
    pub async fn release(&self, batch: &str, why: &Release) -> Result<bool> {
        let reason = why.reason();
        let cause = why.cause();
        let row = self
            .client
            .query_one(
                "SELECT retention.release_batch($1::text::uuid, $2, $3)",
                &[&batch, &reason, &cause],
            )
            .await?;
        Ok(row.get(0))
    }

    /// Deletes the rows a two-window policy archived and kept that are past its `delete_after`
    /// (`retention.prune_archived`); the rows deleted: 0 for other policies, and for an
    /// extension from before the second window.
    pub async fn prune_archived(&self, policy: &str) -> Result<i64> {
        match self
            .client
            .query_one("SELECT retention.prune_archived($1)", &[&policy])
            .await
        {
            Ok(row) => Ok(row.get(0)),
            Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::UNDEFINED_FUNCTION) => {
                Ok(0)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Asks the extension to verify and prune the batch; the rows it deleted. Refusals (the
    /// rows changed, the batch is not ours or not in a state to prune) become
    /// [`Error::Refused`].
    pub async fn complete(
        &self,
        batch: &str,
        key: &str,
        blake3: &str,
        rows: i64,
        bytes: i64,
        owner: &str,
    ) -> Result<i64> {
        let result = self
            .client
            .query_one(
                "SELECT retention.complete_batch($1::text::uuid, $2, $3, $4, $5, $6)",
                &[&batch, &key, &blake3, &rows, &bytes, &owner],
            )
            .await;
        match result {
            Ok(row) => Ok(row.get(0)),
            Err(e) => match Sqlstate::of(&e) {
                Some(Sqlstate::ArchiveMismatch | Sqlstate::BatchState) => Err(Error::Refused {
                    batch: batch.to_owned(),
                    reason: server_message(&e),
                }),
                _ => Err(e.into()),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `retention._error_reason` counts a release by its cause (and, for an extension before
    /// 0.5.0, by the first word of its reason): both agree.
    #[test]
    fn each_release_cause_writes_the_word_the_ledger_counts_it_by() {
        assert_eq!(Release::Refused("x".into()).cause(), "refused");
        assert_eq!(Release::Failed("x".into()).cause(), "failed");
        assert_eq!(Release::Stopped.cause(), "stopped");
        assert_eq!(
            Release::Refused("rows changed".into()).reason(),
            "refused: rows changed"
        );
        assert_eq!(
            Release::Failed("object store: 503".into()).reason(),
            "archiver: object store: 503"
        );
        let stopped = Release::Stopped.reason();
        assert!(!stopped.starts_with("refused") && !stopped.starts_with("archiver"));
    }
}
