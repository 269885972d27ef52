//! Policy definitions: add, alter, enable, disable, drop, and window links.

use crate::api::hold::non_empty;
use crate::catalog::link;
use crate::catalog::policy::{append_version, check_names};
use crate::catalog::{caller, caller_oid, Action, Change, Kind, Policy, PolicySpec, RelationInfo};
use crate::catalog::{LedgerEntry, LedgerMethod};
use crate::engine::validate::{interval_compare, interval_sign, validate};
use crate::error::{returned_nothing, OrReport, Result, RetentionError};
use crate::guard;
use pgrx::prelude::*;
use serde_json::{json, Value};
use std::cmp::Ordering;

/// Merges the non-null fields of `changes` over `base` (alter semantics). An empty string
/// clears a text field.
fn merge(base: &PolicySpec, changes: &Value) -> Result<PolicySpec> {
    let mut merged = serde_json::to_value(base)?;
    if let (Some(m), Some(c)) = (merged.as_object_mut(), changes.as_object()) {
        for (k, v) in c {
            if k == "relation" || k == "name" || v.is_null() {
                continue;
            }
            let cleared = v.as_str().is_some_and(|s| s.is_empty());
            m.insert(k.clone(), if cleared { Value::Null } else { v.clone() });
        }
    }
    Ok(serde_json::from_value(merged)?)
}

/// Refuses a definition that would break a window link it takes part in.
fn check_links(policy_id: i64, spec: &PolicySpec) -> Result<()> {
    for link in link::links_of(policy_id)? {
        let (producer_window, consumer_window) = if link.is_producer {
            (spec.older_than.clone(), link.consumer_window)
        } else {
            (link.producer_window, spec.older_than.clone())
        };
        ensure_link(
            &link.producer,
            &link.consumer,
            producer_window,
            consumer_window,
            &link.margin,
        )?;
    }
    Ok(())
}

/// Checks `consumer >= producer + margin`.
fn ensure_link(
    producer: &str,
    consumer: &str,
    producer_window: Option<String>,
    consumer_window: Option<String>,
    margin: &str,
) -> Result<()> {
    let (Some(pw), Some(cw)) = (producer_window, consumer_window) else {
        return Err(RetentionError::invalid(
            format!("window link between {producer} and {consumer} needs both policies to have older_than"),
            "Only policies with a time window can be linked.",
            "Give both policies an older_than.",
        ));
    };
    let (ok, required) = Spi::get_two_with_args::<bool, String>(
        "SELECT $2::interval >= $1::interval + $3::interval, ($1::interval + $3::interval)::text",
        &[pw.as_str().into(), cw.as_str().into(), margin.into()],
    )?;
    let required = required.ok_or_else(|| returned_nothing("a window sum"))?;
    if ok != Some(true) {
        return Err(RetentionError::WindowLink {
            producer: producer.into(),
            consumer: consumer.into(),
            required,
            producer_window: pw,
            margin: margin.into(),
        });
    }
    Ok(())
}

/// One table, one class: refuses a definition whose action differs from that of another live
/// policy on the same rows — the same table, a partitioned table above it or a partition below
/// it (a delete policy could remove audit rows before they are archived).
fn check_class(policy_id: Option<i64>, spec: &PolicySpec, rel: &RelationInfo) -> Result<()> {
    match Policy::other_class(rel.oid, policy_id, spec.action)? {
        None => Ok(()),
        Some((other, action)) => Err(RetentionError::ClassConflict {
            relation: rel.qualified.clone(),
            class: action.class().into(),
            other,
            action: spec.action.as_str().into(),
        }),
    }
}

/// Policies on one table compose only where a union is what they mean: several delete
/// policies each delete the rows they make eligible. A ranked policy (`keep_latest`,
/// `versions`) keeps rows, which another delete policy on the table would delete anyway (the
/// union of "older than 7 days" and "keep the newest 100" deletes what the second meant to
/// keep): refused (22023) beside any other delete policy on the table, with the one policy
/// that says both.
fn check_composition(policy_id: Option<i64>, spec: &PolicySpec, rel: &RelationInfo) -> Result<()> {
    if spec.action != Action::Delete {
        return Ok(());
    }
    let ranked = |k: Kind| matches!(k, Kind::KeepLatest | Kind::Versions);
    let Some((other, other_kind)) =
        Policy::other_delete_policy(rel.oid, policy_id, ranked(spec.kind))?
    else {
        return Ok(());
    };
    let (keeper, other_name) = if ranked(spec.kind) {
        (spec.name.as_str(), other.as_str())
    } else {
        (other.as_str(), spec.name.as_str())
    };
    Err(RetentionError::invalid(
        format!(
            "{} already has delete policy {other} ({other_kind}); {} {} policy on it would delete rows another keeps",
            rel.qualified,
            crate::engine::validate::article(spec.kind),
            spec.kind
        ),
        format!(
            "{keeper} keeps rows by rank, and {other_name} would delete them anyway: policies on one table add up to a union."
        ),
        "Say both in one policy: kind => 'versions' keeps the newest min_keep and deletes the rest past older_than (keep => 2147483647 for no other limit); or govern the rows with one policy.",
    ))
}

/// The fields `add_policy` (and, for `name`, `alter_policy`) cannot do without.
const REQUIRED_TO_ADD: [&str; 6] = [
    "name",
    "relation",
    "kind",
    "action",
    "batch_size",
    "max_rows_per_run",
];

fn define(change: &str, spec: Value) -> Result<i64> {
    let change = Change::parse(change)?;
    let required: &[&'static str] = match change {
        Change::Add => &REQUIRED_TO_ADD,
        Change::Alter => &REQUIRED_TO_ADD[..1],
        Change::Enable | Change::Disable | Change::Drop => {
            return Err(RetentionError::invalid(
                format!("a definition cannot {}", change.as_str()),
                "Definitions add or alter a policy.",
                "Call retention.enable_policy, disable_policy or drop_policy.",
            ))
        }
    };
    for &field in required {
        if spec.get(field).is_none_or(Value::is_null) {
            return Err(RetentionError::NullArgument(field));
        }
    }
    let name = spec
        .get("name")
        .and_then(Value::as_str)
        .ok_or(RetentionError::NullArgument("name"))?
        .to_owned();
    check_names(&spec)?;
    if change == Change::Add {
        let mut spec: PolicySpec = serde_json::from_value(spec)?;
        spec.enabled = true;
        if Policy::name_taken(&name)? {
            return Err(RetentionError::DuplicatePolicy(name));
        }
        let rel = validate(&spec)?;
        check_class(None, &spec, &rel)?;
        check_composition(None, &spec, &rel)?;
        let id = Policy::new_id(&name)?;
        append_version(id, &spec, &rel.qualified, Change::Add, caller_oid())?;
        if spec.action.archives() {
            guard::install(id, &spec, &rel)?;
        }
        return Ok(id);
    }
    link::serialize_changes()?;
    let current = Policy::by_name(&name)?;
    let spec = merge(&current.spec, &spec)?;
    refuse_lowered_floors(&current.spec, &spec)?;
    let rel = validate(&spec)?;
    check_class(Some(current.id), &spec, &rel)?;
    check_composition(Some(current.id), &spec, &rel)?;
    check_links(current.id, &spec)?;
    check_kept_rows(&current, &spec)?;
    append_version(
        current.id,
        &spec,
        &rel.qualified,
        Change::Alter,
        caller_oid(),
    )?;
    // The altering role owns the policy now, and its claims read the kept rows' entries.
    crate::catalog::archived_rows::reown(current.id, caller_oid())?;
    if spec.action.archives() {
        guard::install(current.id, &spec, &rel)?;
    } else if current.action.archives() {
        guard::remove(current.id, current.relation)?;
    }
    Ok(current.id)
}

/// Refuses (55000) to make a policy that keeps archived rows one that does not while it keeps
/// some: its claims would take them again, and delete them once archived a second time.
fn check_kept_rows(current: &Policy, spec: &PolicySpec) -> Result<()> {
    if !current.keeps_archived_rows() || spec.keeps_archived_rows() {
        return Ok(());
    }
    let kept = crate::catalog::archived_rows::count(current.id)?;
    if kept == 0 {
        return Ok(());
    }
    Err(RetentionError::WrongState {
        message: format!(
            "policy {} keeps {kept} archived rows, and the change would archive them again",
            current.name
        ),
        hint: "Keep action => 'archive', or give the policy a delete_after (the kept rows are deleted once past it); or drop the policy and register a new one.".into(),
    })
}

fn floor_lowered(name: &str, from: &str, to: Option<String>) -> RetentionError {
    RetentionError::invalid(
        format!("{name} is only lowered by retention.lower_floor"),
        format!(
            "The policy's {name} is {from}; the change would make it {}.",
            to.unwrap_or_else(|| "none".into())
        ),
        "Call retention.lower_floor(policy, keep_floor, window_floor, actor, reason): it is ledgered.",
    )
}

/// alter_policy raises floors but never lowers or clears one.
fn refuse_lowered_floors(current: &PolicySpec, next: &PolicySpec) -> Result<()> {
    if let Some(old) = current.keep_floor {
        if next.keep_floor.is_none_or(|n| n < old) {
            return Err(floor_lowered(
                "keep_floor",
                &old.to_string(),
                next.keep_floor.map(|n| n.to_string()),
            ));
        }
    }
    if let Some(old) = &current.window_floor {
        let lowered = match &next.window_floor {
            None => true,
            Some(n) => interval_compare(n, old)? == Ordering::Less,
        };
        if lowered {
            return Err(floor_lowered(
                "window_floor",
                old,
                next.window_floor.clone(),
            ));
        }
    }
    Ok(())
}

/// The floor after lowering `current` to `to` (0 or a zero interval: no floor), refusing a raise.
fn lowered<T: Clone + std::fmt::Display>(
    name: &str,
    current: &Option<T>,
    to: Option<T>,
    order: impl Fn(&T, &T) -> Result<Ordering>,
    is_zero: impl Fn(&T) -> Result<bool>,
) -> Result<Option<T>> {
    let Some(to) = to else {
        return Ok(current.clone());
    };
    let Some(from) = current else {
        return Err(RetentionError::invalid(
            format!("the policy has no {name} to lower"),
            format!("{name} is not set on this policy."),
            "Set a floor with add_policy or alter_policy.",
        ));
    };
    if order(&to, from)? == Ordering::Greater {
        return Err(RetentionError::invalid(
            format!("lower_floor cannot raise {name} from {from} to {to}"),
            "lower_floor only lowers floors.",
            format!("Raise {name} with retention.alter_policy."),
        ));
    }
    Ok(if is_zero(&to)? { None } else { Some(to) })
}

fn lower_floor(
    policy: &str,
    keep_floor: Option<i32>,
    window_floor: Option<String>,
    actor: &str,
    reason: &str,
) -> Result<i64> {
    non_empty(actor, "actor")?;
    non_empty(reason, "reason")?;
    if keep_floor.is_none() && window_floor.is_none() {
        return Err(RetentionError::NullArgument("keep_floor or window_floor"));
    }
    if keep_floor.is_some_and(|k| k < 0)
        || window_floor.as_deref().map(interval_sign).transpose()? == Some(Ordering::Less)
    {
        return Err(RetentionError::invalid(
            "a floor cannot be negative",
            format!("keep_floor = {keep_floor:?}, window_floor = {window_floor:?}."),
            "Pass 0 (or '0 seconds') to remove a floor.",
        ));
    }
    let current = Policy::by_name(policy)?;
    let mut spec = current.spec.clone();
    spec.keep_floor = lowered(
        "keep_floor",
        &current.keep_floor,
        keep_floor,
        |a, b| Ok(a.cmp(b)),
        |k| Ok(*k == 0),
    )?;
    spec.window_floor = lowered(
        "window_floor",
        &current.window_floor,
        window_floor,
        |a, b| interval_compare(a, b),
        |w| Ok(interval_sign(w)? == Ordering::Equal),
    )?;
    append_version(
        current.id,
        &spec,
        &current.relation_name,
        Change::Alter,
        current.owner,
    )?;
    let updated = Policy::by_name(policy)?;
    LedgerEntry {
        method: LedgerMethod::LowerFloor,
        policy: Some(&updated),
        relation: None,
        rows: 0,
        hold_ids: vec![],
        actor,
        run_id: None,
        detail: json!({
            "keep_floor": { "from": current.keep_floor, "to": spec.keep_floor },
            "window_floor": { "from": current.window_floor, "to": spec.window_floor },
            "reason": reason,
            "by": caller(),
        }),
    }
    .append()?;
    Ok(current.id)
}

/// Lowers a policy's floors (a new version and a `lower_floor` ledger entry); returns its id.
#[pg_extern]
#[search_path(pg_catalog, pg_temp)]
fn _lower_floor(
    policy: Option<&str>,
    keep_floor: Option<i32>,
    window_floor: Option<&str>,
    actor: Option<&str>,
    reason: Option<&str>,
) -> i64 {
    crate::identity::entry(|| {
        lower_floor(
            policy.ok_or(RetentionError::NullArgument("policy"))?,
            keep_floor,
            window_floor.map(str::to_owned),
            actor.ok_or(RetentionError::NullArgument("actor"))?,
            reason.ok_or(RetentionError::NullArgument("reason"))?,
        )
    })
    .or_report()
}

/// Adds (`change = 'add'`) or alters (`'alter'`) a policy from a JSON definition; returns its id.
#[pg_extern]
#[search_path(pg_catalog, pg_temp)]
fn _define_policy(change: &str, spec: pgrx::JsonB) -> i64 {
    crate::identity::entry(|| define(change, spec.0)).or_report()
}

fn set_state(name: &str, change: &str) -> Result<i64> {
    let change = Change::parse(change)?;
    if let Change::Add | Change::Alter = change {
        return Err(RetentionError::invalid(
            format!("a state change cannot {}", change.as_str()),
            "State changes enable, disable or drop a policy.",
            "Call retention.add_policy or alter_policy.",
        ));
    }
    let current = Policy::by_name(name)?;
    let mut spec = current.spec.clone();
    spec.enabled = change == Change::Enable;
    append_version(
        current.id,
        &spec,
        &current.relation_name,
        change,
        current.owner,
    )?;
    if change == Change::Drop {
        if current.action.archives() {
            guard::remove(current.id, current.relation)?;
        }
        Policy::mark_dropped(current.id)?;
    }
    Ok(current.id)
}

/// Enables, disables or drops a policy (each a new version); returns its id.
#[pg_extern]
#[search_path(pg_catalog, pg_temp)]
fn _set_policy_state(name: &str, change: &str) -> i64 {
    crate::identity::entry(|| set_state(name, change)).or_report()
}

fn link(producer: &str, consumer: &str, margin: &str) -> Result<()> {
    link::serialize_changes()?;
    let p = Policy::by_name(producer)?;
    let c = Policy::by_name(consumer)?;
    if p.id == c.id {
        return Err(RetentionError::invalid(
            "a policy cannot be linked to itself",
            format!("producer and consumer are both {producer}."),
            "Link two different policies.",
        ));
    }
    if interval_sign(margin)? == std::cmp::Ordering::Less {
        return Err(RetentionError::invalid(
            format!("margin must not be negative, got {margin}"),
            "A negative margin would let the consumer forget before the producer.",
            "Use a margin such as '1 day'.",
        ));
    }
    ensure_link(
        producer,
        consumer,
        p.older_than.clone(),
        c.older_than.clone(),
        margin,
    )?;
    link::save(p.id, c.id, margin, &caller())
}

/// Links two policies' windows: from now on `consumer.older_than >= producer.older_than + margin`.
#[pg_extern]
#[search_path(pg_catalog, pg_temp)]
fn _link_windows(producer: &str, consumer: &str, margin: &str) {
    crate::identity::entry(|| link(producer, consumer, margin)).or_report();
}
