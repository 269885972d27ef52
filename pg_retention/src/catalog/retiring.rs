//! `retention.retiring_leaves`: leaves a sweep detached to retire whole and has not dropped yet.
//! A row is written in the transaction that detaches its leaf and deleted in the one that drops
//! it (`engine/sweep`); one left behind marks a leaf whose run was interrupted in between.

use crate::catalog::query_json;
use crate::error::Result;
use pgrx::prelude::*;
use serde::Deserialize;

/// A row `r` as the JSON [`RetiringLeaf`] reads (oids as numbers).
const AS_JSON: &str = "jsonb_build_object(
    'leaf', r.leaf::bigint, 'policy_id', r.policy_id, 'owner', r.owner::bigint,
    'parent', r.parent::bigint, 'qualified', r.qualified, 'bound', r.bound, 'rows', r.rows,
    'proof', r.proof, 'hold_ids', r.hold_ids, 'hold_seen', r.hold_seen)";

/// A leaf detached from its partitioned table and not yet dropped.
#[derive(Debug, Clone, Deserialize)]
pub struct RetiringLeaf {
    /// The leaf's oid.
    pub leaf: u32,
    /// The policy that retires it.
    pub policy_id: i64,
    /// The policy's owner, as whom the leaf is dropped or attached again.
    pub owner: u32,
    /// The partitioned table it was a partition of.
    pub parent: u32,
    /// The leaf (quoted, schema-qualified, as it was named when it was detached).
    pub qualified: String,
    /// Its partition bound as printed (`FOR VALUES ...`), to attach it again with.
    pub bound: String,
    /// Its rows, counted under the lock that kept them as they are.
    pub rows: i64,
    /// Why it was entirely eligible (`retire::Proof::as_str`).
    pub proof: String,
    /// The holds in force when it was proven.
    pub hold_ids: Vec<i64>,
    /// The hold records of the policy's table counted before it was proven (a hold fence).
    pub hold_seen: i64,
}

impl RetiringLeaf {
    /// Records the leaf as detached by run `run_id`.
    pub fn record(&self, run_id: &str) -> Result<()> {
        Spi::run_with_args(
            "INSERT INTO retention.retiring_leaves
                 (leaf, policy_id, owner, run_id, parent, qualified, bound, rows, proof, hold_ids, hold_seen)
             VALUES ($1::bigint::oid, $2, $11::bigint::oid, $3::uuid, $4::bigint::oid, $5, $6, $7, $8, $9, $10)",
            &[
                i64::from(self.leaf).into(),
                self.policy_id.into(),
                run_id.into(),
                i64::from(self.parent).into(),
                self.qualified.as_str().into(),
                self.bound.as_str().into(),
                self.rows.into(),
                self.proof.as_str().into(),
                self.hold_ids.clone().into(),
                self.hold_seen.into(),
                i64::from(self.owner).into(),
            ],
        )?;
        Ok(())
    }

    /// Leaf `oid`'s record, locked until the transaction ends.
    pub fn take(oid: u32) -> Result<Option<RetiringLeaf>> {
        query_json(
            &format!(
                "SELECT {AS_JSON} FROM retention.retiring_leaves r
                  WHERE r.leaf = $1::bigint::oid FOR UPDATE"
            ),
            &[i64::from(oid).into()],
        )
    }

    /// The records of `policy_id`'s leaves that an earlier run left behind.
    pub fn left_by(policy_id: i64) -> Result<Vec<RetiringLeaf>> {
        Ok(query_json::<Vec<RetiringLeaf>>(
            &format!(
                "SELECT coalesce(jsonb_agg({AS_JSON} ORDER BY r.leaf), '[]')
                   FROM retention.retiring_leaves r WHERE r.policy_id = $1"
            ),
            &[policy_id.into()],
        )?
        .unwrap_or_default())
    }

    /// Deletes the record: the leaf was dropped, attached again, or handed to the operator.
    pub fn forget(&self) -> Result<()> {
        Spi::run_with_args(
            "DELETE FROM retention.retiring_leaves WHERE leaf = $1::bigint::oid",
            &[i64::from(self.leaf).into()],
        )?;
        Ok(())
    }
}
