//! Candidates and prune by name (the designs' two steps, for callers of their own):
//! `retention.candidates(policy, max_rows)` lists the rows the next run would delete — every
//! guard a sweep applies (holds, references, consumer pins, floors) — in the order a run takes
//! them (by the age column where it walks an index on it, else by place), each by
//! its key; `retention.prune(policy, keys)` deletes, in the caller's transaction, exactly those
//! of the given rows that are still eligible then, under the same hold fence as a sweep step,
//! and ledgers them as a sweep step is (`prune`, with the rows its foreign keys changed). A key
//! that stopped being eligible is not deleted, and nothing outside the keys is: a retry never
//! broadens. Both read eligibility from the one builder the sweep's statements use
//! (engine/eligible/kinds.rs: `rows(Guards::ALL)`).
//!
//! A row's key is a JSON array of texts: its primary-key values in key order, or for a table
//! without one its place and the transaction that wrote it (`[ctid, xmin]`, and first the
//! partition for a partitioned table), so that another row put in its place later is not it.

use crate::catalog::{
    active_holds, HoldFence, Kind, LedgerEntry, LedgerMethod, Policy, RelationInfo,
};
use crate::engine::eligible::{keeps_every_referenced_row, Eligibility, Guards};
use crate::engine::references::{check_keys_at_once, Dependents};
use crate::error::{present, Result, RetentionError};
use crate::sql_text::ident;
use pgrx::prelude::*;
use serde_json::json;

/// Refuses a policy whose rows these functions do not delete: archive policies (their rows go
/// through the archive protocol) and `entity` policies (a group goes whole, by `run`).
fn swept(policy: &Policy) -> Result<()> {
    if policy.action.archives() {
        return Err(RetentionError::invalid(
            format!("policy {} is an archive policy", policy.name),
            "Its rows leave only through the archive protocol (claim, write, verify, prune).",
            "Use an archiver (pg-retention-archiver once), or claim_batch and complete_batch.",
        ));
    }
    if policy.kind == Kind::Entity {
        return Err(RetentionError::invalid(
            format!("policy {} is an entity policy", policy.name),
            "An entity policy deletes whole groups, never some rows of one.",
            "Use CALL retention.run(policy).",
        ));
    }
    Ok(())
}

/// The key of row `e` (of the eligible rows) joined to its version `x`, as a jsonb array.
fn key_sql(rel: &RelationInfo) -> String {
    if rel.pk.is_empty() {
        let leaf = if rel.partitioned() {
            "e.__rel::regclass::text, "
        } else {
            ""
        };
        return format!("jsonb_build_array({leaf}e.__ctid::text, x.xmin::text)");
    }
    rel.key_json("e")
}

/// The eligible rows `e`, joined for a table without a key to their versions `x` (for their
/// xmin).
fn eligible_versions(elig: &Eligibility<'_>, rel: &RelationInfo) -> String {
    let rows = elig.rows(Guards::ALL);
    if !rel.pk.is_empty() {
        return format!("({rows}) e");
    }
    let same_leaf = if rel.partitioned() {
        " AND x.tableoid = e.__rel"
    } else {
        ""
    };
    format!(
        "({rows}) e JOIN {source} x ON x.ctid = e.__ctid{same_leaf}",
        source = rel.all_rows(),
    )
}

/// The condition that row `e` is one of the keys in `$1` (a jsonb array of keys), each key
/// element back through its column's type, so that a key finds its row by its index.
fn one_of_keys(rel: &RelationInfo) -> Result<String> {
    let (row, elements): (Vec<String>, Vec<String>) = if rel.pk.is_empty() {
        let mut pairs = Vec::new();
        if rel.partitioned() {
            pairs.push(("e.__rel".to_owned(), "regclass::oid".to_owned()));
        }
        pairs.push(("e.__ctid".to_owned(), "tid".to_owned()));
        // xid has no ordering, so no row comparison: its text is compared.
        pairs.push(("x.xmin::text".to_owned(), "text".to_owned()));
        pairs
            .into_iter()
            .enumerate()
            .map(|(i, (col, ty))| (col, format!("(k->>{i})::{ty}")))
            .unzip()
    } else {
        rel.pk
            .iter()
            .enumerate()
            .map(|(i, c)| {
                Ok((
                    format!("e.{}", ident(c)),
                    format!("(k->>{i})::{}", rel.column(c)?.type_name),
                ))
            })
            .collect::<Result<Vec<_>>>()?
            .into_iter()
            .unzip()
    };
    Ok(format!(
        "({}) IN (SELECT {} FROM jsonb_array_elements($1) k)",
        row.join(", "),
        elements.join(", ")
    ))
}

/// The place order of the eligible rows (a sweep's order by block ranges).
/// The order a run takes the rows in: by the age column when its steps walk an index on it
/// (a table that is not partitioned, `engine/sweep/plan.rs::has_age_index`), otherwise by
/// place (block ranges; leaf by leaf).
fn walk_order(policy: &Policy, rel: &RelationInfo) -> Result<String> {
    if rel.partitioned() {
        return Ok("e.__rel, e.__ctid".into());
    }
    match &policy.age_column {
        Some(age)
            if policy.kind.by_age()
                && crate::engine::sweep::plan::has_age_index(rel.oid, policy)? =>
        {
            Ok(format!("e.{}, e.__ctid", ident(age)))
        }
        _ => Ok("e.__ctid".into()),
    }
}

/// Up to `max_rows` rows the next run of `policy` would delete: (partition or table, key).
pub fn candidates(policy: &Policy, max_rows: i64) -> Result<Vec<(String, pgrx::JsonB)>> {
    swept(policy)?;
    crate::limits::batch_rows("max_rows", max_rows)?;
    if !policy.enabled {
        return Ok(Vec::new());
    }
    let rel = RelationInfo::load(policy.relation, &policy.relation_name)?;
    let holds = active_holds(policy.relation)?;
    let elig = Eligibility::new(policy, &rel, &holds)?;
    let relation = if rel.partitioned() {
        "e.__rel::regclass::text".to_owned()
    } else {
        crate::sql_text::literal(&rel.qualified)
    };
    let sql = format!(
        "SELECT {relation}, {key} FROM {rows} ORDER BY {order} LIMIT {max_rows}",
        key = key_sql(&rel),
        rows = eligible_versions(&elig, &rel),
        order = walk_order(policy, &rel)?,
    );
    elig.as_owner(|| {
        Spi::connect(|client| {
            let mut out = Vec::new();
            for row in client.select(&sql, None, &[])? {
                let relation: Option<String> = row.get(1)?;
                let key: Option<pgrx::JsonB> = row.get(2)?;
                out.push((
                    present(relation, "a candidate's table")?,
                    present(key, "a candidate's key")?,
                ));
            }
            Ok(out)
        })
    })
}

/// Deletes those of `keys` (as [`candidates`] lists them) that are eligible now, and ledgers
/// them; returns the rows deleted.
pub fn prune(policy: &Policy, keys: &serde_json::Value) -> Result<i64> {
    swept(policy)?;
    if !policy.enabled {
        return Err(RetentionError::WrongState {
            message: format!("policy {} is disabled", policy.name),
            hint: "retention.enable_policy to delete by it again.".into(),
        });
    }
    let Some(list) = keys.as_array() else {
        return Err(bad_keys("keys must be a JSON array of keys"));
    };
    crate::limits::batch_rows("the number of keys", list.len() as i64)?;
    let rel = RelationInfo::load(policy.relation, &policy.relation_name)?;
    let arity = if rel.pk.is_empty() {
        2 + usize::from(rel.partitioned())
    } else {
        rel.pk.len()
    };
    if list.iter().any(|k| {
        k.as_array()
            .is_none_or(|k| k.len() != arity || k.iter().any(|v| !v.is_string()))
    }) {
        return Err(bad_keys(&format!(
            "each key must be an array of {arity} strings, as retention.candidates lists them"
        )));
    }
    let dependents = Dependents::of(&rel, keeps_every_referenced_row(policy))?;
    let before = dependents.counts()?;
    let mut attempt = 0;
    let outcome = loop {
        attempt += 1;
        let (fence, holds) = HoldFence::read(rel.oid)?;
        let elig = Eligibility::new(policy, &rel, &holds)?;
        let matching = one_of_keys(&rel)?;
        let target = if rel.partitioned() {
            "(d.tableoid, d.ctid) IN (SELECT __rel, __ctid FROM m)"
        } else {
            "d.ctid = ANY (ARRAY(SELECT __ctid FROM m))"
        };
        let rel_col = if rel.partitioned() { "e.__rel, " } else { "" };
        let sql = format!(
            "WITH m AS MATERIALIZED (
                 SELECT {rel_col}e.__ctid FROM {rows}
                  WHERE {matching}),
             deleted AS (
                 DELETE FROM {table} d WHERE {target} AND NOT {fence} RETURNING {returning})
             SELECT count(*), {keys} FROM deleted",
            rows = eligible_versions(&elig, &rel),
            table = rel.all_rows(),
            fence = fence.tripped(),
            returning = elig.returning("d"),
            keys = elig.deleted_keys("deleted"),
        );
        check_keys_at_once(&rel)?;
        let (deleted, recorded) = elig.as_owner(|| {
            Ok(Spi::connect_mut(|client| {
                let row = client.update(&sql, Some(1), &[pgrx::JsonB(keys.clone()).into()])?;
                let row = row.first();
                Ok::<_, pgrx::spi::SpiError>((row.get::<i64>(1)?, row.get::<pgrx::JsonB>(2)?))
            })?)
        })?;
        let deleted = present(deleted, "the rows pruned")?;
        if deleted > 0 || attempt >= 5 || !fence.tripped_now()? {
            break (deleted, holds, recorded);
        }
    };
    let (deleted, holds, recorded) = outcome;
    let mut detail = json!({ "by": "retention.prune", "requested": list.len() });
    if let Some(recorded) = recorded {
        detail["keys"] = recorded.0;
    }
    if !dependents.is_empty() {
        let (changed, _) = dependents.since(&before)?;
        if let Some(changed) = changed {
            detail["dependents"] = changed;
        }
    }
    if deleted > 0 {
        LedgerEntry {
            method: match policy.kind {
                Kind::Orphan => LedgerMethod::OrphanSweep,
                _ => LedgerMethod::Prune,
            },
            policy: Some(policy),
            relation: None,
            rows: deleted,
            hold_ids: holds.iter().map(|h| h.id).collect(),
            actor: &crate::catalog::caller(),
            run_id: None,
            detail,
        }
        .append()?;
    }
    Ok(deleted)
}

fn bad_keys(message: &str) -> RetentionError {
    RetentionError::invalid(
        message.to_owned(),
        "A key is a JSON array of texts: the primary-key values in key order, or [ctid, xmin] (with the partition first) for a table without one.",
        "Pass the keys retention.candidates returned.",
    )
}
