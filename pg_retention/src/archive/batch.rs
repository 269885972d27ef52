//! The archive protocol: claim → frames/manifest → complete (or release / lease expiry).

use super::render::{
    column_list, key_compare, key_row_compare, pk_order, pk_positions, render_at, render_batch,
    render_rows, Extremes, Rendered, RowLayout, Statement,
};
use crate::catalog::{
    active_holds, caller, optional_one, prepared, query_json, HoldFence, Kind, LedgerEntry, Policy,
    RelationInfo,
};
use crate::engine::eligible::{Eligibility, Guards};
use crate::engine::validate::interval_sign;
use crate::error::{Result, RetentionError};
use crate::tid::{self, Tid};
use pg_retention_format::{ColumnSpec, Manifest, FORMAT_VERSION};
use pgrx::prelude::*;
use serde::Deserialize;
use serde_json::json;

/// Text values as SQL `text[]` gives them (keys).
type Texts = Vec<Option<String>>;

/// A row of `retention.batches`.
#[derive(Debug, Deserialize)]
struct Batch {
    id: String,
    policy_id: i64,
    policy_version: i32,
    relation: u32,
    relation_name: String,
    state: String,
    owner: Option<String>,
    rows: i64,
    age_min: Option<String>,
    age_max: Option<String>,
    claimed_at: String,
}

fn load_batch(id: &str, lock: bool) -> Result<Batch> {
    let sql = format!(
        "SELECT jsonb_build_object('id', b.id::text, 'policy_id', b.policy_id, 'policy_version', b.policy_version,
                'relation', b.relation::bigint, 'relation_name', b.relation_name, 'state', b.state,
                'owner', b.owner, 'rows', b.rows, 'age_min', b.age_min, 'age_max', b.age_max,
                'claimed_at', to_char(b.claimed_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"'))
           FROM retention.batches b WHERE b.id = $1::uuid {}",
        if lock { "FOR UPDATE" } else { "" }
    );
    query_json(&sql, &[id.into()])?.ok_or_else(|| RetentionError::UnknownBatch(id.to_owned()))
}

/// The archive policy a batch belongs to, refusing one that is gone.
fn batch_policy(b: &Batch) -> Result<(Policy, RelationInfo)> {
    let policy = Policy::by_id(b.policy_id)?.ok_or_else(|| RetentionError::BatchState {
        batch: b.id.clone(),
        state: b.state.clone(),
        message: "its policy was dropped".into(),
    })?;
    let rel = RelationInfo::load(b.relation, &b.relation_name)?;
    Ok((policy, rel))
}

/// Refuses (42501) to claim or prune for a policy whose owner lost a privilege it runs with.
fn owner_may_archive(policy: &Policy, rel: &RelationInfo) -> Result<()> {
    crate::author::ensure_owner_privileges(
        policy.owner,
        rel.oid,
        &rel.qualified,
        &policy.name,
        true,
    )
}

fn archive_policy(name: &str) -> Result<Policy> {
    let policy = Policy::by_name(name)?;
    if policy.action != "archive_then_delete" {
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

/// Ends the live batches of `policy_id` whose lease ran out; their rows become claimable.
fn expire_leases(policy: &Policy) -> Result<()> {
    let expired: Vec<(String, i64)> = query_json::<Vec<(String, i64)>>(
        "WITH e AS (
             UPDATE retention.batches SET state = 'expired', finished_at = now(), finish_reason = 'lease expired'
              WHERE policy_id = $1 AND state = 'claimed' AND lease_until < now()
          RETURNING id, rows),
         d AS (DELETE FROM retention.batch_keys k USING e WHERE k.batch_id = e.id)
         SELECT coalesce(jsonb_agg(jsonb_build_array(e.id::text, e.rows)), '[]') FROM e",
        &[policy.id.into()],
    )?
    .unwrap_or_default();
    for (batch, rows) in expired {
        LedgerEntry {
            method: "lease_expired",
            policy: Some(policy),
            relation: None,
            rows,
            hold_ids: vec![],
            actor: &caller(),
            run_id: None,
            detail: json!({ "batch": batch }),
        }
        .append()?;
    }
    Ok(())
}

/// An archiver that restarts under the same owner name gets its own unfinished batch back
/// (even when its lease ran out, as long as nobody else claimed the rows), with a new lease, so
/// it can find its objects under the same keys instead of archiving the rows twice.
fn resume_batch(policy: &Policy, owner: &str, lease: &str) -> Result<Option<String>> {
    let batch = optional_one::<String>(
        "UPDATE retention.batches SET lease_until = now() + $3::interval
          WHERE id = (SELECT id FROM retention.batches
                       WHERE policy_id = $1 AND state = 'claimed' AND owner = $2
                       ORDER BY claimed_at LIMIT 1 FOR UPDATE SKIP LOCKED)
          RETURNING id::text",
        &[policy.id.into(), owner.into(), lease.into()],
    )?;
    if let Some(batch) = &batch {
        LedgerEntry {
            method: "resume",
            policy: Some(policy),
            relation: None,
            rows: 0,
            hold_ids: vec![],
            actor: owner,
            run_id: None,
            detail: json!({ "batch": batch, "lease": lease }),
        }
        .append()?;
    }
    Ok(batch)
}

/// Claims up to `max_rows` eligible, unheld rows not in another live batch. None when there are
/// none. Concurrent claims skip each other's rows (SKIP LOCKED) and never overlap.
pub fn claim(
    name: &str,
    max_rows: i32,
    lease: &str,
    owner: Option<&str>,
) -> Result<Option<String>> {
    Ok(claim_rendering(name, max_rows, lease, owner, true, false)?.map(|(batch, _)| batch))
}

/// [`claim`], and the batch's slice: rendered from the rows the claim itself read and locked,
/// so the rows are read once for both (a resumed batch is rendered from its stored key set).
/// Without `resume` an owner's unfinished batch is left alone (an archiver with one batch in
/// flight claims the next).
pub fn claim_with_slice(
    name: &str,
    max_rows: i32,
    lease: &str,
    owner: Option<&str>,
    resume: bool,
) -> Result<Option<(String, Vec<u8>)>> {
    // The claim commits without waiting for its WAL to reach disk (the wait was a tenth of an
    // archiver's batch). A claim lost to a crash loses nothing but the claim: no row was
    // touched, and objects written for it are never pruned against (its batch id is gone). The
    // batch's prune commits with the session's own setting, which flushes the claim too.
    prepared::commit_unflushed()?;
    match claim_rendering(name, max_rows, lease, owner, resume, true)? {
        None => Ok(None),
        Some((batch, Some(slice))) => Ok(Some((batch, slice))),
        Some((batch, None)) => {
            let slice = batch_slice(&batch)?;
            Ok(Some((batch, slice)))
        }
    }
}

/// A claim; with `render`, the slice of a newly claimed batch too.
fn claim_rendering(
    name: &str,
    max_rows: i32,
    lease: &str,
    owner: Option<&str>,
    resume: bool,
    render: bool,
) -> Result<Option<(String, Option<Vec<u8>>)>> {
    let policy = archive_policy(name)?;
    if max_rows < 1 {
        return Err(RetentionError::invalid(
            format!("max_rows must be at least 1, got {max_rows}"),
            "A batch holds at least one row.",
            "Pass max_rows => 1000 or so.",
        ));
    }
    if interval_sign(lease)? != std::cmp::Ordering::Greater {
        return Err(RetentionError::invalid(
            format!("lease must be a positive interval, got {lease}"),
            "A batch is claimed for the length of its lease.",
            "Pass lease => '10 minutes'.",
        ));
    }
    if let Some(owner) = owner.filter(|_| resume) {
        if let Some(batch) = resume_batch(&policy, owner, lease)? {
            return Ok(Some((batch, None)));
        }
    }
    expire_leases(&policy)?;
    let rel = RelationInfo::load(policy.relation, &policy.relation_name)?;
    owner_may_archive(&policy, &rel)?;
    let holds = active_holds(policy.relation)?;
    let elig = Eligibility::new(&policy, &rel, &holds)?;
    if elig.kind() != Kind::Age {
        return Err(RetentionError::Internal(
            "archive policies are age policies".into(),
        ));
    }
    // Claims walk the table in key order from where the policy's last batch ended, so a claim
    // never reads again past the rows earlier batches pruned (whose dead index entries stay
    // until vacuum). Rows behind the watermark (released batches, rows that became eligible
    // later) are claimed when a claim from the watermark finds nothing and starts over.
    let mut watermark = claim_watermark(&policy)?;
    let (claimed, age) = loop {
        let live = live_ranges(&rel, watermark.as_deref())?;
        let (claimed, age) = claim_keys(
            &policy,
            &rel,
            &elig,
            max_rows,
            watermark.as_deref(),
            &live,
            render,
        )?;
        if !claimed.keys.is_empty() || watermark.is_none() {
            break (claimed, age);
        }
        watermark = None;
    };
    let arity = rel.pk.len().max(1);
    let rows = (claimed.keys.len() / arity) as i64;
    if rows == 0 {
        return Ok(None);
    }
    let first_key = claimed.keys[..arity].to_vec();
    let last_key = claimed.keys[claimed.keys.len() - arity..].to_vec();
    let batch = Spi::get_one_with_args::<String>(
        "INSERT INTO retention.batches (policy_id, policy_version, relation, relation_name, state, owner, rows,
                                        first_key, last_key, age_min, age_max, lease_until)
         VALUES ($1, $2, $3::bigint::oid, $4, 'claimed', $5, $6, $7, $8, $9, $10, now() + $11::interval) RETURNING id::text",
        &[
            policy.id.into(),
            policy.version.into(),
            i64::from(policy.relation).into(),
            policy.relation_name.as_str().into(),
            owner.into(),
            rows.into(),
            first_key.into(),
            last_key.into(),
            age.min.into(),
            age.max.into(),
            lease.into(),
        ],
    )?
    .ok_or_else(|| RetentionError::Internal("batch insert returned nothing".into()))?;
    Spi::run_with_args(
        "INSERT INTO retention.batch_keys (batch_id, keys, ctids) VALUES ($1::uuid, $2, $3)",
        &[
            batch.as_str().into(),
            claimed.keys.into(),
            tid::pointers(&claimed.places).into(),
        ],
    )?;
    LedgerEntry {
        method: "claim",
        policy: Some(&policy),
        relation: None,
        rows,
        hold_ids: holds.iter().map(|h| h.id).collect(),
        actor: owner.unwrap_or(&caller()),
        run_id: None,
        detail: json!({ "batch": batch, "lease": lease }),
    }
    .append()?;
    Ok(Some((batch, render.then_some(claimed.slice))))
}

/// Where the next claim of `policy` starts: after the last key of its latest batch, unless that
/// batch was released or expired (its rows are to be claimed again first).
fn claim_watermark(policy: &Policy) -> Result<Option<Vec<Option<String>>>> {
    optional_one::<Vec<Option<String>>>(
        "SELECT CASE WHEN b.state IN ('claimed', 'pruned') THEN b.last_key END
           FROM retention.batches b WHERE b.policy_id = $1
          ORDER BY b.claimed_at DESC LIMIT 1",
        &[policy.id.into()],
    )
}

/// A live batch's first and last key.
type KeyRange = (Texts, Texts);

/// First and last key of every live batch of the table (any policy) that ends after `after`:
/// nobody else claims a row inside them while the batch lives. A claim that starts after
/// `after` cannot reach the others, and leaving them out keeps its plan an ordered walk of the
/// primary key: each range is a condition that lowers the planner's row estimate, and with a
/// few dozen of them it fell below the claim's limit, so the planner read every eligible row
/// and sorted them (1.1 s and a 156 MB sort on disk per claim, against ~30 ms).
fn live_ranges(rel: &RelationInfo, after: Option<&[Option<String>]>) -> Result<Vec<KeyRange>> {
    let sql = format!(
        "SELECT coalesce(jsonb_agg(jsonb_build_array(b.first_key, b.last_key)), '[]')
           FROM retention.batches b
          WHERE b.relation = $1::bigint::oid AND b.state = 'claimed' AND b.first_key IS NOT NULL
            AND ($2::text[] IS NULL OR {ends_after})",
        ends_after = key_row_compare(rel, "b.last_key", ">", "$2::text[]")?,
    );
    let after: Option<Vec<Option<String>>> = after.map(<[_]>::to_vec);
    Ok(
        query_json::<Vec<KeyRange>>(&sql, &[i64::from(rel.oid).into(), after.into()])?
            .unwrap_or_default(),
    )
}

/// A text[] literal of `key`.
fn key_literal(key: &[Option<String>]) -> String {
    let items: Vec<String> = key
        .iter()
        .map(|v| v.as_deref().map_or("NULL".into(), crate::sql_text::literal))
        .collect();
    format!("ARRAY[{}]::text[]", items.join(", "))
}

/// Locks and renders the keys of up to `max_rows` eligible rows after `after` (in key order)
/// outside the live batches' ranges, with `render` their frames too, and the rows' claim-time
/// places; the extremes are those of the age column. Rows another
/// transaction holds locked (a concurrent claim) are skipped.
fn claim_keys(
    policy: &Policy,
    rel: &RelationInfo,
    elig: &Eligibility<'_>,
    max_rows: i32,
    after: Option<&[Option<String>]>,
    live: &[KeyRange],
    render: bool,
) -> Result<(Rendered, Extremes)> {
    use crate::sql_text::ident;
    let names: Vec<String> = if render {
        rel.columns.iter().map(|c| ident(&c.name)).collect()
    } else {
        rel.pk.iter().map(|c| ident(c)).collect()
    };
    let key_at: Vec<usize> = if render {
        pk_positions(rel)?
    } else {
        (0..rel.pk.len()).collect()
    };
    let age_name = policy.age_column.as_deref().unwrap_or_default();
    let mut outside = Vec::new();
    for (first, last) in live {
        outside.push(format!(
            "NOT ({} AND {})",
            key_compare(rel, ">=", &key_literal(first))?,
            key_compare(rel, "<=", &key_literal(last))?
        ));
    }
    let width = names.len();
    // The age column's least and greatest value go to the manifest: it is among the rendered
    // columns, or selected after the ctid when only keys are.
    let (age_at, age_extra) = match rel.columns.iter().position(|c| c.name == age_name) {
        Some(i) if render => (i, String::new()),
        _ => (width + 1, format!(", t.{}", ident(age_name))),
    };
    let sql = format!(
        "SELECT {cols}, t.ctid{age_extra} FROM ONLY {table} t
          WHERE {eligible} AND {after} AND {outside}
          ORDER BY {order} LIMIT {max_rows}
            FOR UPDATE OF t SKIP LOCKED",
        cols = names
            .iter()
            .map(|c| format!("t.{c}"))
            .collect::<Vec<_>>()
            .join(", "),
        table = rel.qualified,
        eligible = elig.age_predicate(Guards::ALL),
        after = if after.is_some() {
            key_compare(rel, ">", "$1::text[]")?
        } else {
            "$1::text[] IS NULL".into()
        },
        outside = if outside.is_empty() {
            "true".into()
        } else {
            outside.join(" AND ")
        },
        order = pk_order(rel),
    );
    let after: Option<Vec<Option<String>>> = after.map(<[_]>::to_vec);
    let layout = RowLayout {
        width,
        key_at,
        frames: render,
        extremes: Some(age_at),
    };
    elig.as_owner(|| render_rows(Statement::Text(&sql), &[after.into()], &layout))
}

/// The frozen key set of a live batch and where its rows were when claimed.
fn batch_keys(id: &str) -> Result<(Texts, Vec<Tid>)> {
    type Tids = Vec<Option<pg_sys::ItemPointerData>>;
    let (keys, ctids) = Spi::connect(|client| {
        let table = client.select(
            "SELECT keys, ctids FROM retention.batch_keys WHERE batch_id = $1::uuid",
            Some(1),
            &[id.into()],
        )?;
        if table.is_empty() {
            return Ok::<_, pgrx::spi::SpiError>((vec![], vec![]));
        }
        let (keys, ctids) = table.first().get_two::<Texts, Tids>()?;
        Ok((keys.unwrap_or_default(), ctids.unwrap_or_default()))
    })?;
    let places = ctids
        .into_iter()
        .map(|t| t.map(tid::of))
        .collect::<Option<Vec<Tid>>>()
        .ok_or_else(|| RetentionError::Internal(format!("batch {id} has a NULL ctid")))?;
    Ok((keys, places))
}

/// The batch's rows as they are now, rendered in key order, each with its ctid. Read with the
/// privileges of the policy's owner, like every statement over a governed table.
fn current_rows(b: &Batch, policy: &Policy, rel: &RelationInfo) -> Result<Rendered> {
    let (keys, ctids) = batch_keys(&b.id)?;
    let found = crate::author::run_as(policy.owner, || render_batch(rel, &ctids))?;
    in_claim_order(b, rel, &keys, &ctids, found)
}

/// The rows found at a batch's claim-time `ctids`, put back in the claim's (key) order. A row
/// that changed since (an update writes a new version elsewhere), vanished or was moved by a
/// table rewrite is refused, and so is any other row now in its place (its key differs).
fn in_claim_order(
    b: &Batch,
    rel: &RelationInfo,
    keys: &[Option<String>],
    ctids: &[Tid],
    found: Rendered,
) -> Result<Rendered> {
    let mismatch = |reason: String| RetentionError::ArchiveMismatch {
        batch: b.id.clone(),
        reason,
    };
    // Rows come in the scan's order; the slice is in key order, which is the claim's order.
    let rendered = found.reordered(ctids, rel.pk.len()).map_err(|found| {
        let present: std::collections::HashSet<&Tid> = found.places.iter().collect();
        let gone = ctids.iter().filter(|c| !present.contains(c)).count();
        mismatch(format!(
            "{gone} of its {} rows changed, moved or vanished since the claim",
            b.rows
        ))
    })?;
    if rendered.keys != keys {
        return Err(mismatch(
            "rows now at its rows' places have other keys: the table was rewritten since the claim"
                .into(),
        ));
    }
    Ok(rendered)
}

/// The frames of a batch, in key order.
pub fn batch_frames(id: &str) -> Result<Vec<Vec<u8>>> {
    Ok(batch_slice_rendered(id)?
        .frames()
        .map(<[u8]>::to_vec)
        .collect())
}

/// The slice of a batch: its frames in key order, concatenated (what the archiver writes).
pub fn batch_slice(id: &str) -> Result<Vec<u8>> {
    Ok(batch_slice_rendered(id)?.slice)
}

fn batch_slice_rendered(id: &str) -> Result<Rendered> {
    let b = load_batch(id, false)?;
    if b.state != "claimed" {
        return Err(RetentionError::BatchState {
            batch: b.id,
            state: b.state,
            message: "only a claimed batch has frames".into(),
        });
    }
    let (policy, rel) = batch_policy(&b)?;
    current_rows(&b, &policy, &rel)
}

/// The manifest of a batch as it would be written next to its slice.
///
/// With `digest` false the slice is not rendered: `blake3` is empty and `rows` / `bytes` are
/// the claimed row count and 0, for an archiver that computes them from the frames it streams
/// anyway (rendering a batch is the expensive part of archiving).
pub fn manifest(id: &str, digest: bool) -> Result<Manifest> {
    let b = load_batch(id, false)?;
    let (policy, rel) = batch_policy(&b)?;
    let (blake3, rows, bytes) = if digest {
        current_rows(&b, &policy, &rel)?.summary()
    } else {
        (String::new(), b.rows.max(0) as u64, 0)
    };
    let database = Spi::get_one::<String>("SELECT current_database()::text")?.unwrap_or_default();
    // Always schema-qualified, whatever the search path: object keys are built from it.
    let relation = Spi::get_one_with_args::<String>(
        "SELECT format('%I.%I', n.nspname, c.relname) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
          WHERE c.oid = $1::bigint::oid",
        &[i64::from(rel.oid).into()],
    )?
    .unwrap_or_else(|| rel.qualified.clone());
    Ok(Manifest {
        format: FORMAT_VERSION,
        database,
        relation,
        policy: policy.name.clone(),
        policy_version: i64::from(b.policy_version),
        batch: b.id,
        columns: rel
            .columns
            .iter()
            .map(|c| ColumnSpec {
                name: c.name.clone(),
                type_name: c.type_name.clone(),
            })
            .collect(),
        key_columns: rel.pk.clone(),
        rows,
        bytes,
        blake3,
        age_min: b.age_min,
        age_max: b.age_max,
        created_at: b.claimed_at,
        supersedes: None,
    })
}

/// Extends the lease of a live batch; returns the new end of the lease.
pub fn extend_lease(id: &str, lease: &str) -> Result<String> {
    let b = load_batch(id, true)?;
    if b.state != "claimed" {
        return Err(RetentionError::BatchState {
            batch: b.id,
            state: b.state,
            message: "its lease cannot be extended".into(),
        });
    }
    Ok(Spi::get_one_with_args::<String>(
        "UPDATE retention.batches SET lease_until = now() + $2::interval WHERE id = $1::uuid RETURNING lease_until::text",
        &[id.into(), lease.into()],
    )?
    .unwrap_or_default())
}

/// Gives a batch up: its rows become claimable again. Releasing an ended batch is a no-op.
pub fn release(id: &str, reason: &str) -> Result<bool> {
    let b = load_batch(id, true)?;
    if b.state != "claimed" {
        return Ok(false);
    }
    Spi::run_with_args(
        "UPDATE retention.batches SET state = 'released', finished_at = now(), finish_reason = $2 WHERE id = $1::uuid;",
        &[id.into(), reason.into()],
    )?;
    Spi::run_with_args(
        "DELETE FROM retention.batch_keys WHERE batch_id = $1::uuid",
        &[id.into()],
    )?;
    let policy = Policy::by_id(b.policy_id)?;
    LedgerEntry {
        method: "release",
        policy: policy.as_ref(),
        relation: Some(&b.relation_name),
        rows: b.rows,
        hold_ids: vec![],
        actor: b.owner.as_deref().unwrap_or(&caller()),
        run_id: None,
        detail: json!({ "batch": id, "reason": reason }),
    }
    .append()?;
    Ok(true)
}

/// Verifies and prunes a batch in the caller's transaction. Returns rows deleted; 0 for a
/// batch that was already completed. It deletes first and checks after, inside a
/// subtransaction: a refused prune undoes its own deletes before the error comes back, so no
/// caller can commit one.
pub fn complete(
    id: &str,
    object_key: &str,
    blake3: &str,
    rows: i64,
    bytes: i64,
    owner: Option<&str>,
) -> Result<i64> {
    crate::subxact::atomically(|| prune_verified(id, object_key, blake3, rows, bytes, owner))
}

fn prune_verified(
    id: &str,
    object_key: &str,
    blake3: &str,
    rows: i64,
    bytes: i64,
    owner: Option<&str>,
) -> Result<i64> {
    let b = load_batch(id, true)?;
    if b.state == "pruned" {
        return Ok(0);
    }
    if b.state != "claimed" {
        return Err(RetentionError::BatchState {
            batch: b.id,
            state: b.state,
            message: "it cannot be completed; its rows may belong to another batch now".into(),
        });
    }
    if let (Some(given), Some(claimed_by)) = (owner, b.owner.as_deref()) {
        if given != claimed_by {
            return Err(RetentionError::BatchState {
                batch: b.id.clone(),
                state: b.state.clone(),
                message: format!("it was claimed by {claimed_by}, not {given}"),
            });
        }
    }
    if object_key.trim().is_empty() {
        return Err(RetentionError::invalid(
            "object_key must not be empty",
            "The archive index records where the slice is.",
            "Pass the key the slice was written under.",
        ));
    }
    let (policy, rel) = batch_policy(&b)?;
    owner_may_archive(&policy, &rel)?;
    let (keys, ctids) = batch_keys(&b.id)?;
    // Delete the batch's rows that are still eligible and that no hold and no reference keeps,
    // returning them as they were, with the same hold fence as the sweep: a hold placed while
    // we work makes us read the holds again. Then render the rows kept, and check the whole
    // batch against the archive. Any mismatch raises, which rolls the deletes back with it: no
    // row is gone unless this transaction proved its contents hash to the archived slice.
    let mut attempt = 0;
    let (gone, holds) = loop {
        attempt += 1;
        let (fence, holds) = HoldFence::read(rel.oid)?;
        let elig = Eligibility::new(&policy, &rel, &holds)?;
        let sql = format!(
            "DELETE FROM ONLY {table} t
              WHERE t.ctid = ANY ($1) AND {guards} AND NOT {fenced}
          RETURNING {cols}, t.ctid",
            table = rel.qualified,
            guards = elig.age_predicate(Guards::ALL),
            fenced = fence.tripped(),
            cols = column_list(&rel),
        );
        let gone = elig.as_owner(|| render_at(&rel, &sql, &ctids, true))?;
        if !gone.ends.is_empty() || attempt >= 5 || !fence.tripped_now()? {
            break (gone, holds);
        }
    };
    let deleted = gone.ends.len() as i64;
    let mut found = gone;
    if deleted < b.rows {
        // Our own deletes are invisible to us now: this finds the rows kept.
        found.append(crate::author::run_as(policy.owner, || {
            render_batch(&rel, &ctids)
        })?);
    }
    let (digest, n, nbytes) = in_claim_order(&b, &rel, &keys, &ctids, found)?.summary();
    let mismatch = |reason: String| {
        Err(RetentionError::ArchiveMismatch {
            batch: b.id.clone(),
            reason,
        })
    };
    if n as i64 != b.rows {
        return mismatch(format!(
            "{} of its {} rows vanished since the claim",
            b.rows - n as i64,
            b.rows
        ));
    }
    if n as i64 != rows || nbytes as i64 != bytes {
        return mismatch(format!("the archive reports {rows} rows and {bytes} bytes, the rows now make {n} rows and {nbytes} bytes"));
    }
    if digest != blake3 {
        return mismatch(format!("the rows now hash to {digest}, the archive to {blake3}: rows changed since they were archived"));
    }
    let kept = b.rows - deleted;
    let archive_id = Spi::get_one_with_args::<i64>(
        "INSERT INTO retention.archive_records (batch, policy, policy_version, relation, object_key, blake3, rows, bytes, deleted)
         VALUES ($1::uuid, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING id",
        &[
            id.into(),
            policy.name.as_str().into(),
            b.policy_version.into(),
            rel.qualified.as_str().into(),
            object_key.into(),
            blake3.into(),
            rows.into(),
            bytes.into(),
            deleted.into(),
        ],
    )?;
    let actor = b.owner.clone().unwrap_or_else(caller);
    let hold_ids: Vec<i64> = holds.iter().map(|h| h.id).collect();
    LedgerEntry {
        method: "prune",
        policy: Some(&policy),
        relation: None,
        rows: deleted,
        hold_ids: hold_ids.clone(),
        actor: &actor,
        run_id: None,
        detail: json!({ "batch": id, "object_key": object_key, "blake3": blake3, "archive_id": archive_id, "kept": kept }),
    }
    .append_with_archive(archive_id)?;
    if kept > 0 {
        LedgerEntry {
            method: "hold_skip",
            policy: Some(&policy),
            relation: None,
            rows: kept,
            hold_ids,
            actor: &actor,
            run_id: None,
            detail: json!({ "batch": id, "reason": "archived but kept: held, still referenced or no longer eligible at prune time" }),
        }
        .append()?;
    }
    Spi::run_with_args(
        "UPDATE retention.batches SET state = 'pruned', finished_at = now(), finish_reason = 'archived' WHERE id = $1::uuid",
        &[id.into()],
    )?;
    Spi::run_with_args(
        "DELETE FROM retention.batch_keys WHERE batch_id = $1::uuid",
        &[id.into()],
    )?;
    Ok(deleted)
}
