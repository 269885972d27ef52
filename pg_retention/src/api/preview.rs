//! `retention.preview(policy)`.

use crate::catalog::{active_holds, query_json, Policy, RelationInfo};
use crate::engine::preview::{partitions_to_drop, preview as preview_one, table_would_delete};
use crate::error::{returned_nothing, OrReport, Result};
use pgrx::prelude::*;

/// policy, eligible, held, hold_ids, would_delete, backlog, archive_bytes_estimate,
/// partitions_to_drop, pinned, referenced, table_would_delete, index_hint, hidden_rows,
/// would_archive
type PreviewRow = (
    String,
    i64,
    i64,
    Vec<i64>,
    i64,
    i64,
    Option<i64>,
    i64,
    i64,
    i64,
    i64,
    Option<String>,
    Option<i64>,
    i64,
);

fn previews(policy: Option<&str>) -> Result<Vec<PreviewRow>> {
    let names: Vec<String> = match policy {
        Some(name) => vec![Policy::by_name(name)?.name.clone()],
        None => query_json::<Vec<String>>(
            "SELECT coalesce(jsonb_agg(name ORDER BY name), '[]') FROM retention.policies",
            &[],
        )?
        .ok_or_else(|| returned_nothing("listing policies"))?,
    };
    let mut rows = Vec::with_capacity(names.len());
    let mut totals = std::collections::HashMap::new();
    for name in names {
        let policy = Policy::by_name(&name)?;
        let p = preview_one(&policy)?;
        let total = match totals.get(&policy.relation) {
            Some(total) => *total,
            None => {
                let total = table_would_delete(policy.relation)?;
                totals.insert(policy.relation, total);
                total
            }
        }
        .unwrap_or(p.would_delete);
        rows.push((
            p.policy,
            p.eligible,
            p.held,
            p.hold_ids,
            p.would_delete,
            p.backlog,
            p.archive_bytes_estimate,
            p.partitions_to_drop,
            p.pinned,
            p.referenced,
            total,
            p.index_hint,
            p.hidden_rows,
            p.would_archive,
        ));
    }
    Ok(rows)
}

/// What the next run would do, per policy (all current policies when `policy` is NULL).
// pgrx needs the named tuple spelled out in the signature to name the result columns.
#[allow(clippy::type_complexity)]
#[pg_extern(security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn preview(
    policy: default!(Option<&str>, "NULL"),
) -> TableIterator<
    'static,
    (
        name!(policy, String),
        name!(eligible, i64),
        name!(held, i64),
        name!(hold_ids, Vec<i64>),
        name!(would_delete, i64),
        name!(backlog, i64),
        name!(archive_bytes_estimate, Option<i64>),
        name!(partitions_to_drop, i64),
        name!(pinned, i64),
        name!(referenced, i64),
        name!(table_would_delete, i64),
        name!(index_hint, Option<String>),
        name!(hidden_rows, Option<i64>),
        name!(would_archive, i64),
    ),
> {
    crate::identity::refuse_restricted().or_report();
    TableIterator::new(crate::error_watch::keeping_codes(|| previews(policy)).or_report())
}

/// partition, bound, rows, proof
type PartitionRow = (String, String, i64, String);

fn partition_drops(policy: &str) -> Result<Vec<PartitionRow>> {
    let policy = Policy::by_name(policy)?;
    let rel = RelationInfo::load(policy.relation, &policy.relation_name)?;
    let holds = active_holds(policy.relation)?;
    partitions_to_drop(&policy, &rel, &holds)?
        .into_iter()
        .map(|d| Ok((d.partition, d.bound, d.rows, d.proof.as_str().to_owned())))
        .collect()
}

/// The partitions the next run of `policy` would drop whole, with their bounds, rows and why
/// every row is eligible (`range_bound` or `every_row`).
#[pg_extern(security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn preview_partitions(
    policy: &str,
) -> TableIterator<
    'static,
    (
        name!(partition, String),
        name!(bound, String),
        name!(rows, i64),
        name!(proof, String),
    ),
> {
    crate::identity::refuse_restricted().or_report();
    TableIterator::new(crate::error_watch::keeping_codes(|| partition_drops(policy)).or_report())
}

/// The doctor's counts of policy `policy_id` for `retention.health()`: its table's rows, the
/// rows it makes eligible, and those of them holds, references or pins keep; NULLs when they
/// cannot be counted (health() gives the reason from the policy's runs).
#[pg_extern(security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn _doctor(
    policy_id: i64,
) -> TableIterator<
    'static,
    (
        name!(total_rows, Option<i64>),
        name!(eligible_rows, Option<i64>),
        name!(blocked_rows, Option<i64>),
    ),
> {
    let counted = crate::subxact::or_error(|| match Policy::by_id(policy_id)? {
        Some(policy) => crate::engine::preview::counts(&policy).map(Some),
        None => Ok(None),
    });
    let row = match counted {
        Ok(Ok(Some(c))) => (Some(c.total), Some(c.eligible), Some(c.blocked)),
        _ => (None, None, None),
    };
    TableIterator::new(std::iter::once(row))
}
