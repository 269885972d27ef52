//! `retention.archived_rows`: the rows a policy archived and keeps (an `archive` policy, or a
//! two-window `archive_then_delete` one until `delete_after`), by key, so that a claim never
//! takes one again. The only code that writes the table.

use super::{optional_one, Policy, RelationInfo};
use crate::error::{present, Result};
use crate::sql_text::ident;
use pgrx::prelude::*;

/// Records the rows of batch `batch` (its key set) as archived by `policy`; returns how many.
/// A row archived again (it changed after an archive, and was archived anew) moves to the new
/// batch.
pub fn record(policy: &Policy, batch: &str, arity: usize) -> Result<i64> {
    present(
        optional_one::<i64, _>(
            "WITH k AS (
                 SELECT k.keys[(i - 1) * $3 + 1 : i * $3] AS key
                   FROM retention.batch_keys k, generate_series(1, cardinality(k.keys) / $3) i
                  WHERE k.batch_id = $2::uuid),
             n AS (
                 INSERT INTO retention.archived_rows AS a (policy_id, key, batch_id, owner)
                 SELECT $1, k.key, $2::uuid, $4::bigint::oid::regrole FROM k
                 ON CONFLICT (policy_id, key) DO UPDATE SET batch_id = EXCLUDED.batch_id
                 RETURNING 1)
             SELECT count(*) FROM n",
            &[
                policy.id.into(),
                batch.into(),
                i64::try_from(arity.max(1)).unwrap_or(1).into(),
                i64::from(policy.owner).into(),
            ],
        )?,
        "archived rows recorded",
    )
}

/// Forgets the rows with `keys` (one after another, `arity` values each) of `policy`: deleted,
/// or changed since their archive and to be archived again.
pub fn forget(policy_id: i64, keys: &[Option<String>], arity: usize) -> Result<()> {
    if keys.is_empty() {
        return Ok(());
    }
    Spi::run_with_args(
        "DELETE FROM retention.archived_rows a
          WHERE a.policy_id = $1
            AND a.key IN (SELECT $2[(i - 1) * $3 + 1 : i * $3]
                            FROM generate_series(1, cardinality($2) / $3) i)",
        &[
            policy_id.into(),
            keys.to_vec().into(),
            i64::try_from(arity.max(1)).unwrap_or(1).into(),
        ],
    )?;
    Ok(())
}

/// The condition, over row `t` of `rel`, that policy `policy_id` has not archived it. It runs as
/// the policy's owner, who reads the entries of their own policies (row-level security); the
/// key is each key column's output text, as the claim recorded it.
pub fn not_archived(policy_id: i64, rel: &RelationInfo) -> String {
    let key: Vec<String> = rel
        .pk
        .iter()
        .map(|c| format!("pg_catalog.concat(t.{})", ident(c)))
        .collect();
    format!(
        "NOT EXISTS (SELECT 1 FROM retention.archived_rows k
                      WHERE k.policy_id = {policy_id} AND k.key = ARRAY[{}]::text[])",
        key.join(", ")
    )
}

/// `condition` over row `t` of `rel`, and, for a policy that keeps archived rows, that it has not
/// archived it yet: what a claim takes, and what is left to archive.
pub fn still_to_archive(policy: &Policy, rel: &RelationInfo, condition: String) -> String {
    if policy.keeps_archived_rows() {
        format!("{condition} AND {}", not_archived(policy.id, rel))
    } else {
        condition
    }
}

/// Gives the entries of `policy_id` to its new owner (whose claims read them from now on).
pub fn reown(policy_id: i64, owner: u32) -> Result<()> {
    Spi::run_with_args(
        "UPDATE retention.archived_rows SET owner = $2::bigint::oid::regrole
          WHERE policy_id = $1 AND owner <> $2::bigint::oid::regrole",
        &[policy_id.into(), i64::from(owner).into()],
    )?;
    Ok(())
}

/// How many rows policy `policy_id` archived and keeps.
pub fn count(policy_id: i64) -> Result<i64> {
    present(
        optional_one::<i64, _>(
            "SELECT count(*) FROM retention.archived_rows WHERE policy_id = $1",
            &[policy_id.into()],
        )?,
        "archived rows",
    )
}
