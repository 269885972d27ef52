//! Foreign keys that reference a governed table, as its deletes must treat them: each acts as
//! it was declared.
//!
//! * `NO ACTION` / `RESTRICT`: PostgreSQL refuses to delete a referenced row, so a sweep skips
//!   it (and counts it: `referenced` in preview, `reference_skip` in the ledger).
//! * `CASCADE`: the row goes and its referencing rows go with it — unless one of them is held,
//!   or would itself be refused or cascade into a held row (the same rule, down the chain of
//!   cascading keys): then the row is skipped as referenced. A hold on a dependent row protects
//!   the row it depends on.
//! * `SET NULL` / `SET DEFAULT`: the row goes and its referencing rows are updated.
//!
//! Archive policies and `unreferenced` policies keep every referenced row: a cascade would
//! delete rows no archive holds, and an `unreferenced` policy is about references (its keys
//! refuse deletes by validation). The rows a step's cascades delete and its SET NULL / SET
//! DEFAULT keys update are counted per table for its ledger entry ([`Dependents`]).

use crate::catalog::{active_holds, query_json, Hold, HoldFence, Reference, RelationInfo};
use crate::engine::eligible::{hold_call, on_held_leaves};
use crate::error::Result;
use crate::sql_text::ident;
use pgrx::prelude::*;
use serde_json::json;
use std::collections::BTreeMap;

/// How deep a chain of cascading keys is followed; past it (or round a cycle of keys), a
/// cascading key whose tables have anything to protect keeps every row it references.
const MAX_DEPTH: usize = 4;

/// The keys that reference a table, with what deleting one of its rows depends on.
#[derive(Debug, Clone, Default)]
pub struct References {
    /// Keys whose referencing rows keep a row.
    keeping: Vec<Reference>,
    /// Cascading keys whose referencing rows may be protected, with their table's protections.
    cascading: Vec<(Reference, Protected)>,
}

/// What protects the rows a cascade would delete from one table.
#[derive(Debug, Clone)]
struct Protected {
    holds: Vec<Hold>,
    /// The hold records of the table when `holds` were read: a step whose statement sees a
    /// hold placed since deletes nothing.
    fence: HoldFence,
    /// The keys referencing that table in turn.
    below: References,
}

impl References {
    /// The keys referencing `rel` as a policy owned by `owner` deletes its rows; `keep_all`
    /// when every referenced row is kept (archive and `unreferenced` policies). Refuses (42501)
    /// a referencing table whose row-level security would hide rows from the owner: the guard
    /// would not see the rows that keep a row, or the held rows a cascade would reach.
    pub fn load(rel: &RelationInfo, keep_all: bool, owner: u32) -> Result<References> {
        Self::load_below(&rel.referenced_by, keep_all, owner, &mut vec![rel.oid])
    }

    fn load_below(
        refs: &[Reference],
        keep_all: bool,
        owner: u32,
        path: &mut Vec<u32>,
    ) -> Result<References> {
        let mut out = References::default();
        for r in refs {
            if keep_all || r.refuses_delete() || r.on_delete == "c" {
                crate::author::ensure_sees_every_row(owner, r.child_oid, &r.child)?;
            }
            if keep_all || r.refuses_delete() {
                out.keeping.push(r.clone());
                continue;
            }
            if r.on_delete != "c" {
                // SET NULL / SET DEFAULT: the referencing rows stay.
                continue;
            }
            if path.contains(&r.child_oid) || path.len() > MAX_DEPTH {
                // A cycle of cascades (a tree of rows), or a chain too long to follow: keep
                // the row when the table below could protect anything — it has holds, a key
                // that refuses deletes, or cascades on to a table off the path.
                let child = RelationInfo::load(r.child_oid, &r.child)?;
                let protects = !active_holds(child.oid)?.is_empty()
                    || child.referenced_by.iter().any(|below| {
                        below.refuses_delete()
                            || (below.on_delete == "c" && !path.contains(&below.child_oid))
                    });
                if protects {
                    out.keeping.push(r.clone());
                }
                continue;
            }
            let child = RelationInfo::load(r.child_oid, &r.child)?;
            let (fence, holds) = HoldFence::read(child.oid)?;
            path.push(child.oid);
            let below = Self::load_below(&child.referenced_by, false, owner, path)?;
            path.pop();
            if holds.is_empty() && below.is_empty() {
                continue;
            }
            out.cascading.push((
                r.clone(),
                Protected {
                    holds,
                    fence,
                    below,
                },
            ));
        }
        Ok(out)
    }

    /// Whether no key bears on deleting a row.
    pub fn is_empty(&self) -> bool {
        self.keeping.is_empty() && self.cascading.is_empty()
    }

    /// SQL true when the row addressed as `alias` is kept by a referencing row; None when no
    /// key can keep one.
    pub fn kept(&self, alias: &str) -> Option<String> {
        self.kept_at(alias, 0)
    }

    fn kept_at(&self, alias: &str, depth: usize) -> Option<String> {
        if self.is_empty() {
            return None;
        }
        let c = format!("__c{depth}");
        let join = |r: &Reference| {
            r.child_cols
                .iter()
                .zip(&r.parent_cols)
                .map(|(cc, pc)| format!("{c}.{} = {alias}.{}", ident(cc), ident(pc)))
                .collect::<Vec<_>>()
                .join(" AND ")
        };
        let mut parts: Vec<String> = self
            .keeping
            .iter()
            .map(|r| format!("EXISTS (SELECT 1 FROM {} {c} WHERE {})", r.child, join(r)))
            .collect();
        for (r, p) in &self.cascading {
            let mut protects: Vec<String> = p.holds.iter().map(|h| held_as(h, &c)).collect();
            if !p.holds.is_empty() || !p.below.is_empty() {
                // A hold placed on the table below since it was read: keep everything.
                protects.push(p.fence.tripped());
            }
            protects.extend(p.below.kept_at(&c, depth + 1));
            parts.push(format!(
                "EXISTS (SELECT 1 FROM {} {c} WHERE {} AND ({}))",
                r.child,
                join(r),
                protects.join(" OR ")
            ));
        }
        Some(format!("({})", parts.join(" OR ")))
    }
}

/// Makes the foreign keys a delete of this transaction meets check (and act) at the end of each
/// statement, deferrable ones included. A delete runs as the policy's owner inside a
/// security-restricted operation, where PostgreSQL refuses to queue a deferred trigger (42501
/// "cannot fire deferred trigger within security-restricted operation"): every table a
/// `DEFERRABLE` key references (every table a Django `ForeignKey` points at) could not be
/// governed. For the transactions pg_retention owns only (a sweep step's, an archiver's prune),
/// before their delete of `rel`'s rows: nothing of the caller's is pending there. Only a key
/// that references the table queues an event when its rows are deleted; without one, nothing.
pub fn check_keys_at_once(rel: &RelationInfo) -> Result<()> {
    if rel.referenced_by.is_empty() {
        return Ok(());
    }
    Ok(Spi::run("SET CONSTRAINTS ALL IMMEDIATE")?)
}

/// SQL true when the row addressed as `alias` matches hold `h`, evaluated as its placer.
fn held_as(h: &Hold, alias: &str) -> String {
    on_held_leaves(h, &format!("{alias}.tableoid"), hold_call(h, Some(alias)))
}

/// How a dependent table's rows change when a referenced row goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    Deleted,
    Updated,
}

/// The tables whose rows a delete from a governed table deletes (cascades, down their chain)
/// or updates (SET NULL / SET DEFAULT keys), with how many rows of each the current
/// transaction has changed so far: the difference over a step is what its cascades did.
#[derive(Debug, Clone, Default)]
pub struct Dependents {
    tables: Vec<(u32, String, Change)>,
}

impl Dependents {
    /// The dependents of `rel` (none for a policy that keeps every referenced row).
    pub fn of(rel: &RelationInfo, keep_all: bool) -> Result<Dependents> {
        let mut out = Dependents::default();
        if !keep_all {
            out.collect(rel, &mut vec![rel.oid])?;
        }
        Ok(out)
    }

    fn collect(&mut self, rel: &RelationInfo, path: &mut Vec<u32>) -> Result<()> {
        for r in &rel.referenced_by {
            let change = match r.on_delete.as_str() {
                "c" => Change::Deleted,
                "n" | "d" => Change::Updated,
                _ => continue,
            };
            if !self
                .tables
                .iter()
                .any(|(o, _, c)| *o == r.child_oid && *c == change)
            {
                self.tables.push((r.child_oid, r.child.clone(), change));
            }
            if change == Change::Deleted && !path.contains(&r.child_oid) && path.len() <= MAX_DEPTH
            {
                let child = RelationInfo::load(r.child_oid, &r.child)?;
                path.push(child.oid);
                self.collect(&child, path)?;
                path.pop();
            }
        }
        Ok(())
    }

    /// Whether a delete changes no other table.
    pub fn is_empty(&self) -> bool {
        self.tables.is_empty()
    }

    /// The rows of each dependent table (all its partitions) the current transaction has
    /// deleted or updated so far, in order.
    pub fn counts(&self) -> Result<Vec<i64>> {
        if self.tables.is_empty() {
            return Ok(vec![]);
        }
        let items: Vec<String> = self
            .tables
            .iter()
            .map(|(oid, _, change)| {
                let f = match change {
                    Change::Deleted => "pg_stat_get_xact_tuples_deleted",
                    Change::Updated => "pg_stat_get_xact_tuples_updated",
                };
                format!("(SELECT coalesce(sum(pg_catalog.{f}(l)), 0) FROM retention._tree_of({oid}::oid) l)")
            })
            .collect();
        Ok(
            Spi::get_one::<Vec<i64>>(&format!("SELECT ARRAY[{}]::bigint[]", items.join(", ")))?
                .unwrap_or_default(),
        )
    }

    /// Per leaf (partition) of every dependent table: its quoted name and the rows of it the
    /// current transaction has deleted or updated so far.
    pub fn leaf_counts(&self) -> Result<BTreeMap<u32, (String, i64)>> {
        if self.tables.is_empty() {
            return Ok(BTreeMap::new());
        }
        let oids: Vec<i64> = self.tables.iter().map(|(o, _, _)| i64::from(*o)).collect();
        let rows: Vec<(u32, String, i64)> = query_json(
            "SELECT coalesce(jsonb_agg(jsonb_build_array(l::bigint, l::regclass::text,
                        pg_catalog.pg_stat_get_xact_tuples_deleted(l)
                        + pg_catalog.pg_stat_get_xact_tuples_updated(l))), '[]')
               FROM (SELECT DISTINCT l FROM unnest($1::bigint[]) t(o),
                            retention._tree_of(t.o::oid) l) d",
            &[oids.into()],
        )?
        .unwrap_or_default();
        Ok(rows.into_iter().map(|(o, n, c)| (o, (n, c))).collect())
    }

    /// What changed since `before` (from [`Dependents::counts`]), for a ledger entry: the
    /// tables whose rows were deleted or updated, with how many (None when nothing changed),
    /// and the counts now.
    pub fn since(&self, before: &[i64]) -> Result<(Option<serde_json::Value>, Vec<i64>)> {
        if self.tables.is_empty() {
            return Ok((None, vec![]));
        }
        let after = self.counts()?;
        let changed: Vec<serde_json::Value> = self
            .tables
            .iter()
            .zip(after.iter().zip(before.iter().chain(std::iter::repeat(&0))))
            .filter(|(_, (a, b))| *a > *b)
            .map(|((_, table, change), (a, b))| match change {
                Change::Deleted => json!({ "table": table, "deleted": a - b }),
                Change::Updated => json!({ "table": table, "updated": a - b }),
            })
            .collect();
        Ok(((!changed.is_empty()).then(|| json!(changed)), after))
    }
}
