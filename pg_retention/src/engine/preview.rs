//! Preview: what the next run of a policy would do, computed with the same eligibility SQL the
//! sweep uses, so that with no writes in between the run deletes exactly `would_delete` rows.

use crate::catalog::{active_holds, partition, Action, Hold, Kind, Policy, RelationInfo};
use crate::engine::eligible::{Eligibility, Guards};
use crate::engine::retire::{rows_in, whole_leaf, Proof};
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
    /// Rows the next `retention.run` would delete (0 for archive policies: the run never
    /// deletes them; for a two-window policy, the archived rows past its `delete_after`, which
    /// `retention.prune_archived` deletes).
    pub would_delete: i64,
    /// Rows the archivers would archive now (archive policies; a row archived and kept is not
    /// counted again).
    pub would_archive: i64,
    /// Deletable rows beyond the run cap (or, for archive policies, waiting for the archiver).
    pub backlog: i64,
    /// Estimated slice bytes for the deletable rows, from real frames of a sample (archive policies only).
    pub archive_bytes_estimate: Option<i64>,
    /// Partitions the next run would drop whole (their rows are part of `would_delete`).
    pub partitions_to_drop: i64,
    /// Eligible, unreferenced rows kept because a live pull consumer pins them.
    pub pinned: i64,
    /// Eligible rows kept by rows that reference them through foreign keys (NO ACTION,
    /// RESTRICT, or a cascade that would reach a held or referenced row:
    /// engine/references.rs).
    pub referenced: i64,
    /// The indexes the policy's statements would use and that are missing
    /// (engine/index_hint.rs).
    pub index_hint: Option<String>,
    /// For a policy that governs only the rows it sees (`visible_rows_only`): the table's rows
    /// row-level security hides from its owner, which no statement of the policy reads.
    pub hidden_rows: Option<i64>,
}

/// A partition the next run would drop whole.
#[derive(Debug, Clone)]
pub struct PartitionDrop {
    /// The partition, quoted and qualified.
    pub partition: String,
    /// Its bound as PostgreSQL prints it.
    pub bound: String,
    /// Its rows.
    pub rows: i64,
    /// Why every row of it is eligible.
    pub proof: Proof,
}

/// The partitions the next run of `policy` would drop whole, in the order the run takes its
/// leaves, each within what the run's cap has left after the leaves before it.
pub fn partitions_to_drop(
    policy: &Policy,
    rel: &RelationInfo,
    holds: &[Hold],
) -> Result<Vec<PartitionDrop>> {
    if !rel.partitioned()
        || policy.kind != Kind::Age
        || policy.action != Action::Delete
        || !policy.enabled
    {
        return Ok(vec![]);
    }
    let mut budget = policy.max_rows_per_run;
    let mut drops = Vec::new();
    for leaf in partition::leaves(rel.oid, policy.age_column.as_deref())? {
        if budget <= 0 {
            break;
        }
        let elig = Eligibility::new(policy, rel, holds)?.on_leaf(&leaf);
        if let Some(proof) = whole_leaf(&elig, rel, &leaf)? {
            let rows = rows_in(policy.owner, &leaf)?;
            if rows <= budget {
                budget -= rows;
                drops.push(PartitionDrop {
                    partition: leaf.qualified.clone(),
                    bound: leaf.bound.clone(),
                    rows,
                    proof,
                });
                continue;
            }
        }
        budget -= elig.count(Guards::ALL)?.min(budget);
    }
    Ok(drops)
}

/// Previews one policy.
pub fn preview(policy: &Policy) -> Result<Preview> {
    let rel = RelationInfo::load(policy.relation, &policy.relation_name)?;
    let holds = active_holds(policy.relation)?;
    let elig = Eligibility::new(policy, &rel, &holds)?;
    let eligible = elig.count(Guards::NONE)?;
    let unreferenced = elig.count(Guards::REFERENCES)?;
    let unpinned = if elig.pinnable() {
        elig.count(Guards::UNHELD)?
    } else {
        unreferenced
    };
    let deletable = elig.count(Guards::ALL)?;
    let hold_ids = elig
        .held_per_hold()?
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .map(|(id, _)| id)
        .collect();
    let archive = policy.action.archives();
    let (would_archive, archived_due) = if archive && policy.keeps_archived_rows() {
        kept_counts(policy, &rel, &holds, &elig)?
    } else if archive {
        (deletable, 0)
    } else {
        (0, 0)
    };
    let would_delete = if !policy.enabled {
        0
    } else if archive {
        archived_due
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
    let partitions_to_drop = partitions_to_drop(policy, &rel, &holds)?.len() as i64;
    let archive_bytes_estimate = if archive {
        Some(estimate_archive_bytes(&elig, &rel, deletable)?)
    } else {
        None
    };
    Ok(Preview {
        policy: policy.name.clone(),
        eligible,
        held: unpinned - deletable,
        hold_ids,
        would_delete,
        would_archive,
        backlog: if archive {
            would_archive
        } else {
            deletable - would_delete
        },
        archive_bytes_estimate,
        partitions_to_drop,
        pinned: unreferenced - unpinned,
        referenced: eligible - unreferenced,
        index_hint: crate::engine::index_hint::missing(policy, &rel)?,
        hidden_rows: hidden_rows(policy, &elig, &rel)?,
    })
}

/// For a policy that keeps archived rows: the rows to archive (eligible now and not archived
/// yet) and, for a two-window one, the archived rows past its `delete_after` that its delete
/// would take (unheld, unreferenced) — counted as its owner, with the claim's and the delete's
/// own conditions.
fn kept_counts(
    policy: &Policy,
    rel: &RelationInfo,
    holds: &[crate::catalog::Hold],
    elig: &Eligibility<'_>,
) -> Result<(i64, i64)> {
    let not_archived = crate::catalog::archived_rows::not_archived(policy.id, rel);
    let count = |elig: &Eligibility<'_>, condition: &str| -> Result<i64> {
        let sql = format!(
            "SELECT count(*) FROM {} t WHERE {} AND {condition}",
            rel.all_rows(),
            elig.age_predicate(Guards::ALL)
        );
        elig.as_owner(|| present(Spi::get_one::<i64>(&sql)?, "a kept-row count"))
    };
    let to_archive = count(elig, &not_archived)?;
    let Some(later) = policy.second_window() else {
        return Ok((to_archive, 0));
    };
    let due = count(
        &Eligibility::new(&later, rel, holds)?,
        &format!("NOT {not_archived}"),
    )?;
    Ok((to_archive, due))
}

/// [`Preview::hidden_rows`]: the table's rows counted by preview's definer (the extension's
/// owner, whom row security does not filter) less those its owner sees; no predicate of the
/// policy is evaluated but as its owner.
fn hidden_rows(policy: &Policy, elig: &Eligibility<'_>, rel: &RelationInfo) -> Result<Option<i64>> {
    if !policy.visible_rows_only() {
        return Ok(None);
    }
    let count = format!("SELECT count(*) FROM {}", rel.all_rows());
    let all = present(Spi::get_one::<i64>(&count)?, "a table count")?;
    let seen = elig.as_owner(|| present(Spi::get_one::<i64>(&count)?, "a table count"))?;
    Ok(Some(all - seen))
}

/// The doctor's counts of a policy's table (health()): its rows, the rows the policy makes
/// eligible, and those of them kept by holds, references or consumer pins — counted by the
/// sweep's own eligibility, as the policy's owner.
pub struct Counts {
    pub total: i64,
    pub eligible: i64,
    pub blocked: i64,
}

/// [`Counts`] of `policy`.
pub fn counts(policy: &Policy) -> Result<Counts> {
    let rel = RelationInfo::load(policy.relation, &policy.relation_name)?;
    let holds = active_holds(policy.relation)?;
    let elig = Eligibility::new(policy, &rel, &holds)?;
    let eligible = elig.count(Guards::NONE)?;
    let deletable = elig.count(Guards::ALL)?;
    let total = elig.as_owner(|| {
        present(
            Spi::get_one::<i64>(&format!("SELECT count(*) FROM {}", rel.all_rows()))?,
            "a table count",
        )
    })?;
    Ok(Counts {
        total,
        eligible,
        blocked: eligible - deletable,
    })
}

/// What the next `CALL retention.run()` deletes from table `relation` by all its delete
/// policies together (the union of what each deletes: preview's per-policy figures count a row
/// every policy that would delete it makes eligible). Each policy in the run's order takes its
/// deletable rows that an earlier one did not, up to its cap; partitions dropped whole are
/// counted as their rows. None when fewer than two enabled delete policies govern the table
/// (the total is then the one policy's `would_delete`).
pub fn table_would_delete(relation: u32) -> Result<Option<i64>> {
    let order: Vec<i64> = Spi::connect(|client| {
        client
            .select(
                "SELECT o.id FROM retention._run_order(NULL) o
                   JOIN retention.policies p ON p.id = o.id
                  WHERE p.relation::oid IN (SELECT retention._tree_of($1::bigint::oid))",
                None,
                &[i64::from(relation).into()],
            )?
            .map(|row| Ok(row.get::<i64>(1)?.unwrap_or_default()))
            .collect::<std::result::Result<Vec<_>, pgrx::spi::SpiError>>()
    })?;
    if order.len() < 2 {
        return Ok(None);
    }
    let mut taken = std::collections::HashSet::new();
    for id in order {
        let Some(policy) = Policy::by_id(id)? else {
            continue;
        };
        let rel = RelationInfo::load(policy.relation, &policy.relation_name)?;
        let holds = active_holds(policy.relation)?;
        let elig = Eligibility::new(&policy, &rel, &holds)?;
        // A row's place: its tid, and on a partitioned table its leaf.
        let place = if rel.partitioned() {
            "e.__ctid::text || '@' || e.__rel::text"
        } else {
            "e.__ctid::text"
        };
        let rows: Vec<String> = elig.as_owner(|| {
            Ok(Spi::connect(|client| {
                client
                    .select(
                        &format!("SELECT {place} FROM ({}) e", elig.rows(Guards::ALL)),
                        None,
                        &[],
                    )?
                    .map(|row| Ok(row.get::<String>(1)?.unwrap_or_default()))
                    .collect::<std::result::Result<Vec<_>, pgrx::spi::SpiError>>()
            })?)
        })?;
        let mut budget = policy.max_rows_per_run;
        for row in rows {
            if budget <= 0 {
                break;
            }
            if taken.insert(row) {
                budget -= 1;
            }
        }
    }
    Ok(Some(taken.len() as i64))
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
