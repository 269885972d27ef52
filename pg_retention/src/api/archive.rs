//! The archive protocol as SQL functions, for the `retention_archiver` role. The public names
//! are SQL wrappers in sql/api.sql that pin the output settings (so rows render to the same
//! bytes in every session) and raise our typed errors.

use crate::archive::batch;
use crate::error::{outcome, OrReport};
use pgrx::prelude::*;

/// Claims a batch; `{"ok": uuid-or-null}`.
#[pg_extern(security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn _claim_batch(policy: &str, max_rows: i32, lease: &str, owner: Option<&str>) -> pgrx::JsonB {
    outcome(batch::claim(policy, max_rows, lease, owner))
}

/// Claims a batch and renders its slice from the rows the claim read: one row of
/// (`{"ok": uuid-or-null}` or `{"error": …}`, the slice or NULL).
#[pg_extern(security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn _claim_slice(
    policy: &str,
    max_rows: i32,
    lease: &str,
    owner: Option<&str>,
    resume: bool,
) -> TableIterator<'static, (name!(result, pgrx::JsonB), name!(slice, Option<Vec<u8>>))> {
    let (result, slice) = match batch::claim_with_slice(policy, max_rows, lease, owner, resume) {
        Ok(Some((batch, slice))) => (outcome(Ok(Some(batch))), Some(slice)),
        Ok(None) => (outcome(Ok(None::<String>)), None),
        Err(e) => (outcome(Err::<(), _>(e)), None),
    };
    TableIterator::once((result, slice))
}

/// The manifest of a batch.
#[pg_extern(security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn _batch_manifest(batch: &str, digest: bool) -> pgrx::JsonB {
    outcome(batch::manifest(batch, digest))
}

/// The frames of a batch, in key order.
#[pg_extern(security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn _batch_frames(batch: &str) -> SetOfIterator<'static, Vec<u8>> {
    SetOfIterator::new(batch::batch_frames(batch).or_report())
}

/// The slice of a batch: its frames in key order, concatenated.
#[pg_extern(security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn _batch_slice(batch: &str) -> Vec<u8> {
    batch::batch_slice(batch).or_report()
}

/// Extends a lease; `{"ok": new end}`.
#[pg_extern(security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn _extend_lease(batch: &str, lease: &str) -> pgrx::JsonB {
    outcome(batch::extend_lease(batch, lease))
}

/// Releases a batch; `{"ok": released?}`.
#[pg_extern(security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn _release_batch(batch: &str, reason: &str) -> pgrx::JsonB {
    outcome(batch::release(batch, reason))
}

/// Verifies and prunes a batch; `{"ok": rows deleted}`. It deletes before it verifies: an
/// error comes back as a value, and only `retention._result` raising it (what
/// `retention.complete_batch` does, in the same statement) rolls the deletes back.
#[pg_extern(security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn _complete_batch(
    batch: &str,
    object_key: &str,
    blake3: &str,
    rows: i64,
    bytes: i64,
    owner: Option<&str>,
) -> pgrx::JsonB {
    outcome(batch::complete(
        batch, object_key, blake3, rows, bytes, owner,
    ))
}
