//! Archive-then-prune: claimed batches with frozen key sets, deterministic slice frames, and
//! the digest-checked prune. No row of an archive policy is deleted unless the bytes of its
//! current contents hash to the digest of the slice the archiver wrote and read back.
//!
//! A batch's life, one file per step: `claim.rs` (eligible rows → a batch), `slice.rs` (its
//! frames and manifest), `lease.rs` (resume, extend, release, expire), `prune.rs` (the delete,
//! or the rows kept: an `archive` policy, or a two-window one until `deferred.rs` deletes them),
//! `verify.rs` (the in-transaction check that gates it), `handover.rs` (a claimed slice kept
//! for the archiver to take); and, once archives outlive their policy's `archive_keep`,
//! `expiry.rs` (the holds over an archive's rows) and `expire_operation.rs` (the archiver's
//! expire operations: prepared, each apply recorded); when an erasure reaches archived rows,
//! `supersede.rs` (the slice rewritten without them). Both read slices back through
//! `side_load.rs`.

pub mod claim;
pub mod deferred;
pub mod expire_operation;
pub mod expiry;
pub mod handover;
mod leaf_drop;
pub mod lease;
pub mod namespace;
pub mod prune;
mod side_load;
pub mod slice;
pub mod supersede;
mod verify;

use crate::catalog::{Batch, Policy, RelationInfo};
use crate::error::{Result, RetentionError};

/// The archive policy a batch belongs to, refusing one that is gone.
fn batch_policy(b: &Batch) -> Result<(Policy, RelationInfo)> {
    let policy = Policy::by_id(b.policy_id)?.ok_or_else(|| RetentionError::BatchState {
        batch: b.id.clone(),
        state: b.state.to_string(),
        message: "its policy was dropped".into(),
    })?;
    let rel = RelationInfo::load(b.relation, &b.relation_name)?;
    Ok((policy, rel))
}

/// Refuses (42501) to claim or prune for a policy whose owner lost a privilege it runs with.
fn owner_may_archive(policy: &Policy, rel: &RelationInfo) -> Result<()> {
    crate::author::ensure_owner_privileges(
        policy.owner,
        rel.oid,
        &rel.qualified,
        &policy.name,
        policy.visible_rows_only(),
    )
}
