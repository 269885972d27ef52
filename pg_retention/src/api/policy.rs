//! Policy definitions: add, alter, enable, disable, drop, and window links.

use crate::catalog::{caller, caller_oid, query_json, Policy, PolicySpec, RelationInfo};
use crate::engine::validate::{interval_sign, validate};
use crate::error::{outcome, OrReport, Result, RetentionError};
use crate::guard;
use pgrx::prelude::*;
use serde_json::Value;

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
fn check_links(policy_id: Option<i64>, spec: &PolicySpec) -> Result<()> {
    let Some(id) = policy_id else { return Ok(()) };
    #[derive(serde::Deserialize)]
    struct Link {
        producer: String,
        consumer: String,
        producer_window: Option<String>,
        consumer_window: Option<String>,
        margin: String,
        role: String,
    }
    let links: Vec<Link> = query_json(
        "SELECT coalesce(jsonb_agg(jsonb_build_object(
                    'producer', pp.name, 'consumer', cp.name,
                    'producer_window', pv.older_than::text, 'consumer_window', cv.older_than::text,
                    'margin', l.margin::text,
                    'role', CASE WHEN l.producer_id = $1 THEN 'producer' ELSE 'consumer' END)), '[]')
           FROM retention.window_links l
           JOIN retention.policies pp ON pp.id = l.producer_id
           JOIN retention.policies cp ON cp.id = l.consumer_id
           JOIN retention.policy_versions pv ON pv.policy_id = pp.id AND pv.version = pp.version
           JOIN retention.policy_versions cv ON cv.policy_id = cp.id AND cv.version = cp.version
          WHERE l.producer_id = $1 OR l.consumer_id = $1",
        &[id.into()],
    )?
    .unwrap_or_default();
    for link in links {
        let (producer_window, consumer_window) = if link.role == "producer" {
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
    if ok != Some(true) {
        return Err(RetentionError::WindowLink {
            producer: producer.into(),
            consumer: consumer.into(),
            required: required.unwrap_or_default(),
            producer_window: pw,
            margin: margin.into(),
        });
    }
    Ok(())
}

/// One table, one class: refuses a definition whose action differs from that of another live
/// policy on the same table (a delete policy could remove audit rows before they are archived).
fn check_class(policy_id: Option<i64>, spec: &PolicySpec, rel: &RelationInfo) -> Result<()> {
    #[derive(serde::Deserialize)]
    struct Other {
        name: String,
        action: String,
    }
    let other: Option<Other> = query_json(
        "SELECT to_jsonb(x) FROM (
             SELECT p.name, p.action FROM retention.policies p
              WHERE p.relation::oid = $1::bigint::oid AND p.id IS DISTINCT FROM $2 AND p.action <> $3
              ORDER BY p.name LIMIT 1) x",
        &[
            i64::from(rel.oid).into(),
            policy_id.into(),
            spec.action.as_str().into(),
        ],
    )?;
    match other {
        None => Ok(()),
        Some(other) => Err(RetentionError::ClassConflict {
            relation: rel.qualified.clone(),
            class: if other.action == "archive_then_delete" {
                "archive".into()
            } else {
                "delete".into()
            },
            other: other.name,
            action: spec.action.clone(),
        }),
    }
}

fn append_version(
    policy_id: i64,
    spec: &PolicySpec,
    relation_name: &str,
    change: &str,
    owner: u32,
) -> Result<i32> {
    let args = [
        policy_id.into(),
        i64::from(spec.relation).into(),
        relation_name.into(),
        pgrx::JsonB(serde_json::to_value(spec)?).into(),
        change.into(),
        caller().into(),
        i64::from(owner).into(),
    ];
    let version = Spi::get_one_with_args::<i32>(
        "INSERT INTO retention.policy_versions
             (policy_id, version, relation, relation_name, kind, age_column, older_than, scope, terminal,
              group_by, order_by, keep, min_keep, action, batch_size, max_rows_per_run, enabled,
              change, changed_by, owner)
         SELECT $1, coalesce((SELECT max(version) FROM retention.policy_versions WHERE policy_id = $1), 0) + 1,
                $2::bigint::oid, $3, s.kind, s.age_column, s.older_than::interval, s.scope, s.terminal,
                s.group_by, s.order_by, s.keep, s.min_keep, s.action, s.batch_size, s.max_rows_per_run,
                s.enabled, $5, $6, $7::bigint::oid
           FROM jsonb_to_record($4) AS s(kind text, age_column text, older_than text, scope text,
                terminal text, group_by text[], order_by text, keep int, min_keep int, action text,
                batch_size int, max_rows_per_run bigint, enabled boolean)
         RETURNING version",
        &args,
    )?;
    version.ok_or_else(|| RetentionError::Internal("policy version insert returned nothing".into()))
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
    let required: &[&'static str] = if change == "add" {
        &REQUIRED_TO_ADD
    } else {
        &REQUIRED_TO_ADD[..1]
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
    match change {
        "add" => {
            let mut spec: PolicySpec = serde_json::from_value(spec)?;
            spec.enabled = true;
            let exists = Spi::get_one_with_args::<bool>(
                "SELECT EXISTS (SELECT 1 FROM retention.policy_ids WHERE name = $1 AND dropped_at IS NULL)",
                &[name.as_str().into()],
            )?;
            if exists == Some(true) {
                return Err(RetentionError::DuplicatePolicy(name));
            }
            let rel = validate(&spec)?;
            check_class(None, &spec, &rel)?;
            let id = Spi::get_one_with_args::<i64>(
                "INSERT INTO retention.policy_ids (name) VALUES ($1) RETURNING id",
                &[name.as_str().into()],
            )?
            .ok_or_else(|| RetentionError::Internal("policy insert returned nothing".into()))?;
            append_version(id, &spec, &rel.qualified, "add", caller_oid())?;
            if spec.action == "archive_then_delete" {
                guard::install(id, &spec, &rel)?;
            }
            Ok(id)
        }
        _ => {
            let current = Policy::by_name(&name)?;
            let spec = merge(&current.spec, &spec)?;
            let rel = validate(&spec)?;
            check_class(Some(current.id), &spec, &rel)?;
            check_links(Some(current.id), &spec)?;
            append_version(current.id, &spec, &rel.qualified, "alter", caller_oid())?;
            if spec.action == "archive_then_delete" {
                guard::install(current.id, &spec, &rel)?;
            } else if current.action == "archive_then_delete" {
                guard::remove(current.id, current.relation)?;
            }
            Ok(current.id)
        }
    }
}

/// Adds (`change = 'add'`) or alters (`'alter'`) a policy from a JSON definition; returns its id.
#[pg_extern(security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn _define_policy(change: &str, spec: pgrx::JsonB) -> pgrx::JsonB {
    outcome(define(change, spec.0))
}

fn set_state(name: &str, change: &str) -> Result<i64> {
    let current = Policy::by_name(name)?;
    let mut spec = current.spec.clone();
    spec.enabled = change == "enable";
    append_version(
        current.id,
        &spec,
        &current.relation_name,
        change,
        current.owner,
    )?;
    if change == "drop" && current.action == "archive_then_delete" {
        guard::remove(current.id, current.relation)?;
    }
    if change == "drop" {
        Spi::run_with_args(
            "UPDATE retention.policy_ids SET dropped_at = now() WHERE id = $1",
            &[current.id.into()],
        )?;
    }
    Ok(current.id)
}

/// Enables, disables or drops a policy (each a new version); returns its id.
#[pg_extern(security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn _set_policy_state(name: &str, change: &str) -> i64 {
    set_state(name, change).or_report()
}

fn link(producer: &str, consumer: &str, margin: &str) -> Result<()> {
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
    Spi::run_with_args(
        "INSERT INTO retention.window_links (producer_id, consumer_id, margin, created_by)
         VALUES ($1, $2, $3::interval, $4)
         ON CONFLICT (producer_id, consumer_id) DO UPDATE SET margin = EXCLUDED.margin",
        &[p.id.into(), c.id.into(), margin.into(), caller().into()],
    )?;
    Ok(())
}

/// Links two policies' windows: from now on `consumer.older_than >= producer.older_than + margin`.
#[pg_extern(security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn _link_windows(producer: &str, consumer: &str, margin: &str) -> pgrx::JsonB {
    outcome(link(producer, consumer, margin))
}
