//! The check that gates every archive delete, made inside the deleting transaction: the rows a
//! batch claimed, as they are now, must be exactly the rows at their claim-time places, in the
//! claim's order, and render to the slice the archiver wrote and read back (same rows, bytes
//! and BLAKE3). Any mismatch is an error, which undoes the prune's deletes with it.

use crate::catalog::{Batch, RelationInfo};
use crate::error::{Result, RetentionError};
use crate::render::Rendered;
use crate::tid::Tid;

/// What the archiver says it wrote and read back.
pub struct Archived<'a> {
    /// The slice's BLAKE3 (hex).
    pub blake3: &'a str,
    /// Rows in the slice.
    pub rows: i64,
    /// Bytes in the slice.
    pub bytes: i64,
}

fn mismatch(b: &Batch, reason: String) -> RetentionError {
    RetentionError::ArchiveMismatch {
        batch: b.id.clone(),
        reason,
    }
}

/// The rows found at a batch's claim-time `ctids`, put back in the claim's (key) order. A row
/// that changed since (an update writes a new version elsewhere), vanished or was moved by a
/// table rewrite is refused, and so is any other row now in its place (its key differs).
pub fn in_claim_order(
    b: &Batch,
    rel: &RelationInfo,
    keys: &[Option<String>],
    ctids: &[Tid],
    found: Rendered,
) -> Result<Rendered> {
    // Rows come in the scan's order; the slice is in key order, which is the claim's order.
    let rendered = found.reordered(ctids, rel.pk.len()).map_err(|found| {
        let present: std::collections::HashSet<&Tid> = found.places.iter().collect();
        let gone = ctids.iter().filter(|c| !present.contains(c)).count();
        mismatch(
            b,
            format!(
                "{gone} of its {} rows changed, moved or vanished since the claim",
                b.rows
            ),
        )
    })?;
    if rendered.keys != keys {
        return Err(mismatch(
            b,
            "rows now at its rows' places have other keys: the table was rewritten since the claim"
                .into(),
        ));
    }
    Ok(rendered)
}

/// Refuses unless the batch's rows, as they are now and in the claim's order, make exactly
/// the archived slice.
pub fn matches_archive(b: &Batch, now: &Rendered, archived: &Archived<'_>) -> Result<()> {
    let (digest, n, nbytes) = now.summary();
    if n as i64 != b.rows {
        return Err(mismatch(
            b,
            format!(
                "{} of its {} rows vanished since the claim",
                b.rows - n as i64,
                b.rows
            ),
        ));
    }
    let Archived {
        blake3,
        rows,
        bytes,
    } = *archived;
    if n as i64 != rows || nbytes as i64 != bytes {
        return Err(mismatch(b, format!("the archive reports {rows} rows and {bytes} bytes, the rows now make {n} rows and {nbytes} bytes")));
    }
    if digest != blake3 {
        return Err(mismatch(b, format!("the rows now hash to {digest}, the archive to {blake3}: rows changed since they were archived")));
    }
    Ok(())
}
