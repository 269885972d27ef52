//! Claiming: eligible, unheld rows not in another live batch become a batch, walked in key
//! order from the policy's watermark and rendered as they are read. Claims of one table take
//! turns (a transaction-scoped advisory lock): each one sees the batches committed before it,
//! so no row is claimed twice, and no row is locked (a lock per row cost a WAL record per row).

use super::{lease, owner_may_archive, slice};
use crate::catalog::{
    active_holds, caller, partition, prepared, Batch, Kind, Leaf, LedgerEntry, LedgerMethod,
    NewBatch, Policy, RelationInfo, Texts,
};
use crate::engine::eligible::{Eligibility, Guards};
use crate::engine::validate::interval_sign;
use crate::error::{Result, RetentionError};
use crate::render::{render_rows, Extremes, Rendered, RowLayout, Statement};
use crate::sql_text::literal;
use pgrx::prelude::*;
use serde_json::json;

fn archive_policy(name: &str) -> Result<Policy> {
    let policy = Policy::by_name(name)?;
    if !policy.action.archives() {
        return Err(RetentionError::invalid(
            format!("policy {name} is not an archive policy"),
            format!("Its action is {}.", policy.action),
            "Only archive_then_delete policies are claimed by archivers; delete policies are swept by retention.run and the worker.",
        ));
    }
    if !policy.enabled {
        return Err(RetentionError::WrongState {
            message: format!("policy {name} is disabled"),
            hint: "retention.enable_policy to archive again.".into(),
        });
    }
    Ok(policy)
}

/// Claims up to `max_rows` eligible, unheld rows not in another live batch. None when there are
/// none. Concurrent claims of a table wait for each other and never overlap.
pub fn claim(
    name: &str,
    max_rows: i32,
    lease: &str,
    owner: Option<&str>,
) -> Result<Option<String>> {
    Ok(claim_rendering(name, max_rows, lease, owner, true)?.map(|c| c.batch))
}

/// A claimed batch.
pub struct Claimed {
    /// Its id.
    pub batch: String,
    /// Its slice, when the claim rendered it.
    pub slice: Option<Vec<u8>>,
    /// Whether claiming again at once may find more: the batch is full (or resumed), or a
    /// partitioned table has leaves after the one claimed from. A short batch of a table means
    /// the claim read past its last eligible row.
    pub more: bool,
}

/// [`claim`], and the batch's slice: rendered from the rows the claim itself read, so the rows
/// are read once for both (a resumed batch is rendered from its stored key set).
/// Without `resume` an owner's unfinished batch is left alone (an archiver with one batch in
/// flight claims the next). Returns the batch, its slice and [`Claimed::more`].
pub fn claim_with_slice(
    name: &str,
    max_rows: i32,
    lease: &str,
    owner: Option<&str>,
    resume: bool,
) -> Result<Option<(String, Vec<u8>, bool)>> {
    // The claim commits without waiting for its WAL to reach disk (the wait was a tenth of an
    // archiver's batch). A claim lost to a crash loses nothing but the claim: no row was
    // touched, and objects written for it are never pruned against (its batch id is gone). The
    // batch's prune commits with the session's own setting, which flushes the claim too.
    prepared::commit_unflushed()?;
    let Some(c) = claim_rendering(name, max_rows, lease, owner, resume)? else {
        return Ok(None);
    };
    let slice = match c.slice {
        Some(slice) => slice,
        None => match slice::batch_slice(&c.batch) {
            Ok(slice) => slice,
            // A resumed batch whose rows changed or vanished since its claim (an erasure, the
            // application's delete) can never be pruned: resumed again and again, it would
            // keep its owner from ever claiming another. It is given up, and its rows that are
            // still eligible are claimed afresh.
            Err(RetentionError::ArchiveMismatch { reason, .. }) => {
                lease::release(
                    &c.batch,
                    &format!("resumed, but {reason}"),
                    Some(lease::ReleaseCause::Refused),
                )?;
                return claim_with_slice(name, max_rows, lease, owner, false);
            }
            Err(e) => return Err(e),
        },
    };
    Ok(Some((c.batch, slice, c.more)))
}

/// A claim, and the slice of a newly claimed batch.
fn claim_rendering(
    name: &str,
    max_rows: i32,
    lease: &str,
    owner: Option<&str>,
    resume: bool,
) -> Result<Option<Claimed>> {
    let policy = archive_policy(name)?;
    crate::limits::batch_rows("max_rows", i64::from(max_rows))?;
    if interval_sign(lease)? != std::cmp::Ordering::Greater {
        return Err(RetentionError::invalid(
            format!("lease must be a positive interval, got {lease}"),
            "A batch is claimed for the length of its lease.",
            "Pass lease => '10 minutes'.",
        ));
    }
    if let Some(owner) = owner.filter(|_| resume) {
        if let Some(batch) = lease::resume(&policy, owner, lease)? {
            return Ok(Some(Claimed {
                batch,
                slice: None,
                more: true,
            }));
        }
    }
    lease::expire_leases(&policy)?;
    let rel = RelationInfo::load(policy.relation, &policy.relation_name)?;
    owner_may_archive(&policy, &rel)?;
    if !rel.partitioned() {
        return claim_in(&policy, &rel, max_rows, lease, owner);
    }
    // A partitioned table is claimed leaf by leaf: a batch's rows lie in one leaf, where they
    // are addressed by ctid as in a table of its own (the batch's relation is the leaf).
    let leaves = claimable_leaves(&policy, &rel, max_rows)?;
    for (i, leaf) in leaves.iter().enumerate() {
        // Locked before it is read, so a leaf dropped meanwhile (with its last batch) is seen
        // to be gone instead of failing the claim.
        if !lock_if_present(leaf.oid)? {
            continue;
        }
        let target = RelationInfo::load(leaf.oid, &leaf.qualified)?;
        if let Some(mut claimed) = claim_in(&policy, &target, max_rows, lease, owner)? {
            claimed.more |= i + 1 < leaves.len();
            return Ok(Some(claimed));
        }
    }
    Ok(None)
}

/// Takes an ACCESS SHARE lock on table `oid` (until the transaction ends) if it still exists;
/// false, and no lock, when it was dropped.
fn lock_if_present(oid: u32) -> Result<bool> {
    let relid = pgrx::pg_sys::Oid::from(oid);
    let lockmode = pgrx::pg_sys::AccessShareLock as pgrx::pg_sys::LOCKMODE;
    // Safety: locking a relation by oid is what relation_open does first; a relation that does
    // not exist (any more) only gets a lock tag that is released again below.
    unsafe { pgrx::pg_sys::LockRelationOid(relid, lockmode) };
    let present = crate::catalog::optional_one::<bool, _>(
        "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_class WHERE oid = $1::bigint::oid)",
        &[i64::from(oid).into()],
    )? == Some(true);
    if !present {
        // Safety: releases the lock taken above, in the same transaction.
        unsafe { pgrx::pg_sys::UnlockRelationOid(relid, lockmode) };
    }
    Ok(present)
}

/// The leaves of a partitioned table that can hold claimable rows: all but those whose range
/// bound on the age column starts at or after the cutoff, and those whose live batch of this
/// policy came back short (it took every row that was claimable there; reading the leaf again
/// while that batch is in flight would only hold up its drop).
fn claimable_leaves(policy: &Policy, rel: &RelationInfo, max_rows: i32) -> Result<Vec<Leaf>> {
    let age = policy
        .age_column
        .as_deref()
        .ok_or_else(|| RetentionError::Internal("an archive policy without age_column".into()))?;
    let age_type = &rel.column(age)?.type_name;
    let window = policy
        .older_than
        .as_deref()
        .ok_or_else(|| RetentionError::Internal("an archive policy without older_than".into()))?;
    let mut targets = Vec::new();
    for leaf in partition::leaves(rel.oid, Some(age))? {
        let mut young = false;
        for lower in leaf
            .age_bounds
            .lower
            .iter()
            .filter_map(|b| partition::bound_value(b))
        {
            young |= Spi::get_one_with_args::<bool>(
                &format!("SELECT $1::text::{age_type} >= now() - $2::interval"),
                &[lower.as_str().into(), window.into()],
            )? == Some(true);
        }
        if !young && !Batch::short_live(policy.id, leaf.oid, max_rows)? {
            targets.push(leaf);
        }
    }
    Ok(targets)
}

/// Waits for the other claims of table `oid` to end (until this transaction ends, no other
/// claim there starts). Every statement of a claim after this sees the batches they made: in
/// READ COMMITTED each one reads a snapshot taken when it starts, which [`claim`] insists on.
fn take_turn(oid: u32) -> Result<()> {
    let isolation = crate::catalog::optional_one::<String, _>(
        "SELECT current_setting('transaction_isolation')",
        &[],
    )?;
    if isolation.as_deref() != Some("read committed") {
        return Err(RetentionError::WrongState {
            message: format!(
                "claims run in READ COMMITTED transactions, not {}",
                isolation.as_deref().unwrap_or("unknown")
            ),
            hint: "A claim must see the batches claimed while it waited for its turn; claim in a READ COMMITTED transaction.".into(),
        });
    }
    // The advisory lock's first key says whose lock it is (0x5254 = "RT"), the second the
    // table; an oid beyond 2^31 wraps to a negative int4, which is still one key per table.
    Spi::run_with_args(
        "SELECT pg_catalog.pg_advisory_xact_lock(21076, $1::bigint::oid::int4)",
        &[i64::from(oid).into()],
    )?;
    Ok(())
}

/// A claim in one table (the policy's, or a leaf of it); `more` when it filled the batch.
fn claim_in(
    policy: &Policy,
    rel: &RelationInfo,
    max_rows: i32,
    lease: &str,
    owner: Option<&str>,
) -> Result<Option<Claimed>> {
    owner_may_archive(policy, rel)?;
    take_turn(rel.oid)?;
    let holds = active_holds(rel.oid)?;
    let elig = Eligibility::new(policy, rel, &holds)?;
    if elig.kind() != Kind::Age {
        return Err(RetentionError::Internal(
            "archive policies are age policies".into(),
        ));
    }
    // Claims walk the table in key order from where the policy's last batch ended, so a claim
    // never reads again past the rows earlier batches pruned (whose dead index entries stay
    // until vacuum). Rows behind the watermark (released batches, rows that became eligible
    // later) are claimed when a claim from the watermark finds nothing and starts over.
    let mut watermark = Batch::watermark(policy.id, rel.oid)?;
    let keeps = policy.keeps_archived_rows();
    let (claimed, age, bounded) = loop {
        let found = claim_in_gaps(policy, rel, &elig, max_rows, watermark.as_deref())?;
        if found.is_some() || watermark.is_none() {
            if keeps && watermark.is_none() {
                look_behind::looked(policy.id, rel.oid, found.is_some());
            }
            break match found {
                Some(found) => found,
                None => return Ok(None),
            };
        }
        if keeps && look_behind::recently(policy.id, rel.oid) {
            return Ok(None);
        }
        watermark = None;
    };
    let (batch, rows) = Batch::insert_claimed(NewBatch {
        policy,
        relation: rel,
        owner,
        slice: claimed.summary(),
        keys: claimed.keys,
        arity: rel.key_arity(),
        places: &claimed.places,
        xmins: &claimed.xmins,
        age: (age.min, age.max),
        lease,
    })?;
    LedgerEntry {
        method: LedgerMethod::Claim,
        policy: Some(policy),
        relation: None,
        rows,
        hold_ids: holds.iter().map(|h| h.id).collect(),
        actor: owner.unwrap_or(&caller()),
        run_id: None,
        detail: json!({ "batch": batch, "lease": lease }),
    }
    .append()?;
    Ok(Some(Claimed {
        batch,
        slice: Some(claimed.slice),
        // A policy that keeps archived rows has claimable rows behind the watermark as a rule
        // (rows among those it archived that came of age since): a short batch from the
        // watermark has not caught up until a claim from the lowest key has looked.
        more: rows >= i64::from(max_rows)
            || bounded
            || (policy.keeps_archived_rows() && watermark.is_some()),
    }))
}

/// Claims from the first gap between live batches after `after` that has eligible rows: the
/// rows after `after` (or after a live batch's last key) and before the next live batch's first
/// key. A batch never spans a live batch, so live ranges stay disjoint and sort by their first
/// key, and each claim statement reads one range of the primary key. (With every live range as
/// a `NOT (…)` condition of one statement instead, each lowered the planner's row estimate; with
/// a few dozen the estimate fell under the claim's limit and it sorted every eligible row: 1.1 s
/// and a 156 MB sort on disk per claim, against ~30 ms.) The rows, the age column's extremes,
/// and whether a live batch bounded the gap (so claiming again may find more after it).
fn claim_in_gaps(
    policy: &Policy,
    rel: &RelationInfo,
    elig: &Eligibility<'_>,
    max_rows: i32,
    after: Option<&[Option<String>]>,
) -> Result<Option<(Rendered, Extremes, bool)>> {
    let live = Batch::live_ranges(rel, after, policy.owner)?;
    let mut from: Option<Texts> = after.map(<[_]>::to_vec);
    for i in 0..=live.len() {
        let until = live.get(i).map(|(first, _)| first.as_slice());
        let (rows, age) = claim_keys(policy, rel, elig, max_rows, from.as_deref(), until)?;
        if !rows.keys.is_empty() {
            return Ok(Some((rows, age, until.is_some())));
        }
        if let Some((_, last)) = live.get(i) {
            from = Some(last.clone());
        }
    }
    Ok(None)
}

/// Renders up to `max_rows` eligible rows after key `after` and before key `before` (in key
/// order): their frames, keys, claim-time places and xmins; the extremes are those of the age
/// column.
fn claim_keys(
    policy: &Policy,
    rel: &RelationInfo,
    elig: &Eligibility<'_>,
    max_rows: i32,
    after: Option<&[Option<String>]>,
    before: Option<&[Option<String>]>,
) -> Result<(Rendered, Extremes)> {
    let age_name = policy
        .age_column
        .as_deref()
        .ok_or_else(|| RetentionError::Internal("an archive policy without age_column".into()))?;
    let age_at = rel
        .columns
        .iter()
        .position(|c| c.name == age_name)
        .ok_or_else(|| RetentionError::UndefinedColumn {
            relation: rel.qualified.clone(),
            column: age_name.to_owned(),
        })?;
    // The bounds are literals of the text (planned for this one run, as the cutoff is), so the
    // statement takes no parameters and is rendered as the executor produces its rows.
    let bound = |op: &str, key: Option<&[Option<String>]>| -> Result<String> {
        match key {
            Some(key) => rel.key_compare(op, &text_array(key)),
            None => Ok("true".into()),
        }
    };
    // A row archived and kept is not archived again.
    let eligible = crate::catalog::archived_rows::still_to_archive(
        policy,
        rel,
        elig.age_predicate(Guards::ALL),
    );
    let after_key = after;
    let after = bound(">", after)?;
    let mut before = bound("<", before)?;
    if rel.pk.is_empty() {
        // The claim starts in the block of the place it starts after.
        let from_block = after_key
            .and_then(|key| key.first().cloned().flatten())
            .and_then(|place| crate::tid::parse(&place))
            .map_or(0, |(block, _)| i64::try_from(block).unwrap_or(i64::MAX));
        let window = place_window(rel, elig, from_block, &eligible, &after, &before, max_rows)?;
        if let Some(window) = window {
            before = format!("{before} AND {window}");
        }
    }
    let sql = format!(
        "SELECT {cols}, t.ctid, t.xmin FROM ONLY {table} t
          WHERE {eligible} AND {after} AND {before}
          ORDER BY {order} LIMIT {max_rows}",
        cols = rel.column_list(),
        table = rel.qualified,
        order = rel.key_order(),
    );
    let layout = RowLayout {
        width: rel.columns.len(),
        key_at: rel.key_at()?,
        frames: true,
        extremes: Some(age_at),
        most: usize::try_from(max_rows).unwrap_or(0),
    };
    elig.as_owner(|| render_rows(Statement::Text(&sql), &[], &layout))
}

/// For a table without a key (whose rows are claimed in place order, which no index gives): a
/// condition `t.ctid < '(block,0)'` that still leaves the next `max_rows` claimable rows in
/// range, found by counting them (not rendering) in block windows that grow fourfold from the
/// claim's start; None when the rest of the table is the window. Without it each claim would
/// sort every claimable row after its start to take the first `max_rows`.
fn place_window(
    rel: &RelationInfo,
    elig: &Eligibility<'_>,
    from_block: i64,
    eligible: &str,
    after: &str,
    before: &str,
    max_rows: i32,
) -> Result<Option<String>> {
    let blocks = i64::try_from(RelationInfo::blocks(rel.oid)?).unwrap_or(i64::MAX);
    let mut span = 64_i64;
    loop {
        let end = from_block.saturating_add(span);
        if end >= blocks {
            return Ok(None);
        }
        let window = format!("t.ctid < '({end},0)'::pg_catalog.tid");
        let sql = format!(
            "SELECT count(*) FROM (SELECT 1 FROM ONLY {table} t
              WHERE {eligible} AND {after} AND {before} AND {window} LIMIT {max_rows}) w",
            table = rel.qualified,
        );
        let found = elig
            .as_owner(|| crate::catalog::optional_one::<i64, _>(&sql, &[]))?
            .unwrap_or(0);
        if found >= i64::from(max_rows) {
            return Ok(Some(window));
        }
        span = span.saturating_mul(4);
    }
}

/// How often a claim of a policy that keeps archived rows starts over from the lowest key when
/// the walk from its watermark finds nothing. Starting over reads every row it archived (each
/// skipped by its `archived_rows` entry), so this backend does it at most once a minute per
/// table while it finds nothing: a row that comes of age behind the watermark (or whose hold
/// is lifted) is claimed within a minute, and an idle archiver does not read the table again
/// at every pass.
mod look_behind {
    use std::cell::RefCell;
    use std::collections::HashMap;
    use std::time::{Duration, Instant};

    const EVERY: Duration = Duration::from_secs(60);

    thread_local! {
        /// (policy, table) → when a claim from the lowest key last found nothing there.
        static EMPTY: RefCell<HashMap<(i64, u32), Instant>> = RefCell::new(HashMap::new());
    }

    /// Whether a claim from the lowest key of `table` found nothing for `policy` within the
    /// last minute.
    pub fn recently(policy: i64, table: u32) -> bool {
        EMPTY.with(|e| {
            e.borrow()
                .get(&(policy, table))
                .is_some_and(|at| at.elapsed() < EVERY)
        })
    }

    /// Records a claim from the lowest key: whether it found rows.
    pub fn looked(policy: i64, table: u32, found: bool) {
        EMPTY.with(|e| {
            let mut e = e.borrow_mut();
            if found {
                e.remove(&(policy, table));
            } else {
                e.insert((policy, table), Instant::now());
            }
        });
    }
}

/// A key as a text[] literal: `ARRAY['…', NULL]::text[]`.
fn text_array(key: &[Option<String>]) -> String {
    let items: Vec<String> = key
        .iter()
        .map(|v| v.as_deref().map_or_else(|| "NULL".into(), literal))
        .collect();
    format!("ARRAY[{}]::text[]", items.join(", "))
}
