//! Writing policies: a new policy id, marking one dropped, and appending a version (the
//! definition's columns named from [`FIELDS`]). Versions are append-only: a change is a new
//! version, never an update of an old one.

use super::{Change, Policy, PolicySpec, FIELDS};
use crate::catalog::announce::{changed, Changed};
use crate::error::{returned_nothing, Result};
use pgrx::prelude::*;

impl Policy {
    /// A new policy id for `name`.
    pub fn new_id(name: &str) -> Result<i64> {
        let id = Spi::get_one_with_args::<i64>(
            "INSERT INTO retention.policy_ids (name) VALUES ($1) RETURNING id",
            &[name.into()],
        )?
        .ok_or_else(|| returned_nothing("policy insert"))?;
        changed(Changed::PolicyIds)?;
        Ok(id)
    }

    /// Marks policy `id` dropped (its versions and ledger stay).
    pub fn mark_dropped(id: i64) -> Result<()> {
        Spi::run_with_args(
            "UPDATE retention.policy_ids SET dropped_at = now() WHERE id = $1",
            &[id.into()],
        )?;
        changed(Changed::PolicyIds)
    }
}

/// Appends version `max + 1` of policy `policy_id` with definition `spec`; returns its number.
pub fn append_version(
    policy_id: i64,
    spec: &PolicySpec,
    relation_name: &str,
    change: Change,
    owner: u32,
) -> Result<i32> {
    let args = [
        policy_id.into(),
        i64::from(spec.relation).into(),
        relation_name.into(),
        pgrx::JsonB(serde_json::to_value(spec)?).into(),
        change.as_str().into(),
        crate::catalog::caller().into(),
        i64::from(owner).into(),
    ];
    let names: Vec<&str> = FIELDS.iter().map(|(name, _)| *name).collect();
    let record: Vec<String> = FIELDS
        .iter()
        .map(|(name, ty)| format!("{name} {ty}"))
        .collect();
    let sql = format!(
        "INSERT INTO retention.policy_versions
             (policy_id, version, relation, relation_name, {columns}, enabled, change, changed_by, owner)
         SELECT $1, coalesce((SELECT max(version) FROM retention.policy_versions WHERE policy_id = $1), 0) + 1,
                $2::bigint::oid, $3, {values}, s.enabled, $5, $6, $7::bigint::oid
           FROM jsonb_to_record($4) AS s({record}, enabled boolean)
         RETURNING version",
        columns = names.join(", "),
        values = names
            .iter()
            .map(|n| format!("s.{n}"))
            .collect::<Vec<_>>()
            .join(", "),
        record = record.join(", "),
    );
    let version = Spi::get_one_with_args::<i32>(&sql, &args)?
        .ok_or_else(|| returned_nothing("policy version insert"))?;
    changed(Changed::PolicyVersions)?;
    Ok(version)
}
