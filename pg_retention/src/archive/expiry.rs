//! Archives past their policy's `archive_keep` expire through the archiver's `expire plan`,
//! `prepare` and `apply` (docs/archiver.md). Holds cover archived rows too: an archive whose
//! rows match an active hold is not expired. The archiver reads each candidate's slice from
//! the store and hands it here, where it is checked against the archive's record (its bytes
//! are untrusted) and its rows are evaluated against the holds, each as its placer, like the
//! rows of the table.

use super::side_load::{side_load, Recorded};
use crate::catalog::{active_holds, Policy, RelationInfo, StoredArchive};
use crate::engine::eligible::Eligibility;
use crate::error::OrReport;
use crate::error::{Result, RetentionError};
use pgrx::prelude::*;

/// The ids of the active holds that match at least one row of archive `archive_id`, whose
/// slice is `slice` and whose manifest names its columns `columns` (in frame order).
fn holds_over(archive_id: i64, slice: &[u8], columns: &[String]) -> Result<Vec<i64>> {
    let archive = StoredArchive::by_id(archive_id)?.ok_or_else(|| {
        RetentionError::invalid(
            format!("archive {archive_id} does not exist"),
            "No such id in retention.archives.",
            "Pass an id from retention.archives.",
        )
    })?;
    let policy = Policy::by_name(&archive.policy)?;
    // The rows' own table, or the policy's when it is gone (a leaf dropped whole).
    let table = if archive.relation_exists {
        archive.relation
    } else {
        policy.relation
    };
    let rel = RelationInfo::load(table, &policy.relation_name)?;
    let loaded = side_load(
        slice,
        &Recorded {
            label: format!("of archive {archive_id}"),
            blake3: &archive.blake3,
            rows: archive.rows,
            bytes: archive.bytes,
        },
        columns,
        &rel,
    )?;
    let holds = active_holds(table)?;
    if holds.is_empty() || loaded.rows == 0 {
        return Ok(vec![]);
    }
    let elig = Eligibility::new(&policy, &rel, &holds)?;
    let counts = elig.hold_counts(
        &loaded.source,
        &format!("{}::oid", archive.relation),
        &[loaded.values.into()],
    )?;
    Ok(counts
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .map(|(id, _)| id)
        .collect())
}

/// The active holds that match rows of archive `archive_id` (given its slice, read from the
/// store, and its manifest's column names): an archive they match does not expire.
#[pg_extern(security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn _archive_holds(archive_id: i64, slice: &[u8], columns: Vec<Option<String>>) -> Vec<i64> {
    crate::identity::refuse_restricted().or_report();
    crate::arrays::without_nulls(columns, "columns")
        .and_then(|columns| holds_over(archive_id, slice, &columns))
        .or_report()
}
