//! `retention.hold_records` and `retention.hold_lifts`: legal holds, placed and lifted by
//! appending, never changed; and the fence that lets a hold placed mid-batch win.

use crate::catalog::announce::{self, Changed};
use crate::catalog::{prepared, query_json, query_json_kept};
use crate::error::{returned_nothing, OrReport, Result, RetentionError};
use pgrx::prelude::*;
use pgrx::PgOid;

/// An active legal hold whose reach includes a governed table's rows.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct Hold {
    /// Hold id.
    pub id: i64,
    /// The validated predicate text.
    pub predicate: String,
    /// The role that placed it: the predicate runs with its privileges.
    pub placer: u32,
    /// The held table, quoted and qualified: the table itself, a partitioned table above it,
    /// or a partition below it.
    pub relation: String,
    /// The held table's columns in attribute order (a row of it is built from them).
    pub columns: Vec<String>,
    /// None when the hold covers every row of the governed table (placed on it or above it);
    /// for a hold placed on a partition below it, the leaves it covers.
    pub leaves: Option<Vec<u32>>,
}

/// The holds in force on the rows of `relation` right now: its own, those of the partitioned
/// tables above it, and those of the partitions below it (`retention._tree_of`).
pub fn active_holds(relation: u32) -> Result<Vec<Hold>> {
    let holds: Option<Vec<Hold>> = query_json_kept(
        "SELECT coalesce(jsonb_agg(jsonb_build_object(
                    'id', h.id, 'predicate', h.predicate, 'placer', h.placed_by::bigint,
                    'relation', format('%I.%I', n.nspname, c.relname),
                    'columns', (SELECT jsonb_agg(a.attname ORDER BY a.attnum) FROM pg_catalog.pg_attribute a
                                 WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped),
                    'leaves', CASE WHEN c.oid = $1::bigint::oid
                                     OR c.oid IN (SELECT a.relid FROM pg_catalog.pg_partition_ancestors($1::bigint::oid) a)
                                   THEN NULL
                                   ELSE (SELECT coalesce(jsonb_agg(b::bigint), '[]')
                                           FROM retention._below(c.oid) b
                                           JOIN pg_catalog.pg_class bc ON bc.oid = b AND bc.relkind <> 'p')
                              END) ORDER BY h.id), '[]')
           FROM retention.hold_records h
           JOIN pg_catalog.pg_class c ON c.oid = h.relation
           JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
          WHERE h.relation::oid IN (SELECT retention._tree_of($1::bigint::oid))
            AND NOT EXISTS (SELECT 1 FROM retention.hold_lifts l WHERE l.hold_id = h.id)",
        &[pgrx::PgOid::BuiltIn(pg_sys::BuiltinOid::INT8OID)],
        &[i64::from(relation).into()],
    )?;
    holds.ok_or_else(|| returned_nothing("reading holds"))
}

/// How many hold records reached a table's rows when its holds were read. A delete statement that adds
/// `AND NOT <tripped()>` deletes nothing when its own snapshot sees a hold placed after the
/// read, so a hold committed while a batch is being prepared still wins.
#[derive(Debug, Clone)]
pub struct HoldFence {
    relation: u32,
    seen: i64,
}

impl HoldFence {
    /// Counts the table's hold records, then reads its active holds (in that order).
    pub fn read(relation: u32) -> Result<(HoldFence, Vec<Hold>)> {
        let seen = hold_count(relation)?;
        Ok((HoldFence { relation, seen }, active_holds(relation)?))
    }

    /// The fence of a read that counted `seen` hold records of `relation`.
    pub fn since(relation: u32, seen: i64) -> HoldFence {
        HoldFence { relation, seen }
    }

    /// The hold records the read counted.
    pub fn seen(&self) -> i64 {
        self.seen
    }

    /// SQL that is true, in the statement's snapshot, when a hold was placed after the read.
    /// Statements that evaluate predicates run as a policy's owner, who cannot read the
    /// catalog: `retention._hold_count` counts for them, once per statement (an init plan).
    pub fn tripped(&self) -> String {
        format!(
            "((SELECT retention._hold_count({}::oid)) > {})",
            self.relation, self.seen
        )
    }

    /// Whether a hold was placed after the read, as of now: a batch that deleted nothing asks
    /// this to tell a new hold from an empty range.
    pub fn tripped_now(&self) -> Result<bool> {
        Spi::get_one::<bool>(&format!("SELECT {}", self.tripped()))?
            .ok_or_else(|| returned_nothing("the hold fence"))
    }
}

/// How many hold records have ever reached the rows of table `relation` (those placed on any
/// table of its partition tree, `retention._tree_of`), in the current snapshot: hold records
/// are appended and never removed, so a greater count means a hold placed since.
pub fn hold_count(relation: u32) -> Result<i64> {
    let plan = prepared::cached(
        "SELECT count(*) FROM retention.hold_records h WHERE h.relation::oid = ANY ($1)",
        &[PgOid::BuiltIn(pg_sys::BuiltinOid::OIDARRAYOID)],
        false,
    )?;
    let tree = super::tree::tree_of(pg_sys::Oid::from(relation));
    // Generic plans only: costed for an array of ten, the generic plan never looked cheaper
    // than a custom plan for the tree's one or few tables, so the statement was planned again
    // at every call (every step of a sweep calls this).
    prepared::generic_plans(|| prepared::one::<i64>(&plan, &[tree.into()]))?
        .ok_or_else(|| returned_nothing("counting hold records"))
}

/// `retention._hold_count(relation)`: [`hold_count`] for the delete statements, which run as a
/// policy's owner and cannot read the catalog themselves. In Rust with its statement planned
/// once per backend: a SQL function is parsed and planned again at every call, and every
/// sweep step calls this once.
#[pg_extern(stable, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn _hold_count(relation: pg_sys::Oid) -> i64 {
    hold_count(relation.to_u32()).or_report()
}

/// A hold to record.
pub struct NewHold<'a> {
    /// The held table.
    pub relation: u32,
    /// Its qualified name.
    pub relation_name: &'a str,
    /// The validated predicate.
    pub predicate: &'a str,
    /// Why.
    pub reason: &'a str,
    /// Who asks (free text: a person, a case).
    pub actor: &'a str,
    /// The role that placed it: its predicate runs with this role's privileges.
    pub placed_by: u32,
    /// Whether it also refuses every change to its rows (hold_guard.rs).
    pub enforced: bool,
}

impl NewHold<'_> {
    /// Appends the hold record; returns its id.
    pub fn append(&self) -> Result<i64> {
        let id = Spi::get_one_with_args::<i64>(
            "INSERT INTO retention.hold_records (relation, relation_name, predicate, reason, actor, placed_by, enforced)
             VALUES ($1::bigint::oid, $2, $3, $4, $5, $6::bigint::oid, $7) RETURNING id",
            &[
                i64::from(self.relation).into(),
                self.relation_name.into(),
                self.predicate.into(),
                self.reason.into(),
                self.actor.into(),
                i64::from(self.placed_by).into(),
                self.enforced.into(),
            ],
        )?
        .ok_or_else(|| returned_nothing("hold insert"))?;
        announce::changed(Changed::HoldRecords)?;
        Ok(id)
    }
}

/// Who placed hold `id` (its actor) and why, if the hold exists.
pub fn hold_placement(id: i64) -> Result<Option<(String, String)>> {
    query_json::<(String, String)>(
        "SELECT jsonb_build_array(h.actor, h.reason) FROM retention.hold_records h WHERE h.id = $1",
        &[id.into()],
    )
}

/// The held table of hold `id` (its oid), if the hold exists.
pub fn hold_relation(id: i64) -> Result<Option<u32>> {
    let oid = crate::catalog::optional_one::<i64, _>(
        "SELECT h.relation::oid::bigint FROM retention.hold_records h WHERE h.id = $1",
        &[id.into()],
    )?;
    Ok(oid.and_then(|o| u32::try_from(o).ok()))
}

/// The held table's name of hold `id`, and whether the hold is lifted; None for no such hold.
pub fn hold_state(id: i64) -> Result<Option<(String, bool)>> {
    query_json::<(String, bool)>(
        "SELECT jsonb_build_array(h.relation_name,
                    EXISTS (SELECT 1 FROM retention.hold_lifts l WHERE l.hold_id = h.id))
           FROM retention.hold_records h WHERE h.id = $1",
        &[id.into()],
    )
}

/// Appends the lift of hold `id`.
pub fn append_lift(id: i64, actor: &str, reason: &str) -> Result<()> {
    Spi::run_with_args(
        "INSERT INTO retention.hold_lifts (hold_id, actor, reason) VALUES ($1, $2, $3)",
        &[id.into(), actor.into(), reason.into()],
    )?;
    announce::changed(Changed::HoldLifts)
}

/// A hold as a per-row check evaluates it.
#[derive(Clone, serde::Deserialize)]
pub struct HoldCheck {
    /// The predicate.
    pub predicate: String,
    /// The role it runs as.
    pub placer: u32,
    /// The held table's row type.
    pub reltype: u32,
}

/// Hold `id` as a per-row check evaluates it.
pub fn hold_check(id: i64) -> Result<HoldCheck> {
    query_json(
        "SELECT jsonb_build_object('predicate', h.predicate, 'placer', h.placed_by::bigint,
                                   'reltype', c.reltype::bigint)
           FROM retention.hold_records h JOIN pg_catalog.pg_class c ON c.oid = h.relation
          WHERE h.id = $1",
        &[id.into()],
    )?
    .ok_or(RetentionError::UnknownHold(id))
}
