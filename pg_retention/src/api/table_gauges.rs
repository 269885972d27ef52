//! What `retention.metrics()` (api/metrics.rs, where every family is named and described)
//! reports of a governed table itself: how old its oldest deletable row is — the signal that retention
//! stalls — and, for an archive policy, how many rows are deletable now (no run records a
//! backlog for it). Measured as the policy's owner, with every guard (holds, references, pins) a
//! sweep applies, and kept (`retention.policy_gauges`), so a scrape costs one row per policy:
//!
//! * the oldest *candidate* is kept — the oldest row that passes every guard but the age bound
//!   — so the oldest deletable row's age at any later moment follows from it (the candidate is
//!   deletable exactly once it is older than the window) until rows change;
//! * a run's end measures its policy again (its table changed); a scrape measures the policies
//!   never measured, then the least recently measured of those older than [`STALE_AFTER`], at
//!   least one and then for at most [`SCRAPE_BUDGET`] (on a primary: a standby reads what was
//!   kept).

use crate::catalog::{active_holds, gauges, Policy, RelationInfo};
use crate::engine::eligible::{Eligibility, Guards};
use crate::error::Result;
use crate::sql_text::{ident, literal};
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
    /// The oldest candidate row's age-column value, and the same as Unix seconds.
    oldest: Option<TimestampWithTimeZone>,
    oldest_epoch: Option<f64>,
    /// An archive policy's deletable rows.
    eligible_rows: Option<i64>,
}

/// A policy's kept gauges.
#[derive(Clone, Copy)]
pub struct Kept {
    /// The oldest candidate row's age-column value, in Unix seconds (None: no candidate).
    pub oldest_candidate: Option<f64>,
    /// An archive policy's deletable rows.
    pub eligible_rows: Option<i64>,
}

/// A policy as a scrape finds it (api/metrics.rs reads it with the policy's other figures).
pub struct Found {
    pub policy_id: i64,
    /// Whether the policy has gauges: enabled, of a kind whose rows are deletable by age, with
    /// an age column.
    pub measurable: bool,
    pub kept: Option<Kept>,
    /// Seconds since the kept gauges were measured.
    pub measured_ago: Option<f64>,
}

/// Measures policy `policy_id`. `from`: where a run that just ended walked its age index to
/// (the age column's text form); the oldest candidate is then looked for from there on, not
/// through the index entries of the rows the run deleted below it (dead until vacuumed: walking
/// a million of them costs 80–140 ms). Below it the run left no candidate but rows written
/// there behind it, which the next run or measurement finds.
fn measure(policy_id: i64, from: Option<&str>) -> Result<Option<Measured>> {
    let Some(policy) = Policy::by_id(policy_id)? else {
        return Ok(None);
    };
    if !policy.kind.by_age() || !policy.enabled {
        return Ok(None);
    }
    if crate::engine::clock::declared(&policy) == 0 {
        return Ok(None);
    }
    let rel = RelationInfo::load(policy.relation, &policy.relation_name)?;
    let holds = active_holds(rel.oid)?;
    // Every guard but the age bound: the rows that are deletable now or will be with time.
    let candidates = Eligibility::with_cutoff(&policy, &rel, &holds, "'infinity'")?;
    let mut condition = candidates.age_predicate(Guards::ALL);
    if let (Some(from), Some(column), false) =
        (from, policy.age_column.as_deref(), rel.partitioned())
    {
        let type_name = &rel.column(column)?.type_name;
        condition = format!(
            "{condition} AND t.{} >= {}::{type_name}",
            ident(column),
            literal(from)
        );
    }
    let table = &rel.qualified;
    let age = candidates.age_of("t");
    let (oldest, oldest_epoch) = candidates.as_owner(|| {
        Ok(Spi::get_two::<TimestampWithTimeZone, f64>(&format!(
            "SELECT o, extract(epoch FROM o)::float8
               FROM (SELECT min({age})::timestamptz AS o FROM {table} t WHERE {condition}) m"
        ))?)
    })?;
    let eligible_rows = if policy.action.archives() {
        let now = Eligibility::new(&policy, &rel, &holds)?;
        // The backlog is what is left to archive: a row archived and kept is not.
        let condition = crate::catalog::archived_rows::still_to_archive(
            &policy,
            &rel,
            now.age_predicate(Guards::ALL),
        );
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
        oldest_epoch,
        eligible_rows,
    }))
}

/// Measures policy `policy_id` and keeps the result; a failure (a table its owner can no longer
/// read, a table gone) is a warning and drops what was kept, so that one broken policy takes no
/// metric or run with it (`retention.health()` flags it).
fn refresh(policy_id: i64, from: Option<&str>) -> Result<Option<Kept>> {
    let measured = subxact::or_error(|| {
        let measured = measure(policy_id, from)?;
        match &measured {
            Some(m) => gauges::keep(policy_id, m.oldest, m.eligible_rows)?,
            None => gauges::forget(policy_id)?,
        }
        Ok(measured.map(|m| Kept {
            oldest_candidate: m.oldest_epoch,
            eligible_rows: m.eligible_rows,
        }))
    })?;
    match measured {
        Ok(kept) => Ok(kept),
        Err(failure) => {
            warning!(
                "pg_retention: no gauges for policy {policy_id}: {}",
                failure.message
            );
            gauges::forget(policy_id)?;
            Ok(None)
        }
    }
}

/// After a run: its table changed, so its policy is measured again, here, where the run's
/// catalogs are loaded (a query like the run's own, as the policy's owner), so that scrapes
/// rarely measure (the caller bounds it in time). Contained: a failure drops the kept gauges
/// with a warning and never fails the run.
pub fn after_run(policy_id: i64, from: Option<&str>) {
    let outcome = if can_keep() {
        refresh(policy_id, from).map(|_| ())
    } else {
        gauges::forget(policy_id).map_err(Into::into)
    };
    if let Err(e) = outcome {
        warning!("pg_retention: policy {policy_id}: its gauges were not measured: {e}");
    }
}

/// After a run that was not measured (it failed, or its measurement was cut short): the kept
/// gauges no longer describe the table, so they go, and the next scrape measures.
pub fn after_unmeasured_run(policy_id: i64) {
    if let Err(e) = gauges::forget(policy_id) {
        warning!("pg_retention: policy {policy_id}: its gauges were not dropped: {e}");
    }
}

/// Whether this transaction may keep measurements (a primary, not a read-only transaction).
fn can_keep() -> bool {
    // Safety: reading two backend-global flags.
    unsafe { !pg_sys::RecoveryInProgress() && !pg_sys::XactReadOnly }
}

/// Measures the policies among `found` whose kept gauges are missing or stale, the least
/// recently measured first, for at most [`SCRAPE_BUDGET`] — and at least one, so every scrape
/// makes progress (a cold backend's first catalog reads can take the whole budget) — and
/// updates them in place. On a standby, or in a read-only transaction, nothing: a scrape
/// reports what was kept.
pub fn refresh_stale(found: &mut [Found]) -> Result<()> {
    if !can_keep() {
        return Ok(());
    }
    let stale_after = STALE_AFTER.as_secs_f64();
    let mut stale: Vec<&mut Found> = found
        .iter_mut()
        .filter(|f| f.measurable && f.measured_ago.is_none_or(|ago| ago > stale_after))
        .collect();
    // Never measured first, then the longest ago; ties by id.
    stale.sort_by(|a, b| {
        let ago = |f: &Found| f.measured_ago.unwrap_or(f64::INFINITY);
        ago(b)
            .total_cmp(&ago(a))
            .then(a.policy_id.cmp(&b.policy_id))
    });
    let started = Instant::now();
    for (i, f) in stale.into_iter().enumerate() {
        if i > 0 && started.elapsed() >= SCRAPE_BUDGET {
            break;
        }
        f.kept = refresh(f.policy_id, None)?;
        f.measured_ago = f.kept.map(|_| 0.0);
    }
    Ok(())
}
