//! Legal holds: placing and lifting. Both append; nothing is ever changed.

use crate::catalog::hold::{
    append_lift, hold_check, hold_placement, hold_relation, hold_state, HoldCheck, NewHold,
};
use crate::catalog::{caller, caller_oid, LedgerEntry, LedgerMethod, RelationInfo};
use crate::engine::validate::check_predicate;
use crate::error::{OrReport, Result, RetentionError};
use pgrx::prelude::*;
use serde_json::json;

/// Refuses an empty `actor` or `reason`: holds and floor changes record who and why.
pub(crate) fn non_empty(value: &str, what: &str) -> Result<()> {
    if value.trim().is_empty() {
        return Err(RetentionError::invalid(
            format!("{what} must not be empty"),
            format!("The ledger records who and why; {what} was empty."),
            format!("Pass a {what}."),
        ));
    }
    Ok(())
}

fn place(relation: u32, predicate: &str, reason: &str, actor: &str, enforce: bool) -> Result<i64> {
    non_empty(reason, "reason")?;
    non_empty(actor, "actor")?;
    let rel = RelationInfo::load(relation, &format!("oid {relation}"))?;
    rel.ensure_not_catalog()?;
    check_predicate(&rel, predicate, "hold", caller_oid(), false)?;
    let id = NewHold {
        relation,
        relation_name: &rel.qualified,
        predicate,
        reason,
        actor,
        placed_by: caller_oid(),
        enforced: enforce,
    }
    .append()?;
    if enforce {
        crate::hold_guard::install(&rel)?;
    }
    LedgerEntry {
        method: LedgerMethod::HoldPlace,
        policy: None,
        relation: Some(&rel.qualified),
        rows: 0,
        hold_ids: vec![id],
        actor,
        run_id: None,
        detail: json!({ "predicate": predicate, "reason": reason, "by": caller(), "enforced": enforce }),
    }
    .append()?;
    Ok(id)
}

/// Places a hold on the rows of `relation` matching `predicate`; returns the hold id.
#[pg_extern]
#[search_path(pg_catalog, pg_temp)]
fn _place_hold(
    relation: pg_sys::Oid,
    predicate: &str,
    reason: &str,
    actor: &str,
    enforce: bool,
) -> i64 {
    crate::identity::entry(|| place(relation.to_u32(), predicate, reason, actor, enforce))
        .or_report()
}

fn lift(hold_id: i64, actor: &str, reason: &str) -> Result<()> {
    non_empty(reason, "reason")?;
    non_empty(actor, "actor")?;
    let Some((relation, lifted)) = hold_state(hold_id)? else {
        return Err(RetentionError::UnknownHold(hold_id));
    };
    if lifted {
        return Err(RetentionError::WrongState {
            message: format!("hold {hold_id} is already lifted"),
            hint: "See retention.holds.".into(),
        });
    }
    let placed = hold_placement(hold_id)?;
    append_lift(hold_id, actor, reason)?;
    if let Some((by, because)) = placed {
        // Whoever lifts a hold is told what it protected, in its placer's words.
        pgrx::notice!("hold on {relation} lifted; it was placed by {by} because: {because}");
    }
    if let Some(oid) = hold_relation(hold_id)? {
        crate::hold_guard::remove_if_unused(oid)?;
    }
    LedgerEntry {
        method: LedgerMethod::HoldLift,
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
#[pg_extern]
#[search_path(pg_catalog, pg_temp)]
fn _lift_hold(hold_id: i64, actor: &str, reason: &str) {
    crate::identity::entry(|| lift(hold_id, actor, reason)).or_report();
}

/// Why a predicate is not acceptable for a table when `author` runs it, or NULL. Used by
/// `retention._predicate_check`, which turns the errors raised here into the reason.
#[pg_extern(security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn _predicate_problem(
    relation: pg_sys::Oid,
    predicate: &str,
    author: pg_sys::Oid,
    built_in_only: bool,
) -> Option<String> {
    let rel =
        RelationInfo::load(relation.to_u32(), &format!("oid {}", relation.to_u32())).or_report();
    crate::author::run_as(author.to_u32(), || {
        Ok(crate::engine::predicate::problem(
            &rel.qualified,
            predicate,
            built_in_only,
        ))
    })
    .or_report()
}

thread_local! {
    /// Hold records never change, so each is read once per backend.
    static HOLD_CHECKS: std::cell::RefCell<std::collections::HashMap<i64, HoldCheck>> =
        std::cell::RefCell::new(std::collections::HashMap::new());
}

fn hold_matches(hold_id: i64, row: pgrx::AnyElement) -> Result<bool> {
    let cached = HOLD_CHECKS.with(|c| c.borrow().get(&hold_id).cloned());
    let check = match cached {
        Some(check) => check,
        None => {
            let check = hold_check(hold_id)?;
            HOLD_CHECKS.with(|c| c.borrow_mut().insert(hold_id, check.clone()));
            check
        }
    };
    crate::author::row_matches(check.placer, &check.predicate, check.reltype, row)
}

/// Whether `row` of the held table matches hold `hold_id`, evaluated with the privileges of the
/// role that placed the hold. Delete statements run as the policy's owner and call this for
/// the holds another role placed. An error here fails the statement: a hold fails closed.
#[pg_extern(security_definer, stable, parallel_restricted)]
#[search_path(pg_catalog, pg_temp)]
fn _hold_matches(hold_id: i64, row: pgrx::AnyElement) -> bool {
    hold_matches(hold_id, row).or_report()
}
