//! Erasure (`retention.erase`, `erase_in_batches`) and the archive supersession steps the
//! archiver calls (`retention.supersession_*`); the SQL wrappers are in `sql/api/erasure.sql`.

use crate::archive::supersede;
use crate::catalog::supersession::Rewrite;
use crate::engine::erase::{erase, Request};
use crate::error::{required, OrReport};
use pgrx::prelude::*;

/// Erases the matching rows of a table: all of them, or at most `batch_rows` (one committed
/// batch of `erase_in_batches`): rows deleted, whether none is left, and the archives whose
/// slices are still to be rewritten without them.
#[pg_extern]
#[search_path(pg_catalog, pg_temp)]
fn _erase(
    relation: Option<pg_sys::Oid>,
    predicate: Option<&str>,
    request_ref: Option<&str>,
    actor: Option<&str>,
    batch_rows: Option<i32>,
) -> TableIterator<
    'static,
    (
        name!(deleted, i64),
        name!(done, bool),
        name!(pending_archives, i64),
    ),
> {
    let erased = crate::identity::entry(|| {
        let req = Request {
            relation: required(relation, "relation")?.to_u32(),
            predicate: required(predicate, "predicate")?,
            request_ref: required(request_ref, "request_ref")?,
            actor: required(actor, "actor")?,
        };
        erase(&req, batch_rows)
    })
    .or_report();
    TableIterator::once((erased.deleted, erased.done, erased.pending_archives))
}

/// `{"ok": [positions]}`: the rows of an archive's slice a pending supersession's erasure
/// matches.
#[pg_extern(security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn _supersession_matches(
    supersession: i64,
    slice: &[u8],
    columns: Vec<Option<String>>,
) -> Vec<i64> {
    crate::identity::refuse_restricted().or_report();
    crate::arrays::without_nulls(columns, "columns")
        .and_then(|columns| supersede::matches(supersession, slice, &columns))
        .or_report()
}

/// `{"ok": changed}`: a pending supersession with nothing to rewrite.
#[pg_extern(security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn _supersession_unaffected(supersession: i64, reason: &str) -> bool {
    crate::identity::refuse_restricted().or_report();
    supersede::unaffected(supersession, reason).or_report()
}

/// `{"ok": recorded}`: a verified rewrite recorded as the archive's object.
#[pg_extern(security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn _supersession_rewritten(
    supersession: i64,
    replaced_key: &str,
    object_key: &str,
    blake3: &str,
    rows: i64,
    bytes: i64,
    supersedes: &str,
) -> bool {
    crate::identity::refuse_restricted().or_report();
    supersede::rewritten(
        supersession,
        &Rewrite {
            replaced_key,
            object_key,
            blake3,
            rows,
            bytes,
            supersedes,
        },
    )
    .or_report()
}

/// `{"ok": changed}`: the replaced objects are deleted; ledgered.
#[pg_extern(security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn _supersession_done(supersession: i64, actor: &str) -> bool {
    crate::identity::refuse_restricted().or_report();
    supersede::done(supersession, actor).or_report()
}

/// The worker's list of erasures still to reach the disk (`engine/scrub.rs`): scrub ids and
/// their tables, oldest first.
#[pg_extern(security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn _scrub_due() -> TableIterator<'static, (name!(id, i64), name!(relation, pg_sys::Oid))> {
    crate::identity::refuse_restricted().or_report();
    let due = crate::catalog::scrub::due().or_report();
    TableIterator::new(
        due.into_iter()
            .map(|(id, relation)| (id, pg_sys::Oid::from(relation))),
    )
}

/// Checks scrub `id` and records it (`vacuumed`: the worker ran VACUUM just before); its
/// status, or NULL when it is closed already.
#[pg_extern(security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn _scrub_check(id: i64, vacuumed: bool) -> Option<String> {
    crate::identity::refuse_restricted().or_report();
    crate::engine::scrub::check(id, vacuumed)
        .or_report()
        .map(|s| s.as_str().to_owned())
}
