//! The archive protocol as SQL functions, for the `retention_archiver` role. The public names
//! are SQL wrappers in sql/api/archive.sql that pin the output settings (so rows render to the same
//! bytes in every session); errors are raised here, with their own SQLSTATEs.

use crate::archive::{claim, handover, lease, prune, slice};
use crate::error::{required, OrReport};
use pgrx::prelude::*;

/// Claims a batch; its id, or NULL when nothing is claimable.
#[pg_extern]
#[search_path(pg_catalog, pg_temp)]
fn _claim_batch(
    policy: Option<&str>,
    max_rows: Option<i32>,
    lease: Option<&str>,
    owner: Option<&str>,
) -> Option<String> {
    crate::identity::entry(|| {
        claim::claim(
            required(policy, "policy")?,
            required(max_rows, "max_rows")?,
            required(lease, "lease")?,
            owner,
        )
    })
    .or_report()
}

/// [`claim::claim_with_slice`] with the SQL arguments of `_claim_slice` and `_claim_next`.
fn claim_with_slice(
    policy: Option<&str>,
    max_rows: Option<i32>,
    lease: Option<&str>,
    owner: Option<&str>,
    resume: Option<bool>,
) -> crate::error::Result<Option<(String, Vec<u8>, bool)>> {
    claim::claim_with_slice(
        required(policy, "policy")?,
        required(max_rows, "max_rows")?,
        required(lease, "lease")?,
        owner,
        required(resume, "resume")?,
    )
}

/// Claims a batch and renders its slice from the rows the claim read: one row of (the batch
/// or NULL, the slice or NULL, whether claiming again at once may find more).
#[pg_extern]
#[search_path(pg_catalog, pg_temp)]
fn _claim_slice(
    policy: Option<&str>,
    max_rows: Option<i32>,
    lease: Option<&str>,
    owner: Option<&str>,
    resume: Option<bool>,
) -> TableIterator<
    'static,
    (
        name!(batch, Option<String>),
        name!(slice, Option<Vec<u8>>),
        name!(more, bool),
    ),
> {
    let claimed =
        crate::identity::entry(|| claim_with_slice(policy, max_rows, lease, owner, resume))
            .or_report();
    TableIterator::once(match claimed {
        Some((batch, slice, more)) => (Some(batch), Some(slice), more),
        None => (None, None, false),
    })
}

/// Claims a batch as `_claim_slice` does, but keeps its slice in this backend for
/// `retention.claimed_slice` instead of returning it through the SQL wrapper's copies: one row
/// of (batch, bytes, more, manifest), all NULL but `more` (false) when nothing is claimable.
/// The manifest is `retention.batch_manifest(batch, false)`'s: one call less.
#[pg_extern]
#[search_path(pg_catalog, pg_temp)]
// pgrx needs the named tuple spelled out in the signature to name the result columns.
#[allow(clippy::type_complexity)]
fn _claim_next(
    policy: Option<&str>,
    max_rows: Option<i32>,
    lease: Option<&str>,
    owner: Option<&str>,
    resume: Option<bool>,
) -> TableIterator<
    'static,
    (
        name!(batch, Option<String>),
        name!(bytes, Option<i64>),
        name!(more, bool),
        name!(manifest, Option<pgrx::JsonB>),
    ),
> {
    let next = crate::identity::entry(|| {
        let claimed = claim_with_slice(policy, max_rows, lease, owner, resume)?;
        let Some((batch, slice, more)) = claimed else {
            return Ok((None, None, false, None));
        };
        let manifest = serde_json::to_value(slice::manifest(&batch, false)?)?;
        let bytes = i64::try_from(slice.len()).unwrap_or(i64::MAX);
        handover::keep(&batch, slice);
        Ok((Some(batch), Some(bytes), more, Some(pgrx::JsonB(manifest))))
    })
    .or_report();
    TableIterator::once(next)
}

/// The slice `retention.claim_next` kept for batch `batch` in this session, in pieces of
/// [`handover::PIECE`] bytes (in order; concatenated they are the slice), once. No rows when
/// this session did not claim it as the role it acts as now, or took it already.
#[pg_extern(strict)]
fn claimed_slice(batch: pgrx::Uuid) -> SetOfIterator<'static, Vec<u8>> {
    let slice = handover::take(&batch.to_string()).unwrap_or_default();
    let pieces = slice.len().div_ceil(handover::PIECE);
    SetOfIterator::new((0..pieces).map(move |i| {
        let start = i * handover::PIECE;
        slice[start..(start + handover::PIECE).min(slice.len())].to_vec()
    }))
}

/// The manifest of a batch.
#[pg_extern(security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn _batch_manifest(batch: &str, digest: bool) -> pgrx::JsonB {
    crate::identity::refuse_restricted().or_report();
    slice::manifest(batch, digest)
        .and_then(|m| Ok(pgrx::JsonB(serde_json::to_value(m)?)))
        .or_report()
}

/// The frames of a batch, in key order.
#[pg_extern(security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn _batch_frames(batch: &str) -> SetOfIterator<'static, Vec<u8>> {
    crate::identity::refuse_restricted().or_report();
    SetOfIterator::new(slice::batch_frames(batch).or_report())
}

/// The slice of a batch: its frames in key order, concatenated.
#[pg_extern(security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn _batch_slice(batch: &str) -> Vec<u8> {
    crate::identity::refuse_restricted().or_report();
    slice::batch_slice(batch).or_report()
}

/// Extends a lease; returns its new end.
#[pg_extern]
#[search_path(pg_catalog, pg_temp)]
fn _extend_lease(batch: &str, lease: &str) -> String {
    crate::identity::entry(|| lease::extend(batch, lease)).or_report()
}

/// Releases a batch (`cause`: refused, failed or stopped, as the archiver says); whether it
/// was released (false: it was not claimed any more).
#[pg_extern]
#[search_path(pg_catalog, pg_temp)]
fn _release_batch(batch: Option<&str>, reason: Option<&str>, cause: Option<&str>) -> bool {
    crate::identity::entry(|| {
        let cause = cause.map(lease::ReleaseCause::parse).transpose()?;
        lease::release(
            required(batch, "batch")?,
            required(reason, "reason")?,
            cause,
        )
    })
    .or_report()
}

/// Verifies and prunes a batch; returns the rows deleted. A refused prune has undone its
/// deletes (a subtransaction) before its error is raised.
#[pg_extern]
#[search_path(pg_catalog, pg_temp)]
fn _complete_batch(
    batch: Option<&str>,
    object_key: Option<&str>,
    blake3: Option<&str>,
    rows: Option<i64>,
    bytes: Option<i64>,
    owner: Option<&str>,
) -> i64 {
    crate::identity::entry(|| {
        prune::complete(
            required(batch, "batch")?,
            required(object_key, "object_key")?,
            required(blake3, "blake3")?,
            required(rows, "rows")?,
            required(bytes, "bytes")?,
            owner,
        )
    })
    .or_report()
}

/// Deletes the rows of a two-window policy's archived batches that are past its
/// `delete_after` (archive/deferred.rs); returns the rows deleted (0 for other policies).
#[pg_extern]
#[search_path(pg_catalog, pg_temp)]
fn _prune_archived(policy: &str, max_batches: i32) -> i64 {
    crate::identity::entry(|| crate::archive::deferred::prune_archived(policy, max_batches))
        .or_report()
}
