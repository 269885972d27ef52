//! `expire prepare | apply | status`: the operation a plan becomes. Prepare writes a
//! create-only tombstone holding the plan's exact bytes and records the operation (its row in
//! `retention.expire_operations`, and a ledger entry); apply, once the quiescence interval has
//! passed, reads the plan back from the tombstone and its progress from the operation's row,
//! rechecks the state against the plan, deletes only the planned keys that remain, proves none
//! is left and records its outcome.

use super::plan::{holds_over, inventory, inventory_digest, read_plan, sha256_hex, Plan};
use super::MAX_KEYS_PER_REQUEST;
use crate::config::Settings;
use crate::db::{Db, ExpireOutcome, Prepare, Sqlstate};
use crate::error::{Error, Result};
use crate::exit::Exit;
use crate::lifecycle::{Reason, Tally};
use crate::store::Store;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

/// What a tombstone says it is.
const TOMBSTONE_FORMAT: &str = "pg_retention.expire_tombstone.v1";

/// The tombstone prepare writes: the plan's exact bytes and the quiescence interval.
#[derive(Debug, Serialize, Deserialize)]
struct Tombstone {
    format: String,
    operation_id: String,
    plan_sha256: String,
    quiescence_seconds: u64,
    plan: String,
}

/// Where an operation's tombstone lives.
fn tombstone_key(operation_id: &str) -> String {
    format!("_retention/expire/{operation_id}.tombstone.json")
}

/// `expire prepare --plan F --plan-sha256 S`: the tombstone (create-only, read back), then the
/// ledger entry; prints the operation id as the last line.
pub async fn prepare(
    settings: &Settings,
    plan_path: &Path,
    sha256: &str,
    quiescence: Duration,
    actor: &str,
) -> Result<Exit> {
    let bytes = std::fs::read(plan_path)
        .map_err(|e| Error::Config(format!("cannot read {}: {e}", plan_path.display())))?;
    let plan = read_plan(&bytes, sha256)?;
    if plan.archive_ids().is_empty() {
        return Err(Error::Refusal("the plan expires no archive".into()));
    }
    let db = Db::connect(settings).await?;
    let store = Store::open(settings)?;
    let database = db.current_database().await?;
    if database != plan.database {
        return Err(Error::Refusal(format!(
            "the plan is for database {}, this is {database}",
            plan.database
        )));
    }
    let operation_id = db.new_operation_id().await?;
    let plan_text =
        String::from_utf8(bytes).map_err(|_| Error::Config("the plan is not UTF-8".into()))?;
    let tombstone = Tombstone {
        format: TOMBSTONE_FORMAT.into(),
        operation_id: operation_id.clone(),
        plan_sha256: sha256_hex(plan_text.as_bytes()),
        quiescence_seconds: quiescence.as_secs(),
        plan: plan_text,
    };
    let key = tombstone_key(&operation_id);
    let body = Bytes::from(serde_json::to_vec_pretty(&tombstone)?);
    store.put_create(&key, body.clone()).await?;
    if store.get(&key).await? != body {
        return Err(Error::Verify {
            key,
            reason: "the tombstone read back differs from what was written".into(),
        });
    }
    let ids = plan.archive_ids();
    let prepared_at = db
        .expire_prepare(&Prepare {
            operation_id: &operation_id,
            plan_sha256: &tombstone.plan_sha256,
            quiescence,
            archives: &ids,
            objects: plan.keys().len() as i64,
            bytes: plan.bytes() as i64,
            tombstone: &key,
            actor,
        })
        .await?;
    println!(
        "prepared {} archives at {prepared_at}; apply after {}",
        ids.len(),
        humantime::format_duration(quiescence)
    );
    println!("{operation_id}");
    Ok(Exit::Done)
}

/// Reads the operation's plan back from its tombstone, checking both digests.
async fn plan_from_tombstone(store: &Store, key: &str, sha256: &str) -> Result<Plan> {
    let tombstone: Tombstone = match store.get(key).await {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map_err(|e| Error::Refusal(format!("tombstone {key} is not readable: {e}")))?,
        Err(Error::Store(object_store::Error::NotFound { .. })) => {
            return Err(Error::Refusal(format!("tombstone {key} is missing")))
        }
        Err(e) => return Err(e),
    };
    if tombstone.format != TOMBSTONE_FORMAT || tombstone.plan_sha256 != sha256 {
        return Err(Error::Refusal(format!(
            "tombstone {key} is not for plan {sha256}"
        )));
    }
    read_plan(tombstone.plan.as_bytes(), sha256)
        .map_err(|e| Error::Refusal(format!("tombstone {key}: {e}")))
}

/// Why the state now differs from the plan (None: it does not): the reason, its text and the
/// holds. `deleted` are the keys earlier applies of this operation deleted: they must be gone,
/// every other planned object unchanged, and no other object named after a planned batch.
async fn changed(
    db: &Db,
    store: &Store,
    plan: &Plan,
    deleted: &BTreeSet<String>,
) -> Result<Option<(Reason, String, Vec<i64>)>> {
    let now: BTreeSet<i64> = db
        .expiry_candidates()
        .await?
        .iter()
        .map(|c| c.archive_id)
        .collect();
    let gone: Vec<i64> = plan
        .archive_ids()
        .into_iter()
        .filter(|id| !now.contains(id))
        .collect();
    if !gone.is_empty() {
        return Ok(Some((
            Reason::NoLongerDue,
            format!("archives {gone:?} are no longer past their policy's archive_keep"),
            vec![],
        )));
    }
    // The inventory first: a planned object gone (or another named after a planned batch)
    // refuses before anything else is read.
    for p in &plan.policies {
        let mut expected = Vec::new();
        let mut found = Vec::new();
        for a in &p.archives {
            expected.extend(
                a.objects
                    .iter()
                    .filter(|o| !deleted.contains(&o.key))
                    .cloned(),
            );
            found.extend(inventory(store, &a.slice_key, &a.batch, false).await?);
        }
        if inventory_digest(&expected) != inventory_digest(&found) {
            return Ok(Some((
                Reason::InventoryChanged,
                format!(
                    "the inventory of policy {} changed since the plan",
                    p.policy
                ),
                vec![],
            )));
        }
    }
    // An archive some of whose keys an earlier apply deleted passed the hold check then.
    for a in plan.archives() {
        if a.objects.iter().any(|o| deleted.contains(&o.key)) {
            continue;
        }
        let holds = holds_over(db, store, a.archive_id, &a.slice_key).await?;
        if !holds.is_empty() {
            return Ok(Some((
                Reason::Held,
                format!("archive {} is held by holds {holds:?}", a.archive_id),
                holds,
            )));
        }
    }
    Ok(None)
}

/// `expire apply --operation-id ID --plan-sha256 S`; `tally` counts its refusal, the keys
/// and bytes it deleted, a partial end or a completion.
pub async fn apply(
    settings: &Settings,
    operation_id: &str,
    sha256: &str,
    actor: &str,
    tally: &mut Tally,
) -> Result<Exit> {
    let started = Instant::now();
    let db = Db::connect(settings).await?;
    let store = Store::open(settings)?;
    let Some(st) = db.expire_state(operation_id).await? else {
        return Err(Error::Refusal(format!(
            "expire operation {operation_id} was never prepared"
        )));
    };
    if st.plan_sha256 != sha256.trim().to_ascii_lowercase() {
        return Err(Error::Refusal(format!(
            "expire operation {operation_id} was prepared for plan {}, not {sha256}",
            st.plan_sha256
        )));
    }
    if st.outcome() == Some(ExpireOutcome::Completed) {
        println!("completed (already)");
        return Ok(Exit::Done);
    }
    if !st.ready {
        db.expire_record(
            operation_id,
            ExpireOutcome::NotReady,
            &[],
            &serde_json::json!({ "ready_at": st.ready_at }),
            actor,
        )
        .await?;
        tally.refuse_run(Reason::NotReady);
        println!("not_ready: quiescence lasts until {}", st.ready_at);
        return Ok(Exit::ExpireRefused);
    }
    let plan = plan_from_tombstone(&store, &st.tombstone, &st.plan_sha256)
        .await
        .inspect_err(|e| {
            if matches!(e, Error::Refusal(_)) {
                tally.refuse_run(Reason::Tombstone);
            }
        })?;
    if plan.archive_ids() != st.archives {
        tally.refuse_run(Reason::Tombstone);
        return Err(Error::Refusal(
            "the tombstone's plan and the prepared operation name other archives".into(),
        ));
    }
    let deleted_before: BTreeSet<String> = st.deleted_keys.iter().cloned().collect();
    if let Some((why, reason, holds)) = changed(&db, &store, &plan, &deleted_before).await? {
        tally.refuse_run(why);
        db.expire_record(
            operation_id,
            ExpireOutcome::Refused,
            &[],
            &serde_json::json!({ "reason": reason, "hold_ids": holds }),
            actor,
        )
        .await?;
        println!("refused: {reason}");
        return Ok(Exit::ExpireRefused);
    }
    // Only the keys of the original set that remain; never a new listing.
    let remaining: Vec<String> = plan
        .keys()
        .into_iter()
        .filter(|k| !deleted_before.contains(k))
        .collect();
    let per_request = plan.bounds.keys_per_request.clamp(1, MAX_KEYS_PER_REQUEST);
    let budget = Duration::from_secs(plan.bounds.max_active_seconds);
    let mut deleted = Vec::new();
    let mut stopped: Option<String> = None;
    for chunk in remaining.chunks(per_request) {
        if started.elapsed() > budget {
            stopped = Some(format!(
                "active time bound of {}s reached",
                budget.as_secs()
            ));
            break;
        }
        if !deleted.is_empty() && crate::fault::armed("expire-partial") {
            stopped = Some("store failure injected (expire-partial)".into());
            break;
        }
        match store.delete(chunk).await {
            Ok(()) => deleted.extend(chunk.iter().cloned()),
            Err(e) => {
                stopped = Some(e.to_string());
                break;
            }
        }
    }
    // Proof: none of the planned keys remains.
    let mut left = Vec::new();
    if stopped.is_none() {
        for key in &remaining {
            if store.exists(key).await? {
                left.push(key.clone());
            }
        }
        if !left.is_empty() {
            stopped = Some(format!(
                "{} keys still there after their delete",
                left.len()
            ));
        }
    }
    let sizes: std::collections::BTreeMap<&str, u64> = plan
        .archives()
        .flat_map(|a| a.objects.iter().map(|o| (o.key.as_str(), o.size)))
        .collect();
    let mut count_deleted = |keys: &[String]| {
        tally.deleted_objects += keys.len() as u64;
        tally.deleted_bytes += keys
            .iter()
            .map(|k| sizes.get(k.as_str()).copied().unwrap_or_default())
            .sum::<u64>();
    };
    let detail = serde_json::json!({
        "archives": plan.archive_ids(),
        "deleted": deleted.len(),
        "remaining": remaining.len() - deleted.len() + left.len(),
        "attempt": st.applies + 1,
        "reason": stopped,
    });
    match stopped {
        None => {
            match db
                .expire_record(
                    operation_id,
                    ExpireOutcome::Completed,
                    &deleted,
                    &detail,
                    actor,
                )
                .await
            {
                // An archive's object now is a rewrite this operation did not delete (an
                // erasure's supersession recorded since the plan): the archives are not
                // expired. The keys deleted are ledgered; a new plan names the objects now.
                Err(Error::Db(e)) if Sqlstate::of(&e) == Some(Sqlstate::ExpiryConflict) => {
                    let reason = e
                        .as_db_error()
                        .map_or_else(|| e.to_string(), |d| d.message().to_owned());
                    count_deleted(&deleted);
                    tally.refuse_run(Reason::Superseded);
                    let mut detail = detail;
                    detail["reason"] = serde_json::Value::String(reason.clone());
                    db.expire_record(
                        operation_id,
                        ExpireOutcome::Refused,
                        &deleted,
                        &detail,
                        actor,
                    )
                    .await?;
                    println!("refused: {reason}; plan again");
                    return Ok(Exit::ExpireRefused);
                }
                other => other?,
            }
            count_deleted(&deleted);
            tally.succeeded = true;
            println!(
                "completed: {} archives expired, {} keys deleted",
                plan.archive_ids().len(),
                deleted.len()
            );
            Ok(Exit::Done)
        }
        Some(reason) => {
            let done: Vec<String> = deleted.into_iter().filter(|k| !left.contains(k)).collect();
            count_deleted(&done);
            tally.partial = true;
            db.expire_record(operation_id, ExpireOutcome::Partial, &done, &detail, actor)
                .await?;
            println!("partial: {} keys deleted; {reason}", done.len());
            Ok(Exit::ExpirePartial)
        }
    }
}

/// `expire status --operation-id ID`: from the operation's row and the tombstone.
pub async fn status(settings: &Settings, operation_id: &str) -> Result<Exit> {
    let db = Db::connect(settings).await?;
    let store = Store::open(settings)?;
    let Some(st) = db.expire_state(operation_id).await? else {
        return Err(Error::Refusal(format!(
            "expire operation {operation_id} was never prepared"
        )));
    };
    let phase = match (st.outcome(), st.ready) {
        (Some(ExpireOutcome::Completed), _) => "completed",
        (Some(ExpireOutcome::Partial), _) => "partial",
        (Some(ExpireOutcome::Refused), _) => "refused",
        (_, false) => "prepared (not ready)",
        (_, true) => "ready",
    };
    let tombstone = if store.exists(&st.tombstone).await? {
        "present"
    } else {
        "missing"
    };
    let report = serde_json::json!({
        "operation_id": operation_id,
        "state": phase,
        "prepared_at": st.prepared_at,
        "ready_at": st.ready_at,
        "plan_sha256": st.plan_sha256,
        "archives": st.archives,
        "applies": st.applies,
        "keys_deleted": st.deleted_keys.len(),
        "tombstone": tombstone,
    });
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(Exit::Done)
}
