//! What `retention.metrics()` (sql/api.sql, where every family is named and described) reads
//! from a governed table itself: how old its oldest deletable row is — the signal that retention
//! stalls — and, for an archive policy, how many rows are deletable now (no run records a
//! backlog for it). Read as the policy's owner, with every guard (holds, references, pins) a
//! sweep applies.

use crate::catalog::{active_holds, Action, Policy, RelationInfo};
use crate::engine::eligible::{Eligibility, Guards};
use crate::error::OrReport;
use crate::error::{outcome, Result};
use pgrx::prelude::*;

/// Deletable rows counted for an archive policy's backlog at most (a scrape stays cheap; the
/// gauge reads "at least this many" when it is reached).
const BACKLOG_CAP: i64 = 100_000;

#[derive(serde::Serialize, Default)]
struct Gauges {
    /// Seconds since the age-column value of the oldest deletable row; 0 when none is.
    oldest_eligible_age_seconds: Option<f64>,
    /// Deletable rows now, up to [`BACKLOG_CAP`] (archive policies only).
    eligible_rows: Option<i64>,
}

fn gauges(policy_id: i64) -> Result<Gauges> {
    let Some(policy) = Policy::by_id(policy_id)? else {
        return Ok(Gauges::default());
    };
    if !policy.kind.by_age() || !policy.enabled {
        return Ok(Gauges::default());
    }
    let Some(age) = policy.age_column.as_deref() else {
        return Ok(Gauges::default());
    };
    let rel = RelationInfo::load(policy.relation, &policy.relation_name)?;
    let holds = active_holds(rel.oid)?;
    let elig = Eligibility::new(&policy, &rel, &holds)?;
    let condition = elig.age_predicate(Guards::ALL);
    let table = &rel.qualified;
    let age = crate::sql_text::ident(age);
    elig.as_owner(|| {
        let oldest = Spi::get_one::<f64>(&format!(
            "SELECT coalesce(extract(epoch FROM now() - min(t.{age})::timestamptz)::float8, 0)
               FROM {table} t WHERE {condition}"
        ))?;
        let eligible_rows = if policy.action == Action::ArchiveThenDelete {
            Spi::get_one::<i64>(&format!(
                "SELECT count(*) FROM (SELECT 1 FROM {table} t WHERE {condition} LIMIT {BACKLOG_CAP}) x"
            ))?
        } else {
            None
        };
        Ok(Gauges {
            oldest_eligible_age_seconds: oldest,
            eligible_rows,
        })
    })
}

/// `{"ok": {oldest_eligible_age_seconds, eligible_rows}}` of policy `policy_id` (nulls for a
/// policy that has no age, is disabled or gone). `retention._policy_gauges_safe` calls it.
#[pg_extern(security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn _policy_gauges(policy_id: i64) -> pgrx::JsonB {
    crate::identity::refuse_restricted().or_report();
    outcome(gauges(policy_id))
}
