//! `retention.erasure_scrubs`: the tables (leaves) an erasure deleted rows from, until the
//! deleted row versions are gone from their pages. A row is written by the erasure
//! (`engine/erase.rs`), in its transaction; the database worker checks it (`engine/scrub.rs`)
//! and stamps it when nothing erased is left.

use crate::catalog::{optional_one, query_json};
use crate::error::{returned_nothing, Result};
use pgrx::prelude::*;
use serde::Deserialize;

/// Scrubs a worker's visit looks at, at most.
pub const PER_VISIT: i64 = 16;

/// Where a scrub stands, as `status` records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Not checked yet.
    Pending,
    /// A transaction older than the erasure (or a replication slot, or a standby's feedback)
    /// still sees the erased versions: no VACUUM can remove them yet.
    Waiting,
    /// Erased versions are left in the pages, though VACUUM may remove them.
    Left,
    /// No erased version is left: nothing reads them through the table any more.
    Unreadable,
    /// The table is gone (dropped): its files went with it.
    Dropped,
    /// The table is not stored by the heap access method: its pages cannot be checked, and it
    /// is not checked again.
    Unverifiable,
}

impl Status {
    /// The value of the `status` column.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pending => "pending",
            Status::Waiting => "waiting",
            Status::Left => "left",
            Status::Unreadable => "unreadable",
            Status::Dropped => "dropped",
            Status::Unverifiable => "unverifiable",
        }
    }

    /// Whether the scrub is over.
    pub fn is_final(self) -> bool {
        matches!(self, Status::Unreadable | Status::Dropped)
    }
}

/// A scrub still open.
#[derive(Debug, Deserialize)]
pub struct Scrub {
    /// Its id.
    pub id: i64,
    /// The erasure request it belongs to.
    pub request_ref: String,
    /// The table (leaf) the rows were erased from.
    pub relation: u32,
    /// Its name when the rows were erased.
    pub relation_name: String,
    /// The first transaction id after the erasure committed: every version the erasure
    /// deleted died before it.
    pub horizon: u64,
}

/// Records that `request_ref` erased `rows` rows of table `relation` (named `name`): its scrub
/// opens again if an earlier call of the same request had closed it.
pub fn record(request_ref: &str, relation: u32, name: &str, rows: i64) -> Result<()> {
    Spi::run_with_args(
        "INSERT INTO retention.erasure_scrubs (request_ref, relation, relation_name, erased, status)
         VALUES ($1, $2::bigint::oid, $3, $4, $5)
         ON CONFLICT (request_ref, relation) DO UPDATE
            SET erased = erasure_scrubs.erased + EXCLUDED.erased, requested_at = now(),
                horizon = NULL, status = EXCLUDED.status, unreadable_at = NULL,
                left_versions = NULL",
        &[
            request_ref.into(),
            i64::from(relation).into(),
            name.into(),
            rows.into(),
            Status::Pending.as_str().into(),
        ],
    )?;
    Ok(())
}

/// The open scrubs (id, table), oldest first, at most [`PER_VISIT`]; each gets its horizon the first time
/// it is read here. The erasure that wrote the row has committed (its row is visible), so
/// every transaction id it used is below the snapshot's `xmax`.
pub fn due() -> Result<Vec<(i64, u32)>> {
    Spi::run(
        "UPDATE retention.erasure_scrubs
            SET horizon = pg_catalog.pg_snapshot_xmax(pg_catalog.pg_current_snapshot())
          WHERE horizon IS NULL AND unreadable_at IS NULL",
    )?;
    Ok(query_json::<Vec<(i64, u32)>>(
        "SELECT coalesce(jsonb_agg(jsonb_build_array(id, relation::bigint) ORDER BY id), '[]')
           FROM (SELECT id, relation FROM retention.erasure_scrubs
                  WHERE unreadable_at IS NULL AND status <> 'unverifiable'
                  ORDER BY id LIMIT $1) d",
        &[PER_VISIT.into()],
    )?
    .unwrap_or_default())
}

/// Scrub `id` if it is still open, locked until the transaction ends.
pub fn take(id: i64) -> Result<Option<Scrub>> {
    query_json(
        "SELECT jsonb_build_object('id', id, 'request_ref', request_ref,
                    'relation', relation::bigint, 'relation_name', relation_name,
                    'horizon', horizon::text::numeric)
           FROM retention.erasure_scrubs
          WHERE id = $1 AND unreadable_at IS NULL AND horizon IS NOT NULL
            FOR UPDATE",
        &[id.into()],
    )
}

/// Records a check of scrub `id`: its status, the erased versions left (when counted), and
/// whether a VACUUM ran before it. A final status stamps `unreadable_at`.
pub fn checked(id: i64, status: Status, left: Option<i64>, vacuumed: bool) -> Result<()> {
    optional_one::<i64, _>(
        "UPDATE retention.erasure_scrubs
            SET status = $2, left_versions = $3, checks = checks + 1,
                vacuums = vacuums + $4::int, checked_at = now(),
                unreadable_at = CASE WHEN $5 THEN now() END
          WHERE id = $1
          RETURNING id",
        &[
            id.into(),
            status.as_str().into(),
            left.into(),
            i32::from(vacuumed).into(),
            status.is_final().into(),
        ],
    )?
    .ok_or_else(|| returned_nothing("the scrub's update"))?;
    Ok(())
}
