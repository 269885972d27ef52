//! An erasure's supersessions of archived slices (`crate::supersede` does the work): the open
//! ones, which rows of a slice the erasure matches, and each outcome recorded.

use super::{unknown_state, Db, Sqlstate};
use crate::error::Result;

/// The state of an open supersession (`retention.supersessions.state`; the closed ones,
/// `unaffected` and `done`, are never listed open).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenState {
    /// Nothing is rewritten yet.
    Pending,
    /// The rewrite is recorded; the replaced slice is still to be deleted.
    Rewritten,
}

sql_text!(OpenState {
    Pending => "pending",
    Rewritten => "rewritten",
});

/// An open supersession as the index lists it (`retention.open_supersessions`).
pub struct Open {
    /// Id.
    pub id: i64,
    /// The archive.
    pub archive_id: i64,
    /// Where it is.
    pub state: OpenState,
    /// The archive's slice key now.
    pub object_key: String,
    /// BLAKE3 (hex) of the archive's slice now.
    pub blake3: String,
    /// Rows of the archive's slice now.
    pub rows: i64,
    /// Bytes of the archive's slice now.
    pub bytes: i64,
    /// For a rewritten one: the slice key it replaced, to delete.
    pub replaced_key: Option<String>,
    /// Where the rewrite goes.
    pub rewrite_key: String,
    /// The archive's objects expired: nothing is left to rewrite.
    pub expired: bool,
    /// The archive's policy (the label its failures are counted under).
    pub policy: String,
}

/// A verified rewrite, as it is recorded.
pub struct Rewrite<'a> {
    /// The slice key it replaces.
    pub replaced_key: &'a str,
    /// The rewrite's slice key.
    pub object_key: &'a str,
    /// Its BLAKE3 (hex).
    pub blake3: &'a str,
    /// Its rows.
    pub rows: u64,
    /// Its bytes.
    pub bytes: u64,
    /// BLAKE3 (hex) of the manifest it supersedes.
    pub supersedes: &'a str,
}

/// What recording a rewrite did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RewriteRecorded {
    /// The rewrite is the archive's object now.
    Recorded,
    /// Refused: an expire operation marked the archive expired since it was listed (RT504).
    ArchiveExpired,
}

impl Db {
    /// The open supersessions, oldest first, one per archive (`retention.open_supersessions`).
    pub async fn open_supersessions(&self, max: i32) -> Result<Vec<Open>> {
        let rows = self
            .client
            .query(
                "SELECT id, archive_id, state, object_key, blake3, rows, bytes, replaced_key, rewrite_key, expired, policy
                   FROM retention.open_supersessions($1)",
                &[&max],
            )
            .await?;
        rows.iter()
            .map(|r| {
                let state: &str = r.get(2);
                Ok(Open {
                    id: r.get(0),
                    archive_id: r.get(1),
                    state: OpenState::parse(state)
                        .ok_or_else(|| unknown_state("an open supersession's state", state))?,
                    object_key: r.get(3),
                    blake3: r.get(4),
                    rows: r.get(5),
                    bytes: r.get(6),
                    replaced_key: r.get(7),
                    rewrite_key: r.get(8),
                    expired: r.get(9),
                    policy: r.get(10),
                })
            })
            .collect()
    }

    /// The 0-based positions of the slice's rows that supersession `id`'s erasure matches.
    pub async fn supersession_matches(
        &self,
        id: i64,
        slice: &[u8],
        columns: &[String],
    ) -> Result<Vec<i32>> {
        self.value(
            "SELECT retention.supersession_matches($1, $2, $3)",
            &[&id, &slice, &columns],
        )
        .await
    }

    /// Supersession `id` had nothing to rewrite.
    pub async fn supersession_unaffected(&self, id: i64, reason: &str) -> Result<()> {
        self.client
            .execute(
                "SELECT retention.supersession_unaffected($1, $2)",
                &[&id, &reason],
            )
            .await?;
        Ok(())
    }

    /// Records supersession `id`'s verified rewrite.
    pub async fn supersession_rewritten(
        &self,
        id: i64,
        w: &Rewrite<'_>,
    ) -> Result<RewriteRecorded> {
        let (rows, bytes) = (w.rows as i64, w.bytes as i64);
        let result = self
            .client
            .execute(
                "SELECT retention.supersession_rewritten($1, $2, $3, $4, $5, $6, $7)",
                &[
                    &id,
                    &w.replaced_key,
                    &w.object_key,
                    &w.blake3,
                    &rows,
                    &bytes,
                    &w.supersedes,
                ],
            )
            .await;
        match result {
            Ok(_) => Ok(RewriteRecorded::Recorded),
            Err(e) if Sqlstate::of(&e) == Some(Sqlstate::ExpiryConflict) => {
                Ok(RewriteRecorded::ArchiveExpired)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Supersession `id`'s replaced objects are deleted.
    pub async fn supersession_done(&self, id: i64, actor: &str) -> Result<()> {
        self.client
            .execute("SELECT retention.supersession_done($1, $2)", &[&id, &actor])
            .await?;
        Ok(())
    }
}
