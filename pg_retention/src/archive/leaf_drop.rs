//! Archive-then-drop: when a batch holds every row left in a leaf of a partitioned table (a
//! leaf small enough for one batch, or the last batch of a leaf whose earlier batches were
//! pruned) and the leaf is entirely eligible and unheld, completing the batch drops the leaf
//! instead of deleting its rows. Inside the dropping transaction, under a SHARE lock on the leaf (no row
//! of it can change until the drop commits), the leaf holds exactly the batch's row count and
//! every one of the batch's rows is the version claimed (its place, xmin and key, in the same
//! relfilenode; the prune checked the archiver's slice against the claim's): the rows dropped
//! are the archived rows. Anything short of that, or a lock not granted in time, leaves the
//! batch to the row prune.

use super::verify::{kept_versions, same_versions};
use crate::catalog::{partition, Batch, ClaimedRows, HoldFence, Leaf, Policy, RelationInfo};
use crate::engine::eligible::Eligibility;
use crate::engine::retire::drop_proven;
use crate::error::{present, Result};
use crate::subxact::Attempt;
use pgrx::prelude::*;

/// A leaf dropped with its batch.
pub(super) struct Dropped {
    /// The leaf.
    pub leaf: Leaf,
    /// Its rows (the batch's).
    pub rows: i64,
}

/// Drops the batch's leaf if the batch is all of it (see the module); None when the rows are
/// to be pruned one by one instead.
pub(super) fn drop_if_whole(
    b: &Batch,
    policy: &Policy,
    rel: &RelationInfo,
    claimed: &ClaimedRows,
) -> Result<Option<Dropped>> {
    if policy.relation == rel.oid {
        return Ok(None);
    }
    let parent = RelationInfo::load(policy.relation, &policy.relation_name)?;
    let Some(leaf) = partition::leaf(parent.oid, rel.oid, policy.age_column.as_deref())? else {
        return Ok(None);
    };
    // Cheap first, reading at most one row more than the batch holds: a leaf with more rows
    // than the batch cannot go with it.
    let at_most = crate::author::run_as(policy.owner, || {
        present(
            Spi::get_one_with_args::<i64>(
                &format!(
                    "SELECT count(*) FROM (SELECT 1 FROM ONLY {} LIMIT $1) x",
                    leaf.qualified
                ),
                &[(b.rows + 1).into()],
            )?,
            "count(*)",
        )
    })?;
    if at_most != b.rows {
        return Ok(None);
    }
    let (fence, holds) = HoldFence::read(parent.oid)?;
    let elig = Eligibility::new(policy, &parent, &holds)?.on_leaf(&leaf);
    let attempt = drop_proven(&elig, &parent, &leaf, |rows| {
        // A hold placed since the holds were read: the row prune reads them again.
        if rows != b.rows || fence.tripped_now()? {
            return Ok(false);
        }
        // Every row of the batch the version claimed (so, with the count, the leaf's rows are
        // the batch's); a mismatch refuses.
        let found = kept_versions(policy, rel, &claimed.places)?;
        same_versions(b, claimed, rel, &found)?;
        Ok(true)
    })?;
    Ok(match attempt {
        Attempt::Done((rows, _)) => Some(Dropped { leaf, rows }),
        Attempt::Declined | Attempt::Busy => None,
    })
}
