//! `retention.supersessions`: erasures that reach archived rows, one row per archive an erasure
//! may have rows in, and where each stands (DDL and states in `sql/archive.sql`).

use crate::catalog::{optional_one, query_json};
use crate::error::{returned_nothing, Result, RetentionError};
use pgrx::prelude::*;
use serde::Deserialize;

/// Where a supersession stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SupersessionState {
    /// The erasure's predicate is still to be evaluated over the archive's slice.
    Pending,
    /// No archived row matched, or the archive's objects had expired.
    Unaffected,
    /// The rewritten slice is the archive's object; the replaced objects still exist.
    Rewritten,
    /// The replaced objects are deleted.
    Done,
}

impl std::fmt::Display for SupersessionState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SupersessionState::Pending => "pending",
            SupersessionState::Unaffected => "unaffected",
            SupersessionState::Rewritten => "rewritten",
            SupersessionState::Done => "done",
        })
    }
}

/// One supersession, with the archive's object as the index has it now.
#[derive(Debug, Clone, Deserialize)]
pub struct Supersession {
    /// Id.
    pub id: i64,
    /// The archive.
    pub archive_id: i64,
    /// The erasure request it belongs to.
    pub request_ref: String,
    /// The erased table (its oid); the archived rows are read as its rows.
    pub relation: u32,
    /// Its name when the erasure ran.
    pub relation_name: String,
    /// The erasure's predicate.
    pub predicate: String,
    /// The role that erased: the predicate runs with its privileges.
    pub author: u32,
    /// Where it stands.
    pub state: SupersessionState,
    /// The key of the rewritten slice, once rewritten.
    pub object_key: Option<String>,
    /// The key the rewrite replaced, once rewritten.
    pub replaced_key: Option<String>,
    /// BLAKE3 (hex) of the manifest the rewrite replaced, once rewritten.
    pub supersedes: Option<String>,
    /// Rows the rewrite dropped.
    pub erased: Option<i64>,
    /// The archive's slice key now (the newest rewrite's, or the original's).
    pub current_key: String,
    /// Its BLAKE3 (hex).
    pub current_blake3: String,
    /// Its rows.
    pub current_rows: i64,
    /// Its bytes.
    pub current_bytes: i64,
    /// The key a rewrite is written under (`retention._rewrite_key`).
    pub rewrite_key: String,
    /// The archived table's name, as the archive records it.
    pub archive_relation: String,
}

/// A verified rewrite, as the archiver reports it.
pub struct Rewrite<'a> {
    /// The key it replaces (the archive's object when the rewrite was made).
    pub replaced_key: &'a str,
    /// Its slice key.
    pub object_key: &'a str,
    /// Its BLAKE3 (hex).
    pub blake3: &'a str,
    /// Its rows.
    pub rows: i64,
    /// Its bytes.
    pub bytes: i64,
    /// BLAKE3 (hex) of the manifest it replaces.
    pub supersedes: &'a str,
}

impl Supersession {
    /// Supersession `id`, locked until the transaction ends (its changes are made one at a
    /// time, whoever makes them).
    pub fn lock(id: i64) -> Result<Supersession> {
        query_json(
            "SELECT jsonb_build_object('id', s.id, 'archive_id', s.archive_id, 'request_ref', s.request_ref,
                    'relation', s.relation::oid::bigint, 'relation_name', s.relation_name,
                    'predicate', s.predicate, 'author', s.author::oid::bigint, 'state', s.state,
                    'object_key', s.object_key, 'erased', s.erased,
                    'replaced_key', s.replaced_key, 'supersedes', s.supersedes,
                    'current_key', a.object_key, 'current_blake3', a.blake3,
                    'current_rows', a.rows, 'current_bytes', a.bytes,
                    'rewrite_key', retention._rewrite_key(a.original_key, s.id),
                    'archive_relation', a.relation)
               FROM retention.supersessions s
               JOIN retention.archives a ON a.id = s.archive_id
              WHERE s.id = $1
                FOR UPDATE OF s",
            &[id.into()],
        )?
        .ok_or_else(|| {
            RetentionError::invalid(
                format!("supersession {id} does not exist"),
                "No such id in retention.supersessions.",
                "Pass an id from retention.open_supersessions().",
            )
        })
    }

    /// Refuses unless the supersession is in `state`.
    pub fn expect(&self, state: SupersessionState) -> Result<()> {
        if self.state == state {
            return Ok(());
        }
        Err(RetentionError::WrongState {
            message: format!("supersession {} is {}, not {state}", self.id, self.state),
            hint: "See retention.open_supersessions().".into(),
        })
    }

    /// Whether the archive's objects expired, read after locking its record until the
    /// transaction ends: `retention.expire_record` takes the same lock before it marks an
    /// archive expired, so a rewrite is recorded either before an expiry completes (which then
    /// sees it) or after (and sees the expiry here).
    pub fn archive_expired(&self) -> Result<bool> {
        Spi::run_with_args(
            "SELECT 1 FROM retention.archive_records WHERE id = $1 FOR NO KEY UPDATE",
            &[self.archive_id.into()],
        )?;
        // A statement of its own: it reads what committed while the lock was waited for.
        optional_one::<bool, _>(
            "SELECT EXISTS (SELECT 1 FROM retention.archive_expirations WHERE archive_id = $1)",
            &[self.archive_id.into()],
        )?
        .ok_or_else(|| returned_nothing("an archive's expiry"))
    }

    /// A pending supersession with nothing to rewrite: unaffected, for `reason`.
    pub fn mark_unaffected(&self, reason: &str) -> Result<()> {
        Spi::run_with_args(
            "UPDATE retention.supersessions SET state = 'unaffected', finished_at = now(), reason = $2
              WHERE id = $1",
            &[self.id.into(), reason.into()],
        )?;
        Ok(())
    }

    /// Records a verified rewrite: from now on it is the archive's object.
    pub fn mark_rewritten(&self, rewrite: &Rewrite<'_>) -> Result<()> {
        Spi::run_with_args(
            "UPDATE retention.supersessions
                SET state = 'rewritten', replaced_key = $2, object_key = $3, blake3 = $4, rows = $5,
                    bytes = $6, erased = $7, supersedes = $8, rewritten_at = now()
              WHERE id = $1",
            &[
                self.id.into(),
                rewrite.replaced_key.into(),
                rewrite.object_key.into(),
                rewrite.blake3.into(),
                rewrite.rows.into(),
                rewrite.bytes.into(),
                (self.current_rows - rewrite.rows).into(),
                rewrite.supersedes.into(),
            ],
        )?;
        Ok(())
    }

    /// The replaced objects are deleted.
    pub fn mark_done(&self) -> Result<()> {
        Spi::run_with_args(
            "UPDATE retention.supersessions SET state = 'done', finished_at = now() WHERE id = $1",
            &[self.id.into()],
        )?;
        Ok(())
    }
}

/// An erasure of the rows of `relation` (oid, named `relation_name`) matching `predicate`,
/// written by role `author`, for request `request_ref`.
pub struct Erasure<'a> {
    /// The erased table.
    pub relation: u32,
    /// Its name.
    pub relation_name: &'a str,
    /// The predicate.
    pub predicate: &'a str,
    /// The request.
    pub request_ref: &'a str,
    /// The role that erased.
    pub author: u32,
}

impl Erasure<'_> {
    /// Records a pending supersession for every archive that may hold rows of the table (its
    /// batches were of the table or a partition below it, or its policy governed one of
    /// them) and whose objects have not expired; one already recorded for this request and
    /// predicate stays as it is. Returns the supersessions of this erasure still open.
    pub fn supersede_archives(&self) -> Result<i64> {
        Spi::run_with_args(
            "INSERT INTO retention.supersessions (archive_id, request_ref, relation, relation_name, predicate, author)
             SELECT a.id, $2, $1::bigint::oid, $3, $4, $5::bigint::oid
               FROM retention.archive_records a
               JOIN retention.batches b ON b.id = a.batch
              WHERE (b.relation IN (SELECT retention._below($1::bigint::oid))
                     OR EXISTS (SELECT 1 FROM retention.policy_versions v
                                 WHERE v.policy_id = b.policy_id AND v.version = b.policy_version
                                   AND v.relation IN (SELECT retention._below($1::bigint::oid))))
                AND NOT EXISTS (SELECT 1 FROM retention.archive_expirations x WHERE x.archive_id = a.id)
              ORDER BY a.id
             ON CONFLICT (archive_id, request_ref, predicate) DO NOTHING",
            &[
                i64::from(self.relation).into(),
                self.request_ref.into(),
                self.relation_name.into(),
                self.predicate.into(),
                i64::from(self.author).into(),
            ],
        )?;
        optional_one::<i64, _>(
            "SELECT count(*) FROM retention.supersessions
              WHERE request_ref = $1 AND predicate = $2 AND relation = $3::bigint::oid
                AND state IN ('pending', 'rewritten')",
            &[
                self.request_ref.into(),
                self.predicate.into(),
                i64::from(self.relation).into(),
            ],
        )?
        .ok_or_else(|| returned_nothing("count(*)"))
    }
}
