//! The archive protocol as SQL functions, for the `retention_archiver` role. The public names
//! are SQL wrappers in sql/api.sql that pin the output settings (so rows render to the same
//! bytes in every session) and raise our typed errors.

use crate::archive::{claim, handover, lease, prune, slice};
use crate::error::OrReport;
use crate::error::{outcome, required};
use pgrx::prelude::*;

/// Claims a batch; `{"ok": uuid-or-null}`.
#[pg_extern]
#[search_path(pg_catalog, pg_temp)]
fn _claim_batch(
    policy: Option<&str>,
    max_rows: Option<i32>,
    lease: Option<&str>,
    owner: Option<&str>,
) -> pgrx::JsonB {
    outcome(crate::identity::entry(|| {
        claim::claim(
            required(policy, "policy")?,
            required(max_rows, "max_rows")?,
            required(lease, "lease")?,
            owner,
        )
    }))
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

/// Claims a batch and renders its slice from the rows the claim read: one row of
/// (`{"ok": uuid-or-null}` or `{"error": …}`, the slice or NULL, whether claiming again at once
/// may find more).
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
        name!(result, pgrx::JsonB),
        name!(slice, Option<Vec<u8>>),
        name!(more, bool),
    ),
> {
    let claimed =
        crate::identity::entry(|| claim_with_slice(policy, max_rows, lease, owner, resume));
    let (result, slice, more) = match claimed {
        Ok(Some((batch, slice, more))) => (outcome(Ok(Some(batch))), Some(slice), more),
        Ok(None) => (outcome(Ok(None::<String>)), None, false),
        Err(e) => (outcome(Err::<(), _>(e)), None, false),
    };
    TableIterator::once((result, slice, more))
}

/// Claims a batch as `_claim_slice` does, but keeps its slice in this backend for
/// `retention.claimed_slice` instead of returning it through the SQL wrapper's copies:
/// `{"ok": {"batch", "bytes", "more", "manifest"}}` (`{"ok": null}` when nothing is
/// claimable). The manifest is `retention.batch_manifest(batch, false)`'s: one call less.
#[pg_extern]
#[search_path(pg_catalog, pg_temp)]
fn _claim_next(
    policy: Option<&str>,
    max_rows: Option<i32>,
    lease: Option<&str>,
    owner: Option<&str>,
    resume: Option<bool>,
) -> pgrx::JsonB {
    outcome(crate::identity::entry(|| {
        let claimed = claim_with_slice(policy, max_rows, lease, owner, resume)?;
        let Some((batch, slice, more)) = claimed else {
            return Ok(None);
        };
        let manifest = slice::manifest(&batch, false)?;
        let bytes = slice.len();
        handover::keep(&batch, slice);
        Ok(Some(serde_json::json!({
            "batch": batch, "bytes": bytes, "more": more, "manifest": manifest
        })))
    }))
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
    outcome(slice::manifest(batch, digest))
}

/// The frames of a batch, in key order: rows of (NULL, frame), or one row of (`{"error": …}`,
/// NULL) that `retention.batch_frames` raises with its own SQLSTATE (raised here, an RT code
/// would come out as XX000).
#[pg_extern(security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn _batch_frames(
    batch: &str,
) -> TableIterator<
    'static,
    (
        name!(error, Option<pgrx::JsonB>),
        name!(frame, Option<Vec<u8>>),
    ),
> {
    crate::identity::refuse_restricted().or_report();
    match slice::batch_frames(batch) {
        Ok(frames) => TableIterator::new(frames.into_iter().map(|f| (None, Some(f)))),
        Err(e) => TableIterator::once((Some(outcome(Err::<(), _>(e))), None)),
    }
}

/// The slice of a batch (its frames in key order, concatenated): one row of (`{"ok": null}`,
/// slice) or (`{"error": …}`, NULL), raised by `retention.batch_slice`.
#[pg_extern(security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn _batch_slice(
    batch: &str,
) -> TableIterator<'static, (name!(result, pgrx::JsonB), name!(slice, Option<Vec<u8>>))> {
    crate::identity::refuse_restricted().or_report();
    let (result, slice) = match slice::batch_slice(batch) {
        Ok(slice) => (outcome(Ok(())), Some(slice)),
        Err(e) => (outcome(Err::<(), _>(e)), None),
    };
    TableIterator::once((result, slice))
}

/// Extends a lease; `{"ok": new end}`.
#[pg_extern]
#[search_path(pg_catalog, pg_temp)]
fn _extend_lease(batch: &str, lease: &str) -> pgrx::JsonB {
    outcome(crate::identity::entry(|| lease::extend(batch, lease)))
}

/// Releases a batch (`cause`: refused, failed or stopped, as the archiver says); `{"ok":
/// released?}`.
#[pg_extern]
#[search_path(pg_catalog, pg_temp)]
fn _release_batch(batch: Option<&str>, reason: Option<&str>, cause: Option<&str>) -> pgrx::JsonB {
    outcome(crate::identity::entry(|| {
        let cause = cause.map(lease::ReleaseCause::parse).transpose()?;
        lease::release(
            required(batch, "batch")?,
            required(reason, "reason")?,
            cause,
        )
    }))
}

/// Verifies and prunes a batch; `{"ok": rows deleted}` or `{"error": …}`. A refused prune has
/// already undone its deletes (a subtransaction) when its error comes back as a value.
#[pg_extern]
#[search_path(pg_catalog, pg_temp)]
fn _complete_batch(
    batch: Option<&str>,
    object_key: Option<&str>,
    blake3: Option<&str>,
    rows: Option<i64>,
    bytes: Option<i64>,
    owner: Option<&str>,
) -> pgrx::JsonB {
    outcome(crate::identity::entry(|| {
        prune::complete(
            required(batch, "batch")?,
            required(object_key, "object_key")?,
            required(blake3, "blake3")?,
            required(rows, "rows")?,
            required(bytes, "bytes")?,
            owner,
        )
    }))
}
