//! Reading live policies: by name or id (the current version, through a statement built once
//! from [`FIELDS`]), the other policies on a table's partition tree, and the fingerprint a run
//! compares between steps. Only reads: nothing here assigns a transaction id.

use super::{Action, Kind, Policy, FIELDS};
use crate::catalog::{prepared, query_json, query_json_kept};
use crate::error::{returned_nothing, Result, RetentionError};
use pgrx::pg_sys::BuiltinOid;
use pgrx::prelude::*;
use pgrx::PgOid;
use serde::Deserialize;

/// `v.<field>` for each field, as [`PolicySpec`] reads it (intervals as text).
fn field_selects() -> String {
    FIELDS
        .iter()
        .map(|(name, ty)| match *ty {
            "interval" => format!("v.{name}::text AS {name}"),
            "regclass" => format!("v.{name}::oid::bigint AS {name}"),
            _ => format!("v.{name}"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The current version of every live policy, as jsonb; callers append the condition on `p`.
fn current() -> &'static str {
    static SQL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SQL.get_or_init(|| {
        format!(
            "SELECT to_jsonb(x) FROM (
                SELECT p.id, p.name, v.version, v.relation::bigint AS relation, v.relation_name,
                       {fields}, v.enabled, v.owner::bigint AS owner
                  FROM retention.policy_ids p
                  CROSS JOIN LATERAL (SELECT * FROM retention.policy_versions pv
                                       WHERE pv.policy_id = p.id ORDER BY pv.version DESC LIMIT 1) v
                 WHERE p.dropped_at IS NULL AND",
            fields = field_selects()
        )
    })
}

/// Another policy on a table, as [`Policy::other_on_tree`] finds it.
#[derive(Deserialize)]
struct Other {
    name: String,
    action: Action,
    kind: Kind,
}

impl Policy {
    /// Whether a live policy is named `name`.
    pub fn name_taken(name: &str) -> Result<bool> {
        Spi::get_one_with_args::<bool>(
            "SELECT EXISTS (SELECT 1 FROM retention.policy_ids WHERE name = $1 AND dropped_at IS NULL)",
            &[name.into()],
        )?
        .ok_or_else(|| returned_nothing("EXISTS"))
    }

    /// The first (by name) other live policy on table `relation` (or its partition tree) whose
    /// action is not `action`: the table's class is the other one.
    pub fn other_class(
        relation: u32,
        policy_id: Option<i64>,
        action: Action,
    ) -> Result<Option<(String, Action)>> {
        let other = Self::other_on_tree(
            relation,
            policy_id,
            "p.action <> $3",
            action.as_str().into(),
        )?;
        Ok(other.map(|o| (o.name, o.action)))
    }

    /// Another live delete policy on table `relation` (or its partition tree) that a delete
    /// policy of kind `ranked` (keep_latest, versions) or not cannot share it with: any, for a
    /// ranked one; a ranked one, otherwise. Its name and kind.
    pub fn other_delete_policy(
        relation: u32,
        policy_id: Option<i64>,
        ranked: bool,
    ) -> Result<Option<(String, Kind)>> {
        let other = Self::other_on_tree(
            relation,
            policy_id,
            "p.action = 'delete' AND ($3 OR p.kind IN ('keep_latest', 'versions'))",
            ranked.into(),
        )?;
        Ok(other.map(|o| (o.name, o.kind)))
    }

    /// The first (by name) live policy on table `relation` or its partition tree, other than
    /// `policy_id`, that meets `condition` (SQL over `p`, a row of `retention.policies`, with
    /// `argument` as `$3`).
    fn other_on_tree(
        relation: u32,
        policy_id: Option<i64>,
        condition: &str,
        argument: pgrx::datum::DatumWithOid<'_>,
    ) -> Result<Option<Other>> {
        query_json(
            &format!(
                "SELECT to_jsonb(x) FROM (
                     SELECT p.name, p.action, p.kind FROM retention.policies p
                      WHERE p.relation::oid IN (SELECT retention._tree_of($1::bigint::oid))
                        AND p.id IS DISTINCT FROM $2 AND {condition}
                      ORDER BY p.name LIMIT 1) x"
            ),
            &[i64::from(relation).into(), policy_id.into(), argument],
        )
    }

    /// The live policy named `name`.
    pub fn by_name(name: &str) -> Result<Policy> {
        query_json_kept(
            &format!("{} p.name = $1) x", current()),
            &[PgOid::BuiltIn(BuiltinOid::TEXTOID)],
            &[name.into()],
        )?
        .ok_or_else(|| RetentionError::UnknownPolicy(name.to_owned()))
    }

    /// The live policy with id `id`, if it still exists.
    pub fn by_id(id: i64) -> Result<Option<Policy>> {
        query_json_kept(
            &format!("{} p.id = $1) x", current()),
            &[PgOid::BuiltIn(BuiltinOid::INT8OID)],
            &[id.into()],
        )
    }
}

/// One value that changes whenever anything a batch planned with changes. A table's catalog row
/// gets a new xmin from every ALTER (rename, new schema, columns); foreign keys referencing the
/// table (or a table of its partition tree) live in other tables' rows, so they are listed with
/// their tables' xmin; holds are append-only, so counts of hold records and lifts say whether
/// the holds changed; a hold placed on a partition below the table covers that partition's
/// leaves, listed too. A step reads its own leaf afresh, so dropping a leaf changes nothing here.
const FINGERPRINT: &str = "
SELECT concat_ws('|', p.dropped_at IS NULL, v.version, v.enabled, c.xmin,
         (SELECT string_agg(con.oid || ':' || child.xmin, ',' ORDER BY con.oid)
            FROM pg_catalog.pg_constraint con JOIN pg_catalog.pg_class child ON child.oid = con.conrelid
           WHERE con.confrelid = ANY (tree.rels) AND con.contype = 'f'),
         (SELECT string_agg(h.id || ':' || (SELECT string_agg(b::text, ',' ORDER BY b)
                                              FROM retention._below(h.relation) b),
                            ';' ORDER BY h.id)
            FROM retention.hold_records h
           WHERE h.relation::oid = ANY (tree.rels) AND h.relation::oid <> c.oid
             AND NOT h.relation::oid = ANY (tree.above)),
         (SELECT count(*) FROM retention.hold_records h WHERE h.relation::oid = ANY (tree.rels)),
         (SELECT count(*) FROM retention.hold_lifts l JOIN retention.hold_records h ON h.id = l.hold_id
           WHERE h.relation::oid = ANY (tree.rels)))
  FROM retention.policy_ids p
 CROSS JOIN LATERAL (SELECT pv.version, pv.enabled, pv.relation FROM retention.policy_versions pv
                      WHERE pv.policy_id = p.id ORDER BY pv.version DESC LIMIT 1) v
  LEFT JOIN pg_catalog.pg_class c ON c.oid = v.relation
 CROSS JOIN LATERAL (SELECT ARRAY(SELECT retention._tree_of(c.oid)) AS rels,
                            ARRAY(SELECT a.relid FROM pg_catalog.pg_partition_ancestors(c.oid) a) AS above) tree
 WHERE p.id = $1";

/// The fingerprint of policy `policy_id`, its table and its holds (see [`FINGERPRINT`]); None
/// when there never was such a policy.
pub fn fingerprint(policy_id: i64) -> Result<Option<String>> {
    let plan = prepared::cached(FINGERPRINT, &[PgOid::BuiltIn(BuiltinOid::INT8OID)], false)?;
    prepared::one::<String>(&plan, &[policy_id.into()])
}
