//! The check that gates every archive delete, made inside the deleting transaction. A claim
//! renders its rows into the slice and freezes, for each row, its key, its place (ctid) and the
//! transaction that wrote that version (xmin), with the table's relfilenode and the slice's
//! BLAKE3. A prune deletes a row only when the deleted tuple is that very version: the same
//! place, xmin and key, in the same relfilenode, and the archiver's read-back slice is the one
//! the claim rendered (same rows, bytes and BLAKE3). PostgreSQL never changes a tuple version
//! in place, so that version's contents are the ones archived (docs/reliability.md). Any
//! mismatch is an error, which undoes the prune's deletes with it.
use crate::catalog::{Batch, ClaimedRows, RelationInfo};
use crate::error::{Result, RetentionError};
use crate::render::Rendered;
use crate::render::Version;
use crate::tid::Tid;
use pgrx::prelude::*;

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
    let rendered = found.reordered(ctids, rel.key_arity()).map_err(|found| {
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

/// Refuses unless the archiver's slice is the one the claim rendered: same rows, bytes and
/// BLAKE3 (the archiver checked the BLAKE3 of what it read back against the same digest).
pub fn matches_claim(b: &Batch, archived: &Archived<'_>) -> Result<()> {
    let (Some(digest), Some(nbytes)) = (b.blake3.as_deref(), b.bytes) else {
        return Err(mismatch(
            b,
            "it was claimed before 0.4.0 and recorded no slice digest: release it and claim again"
                .into(),
        ));
    };
    let Archived {
        blake3,
        rows,
        bytes,
    } = *archived;
    if rows != b.rows || bytes != nbytes {
        return Err(mismatch(b, format!("the archive reports {rows} rows and {bytes} bytes, the claim rendered {} rows and {nbytes} bytes", b.rows)));
    }
    if digest != blake3 {
        return Err(mismatch(
            b,
            format!("the archive hashes to {blake3}, the slice claimed to {digest}"),
        ));
    }
    Ok(())
}

/// Refuses unless `found` (the batch's rows as the deleting transaction sees them: those it
/// deleted and those it kept, each with key, place and xmin) is exactly the claimed versions,
/// every one of them once, in the storage they were claimed in: an updated row is a new
/// version elsewhere (its old place holds a version this snapshot does not see), a vanished one
/// is not found, a row moved into a place has another xmin or key, and a rewrite (VACUUM FULL,
/// CLUSTER, a table-rewriting ALTER), which moves rows and keeps their xmin, gives the table a
/// new relfilenode. Called under a lock that keeps the table from being rewritten until commit.
pub fn same_versions(
    b: &Batch,
    claimed: &ClaimedRows,
    rel: &RelationInfo,
    found: &Rendered,
) -> Result<()> {
    let (seen, other) = matched(claimed, rel, found)?;
    let missing = seen.iter().filter(|s| !**s).count();
    if other > 0 {
        return Err(mismatch(
            b,
            format!("{other} rows at its rows' places are other row versions than the ones claimed (changed since the claim, or the table was rewritten)"),
        ));
    }
    if missing > 0 {
        return Err(mismatch(
            b,
            format!(
                "{missing} of its {} rows changed, moved or vanished since the claim",
                b.rows
            ),
        ));
    }
    same_storage(b, rel)
}

/// Refuses unless table `rel` is in the storage batch `b` was claimed in (a rewrite gives it a
/// new relfilenode, and every row a new place).
pub fn same_storage(b: &Batch, rel: &RelationInfo) -> Result<()> {
    let now = Spi::get_one_with_args::<i64>(
        "SELECT pg_catalog.pg_relation_filenode($1::bigint::oid)::bigint",
        &[i64::from(rel.oid).into()],
    )?;
    if now.is_none() || now != b.relfilenode.map(i64::from) {
        return Err(mismatch(
            b,
            "the table was rewritten since the claim (its relfilenode changed)".into(),
        ));
    }
    Ok(())
}

/// Which claimed rows `found` holds, each the claimed version (same place, xmin and key; a row
/// is matched once), and how many rows of `found` are other versions.
pub fn matched(
    claimed: &ClaimedRows,
    rel: &RelationInfo,
    found: &Rendered,
) -> Result<(Vec<bool>, usize)> {
    let arity = rel.key_arity();
    if found.places == claimed.places && found.xmins == claimed.xmins && found.keys == claimed.keys
    {
        // Every claimed row, in the claim's order: what a prune that deleted the whole batch
        // finds in a table whose key order is its storage order (the delete returns its rows
        // by place). Compared pairwise, without the sort and the searches below.
        return Ok((vec![true; claimed.places.len()], 0));
    }
    // Claimed versions sorted, each found one looked up by binary search: in perf about half
    // of what a SipHash map cost (7 % of a prune's CPU against 13 %).
    let mut at: Vec<(Version, usize)> = claimed
        .places
        .iter()
        .copied()
        .zip(claimed.xmins.iter().copied())
        .enumerate()
        .map(|(i, v)| (v, i))
        .collect();
    at.sort_unstable();
    let mut seen = vec![false; claimed.places.len()];
    if found.xmins.len() != found.places.len() || found.keys.len() != found.places.len() * arity {
        return Err(RetentionError::Internal(
            "the rows read for the proof lack their place, xmin or key".into(),
        ));
    }
    let mut other = 0usize;
    for (j, version) in found.versions().enumerate() {
        let claimed_at = at
            .binary_search_by(|(v, _)| v.cmp(&version))
            .ok()
            .map(|k| at[k].1);
        match claimed_at {
            Some(i)
                if !seen[i]
                    && claimed.keys.get(i * arity..(i + 1) * arity)
                        == found.keys.get(j * arity..(j + 1) * arity) =>
            {
                seen[i] = true
            }
            _ => other += 1,
        }
    }
    Ok((seen, other))
}

/// The versions (key, place, xmin) of the rows now at `places`, read as the policy's owner.
pub fn kept_versions(
    policy: &crate::catalog::Policy,
    rel: &RelationInfo,
    places: &[Tid],
) -> Result<Rendered> {
    let sql = format!(
        "SELECT {key}, t.ctid, t.xmin FROM ONLY {table} t WHERE t.ctid = ANY ($1)",
        key = rel.key_order(),
        table = rel.qualified,
    );
    crate::author::run_as(policy.owner, || {
        crate::render::versions_at(rel, &sql, places, Vec::new(), false)
    })
}
