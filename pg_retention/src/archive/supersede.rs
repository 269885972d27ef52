//! Archive supersession: erasure reaches archived rows. For each archive an erasure may have
//! rows in (`catalog/supersession.rs`), an archiver reads the archive's slice and hands it
//! here; the erasure's predicate is evaluated over its rows, side-loaded as rows of the erased
//! table (`side_load.rs`), as the role that erased. The archiver then writes the slice without
//! the matching rows under new keys, reads it back and verifies it, records it
//! ([`rewritten`]: from then on it is the archive's object), deletes the objects it replaces,
//! and says so ([`done`]: ledgered `supersede`). Every step is recorded only after the one
//! before it succeeded, so a failure at any step leaves the original in place and the
//! supersession open, and the next pass goes on from where it stopped.

use super::side_load::{side_load, Recorded, ORDINAL};
use crate::catalog::supersession::{Rewrite, Supersession, SupersessionState};
use crate::catalog::{query_json, LedgerEntry, LedgerMethod, RelationInfo};
use crate::error::{returned_nothing, Result, RetentionError};
use crate::sql_text::{ident, predicate};
use serde_json::json;

/// The 0-based positions of the rows of `slice` (the archive's object now; its manifest names
/// its columns `columns`) that supersession `id`'s erasure matches.
pub fn matches(id: i64, slice: &[u8], columns: &[String]) -> Result<Vec<i64>> {
    let s = Supersession::lock(id)?;
    s.expect(SupersessionState::Pending)?;
    let rel = RelationInfo::load(s.relation, &s.relation_name)?;
    let loaded = side_load(
        slice,
        &Recorded {
            label: format!("of archive {} (supersession {id})", s.archive_id),
            blake3: &s.current_blake3,
            rows: s.current_rows,
            bytes: s.current_bytes,
        },
        columns,
        &rel,
    )?;
    if loaded.rows == 0 {
        return Ok(vec![]);
    }
    let sql = format!(
        "SELECT coalesce(jsonb_agg(t.{n} - 1 ORDER BY t.{n}), '[]') FROM ({source}) t WHERE {predicate}",
        n = ident(ORDINAL),
        source = loaded.source,
        predicate = predicate(&s.predicate),
    );
    crate::author::run_as(s.author, || {
        query_json::<Vec<i64>>(&sql, &[loaded.values.into()])?
            .ok_or_else(|| returned_nothing("an erasure's archived matches"))
    })
}

/// A pending supersession with nothing to rewrite (no row matched, or the objects expired).
/// False when it was marked so already.
pub fn unaffected(id: i64, reason: &str) -> Result<bool> {
    let s = Supersession::lock(id)?;
    if s.state == SupersessionState::Unaffected {
        return Ok(false);
    }
    s.expect(SupersessionState::Pending)?;
    s.mark_unaffected(reason)?;
    Ok(true)
}

/// Records a verified rewrite of a pending supersession. False when this rewrite was recorded
/// already (a retry after a crash, or another archiver).
pub fn rewritten(id: i64, rewrite: &Rewrite<'_>) -> Result<bool> {
    let s = Supersession::lock(id)?;
    if matches!(
        s.state,
        SupersessionState::Rewritten | SupersessionState::Done
    ) && s.object_key.as_deref() == Some(rewrite.object_key)
    {
        return Ok(false);
    }
    s.expect(SupersessionState::Pending)?;
    // An expired archive's objects were deleted (the ones the expiry found): a rewrite
    // recorded now would be an object of an expired archive that nothing deletes.
    if s.archive_expired()? {
        return Err(RetentionError::ExpiryConflict {
            message: format!(
                "archive {} expired: a rewrite is not recorded for it (supersession {id})",
                s.archive_id
            ),
            detail: "An expire operation deleted the archive's objects after the rewrite was read from them.".into(),
            hint: "Delete the rewrite's objects and mark the supersession unaffected (retention.supersession_unaffected): the erased rows left the store with the archive.".into(),
        });
    }
    let refuse = |reason: String| RetentionError::ArchiveMismatch {
        batch: format!("of archive {} (supersession {id})", s.archive_id),
        reason,
    };
    if rewrite.replaced_key != s.current_key {
        return Err(refuse(format!(
            "it replaces {}, but the archive's object is {}",
            rewrite.replaced_key, s.current_key
        )));
    }
    if rewrite.object_key != s.rewrite_key {
        return Err(refuse(format!(
            "a rewrite is written under {}, not {}",
            s.rewrite_key, rewrite.object_key
        )));
    }
    if rewrite.rows < 0 || rewrite.rows >= s.current_rows || rewrite.bytes < 0 {
        return Err(refuse(format!(
            "a rewrite drops rows: {} of {} rows, {} bytes",
            rewrite.rows, s.current_rows, rewrite.bytes
        )));
    }
    for (what, digest) in [
        ("blake3", rewrite.blake3),
        ("supersedes", rewrite.supersedes),
    ] {
        if digest.len() != 64 || !digest.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(RetentionError::invalid(
                format!("{what} must be 64 hex digits"),
                format!("Got {digest:?}."),
                "Pass the BLAKE3 digest in hex.",
            ));
        }
    }
    s.mark_rewritten(rewrite)?;
    Ok(true)
}

/// The objects a rewrite replaced are deleted: the supersession is done, and ledgered. False
/// when it was done already.
pub fn done(id: i64, actor: &str) -> Result<bool> {
    let s = Supersession::lock(id)?;
    if s.state == SupersessionState::Done {
        return Ok(false);
    }
    s.expect(SupersessionState::Rewritten)?;
    s.mark_done()?;
    LedgerEntry {
        method: LedgerMethod::Supersede,
        policy: None,
        relation: Some(&s.archive_relation),
        rows: s.erased.unwrap_or(0),
        hold_ids: vec![],
        actor,
        run_id: None,
        detail: json!({
            "request_ref": s.request_ref, "supersession": s.id,
            "replaced_key": s.replaced_key, "supersedes": s.supersedes,
            "object_key": s.current_key, "blake3": s.current_blake3, "rows": s.current_rows,
        }),
    }
    .append_with_archive(s.archive_id)?;
    Ok(true)
}
