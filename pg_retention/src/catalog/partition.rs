//! Partition trees, read from the system catalogs: the leaves a policy on a partitioned table
//! sweeps one by one, and what each leaf's bounds say about its rows.

use crate::catalog::query_json_kept;
use crate::error::{returned_nothing, Result};
use pgrx::prelude::*;
use pgrx::{pg_sys, PgOid};
use serde::Deserialize;

/// One leaf of a governed table: a partition that holds rows, or the table itself when it is
/// not partitioned.
#[derive(Debug, Clone, Deserialize)]
pub struct Leaf {
    /// Oid.
    pub oid: u32,
    /// Quoted, schema-qualified name.
    pub qualified: String,
    /// The partition bound as PostgreSQL prints it (`FOR VALUES ...`); empty for a table that
    /// is not a partition.
    #[serde(default)]
    pub bound: String,
    /// The leaf is a default partition, or lies under one: its rows have no bound to reason with.
    #[serde(default)]
    pub default: bool,
    /// The bounds of every range level above and at this leaf whose key is the policy's age
    /// column alone.
    #[serde(default)]
    pub age_bounds: AgeBounds,
    /// The leaf's owner: only a policy owner who could drop the table drops it whole.
    pub owner: u32,
    /// The leaf has a user trigger that fires on DELETE, which a whole-leaf drop would not fire.
    #[serde(default)]
    pub delete_triggers: bool,
    /// The partitioned table the leaf is a partition of (quoted, schema-qualified), when it is
    /// one: a whole-leaf retirement detaches it from there first.
    #[serde(default)]
    pub parent: Option<String>,
    /// That table's oid.
    #[serde(default)]
    pub parent_oid: Option<u32>,
    /// That table's owner: only a policy owner who could detach the leaf detaches it.
    #[serde(default)]
    pub parent_owner: Option<u32>,
    /// The partition bounds of the leaf and every table above it, as printed: what its
    /// `age_bounds` were read from, compared again once the leaf is locked ([`unchanged`]).
    #[serde(default)]
    pub lineage: String,
}

/// SQL for the partition bounds of relation `{oid}` and every table above it, printed, leaf
/// first ([`Leaf::lineage`]); empty for a table that is not a partition, and for one dropped
/// while the statement runs (see [`printed_bounds`]).
const LINEAGE: &str = "coalesce((
    SELECT string_agg(coalesce(pg_catalog.pg_get_expr(ac.relpartbound, ac.oid), ''), ' / ' ORDER BY a.n)
      FROM pg_catalog.pg_partition_ancestors({oid}) WITH ORDINALITY a(relid, n)
      JOIN pg_catalog.pg_class ac ON ac.oid = a.relid), '')";

/// Whether `leaf` still is where it was described, with the same bounds up its tree. Asked
/// once the leaf is locked: a detach and an attach with other bounds between its description
/// and its lock would make a proof from its old bounds wrong, and once it is locked in SHARE
/// mode neither can happen to it any more.
///
/// A leaf described as a partition must also still be one, of the same table: a description
/// read while a DETACH PARTITION committed could carry the lineage of the leaf as it is after
/// it (none) with the parent it had before.
pub fn unchanged(leaf: &Leaf) -> Result<bool> {
    Ok(Spi::get_one_with_args::<bool>(
        &format!(
            "SELECT {} = $2 AND ($3::bigint IS NULL OR EXISTS (
                 SELECT 1 FROM pg_catalog.pg_class c
                   JOIN pg_catalog.pg_inherits i ON i.inhrelid = c.oid
                  WHERE c.oid = $1::bigint::oid AND c.relispartition AND c.relpartbound IS NOT NULL
                    AND i.inhparent = $3::bigint::oid))",
            LINEAGE.replace("{oid}", "$1::bigint::oid")
        ),
        &[
            i64::from(leaf.oid).into(),
            leaf.lineage.as_str().into(),
            leaf.parent_oid.map(i64::from).into(),
        ],
    )? == Some(true))
}

/// Range bounds on the age column, as printed (`'2026-01-02 00:00:00+00'`, `MAXVALUE`).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct AgeBounds {
    /// Upper bounds: every row of the leaf is aged before each.
    #[serde(deserialize_with = "printed_bounds")]
    pub upper: Vec<String>,
    /// Lower bounds: every row of the leaf is aged at or after each.
    #[serde(deserialize_with = "printed_bounds")]
    pub lower: Vec<String>,
}

/// The bounds that printed. `pg_get_expr` reads the relation cache, not the statement's
/// snapshot: for a leaf dropped while the statement runs it prints NULL, and the planner
/// evaluates it once for the aggregate's filter and again for its value, so a NULL can pass
/// the filter. A bound that did not print is no bound: the leaf is then not known to be
/// expired by its bounds, and whoever acts on it finds it gone.
fn printed_bounds<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<Vec<String>, D::Error> {
    let printed: Vec<Option<String>> = Deserialize::deserialize(d)?;
    Ok(printed.into_iter().flatten().collect())
}

/// The leaves of `relation` (the table itself when it is not partitioned), in oid order, which
/// is creation order for the leaves a tool premakes in time order. `age_column` names the
/// column whose range bounds are collected in [`Leaf::age_bounds`].
pub fn leaves(relation: u32, age_column: Option<&str>) -> Result<Vec<Leaf>> {
    describe(relation, None, age_column)
}

/// Leaf `oid` of `relation`, if it still is one (a step reads only its own leaf).
pub fn leaf(relation: u32, oid: u32, age_column: Option<&str>) -> Result<Option<Leaf>> {
    Ok(describe(relation, Some(&[oid]), age_column)?.pop())
}

/// Those of `oids` that still are leaves of `relation`, in oid order: one catalog read for the
/// leaves a step may retire.
pub fn these(relation: u32, oids: &[u32], age_column: Option<&str>) -> Result<Vec<Leaf>> {
    describe(relation, Some(oids), age_column)
}

fn describe(relation: u32, only: Option<&[u32]>, age_column: Option<&str>) -> Result<Vec<Leaf>> {
    if let Some(oids) = only {
        lock_first(relation, oids);
    }
    // Planned once per backend: steps read their leaves with it.
    let leaves: Option<Vec<Leaf>> = query_json_kept(
        &"WITH l(relid) AS (
             SELECT b FROM retention._below($1::bigint::oid) b
              JOIN pg_catalog.pg_class c ON c.oid = b AND c.relkind <> 'p'
              WHERE $3::bigint[] IS NULL
             UNION ALL
             -- Given leaves: those the table is or is an ancestor of (cheaper than the tree).
             SELECT c.oid FROM pg_catalog.pg_class c
              WHERE c.oid = ANY ($3::bigint[]::oid[]) AND c.relkind <> 'p'
                AND (c.oid = $1::bigint::oid OR $1::bigint::oid IN (
                        SELECT a.relid FROM pg_catalog.pg_partition_ancestors(c.oid) a)))
         SELECT coalesce(jsonb_agg(jsonb_build_object(
                    'oid', c.oid::bigint,
                    'qualified', format('%I.%I', n.nspname, c.relname),
                    'bound', coalesce(pg_catalog.pg_get_expr(c.relpartbound, c.oid), ''),
                    'default', EXISTS (
                        SELECT 1 FROM pg_catalog.pg_partition_ancestors(c.oid) a
                          JOIN pg_catalog.pg_class ac ON ac.oid = a.relid
                         WHERE pg_catalog.pg_get_expr(ac.relpartbound, ac.oid) = 'DEFAULT'),
                    'age_bounds', (
                        SELECT jsonb_build_object(
                                   'upper', coalesce(jsonb_agg(u.upper) FILTER (WHERE u.upper IS NOT NULL), '[]'),
                                   'lower', coalesce(jsonb_agg(u.lower) FILTER (WHERE u.lower IS NOT NULL), '[]'))
                          FROM pg_catalog.pg_partition_ancestors(c.oid) a
                          JOIN pg_catalog.pg_class ac ON ac.oid = a.relid AND ac.relispartition
                          JOIN pg_catalog.pg_inherits i ON i.inhrelid = ac.oid
                          JOIN pg_catalog.pg_partitioned_table pt ON pt.partrelid = i.inhparent
                          JOIN pg_catalog.pg_attribute att ON att.attrelid = pt.partrelid
                                                         AND att.attnum = pt.partattrs[0]
                          CROSS JOIN LATERAL (SELECT pg_catalog.pg_get_expr(ac.relpartbound, ac.oid) AS printed) e
                          CROSS JOIN LATERAL (SELECT substring(e.printed FROM ' TO \\((.*)\\)$') AS upper,
                                                     substring(e.printed FROM '^FOR VALUES FROM \\((.*)\\) TO \\(') AS lower) u
                         WHERE pt.partstrat = 'r' AND pt.partnatts = 1 AND att.attname = $2),
                    'owner', c.relowner::bigint,
                    'delete_triggers', EXISTS (
                        SELECT 1 FROM pg_catalog.pg_trigger tg
                         WHERE tg.tgrelid = c.oid AND NOT tg.tgisinternal AND tg.tgenabled <> 'D'
                           AND (tg.tgtype & 8) <> 0),
                    'parent', p.qualified,
                    'parent_oid', p.oid,
                    'parent_owner', p.owner,
                    'lineage', {lineage})
                  ORDER BY c.oid), '[]')
           FROM l JOIN pg_catalog.pg_class c ON c.oid = l.relid
           JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
           -- The partitioned table a partition is in (a partition has exactly one).
           LEFT JOIN LATERAL (
                SELECT format('%I.%I', pn.nspname, pc.relname) AS qualified,
                       pc.oid::bigint AS oid, pc.relowner::bigint AS owner
                  FROM pg_catalog.pg_inherits i
                  JOIN pg_catalog.pg_class pc ON pc.oid = i.inhparent
                  JOIN pg_catalog.pg_namespace pn ON pn.oid = pc.relnamespace
                 WHERE i.inhrelid = c.oid AND c.relispartition) p ON true"
            .replace("{lineage}", &LINEAGE.replace("{oid}", "c.oid")),
        &[
            PgOid::BuiltIn(pg_sys::BuiltinOid::INT8OID),
            PgOid::BuiltIn(pg_sys::BuiltinOid::TEXTOID),
            PgOid::BuiltIn(pg_sys::BuiltinOid::INT8ARRAYOID),
        ],
        &[
            i64::from(relation).into(),
            age_column.into(),
            only.map(|oids| oids.iter().map(|&o| i64::from(o)).collect::<Vec<i64>>())
                .into(),
        ],
    )?;
    leaves.ok_or_else(|| returned_nothing("listing a table's leaves"))
}

/// Takes the ACCESS SHARE locks that printing the bounds of `oids` takes anyway (`pg_get_expr`
/// locks the relation it prints for: the leaf and the tables above it), on `relation` first
/// and then on each of `oids`, before the statement that describes them. Taken inside that
/// statement, a lock that waits for another session's DETACH PARTITION or DROP TABLE of a leaf
/// is granted after its snapshot was taken: the leaf would be described half as it was (a
/// partition, with its parent and bound) and half as it is (no longer under the table), and
/// one gone would be named by a run step that fails on it. Taken here, the statement's
/// snapshot is taken after every wait, and a leaf detached or dropped meanwhile is no longer
/// listed: the run goes on without it. Held until the transaction ends, as the statement's
/// own would be; a leaf that no longer exists keeps no lock.
fn lock_first(relation: u32, oids: &[u32]) {
    let share = pg_sys::AccessShareLock as pg_sys::LOCKMODE;
    for &oid in std::iter::once(&relation).chain(oids.iter().filter(|&&o| o != relation)) {
        let id = pg_sys::Oid::from(oid);
        // Safety: lock-manager and syscache calls on a relation id, in a transaction (an ERROR
        // inside, a lock timeout or a cancel, becomes a Rust panic that pgrx raises again). A
        // lock on an id whose relation is gone is let go at once.
        unsafe {
            pg_sys::LockRelationOid(id, share);
            if pg_sys::get_rel_relkind(id) == 0 {
                pg_sys::UnlockRelationOid(id, share);
            }
        }
    }
}

/// A bound value as printed in a partition bound (`'2026-01-02 00:00:00+00'`, `42`), as the
/// text its type reads back; None for `MINVALUE`/`MAXVALUE` and anything else that is not one
/// plain value.
pub fn bound_value(printed: &str) -> Option<String> {
    let printed = printed.trim();
    if let Some(quoted) = printed
        .strip_prefix('\'')
        .and_then(|rest| rest.strip_suffix('\''))
    {
        // Inside, a quote is only ever doubled: anything else means more than one value.
        let inner = quoted.replace("''", "");
        return (!inner.contains('\'')).then(|| quoted.replace("''", "'"));
    }
    let numeric = !printed.is_empty()
        && printed
            .chars()
            .all(|c| c.is_ascii_digit() || matches!(c, '-' | '+' | '.' | 'e' | 'E'));
    numeric.then(|| printed.to_owned())
}

#[cfg(any(test, feature = "pg_test"))]
#[pgrx::pg_schema]
// A panic is how a #[pg_test] fails (allow-unwrap-in-tests sees only #[test] functions).
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::{bound_value, Leaf};
    use pgrx::prelude::*;

    #[pg_test]
    fn a_bound_that_did_not_print_is_no_bound() {
        // What the leaf listing reads for a leaf dropped while it runs (see printed_bounds).
        let leaf: Leaf = serde_json::from_value(serde_json::json!({
            "oid": 1, "qualified": "public.t_p1", "bound": "", "owner": 10,
            "age_bounds": { "upper": [null, "'2026-01-02 00:00:00+00'"], "lower": [null] }
        }))
        .expect("a leaf with unprinted bounds decodes");
        assert_eq!(leaf.age_bounds.upper, vec!["'2026-01-02 00:00:00+00'"]);
        assert!(leaf.age_bounds.lower.is_empty());
    }

    #[pg_test]
    fn bound_values_are_read_back_as_their_text() {
        assert_eq!(
            bound_value("'2026-01-02 00:00:00+00'").as_deref(),
            Some("2026-01-02 00:00:00+00")
        );
        assert_eq!(bound_value("'it''s'").as_deref(), Some("it's"));
        assert_eq!(bound_value("42").as_deref(), Some("42"));
        assert_eq!(bound_value("MAXVALUE"), None);
        assert_eq!(bound_value("'a', 'b'"), None);
        assert_eq!(bound_value("'a'), ('b'"), None);
    }
}
