//! The archive index as the operator commands read it (`verify`, `inspect`, `restore`,
//! `sweep-orphans`) and what they record, and this database's archive namespace.

use super::{unknown_state, Db};
use crate::error::Result;

/// A verified archive as the extension recorded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchiveRecord {
    /// Object key of the slice.
    pub object_key: String,
    /// BLAKE3 hex.
    pub blake3: String,
    /// Frames.
    pub rows: i64,
    /// Slice length.
    pub bytes: i64,
}

/// What the index says of an object key (`retention.archive_object_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObjectState {
    /// It is its archive's object now.
    Current,
    /// An erasure's rewrite replaced it.
    Superseded,
}

sql_text!(ObjectState {
    Current => "current",
    Superseded => "superseded",
});

/// An object key's archive, as the index knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectStatus {
    /// Whether the key is the archive's object now.
    pub state: ObjectState,
    /// The archive's object key now.
    pub current_key: String,
}

/// What the catalog references (`retention.archive_object_refs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct References {
    /// Slice keys of every archive record (current, original and replaced).
    pub archived: Vec<String>,
    /// Ids of live (claimed) batches.
    pub live_batches: Vec<String>,
}

/// This database's archive namespace and identity (`retention.archive_namespace`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The namespace.
    pub namespace: String,
    /// The cluster's system identifier.
    pub system_identifier: String,
    /// The database's oid.
    pub database_oid: i64,
    /// The database's name.
    pub database_name: String,
}

/// What a `verify --all` found, as the catalog records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verification {
    /// Recorded archives checked.
    pub checked: i64,
    /// Recorded archives missing from the store.
    pub missing: i64,
    /// Recorded archives that failed verification.
    pub failed: i64,
    /// Objects of the namespace nothing references.
    pub unreferenced: i64,
}

impl Db {
    /// What the index says of an object key; None when no archive knows it.
    pub async fn object_state(&self, key: &str) -> Result<Option<ObjectStatus>> {
        let row = self
            .client
            .query_opt(
                "SELECT state, current_key FROM retention.archive_object_state($1)",
                &[&key],
            )
            .await?;
        row.map(|r| {
            let state: &str = r.get(0);
            Ok(ObjectStatus {
                state: ObjectState::parse(state)
                    .ok_or_else(|| unknown_state("an archive object's state", state))?,
                current_key: r.get(1),
            })
        })
        .transpose()
    }

    /// The archive record of a batch, if it was completed.
    pub async fn archive_record(&self, batch: &str) -> Result<Option<ArchiveRecord>> {
        let row = self
            .client
            .query_opt(
                "SELECT object_key, blake3, rows, bytes FROM retention.archives WHERE batch = $1::text::uuid",
                &[&batch],
            )
            .await?;
        Ok(row.map(|r| ArchiveRecord {
            object_key: r.get(0),
            blake3: r.get(1),
            rows: r.get(2),
            bytes: r.get(3),
        }))
    }

    /// The slice key of a completed batch.
    pub async fn key_of_batch(&self, batch: &str) -> Result<Option<String>> {
        Ok(self.archive_record(batch).await?.map(|r| r.object_key))
    }

    /// The slice keys of every unexpired archive, in the order they were recorded.
    pub async fn unexpired_archive_keys(&self) -> Result<Vec<String>> {
        Ok(self
            .client
            .query(
                "SELECT object_key FROM retention.archives WHERE expired_at IS NULL ORDER BY id",
                &[],
            )
            .await?
            .iter()
            .map(|r| r.get(0))
            .collect())
    }

    /// The slice keys every archive record references.
    pub async fn archived_keys(&self) -> Result<Vec<String>> {
        Ok(self
            .client
            .query_one(
                "SELECT r.archived FROM retention.archive_object_refs() r",
                &[],
            )
            .await?
            .get(0))
    }

    /// What the catalog references now: archived keys and live batches.
    pub async fn references(&self) -> Result<References> {
        let row = self
            .client
            .query_one(
                "SELECT r.archived, r.live_batches FROM retention.archive_object_refs() r",
                &[],
            )
            .await?;
        Ok(References {
            archived: row.get(0),
            live_batches: row.get(1),
        })
    }

    /// Records what a `verify --all` found (read by `retention._missing_archives()`).
    pub async fn record_verification(&self, v: Verification) -> Result<()> {
        self.client
            .execute(
                "SELECT retention.record_archive_verification($1, $2, $3, $4)",
                &[&v.checked, &v.missing, &v.failed, &v.unreferenced],
            )
            .await?;
        Ok(())
    }

    /// Ledgers the objects `sweep-orphans` deleted.
    pub async fn ledger_orphan_objects(
        &self,
        keys: &[String],
        bytes: u64,
        actor: &str,
    ) -> Result<()> {
        self.client
            .execute(
                "SELECT retention.ledger_orphan_objects($1, $2, $3, $4)",
                &[&(keys.len() as i64), &(bytes as i64), &keys, &actor],
            )
            .await?;
        Ok(())
    }

    /// This database's namespace and identity, as the catalog records them.
    pub async fn identity(&self) -> Result<Identity> {
        let row = self
            .client
            .query_one(
                "SELECT namespace, system_identifier, database_oid, database_name FROM retention.archive_namespace()",
                &[],
            )
            .await?;
        Ok(Identity {
            namespace: row.get(0),
            system_identifier: row.get(1),
            database_oid: row.get(2),
            database_name: row.get(3),
        })
    }
}
