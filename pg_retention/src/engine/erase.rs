//! Erasure: the rows of a table that match a predicate are deleted now, whatever policies and
//! holds say (erasure outranks a hold; the ledger names every hold that lost). The delete runs
//! as the caller, who needs SELECT and DELETE on the table: `retention_eraser` lets a role ask
//! for an erasure, the table's grants say whose rows it may erase. A partitioned table is
//! erased leaf by leaf, each leaf addressed through the table (the caller's grants are on it,
//! not on its partitions) with the leaf's partition constraint, which prunes the statement to
//! the leaf, and its `tableoid`, which keeps it there when the constraint cannot prune (hash
//! partitions: each leaf's rows are then found by a scan of every leaf). Foreign keys act as PostgreSQL declares them: a row still referenced
//! (NO ACTION, RESTRICT) fails the statement with 23503, so erasing a parent is the caller's
//! to order; CASCADE and SET NULL change the referencing rows. Archived rows are reached
//! through supersessions (`catalog/supersession.rs`), recorded when the live rows are gone.

use crate::api::hold::non_empty;
use crate::catalog::scrub;
use crate::catalog::supersession::Erasure;
use crate::catalog::{
    active_holds, caller, caller_oid, partition, query_json, Hold, Leaf, LedgerEntry, LedgerMethod,
    RelationInfo,
};
use crate::engine::eligible::hold_call;
use crate::engine::references::Dependents;
use crate::engine::validate::check_predicate;
use crate::error::{returned_nothing, Result, RetentionError};
use crate::sql_text::predicate as parenthesized;
use serde_json::json;
use std::collections::BTreeMap;

/// Rows one delete statement takes at most.
const STATEMENT_ROWS: i64 = 10_000;

/// Rounds over a leaf after it seemed exhausted: a row changed while a statement ran is left by
/// it (its version moved) and found by the next round.
const ROUNDS: usize = 3;

/// An erasure request.
pub struct Request<'a> {
    /// The table.
    pub relation: u32,
    /// Which of its rows.
    pub predicate: &'a str,
    /// The request's reference (a ticket, a case number): how it is found again.
    pub request_ref: &'a str,
    /// Who asked, for the ledger.
    pub actor: &'a str,
}

/// What one call erased.
#[derive(serde::Serialize)]
pub struct Erased {
    /// Rows deleted.
    pub deleted: i64,
    /// No matching row is left (with a row budget: the budget was not used up).
    pub done: bool,
    /// Archives whose slices are still to be rewritten without the erased rows (once done).
    pub pending_archives: i64,
}

/// Erases up to `budget` rows (all of them without one) of the request, in statements of at
/// most [`STATEMENT_ROWS`] rows, and ledgers it: one `erasure` entry, and one `hold_collision`
/// entry per active hold that matched erased rows. When no matching row is left, every archive
/// of the table gets a pending supersession.
pub fn erase(req: &Request<'_>, budget: Option<i32>) -> Result<Erased> {
    non_empty(req.request_ref, "request_ref")?;
    non_empty(req.actor, "actor")?;
    if let Some(b) = budget.filter(|b| *b < 1) {
        return Err(RetentionError::invalid(
            format!("batch_rows must be at least 1, got {b}"),
            "Each committed batch erases at most batch_rows rows.",
            "Pass batch_rows => 10000 or so.",
        ));
    }
    let rel = RelationInfo::load(req.relation, &format!("oid {}", req.relation))?;
    rel.ensure_not_catalog()?;
    if !matches!(rel.relkind.as_str(), "r" | "p") {
        return Err(RetentionError::invalid(
            format!("{} is not a table", rel.qualified),
            format!("Its relkind is {}.", rel.relkind),
            "Erase from the table (or partitioned table) that holds the rows.",
        ));
    }
    let author = caller_oid();
    check_predicate(&rel, req.predicate, "erasure", author, false)?;
    let holds = active_holds(rel.oid)?;
    let leaves = partition::leaves(rel.oid, None)?;
    let mut deleted = 0i64;
    let mut collided: BTreeMap<i64, i64> = BTreeMap::new();
    let mut exhausted = true;
    // Rows erased per leaf: each leaf erased from is scrubbed (engine/scrub.rs), and so is
    // each leaf of a table whose rows the erasure's deletes cascaded to or updated.
    let mut per_leaf: Vec<(&Leaf, i64)> = Vec::new();
    let dependents = Dependents::of(&rel, false)?;
    let dependents_before = dependents.leaf_counts()?;
    // Erasure outranks holds, enforced ones too: their triggers let these deletes through.
    let _erasing = crate::hold_guard::Erasing::begin();
    'leaves: for info in &leaves {
        let on_leaf: Vec<&Hold> = holds
            .iter()
            .filter(|h| h.leaves.as_ref().is_none_or(|l| l.contains(&info.oid)))
            .collect();
        let leaf = &Target::of(&rel, info)?;
        for _ in 0..ROUNDS {
            loop {
                let want = match budget {
                    Some(b) => (i64::from(b) - deleted).min(STATEMENT_ROWS),
                    None => STATEMENT_ROWS,
                };
                if want == 0 {
                    exhausted = false;
                    break 'leaves;
                }
                let (n, per_hold) = crate::author::run_as(author, || {
                    delete_some(leaf, &on_leaf, req.predicate, want)
                })?;
                deleted += n;
                if n > 0 {
                    match per_leaf.last_mut() {
                        Some((l, rows)) if l.oid == info.oid => *rows += n,
                        _ => per_leaf.push((info, n)),
                    }
                }
                for (h, m) in on_leaf.iter().zip(per_hold) {
                    *collided.entry(h.id).or_default() += m;
                }
                if n < want {
                    break;
                }
            }
            if !crate::author::run_as(author, || any_left(leaf, req.predicate))? {
                continue 'leaves;
            }
        }
        return Err(RetentionError::WrongState {
            message: format!(
                "rows of {} matching the erasure kept changing while it ran",
                leaf.name
            ),
            hint: "Erase again: the rows erased so far stay erased.".into(),
        });
    }
    let pending_archives = if exhausted {
        Erasure {
            relation: rel.oid,
            relation_name: &rel.qualified,
            predicate: req.predicate,
            request_ref: req.request_ref,
            author,
        }
        .supersede_archives()?
    } else {
        0
    };
    for (leaf, rows) in &per_leaf {
        scrub::record(req.request_ref, leaf.oid, &leaf.qualified, *rows)?;
    }
    for (oid, (name, now)) in dependents.leaf_counts()? {
        let before = dependents_before.get(&oid).map_or(0, |(_, n)| *n);
        if now > before {
            scrub::record(req.request_ref, oid, &name, now - before)?;
        }
    }
    let collisions: Vec<(i64, i64)> = collided.into_iter().filter(|(_, n)| *n > 0).collect();
    LedgerEntry {
        method: LedgerMethod::Erasure,
        policy: None,
        relation: Some(&rel.qualified),
        rows: deleted,
        hold_ids: collisions.iter().map(|(id, _)| *id).collect(),
        actor: req.actor,
        run_id: None,
        detail: json!({
            "request_ref": req.request_ref, "predicate": req.predicate, "by": caller(),
            "done": exhausted, "pending_archives": pending_archives,
        }),
    }
    .append()?;
    for (hold, rows) in &collisions {
        LedgerEntry {
            method: LedgerMethod::HoldCollision,
            policy: None,
            relation: Some(&rel.qualified),
            rows: *rows,
            hold_ids: vec![*hold],
            actor: req.actor,
            run_id: None,
            detail: json!({
                "request_ref": req.request_ref, "hold": hold,
                "reason": "erasure outranks a legal hold: the rows it held were erased",
            }),
        }
        .append()?;
    }
    Ok(Erased {
        deleted,
        done: exhausted,
        pending_archives,
    })
}

/// A leaf as the erasure's statements address it.
struct Target {
    /// The leaf's name, for messages.
    name: String,
    /// What the statements read and delete from: `ONLY <table>` for a table that is not
    /// partitioned, else the erased table.
    from: String,
    /// The condition that keeps them to the leaf (`true` for a table that is not partitioned).
    scope: String,
}

impl Target {
    fn of(rel: &RelationInfo, leaf: &Leaf) -> Result<Target> {
        if leaf.oid == rel.oid {
            return Ok(Target {
                name: rel.qualified.clone(),
                from: format!("ONLY {}", rel.qualified),
                scope: "true".into(),
            });
        }
        let constraint = crate::catalog::optional_one::<String, _>(
            "SELECT pg_catalog.pg_get_partition_constraintdef($1::bigint::oid)",
            &[i64::from(leaf.oid).into()],
        )?
        .unwrap_or_else(|| "true".into());
        Ok(Target {
            name: leaf.qualified.clone(),
            from: rel.qualified.clone(),
            scope: format!("({constraint}) AND {{alias}}.tableoid = {}::oid", leaf.oid),
        })
    }

    /// The scope, for rows read as `alias`.
    fn scope(&self, alias: &str) -> String {
        self.scope.replace("{alias}", alias)
    }
}

/// Deletes up to `want` matching rows of `leaf`; the rows deleted, and how many of them each
/// of `holds` matched (in order).
fn delete_some(
    leaf: &Target,
    holds: &[&Hold],
    predicate: &str,
    want: i64,
) -> Result<(i64, Vec<i64>)> {
    let returning = if holds.is_empty() {
        "1 AS one".to_owned()
    } else {
        holds
            .iter()
            .enumerate()
            .map(|(i, h)| format!("{} AS h{i}", hold_call(h, Some("d"))))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let counts: String = (0..holds.len())
        .map(|i| format!(", count(*) FILTER (WHERE g.h{i})"))
        .collect();
    // The predicate reads the rows as `t`, as it was validated; the delete's own alias is `d`.
    let sql = format!(
        "WITH g AS (
             DELETE FROM {from} d
              WHERE {d_scope} AND d.ctid = ANY (ARRAY(
                    SELECT t.ctid FROM {from} t WHERE {t_scope} AND {predicate} LIMIT {want}))
          RETURNING {returning})
         SELECT jsonb_build_array(count(*){counts}) FROM g",
        from = leaf.from,
        d_scope = leaf.scope("d"),
        t_scope = leaf.scope("t"),
        predicate = parenthesized(predicate),
    );
    let counts: Vec<i64> =
        query_json(&sql, &[])?.ok_or_else(|| returned_nothing("an erasure's delete"))?;
    let (deleted, per_hold) = counts
        .split_first()
        .ok_or_else(|| returned_nothing("an erasure's delete"))?;
    Ok((*deleted, per_hold.to_vec()))
}

/// Whether a row of `leaf` still matches.
fn any_left(leaf: &Target, predicate: &str) -> Result<bool> {
    Ok(crate::catalog::optional_one::<bool, _>(
        format!(
            "SELECT EXISTS (SELECT 1 FROM {} t WHERE {} AND {})",
            leaf.from,
            leaf.scope("t"),
            parenthesized(predicate)
        )
        .as_str(),
        &[],
    )? == Some(true))
}
