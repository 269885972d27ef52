//! What `retention.metrics()` (sql/api.sql, where every family is named and described) reports
//! of a governed table itself: how old its oldest deletable row is — the signal that retention
//! stalls — and, for an archive policy, how many rows are deletable now (no run records a
//! backlog for it). Measured as the policy's owner, with every guard (holds, references, pins) a
//! sweep applies, and kept (`retention.policy_gauges`), so a scrape costs one row per policy:
//!
//! * the oldest *candidate* is kept — the oldest row that passes every guard but the age bound
//!   — so the oldest deletable row's age at any later moment follows from it (the candidate is
//!   deletable exactly once it is older than the window) until rows change;
//! * a run's end marks its policy's measurement stale; a scrape measures the policies never
//!   measured or stale, then the least recently measured of those older than [`STALE_AFTER`],
//!   at least one and then for at most [`SCRAPE_BUDGET`] (on a primary: a standby reads what
//!   was kept).

use crate::catalog::{active_holds, gauges, Action, Policy, RelationInfo};
use crate::engine::eligible::{Eligibility, Guards};
use crate::error::{OrReport, Result};
use crate::subxact;
use pgrx::datum::TimestampWithTimeZone;
use pgrx::prelude::*;
use std::time::{Duration, Instant};

/// Deletable rows counted for an archive policy's backlog at most (a scrape stays cheap; the
/// gauge reads "at least this many" when it is reached).
const BACKLOG_CAP: i64 = 100_000;
/// A kept measurement older than this is measured again by a scrape that has time left.
const STALE_AFTER: Duration = Duration::from_secs(300);
/// How long one scrape spends measuring stale policies.
const SCRAPE_BUDGET: Duration = Duration::from_millis(3);

/// One measurement. None for a policy without gauges (no age, disabled, gone).
struct Measured {
    /// The oldest candidate row's age-column value, and its age now in seconds.
    oldest: Option<TimestampWithTimeZone>,
    oldest_age: Option<f64>,
    /// An archive policy's deletable rows.
    eligible_rows: Option<i64>,
}

/// A policy's gauges as metrics() reports them: its id, the oldest deletable row's age in
/// seconds, an archive policy's deletable rows.
type Reported = (i64, Option<f64>, Option<i64>);

fn measure(policy_id: i64) -> Result<Option<Measured>> {
    let Some(policy) = Policy::by_id(policy_id)? else {
        return Ok(None);
    };
    if !policy.kind.by_age() || !policy.enabled {
        return Ok(None);
    }
    let Some(age) = policy.age_column.as_deref() else {
        return Ok(None);
    };
    let rel = RelationInfo::load(policy.relation, &policy.relation_name)?;
    let holds = active_holds(rel.oid)?;
    // Every guard but the age bound: the rows that are deletable now or will be with time.
    let candidates = Eligibility::with_cutoff(&policy, &rel, &holds, "'infinity'")?;
    let condition = candidates.age_predicate(Guards::ALL);
    let table = &rel.qualified;
    let age = crate::sql_text::ident(age);
    let (oldest, oldest_age) = candidates.as_owner(|| {
        Ok(Spi::get_two::<TimestampWithTimeZone, f64>(&format!(
            "SELECT o, extract(epoch FROM now() - o)::float8
               FROM (SELECT min(t.{age})::timestamptz AS o FROM {table} t WHERE {condition}) m"
        ))?)
    })?;
    let eligible_rows = if policy.action == Action::ArchiveThenDelete {
        let now = Eligibility::new(&policy, &rel, &holds)?;
        let condition = now.age_predicate(Guards::ALL);
        now.as_owner(|| {
            Ok(Spi::get_one::<i64>(&format!(
                "SELECT count(*) FROM (SELECT 1 FROM {table} t WHERE {condition} LIMIT {BACKLOG_CAP}) x"
            ))?)
        })?
    } else {
        None
    };
    Ok(Some(Measured {
        oldest,
        oldest_age,
        eligible_rows,
    }))
}

/// Measures policy `policy_id` and keeps the result; a failure (a table its owner can no longer
/// read, a table gone) is a warning and keeps nothing, so that one broken policy takes no
/// metric or run with it (`retention.health()` flags it).
fn refresh(policy_id: i64) -> Result<Option<Measured>> {
    let measured = subxact::or_error(|| {
        let measured = measure(policy_id)?;
        if let Some(m) = &measured {
            gauges::keep(policy_id, m.oldest, m.eligible_rows)?;
        }
        Ok(measured)
    })?;
    Ok(measured.unwrap_or_else(|failure| {
        warning!(
            "pg_retention: no gauges for policy {policy_id}: {}",
            failure.message
        );
        None
    }))
}

/// After a run: its policy's kept gauges are stale (the run changed its table), so the next
/// scrape measures it first. Not measured here: measuring runs the policy's predicates, and a
/// run's close must stay as short as its statements.
pub fn after_run(policy_id: i64) {
    if let Err(e) = gauges::forget(policy_id) {
        warning!("pg_retention: policy {policy_id}: its gauges were not marked stale: {e}");
    }
}

/// Whether this transaction may keep measurements (a primary, not a read-only transaction).
fn can_keep() -> bool {
    // Safety: reading two backend-global flags.
    unsafe { !pg_sys::RecoveryInProgress() && !pg_sys::XactReadOnly }
}

fn all_gauges() -> Result<Vec<Reported>> {
    let keep = can_keep();
    let kept_all = gauges::all()?;
    // The budget counts measuring only, and one stale policy is measured whatever the budget,
    // so every scrape makes progress (a cold backend's first catalog reads can take it all).
    let started = Instant::now();
    let mut measured_one = false;
    let mut out = Vec::new();
    for kept in kept_all {
        if !kept.measurable {
            continue;
        }
        let stale = kept.staleness.is_none_or(|s| s > STALE_AFTER.as_secs_f64());
        let (candidate_age, rows) =
            if keep && stale && (!measured_one || started.elapsed() < SCRAPE_BUDGET) {
                measured_one = true;
                match refresh(kept.policy_id)? {
                    Some(m) => (m.oldest_age, m.eligible_rows),
                    None => continue,
                }
            } else if kept.staleness.is_some() {
                (kept.candidate_age, kept.eligible_rows)
            } else {
                // Never measured yet: a later scrape will.
                continue;
            };
        // The oldest candidate is deletable once it is older than the window.
        let oldest_eligible_age = match (candidate_age, kept.window) {
            (Some(age), Some(window)) if age > window => age,
            _ => 0.0,
        };
        out.push((kept.policy_id, Some(oldest_eligible_age), rows));
    }
    Ok(out)
}

/// Every policy's gauges for `retention.metrics()`: the oldest deletable row's age (0 when none;
/// absent for a policy without an age column, disabled, or never measured) and an archive
/// policy's deletable rows.
#[pg_extern(security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn _policy_gauges_all() -> TableIterator<
    'static,
    (
        name!(policy_id, i64),
        name!(oldest_eligible_age_seconds, Option<f64>),
        name!(eligible_rows, Option<i64>),
    ),
> {
    crate::identity::refuse_restricted().or_report();
    TableIterator::new(all_gauges().or_report())
}
