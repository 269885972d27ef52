//! The prune of an archived batch: check the archiver's slice against the one the claim
//! rendered, delete the batch's rows that are still eligible and that no hold and no reference
//! keeps, and prove that the rows deleted and the rows kept are exactly the versions claimed
//! (`verify.rs`) before anything is recorded. All of it in the caller's transaction.

use super::leaf_drop::Dropped;
use super::verify::{kept_versions, matches_claim, same_versions, Archived};
use super::{batch_policy, owner_may_archive};
use crate::catalog::{
    caller, ArchiveRecord, Batch, BatchState, HoldFence, LedgerEntry, LedgerMethod, Policy,
    RelationInfo,
};
use crate::engine::eligible::{Eligibility, Guards};
use crate::error::{Result, RetentionError};
use crate::render::versions_at;
use serde_json::json;

/// Verifies and prunes a batch in the caller's transaction. Returns rows deleted; 0 for a
/// batch that was already completed. It deletes first and checks after, inside a
/// subtransaction: a refused prune undoes its own deletes before the error comes back, so no
/// caller can commit one.
pub fn complete(
    id: &str,
    object_key: &str,
    blake3: &str,
    rows: i64,
    bytes: i64,
    owner: Option<&str>,
) -> Result<i64> {
    let archived = Archived {
        blake3,
        rows,
        bytes,
    };
    crate::subxact::atomically(|| prune_verified(id, object_key, &archived, owner))
}

fn prune_verified(
    id: &str,
    object_key: &str,
    archived: &Archived<'_>,
    owner: Option<&str>,
) -> Result<i64> {
    let b = Batch::load(id, true)?;
    match b.state {
        // Completed already (a retry after a lost answer): its rows were deleted, or kept.
        BatchState::Pruned | BatchState::Archived => return Ok(0),
        BatchState::Claimed => {}
        BatchState::Released | BatchState::Expired => {
            return Err(RetentionError::BatchState {
                batch: b.id,
                state: b.state.to_string(),
                message: "it cannot be completed; its rows may belong to another batch now".into(),
            })
        }
    }
    if let (Some(given), Some(claimed_by)) = (owner, b.owner.as_deref()) {
        if given != claimed_by {
            return Err(RetentionError::BatchState {
                batch: b.id.clone(),
                state: b.state.to_string(),
                message: format!("it was claimed by {claimed_by}, not {given}"),
            });
        }
    }
    if object_key.trim().is_empty() {
        return Err(RetentionError::invalid(
            "object_key must not be empty",
            "The archive index records where the slice is.",
            "Pass the key the slice was written under.",
        ));
    }
    let (policy, rel) = batch_policy(&b)?;
    owner_may_archive(&policy, &rel)?;
    // The slice first: nothing is deleted against a slice other than the one claimed.
    matches_claim(&b, archived)?;
    if policy.keeps_archived_rows() {
        return record_kept(&b, &policy, &rel, object_key, archived);
    }
    let claimed = Batch::claimed_rows(&b.id)?;
    if let Some(dropped) = super::leaf_drop::drop_if_whole(&b, &policy, &rel, &claimed)? {
        return record_drop(&b, &policy, &rel, object_key, archived, dropped);
    }
    // No row is gone unless this transaction proved it is the version the slice was rendered
    // from.
    let (gone, holds) = delete_at(&policy, &rel, &claimed.places)?;
    let deleted = gone.places.len() as i64;
    let mut found = gone;
    if deleted < b.rows {
        // Our own deletes are invisible to us now: this finds the rows kept.
        found.append(kept_versions(&policy, &rel, &claimed.places)?);
    }
    // The DELETE's lock keeps the table from being rewritten until we commit.
    same_versions(&b, &claimed, &rel, &found)?;
    let kept = b.rows - deleted;
    let archive_id = record_archive(&b, &policy, &rel, object_key, archived, deleted)?;
    let actor = b.owner.clone().unwrap_or_else(caller);
    let hold_ids: Vec<i64> = holds.iter().map(|h| h.id).collect();
    LedgerEntry {
        method: LedgerMethod::Prune,
        policy: Some(&policy),
        relation: None,
        rows: deleted,
        hold_ids: hold_ids.clone(),
        actor: &actor,
        run_id: None,
        detail: json!({ "batch": id, "object_key": object_key, "blake3": archived.blake3, "archive_id": archive_id, "kept": kept }),
    }
    .append_with_archive(archive_id)?;
    if kept > 0 {
        LedgerEntry {
            method: LedgerMethod::HoldSkip,
            policy: Some(&policy),
            relation: None,
            rows: kept,
            hold_ids,
            actor: &actor,
            run_id: None,
            detail: json!({ "batch": id, "reason": "archived but kept: held, still referenced or no longer eligible at prune time" }),
        }
        .append()?;
    }
    Batch::finish(id, BatchState::Pruned, "archived")?;
    Ok(deleted)
}

/// Deletes the rows at `places` that are still eligible under `policy` (its window: the
/// caller's copy may carry another) and that no hold and no reference keeps, returning each
/// deleted version's key, place and xmin, with the same hold fence as the sweep: a hold placed
/// while we work makes us read the holds again. The holds read last come with them.
pub(super) fn delete_at(
    policy: &Policy,
    rel: &RelationInfo,
    places: &[crate::tid::Tid],
) -> Result<(crate::render::Rendered, Vec<crate::catalog::Hold>)> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        let (fence, holds) = HoldFence::read(rel.oid)?;
        // The cutoff is the statement's second parameter, not a constant in its text: the text
        // stays the same from batch to batch, so its plan is kept and soon generic (a new text
        // was planned anew every batch, estimating each of its 10,000 tids: 2 ms).
        let elig = Eligibility::with_cutoff(policy, rel, &holds, "$2")?;
        let sql = format!(
            "DELETE FROM ONLY {table} t
              WHERE t.ctid = ANY ($1) AND {guards} AND NOT {fenced}
          RETURNING {key}, t.ctid, t.xmin",
            table = rel.qualified,
            guards = elig.age_predicate(Guards::ALL),
            fenced = fence.tripped(),
            key = rel.key_order(),
        );
        crate::engine::references::check_keys_at_once(rel)?;
        let gone = elig.as_owner(|| {
            let cutoff = elig.policy_cutoff()?;
            versions_at(rel, &sql, places, vec![cutoff.into()], true)
        })?;
        if !gone.places.is_empty() || attempt >= 5 || !fence.tripped_now()? {
            return Ok((gone, holds));
        }
    }
}

/// Records batch `b`'s verified archive (`deleted` of its rows deleted); its id.
fn record_archive(
    b: &Batch,
    policy: &Policy,
    rel: &RelationInfo,
    object_key: &str,
    archived: &Archived<'_>,
    deleted: i64,
) -> Result<i64> {
    ArchiveRecord {
        batch: &b.id,
        policy,
        policy_version: b.policy_version,
        relation: &rel.qualified,
        object_key,
        blake3: archived.blake3,
        rows: archived.rows,
        bytes: archived.bytes,
        deleted,
    }
    .append()
}

/// Records a batch whose rows the policy keeps: the archive (nothing deleted), its rows in
/// `retention.archived_rows` (no claim takes them again), the `archive` ledger entry, and the
/// batch archived, its key set kept for a delete after `delete_after` (deferred.rs).
fn record_kept(
    b: &Batch,
    policy: &Policy,
    rel: &RelationInfo,
    object_key: &str,
    archived: &Archived<'_>,
) -> Result<i64> {
    let archive_id = record_archive(b, policy, rel, object_key, archived, 0)?;
    let kept = crate::catalog::archived_rows::record(policy, &b.id, rel.key_arity())?;
    LedgerEntry {
        method: LedgerMethod::Archive,
        policy: Some(policy),
        relation: None,
        rows: kept,
        hold_ids: vec![],
        actor: &b.owner.clone().unwrap_or_else(caller),
        run_id: None,
        detail: json!({
            "batch": b.id, "object_key": object_key, "blake3": archived.blake3,
            "archive_id": archive_id, "delete_after": policy.delete_after,
        }),
    }
    .append_with_archive(archive_id)?;
    Batch::archived(&b.id, "archived; its rows kept")?;
    Ok(0)
}

/// Records a batch completed by dropping its whole leaf: the archive (every row deleted), the
/// `drop_partition` ledger entry with the archive it rests on, and the batch pruned.
fn record_drop(
    b: &Batch,
    policy: &Policy,
    rel: &RelationInfo,
    object_key: &str,
    archived: &Archived<'_>,
    dropped: Dropped,
) -> Result<i64> {
    let archive_id = record_archive(b, policy, rel, object_key, archived, dropped.rows)?;
    LedgerEntry {
        method: LedgerMethod::DropPartition,
        policy: Some(policy),
        relation: None,
        rows: dropped.rows,
        hold_ids: vec![],
        actor: &b.owner.clone().unwrap_or_else(caller),
        run_id: None,
        detail: json!({
            "partition": dropped.leaf.qualified, "bound": dropped.leaf.bound, "proof": "archived",
            "batch": b.id, "object_key": object_key, "blake3": archived.blake3, "archive_id": archive_id,
        }),
    }
    .append_with_archive(archive_id)?;
    Batch::finish(
        &b.id,
        BatchState::Pruned,
        "archived; its partition dropped whole",
    )?;
    Ok(dropped.rows)
}
