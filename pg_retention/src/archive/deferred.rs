//! The second window of a two-window `archive_then_delete` policy (`delete_after`): its rows
//! were archived after `older_than` and kept (`prune.rs` left their batch `archived`, their keys
//! in `retention.archived_rows`); `retention.prune_archived` deletes them once they are past
//! `delete_after`, and only the versions their verified archive holds.
//!
//! Per archived batch with a row past the window, in a subtransaction of its own:
//! * the rows at the batch's places are read (as the policy's owner); those that are still the
//!   archived version (same place, xmin, key, in the same storage) may go;
//! * those of them past `delete_after`, unheld, unreferenced, are deleted, and every deleted
//!   version is proven one the batch archived (anything else undoes the delete, RT502);
//! * a row that changed since its archive (a `mutable_columns` update) or vanished leaves the
//!   batch and `archived_rows`: a changed row is claimed and archived again, as it is now;
//! * the rest wait in the batch (held, or not past the window yet); the batch is `pruned` when
//!   none is left.

use super::owner_may_archive;
use super::verify::{kept_versions, matched, same_storage};
use crate::catalog::archived_rows;
use crate::catalog::{
    caller, Batch, BatchState, ClaimedRows, LedgerEntry, LedgerMethod, Policy, RelationInfo,
};
use crate::error::{Result, RetentionError};
use serde_json::json;

/// Deletes the rows of up to `max_batches` archived batches of two-window policy `name` that
/// are past its `delete_after`; returns the rows deleted. 0 for a policy without a second
/// window.
pub fn prune_archived(name: &str, max_batches: i32) -> Result<i64> {
    let policy = Policy::by_name(name)?;
    if max_batches < 1 {
        return Err(RetentionError::invalid(
            format!("max_batches must be at least 1, got {max_batches}"),
            "Each call deletes the due rows of at most max_batches archived batches.",
            "Pass max_batches => 100 or so.",
        ));
    }
    let Some(later) = policy.second_window().filter(|_| policy.enabled) else {
        return Ok(0);
    };
    let window = crate::error::present(later.older_than.clone(), "the second window")?;
    let mut deleted = 0;
    for id in Batch::archived_due(policy.id, &window, max_batches)? {
        deleted += crate::subxact::atomically(|| delete_due(&policy, &later, &id))?;
    }
    Ok(deleted)
}

/// The rows of `claimed` at positions where `keep` is true.
fn subset(claimed: &ClaimedRows, keep: &[bool], arity: usize) -> ClaimedRows {
    let mut out = ClaimedRows {
        keys: Vec::new(),
        places: Vec::new(),
        xmins: Vec::new(),
    };
    for (i, _) in keep.iter().enumerate().filter(|(_, k)| **k) {
        out.keys
            .extend_from_slice(&claimed.keys[i * arity..(i + 1) * arity]);
        out.places.push(claimed.places[i]);
        out.xmins.push(claimed.xmins[i]);
    }
    out
}

fn delete_due(policy: &Policy, later: &Policy, id: &str) -> Result<i64> {
    let b = Batch::load(id, true)?;
    if b.state != BatchState::Archived {
        return Ok(0);
    }
    let rel = RelationInfo::load(b.relation, &b.relation_name)?;
    owner_may_archive(policy, &rel)?;
    let arity = rel.key_arity();
    let claimed = Batch::claimed_rows(&b.id)?;
    // Which rows are still the archived version. After a rewrite of the table none is (every
    // row has a new place): all of them are archived again.
    let unchanged = match same_storage(&b, &rel) {
        Ok(()) => {
            matched(
                &claimed,
                &rel,
                &kept_versions(policy, &rel, &claimed.places)?,
            )?
            .0
        }
        Err(RetentionError::ArchiveMismatch { .. }) => vec![false; claimed.places.len()],
        Err(e) => return Err(e),
    };
    let candidates = subset(&claimed, &unchanged, arity);
    let (gone, holds) = if candidates.places.is_empty() {
        (None, Vec::new())
    } else {
        let (gone, holds) = super::prune::delete_at(later, &rel, &candidates.places)?;
        (Some(gone), holds)
    };

    // Every version deleted is one the archive holds (read a moment ago as unchanged; a row
    // updated since is another version at another place, which a delete by place misses).
    let deleted_at = match &gone {
        Some(gone) => {
            let (seen, other) = matched(&candidates, &rel, gone)?;
            if other > 0 {
                return Err(RetentionError::ArchiveMismatch {
                    batch: b.id.clone(),
                    reason: format!(
                        "{other} rows deleted are not versions its archive holds; nothing was deleted"
                    ),
                });
            }
            seen
        }
        None => Vec::new(),
    };
    let deleted = deleted_at.iter().filter(|d| **d).count();
    // Back to the batch's positions: a row waits when it is unchanged and was not deleted
    // (the candidates are the unchanged rows, in order); every other row leaves the batch.
    let mut deleted_in_order = deleted_at.iter();
    let waiting: Vec<bool> = unchanged
        .iter()
        .map(|&u| u && !deleted_in_order.next().copied().unwrap_or(false))
        .collect();
    let changed = unchanged.iter().filter(|u| !**u).count();
    let leaving: Vec<bool> = waiting.iter().map(|w| !w).collect();
    archived_rows::forget(policy.id, &subset(&claimed, &leaving, arity).keys, arity)?;
    let left = subset(&claimed, &waiting, arity);
    let archive_id = Batch::archive_of(&b.id)?;
    let actor = caller();
    if deleted > 0 {
        LedgerEntry {
            method: LedgerMethod::Prune,
            policy: Some(policy),
            relation: None,
            rows: i64::try_from(deleted).unwrap_or(i64::MAX),
            hold_ids: holds.iter().map(|h| h.id).collect(),
            actor: &actor,
            run_id: None,
            detail: json!({
                "batch": b.id, "archive_id": archive_id, "window": "delete_after",
                "waiting": left.places.len(), "changed": changed,
            }),
        }
        .append()?;
    }
    if changed > 0 {
        LedgerEntry {
            method: LedgerMethod::Release,
            policy: Some(policy),
            relation: None,
            rows: i64::try_from(changed).unwrap_or(i64::MAX),
            hold_ids: vec![],
            actor: &actor,
            run_id: None,
            detail: json!({
                "batch": b.id, "archive_id": archive_id,
                "reason": "changed or gone since their archive: a changed row is archived again as it is now",
            }),
        }
        .append()?;
    }
    if left.places.is_empty() {
        Batch::finish(&b.id, BatchState::Pruned, "deleted after delete_after")?;
    } else if deleted > 0 || changed > 0 {
        Batch::keep_only(&b.id, &left)?;
    }
    Ok(i64::try_from(deleted).unwrap_or(i64::MAX))
}
