//! Preview: what the next run of a policy would do, computed with the same eligibility SQL the
//! sweep uses, so that with no writes in between the run deletes exactly `would_delete` rows.

use crate::catalog::{active_holds, Action, Kind, Policy, RelationInfo};
use crate::engine::eligible::{Eligibility, Guards};
use crate::error::{present, Result};
use pgrx::prelude::*;

/// One preview row.
#[derive(Debug, Clone)]
pub struct Preview {
    /// Policy name.
    pub policy: String,
    /// Rows the policy makes eligible, before holds and references.
    pub eligible: i64,
    /// Eligible rows kept because of a hold (for `entity`, whole groups).
    pub held: i64,
    /// Holds that keep at least one eligible row.
    pub hold_ids: Vec<i64>,
    /// Rows the next `retention.run` would delete (0 for archive policies: the run never deletes them).
    pub would_delete: i64,
    /// Deletable rows beyond the run cap (or, for archive policies, waiting for the archiver).
    pub backlog: i64,
    /// Estimated slice bytes for the deletable rows, from real frames of a sample (archive policies only).
    pub archive_bytes_estimate: Option<i64>,
}

/// Previews one policy.
pub fn preview(policy: &Policy) -> Result<Preview> {
    let rel = RelationInfo::load(policy.relation, &policy.relation_name)?;
    let holds = active_holds(policy.relation)?;
    let elig = Eligibility::new(policy, &rel, &holds)?;
    let eligible = elig.count(Guards::NONE)?;
    let unreferenced = elig.count(Guards::REFERENCES)?;
    let deletable = elig.count(Guards::ALL)?;
    let hold_ids = elig
        .held_per_hold()?
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .map(|(id, _)| id)
        .collect();
    let archive = policy.action == Action::ArchiveThenDelete;
    let would_delete = if archive || !policy.enabled {
        0
    } else if elig.kind() == Kind::Entity {
        // Whole groups in the order the sweep takes them, as many as fit under the cap.
        elig.as_owner(|| {
            present(Spi::get_one::<i64>(&format!(
                "SELECT coalesce(sum(__n) FILTER (WHERE __cum <= {cap}), 0)::bigint
                   FROM (SELECT g.__n, sum(g.__n) OVER (ORDER BY g.__first) AS __cum FROM ({groups}) g) x",
                cap = policy.max_rows_per_run,
                groups = elig.entity_groups(Guards::ALL),
            ))?, "an entity count")
        })?
    } else {
        deletable.min(policy.max_rows_per_run)
    };
    let archive_bytes_estimate = if archive {
        Some(estimate_archive_bytes(&elig, &rel, deletable)?)
    } else {
        None
    };
    Ok(Preview {
        policy: policy.name.clone(),
        eligible,
        held: unreferenced - deletable,
        hold_ids,
        would_delete,
        backlog: deletable - would_delete,
        archive_bytes_estimate,
    })
}

/// Deletable rows times the mean size of real frames encoded from a sample of them.
fn estimate_archive_bytes(
    elig: &Eligibility<'_>,
    rel: &RelationInfo,
    deletable: i64,
) -> Result<i64> {
    if deletable == 0 || elig.kind() != Kind::Age {
        return Ok(0);
    }
    let sample = elig
        .as_owner(|| crate::render::sample_frames(rel, &elig.age_predicate(Guards::ALL), 1000))?;
    if sample.ends.is_empty() {
        return Ok(0);
    }
    let mean = sample.slice.len() as f64 / sample.ends.len() as f64;
    Ok((mean * deletable as f64).round() as i64)
}
