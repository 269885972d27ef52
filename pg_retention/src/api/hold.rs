//! Legal holds: placing and lifting. Both append; nothing is ever changed.

use crate::catalog::{caller, LedgerEntry, RelationInfo};
use crate::engine::validate::check_predicate;
use crate::error::{outcome, OrReport, Result, RetentionError};
use pgrx::prelude::*;
use serde_json::json;

fn non_empty(value: &str, what: &str) -> Result<()> {
    if value.trim().is_empty() {
        return Err(RetentionError::invalid(
            format!("{what} must not be empty"),
            format!("A hold records who and why; {what} was empty."),
            format!("Pass a {what}."),
        ));
    }
    Ok(())
}

fn place(relation: u32, predicate: &str, reason: &str, actor: &str) -> Result<i64> {
    non_empty(reason, "reason")?;
    non_empty(actor, "actor")?;
    let rel = RelationInfo::load(relation, &format!("oid {relation}"))?;
    check_predicate(&rel, predicate, "hold")?;
    let id = Spi::get_one_with_args::<i64>(
        "INSERT INTO retention.hold_records (relation, relation_name, predicate, reason, actor)
         VALUES ($1::bigint::oid, $2, $3, $4, $5) RETURNING id",
        &[
            i64::from(relation).into(),
            rel.qualified.as_str().into(),
            predicate.into(),
            reason.into(),
            actor.into(),
        ],
    )?
    .unwrap_or(0);
    LedgerEntry {
        method: "hold_place",
        policy: None,
        relation: Some(&rel.qualified),
        rows: 0,
        hold_ids: vec![id],
        actor,
        run_id: None,
        detail: json!({ "predicate": predicate, "reason": reason, "by": caller() }),
    }
    .append()?;
    Ok(id)
}

/// Places a hold on the rows of `relation` matching `predicate`; returns the hold id.
#[pg_extern(security_definer)]
#[search_path(pg_catalog, public, pg_temp)]
fn _place_hold(relation: pg_sys::Oid, predicate: &str, reason: &str, actor: &str) -> pgrx::JsonB {
    outcome(place(relation.to_u32(), predicate, reason, actor))
}

fn lift(hold_id: i64, actor: &str, reason: &str) -> Result<()> {
    non_empty(reason, "reason")?;
    non_empty(actor, "actor")?;
    let Some(relation) = crate::catalog::optional_one::<String>(
        "SELECT h.relation_name FROM retention.hold_records h WHERE h.id = $1",
        &[hold_id.into()],
    )?
    else {
        return Err(RetentionError::UnknownHold(hold_id));
    };
    let lifted = Spi::get_one_with_args::<bool>(
        "SELECT EXISTS (SELECT 1 FROM retention.hold_lifts l WHERE l.hold_id = $1)",
        &[hold_id.into()],
    )?;
    if lifted == Some(true) {
        return Err(RetentionError::WrongState {
            message: format!("hold {hold_id} is already lifted"),
            hint: "See retention.holds.".into(),
        });
    }
    Spi::run_with_args(
        "INSERT INTO retention.hold_lifts (hold_id, actor, reason) VALUES ($1, $2, $3)",
        &[hold_id.into(), actor.into(), reason.into()],
    )?;
    LedgerEntry {
        method: "hold_lift",
        policy: None,
        relation: Some(&relation),
        rows: 0,
        hold_ids: vec![hold_id],
        actor,
        run_id: None,
        detail: json!({ "reason": reason, "by": caller() }),
    }
    .append()?;
    Ok(())
}

/// Lifts a hold (appends a lift record).
#[pg_extern(security_definer)]
#[search_path(pg_catalog, public, pg_temp)]
fn _lift_hold(hold_id: i64, actor: &str, reason: &str) -> pgrx::JsonB {
    outcome(lift(hold_id, actor, reason))
}

/// Why a predicate is not acceptable for a table, or NULL. Used by `retention._predicate_check`.
#[pg_extern(security_definer)]
#[search_path(pg_catalog, public, pg_temp)]
fn _predicate_problem(relation: pg_sys::Oid, predicate: &str) -> Option<String> {
    let rel =
        RelationInfo::load(relation.to_u32(), &format!("oid {}", relation.to_u32())).or_report();
    crate::engine::predicate::problem(&rel.qualified, predicate)
}
