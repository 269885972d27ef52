//! A claimed batch's slice and manifest, rendered from its rows as they are now (read with the
//! privileges of the policy's owner, like every statement over a governed table).

use super::batch_policy;
use super::verify::in_claim_order;
use crate::catalog::{Batch, BatchState, Policy, RelationInfo};
use crate::error::{returned_nothing, Result, RetentionError};
use crate::render::{render_batch, Rendered};
use pg_retention_format::{ColumnSpec, Manifest, FORMAT_VERSION};
use pgrx::prelude::*;

/// The batch's rows as they are now, rendered in key order, each with its ctid.
pub(super) fn current_rows(b: &Batch, policy: &Policy, rel: &RelationInfo) -> Result<Rendered> {
    let claimed = Batch::claimed_rows(&b.id)?;
    let found = crate::author::run_as(policy.owner, || render_batch(rel, &claimed.places))?;
    in_claim_order(b, rel, &claimed.keys, &claimed.places, found)
}

/// The frames of a batch, in key order.
pub fn batch_frames(id: &str) -> Result<Vec<Vec<u8>>> {
    Ok(claimed_rows(id)?.frames().map(<[u8]>::to_vec).collect())
}

/// The slice of a batch: its frames in key order, concatenated (what the archiver writes).
pub fn batch_slice(id: &str) -> Result<Vec<u8>> {
    Ok(claimed_rows(id)?.slice)
}

fn claimed_rows(id: &str) -> Result<Rendered> {
    let b = Batch::load(id, false)?;
    if b.state != BatchState::Claimed {
        return Err(RetentionError::BatchState {
            batch: b.id,
            state: b.state.to_string(),
            message: "only a claimed batch has frames".into(),
        });
    }
    let (policy, rel) = batch_policy(&b)?;
    current_rows(&b, &policy, &rel)
}

/// The manifest of a batch as it would be written next to its slice.
///
/// With `digest` false the slice is not rendered: `blake3` is empty and `rows` / `bytes` are
/// the claimed row count and 0, for an archiver that computes them from the frames it streams
/// anyway (rendering a batch is the expensive part of archiving).
pub fn manifest(id: &str, digest: bool) -> Result<Manifest> {
    let b = Batch::load(id, false)?;
    if digest && b.state != BatchState::Claimed {
        // Its key set went with its prune or release: there are no rows to digest any more.
        return Err(RetentionError::BatchState {
            batch: b.id,
            state: b.state.to_string(),
            message: "only a claimed batch has rows to digest (digest => false gives its manifest)"
                .into(),
        });
    }
    let (policy, rel) = batch_policy(&b)?;
    let (blake3, rows, bytes) = if digest {
        current_rows(&b, &policy, &rel)?.summary()
    } else {
        (String::new(), b.rows.max(0) as u64, 0)
    };
    let database = Spi::get_one::<String>("SELECT current_database()::text")?
        .ok_or_else(|| returned_nothing("current_database()"))?;
    Ok(Manifest {
        format: FORMAT_VERSION,
        database,
        // Always schema-qualified, whatever the search path: object keys are built from it.
        relation: rel.qualified.clone(),
        policy: policy.name.clone(),
        policy_version: i64::from(b.policy_version),
        batch: b.id,
        columns: rel
            .columns
            .iter()
            .map(|c| ColumnSpec {
                name: c.name.clone(),
                type_name: c.type_name.clone(),
            })
            .collect(),
        key_columns: rel.key_names(),
        rows,
        bytes,
        blake3,
        age_min: b.age_min,
        age_max: b.age_max,
        created_at: b.claimed_at,
        supersedes: None,
    })
}
