//! The archiver's expire operations (`expire prepare`, `apply`, `status`; docs/archiver.md):
//! `retention.expire_prepare` records one as prepared, `retention.expire_state` reads where it
//! stands, `retention.expire_record` records each apply, and a completed one marks its
//! archives expired. The state is `retention.expire_operations`'s row
//! (`catalog/expire_operation.rs`); the ledger gets an `expire_prepare` entry and one
//! `expire_apply` entry per apply, as the history.

use crate::arrays::without_nulls;
use crate::catalog::expire_operation::{self, ApplyOutcome, ExpireOperation, NewOperation};
use crate::catalog::{optional_one, LedgerEntry, LedgerMethod};
use crate::error::{present, required, OrReport, Result, RetentionError};
use pgrx::datum::{Interval, TimestampWithTimeZone};
use pgrx::prelude::*;
use pgrx::Uuid;
use serde_json::{json, Value};

/// An operation's arguments as `expire_prepare` takes them.
struct Prepare<'a> {
    operation: Option<Uuid>,
    plan_sha256: Option<&'a str>,
    quiescence: Option<Interval>,
    archive_ids: Option<Vec<Option<i64>>>,
    objects: Option<i64>,
    bytes: Option<i64>,
    tombstone: Option<&'a str>,
    actor: Option<&'a str>,
}

/// An array as PostgreSQL writes it (`{1,2}`), for messages.
fn array_text(ids: &[i64]) -> String {
    let ids: Vec<String> = ids.iter().map(i64::to_string).collect();
    format!("{{{}}}", ids.join(","))
}

/// Records an operation as prepared and ledgers it; when it was prepared.
fn prepare(p: Prepare<'_>) -> Result<TimestampWithTimeZone> {
    let digest = p
        .plan_sha256
        .filter(|d| d.len() == 64 && d.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')));
    let archive_ids = p.archive_ids.filter(|ids| !ids.is_empty());
    let quiescence = p.quiescence.filter(|q| q.as_micros() >= 0);
    let actor = p.actor.filter(|a| !a.is_empty());
    let (Some(digest), Some(archive_ids), Some(quiescence), Some(actor)) =
        (digest, archive_ids, quiescence, actor)
    else {
        return Err(RetentionError::invalid(
            "an expire operation needs a plan digest, archives, a quiescence >= 0 and an actor",
            "The plan digest is the plan's SHA-256 in lower-case hex, the archives at least one \
             archive id, the quiescence an interval of zero or more and the actor a name.",
            "Prepare with pg-retention-archiver expire prepare.",
        ));
    };
    let operation = required(p.operation, "operation")?;
    let archive_ids: Vec<i64> = archive_ids
        .into_iter()
        .map(|id| id.ok_or(RetentionError::NullArgument("archive_ids")))
        .collect::<Result<_>>()?;
    let new = NewOperation {
        operation,
        plan_sha256: digest,
        quiescence,
        archive_ids: &archive_ids,
        objects: required(p.objects, "objects")?,
        bytes: required(p.bytes, "bytes")?,
        tombstone: required(p.tombstone, "tombstone")?,
        actor,
    };
    let prepared_already = || {
        RetentionError::raised(
            "42710",
            format!("expire operation {operation} is prepared already"),
        )
    };
    if expire_operation::exists(operation)? {
        return Err(prepared_already());
    }
    let stale = present(
        optional_one::<Vec<i64>, _>(
            "SELECT ARRAY(SELECT unnest($1::bigint[]) EXCEPT SELECT c.archive_id FROM retention.expiry_candidates() c
                          ORDER BY 1)",
            &[archive_ids.clone().into()],
        )?,
        "the archives no longer due",
    )?;
    if !stale.is_empty() {
        return Err(RetentionError::WrongState {
            message: format!(
                "archives {} are not past their policy's archive_keep (or expired already)",
                array_text(&stale)
            ),
            hint: "Plan again.".into(),
        });
    }
    let prepared = new.insert()?.ok_or_else(prepared_already)?;
    LedgerEntry {
        method: LedgerMethod::ExpirePrepare,
        policy: None,
        relation: None,
        rows: 0,
        hold_ids: vec![],
        actor,
        run_id: None,
        detail: json!({
            "operation": operation.to_string(), "plan_sha256": digest,
            "quiescence": prepared.quiescence, "archives": archive_ids,
            "objects": new.objects, "bytes": new.bytes, "tombstone": new.tombstone,
        }),
    }
    .append()?;
    Ok(prepared.at)
}

/// Refuses (RT504) to complete `op` when an archive's object now is not among the keys it
/// deleted (`deleted` by this apply, or an earlier one): a rewrite (an erasure's supersession)
/// became the object after the plan, and marked expired it would stay in the store with
/// nothing to delete it.
fn refuse_a_rewrite_since_the_plan(op: &ExpireOperation, deleted: &[String]) -> Result<()> {
    // One at a time with a rewrite being recorded for one of the archives (archive/supersede.rs
    // takes the same lock), then read in a statement of its own, as committed.
    Spi::run_with_args(
        "SELECT 1 FROM retention.archive_records a WHERE a.id = ANY ($1)
          ORDER BY a.id FOR NO KEY UPDATE",
        &[op.archive_ids.clone().into()],
    )?;
    let gone: Vec<String> = op.deleted_keys.iter().chain(deleted).cloned().collect();
    let kept = present(
        optional_one::<Vec<i64>, _>(
            "SELECT ARRAY(SELECT a.id FROM retention.archives a
                           WHERE a.id = ANY ($1) AND a.expired_at IS NULL AND a.object_key <> ALL ($2)
                           ORDER BY a.id)",
            &[op.archive_ids.clone().into(), gone.into()],
        )?,
        "the archives whose object is a rewrite",
    )?;
    let Some(first) = kept.first() else {
        return Ok(());
    };
    Err(RetentionError::ExpiryConflict {
        message: format!(
            "expire operation {} cannot complete: the object of archive {first} now is not one it deleted",
            op.operation
        ),
        detail: format!(
            "Archives {}: a rewrite (an erasure's supersession) became the object after the plan; \
             marked expired, it would stay in the store with nothing to delete it.",
            array_text(&kept)
        ),
        hint: "Record the apply as refused and plan again: a new plan names the archive's objects now.".into(),
    })
}

/// Records one apply of operation `operation` and ledgers it; a completed one marks the
/// operation's archives expired.
fn record(
    operation: Option<Uuid>,
    outcome: Option<&str>,
    deleted_keys: Option<Vec<Option<String>>>,
    detail: Option<Value>,
    actor: Option<&str>,
) -> Result<()> {
    let outcome = outcome.and_then(ApplyOutcome::parse);
    let (Some(outcome), Some(actor)) = (outcome, actor.filter(|a| !a.is_empty())) else {
        return Err(RetentionError::invalid(
            "an apply outcome is completed, partial, refused or not_ready, with an actor",
            "The outcome names what the apply found and did; the actor who applied.",
            "Apply with pg-retention-archiver expire apply.",
        ));
    };
    let mut detail = match detail {
        None => serde_json::Map::new(),
        Some(Value::Object(d)) => d,
        Some(other) => {
            return Err(RetentionError::invalid(
                "an apply's detail is a JSON object",
                format!("Got {other}."),
                "Pass a jsonb object, or NULL.",
            ))
        }
    };
    let operation = required(operation, "operation")?;
    let deleted = without_nulls(deleted_keys.unwrap_or_default(), "deleted_keys")?;
    let op = ExpireOperation::lock(operation)?.ok_or_else(|| {
        RetentionError::raised(
            "42704",
            format!("expire operation {operation} was never prepared"),
        )
    })?;
    if outcome == ApplyOutcome::Completed {
        refuse_a_rewrite_since_the_plan(&op, &deleted)?;
        Spi::run_with_args(
            "INSERT INTO retention.archive_expirations (archive_id, operation_id)
             SELECT x, $2 FROM unnest($1::bigint[]) x
             ON CONFLICT (archive_id) DO NOTHING",
            &[op.archive_ids.clone().into(), operation.into()],
        )?;
    }
    op.record_apply(outcome, &deleted)?;
    detail.insert("operation".into(), json!(operation.to_string()));
    detail.insert("outcome".into(), json!(outcome.as_str()));
    detail.insert("deleted_keys".into(), json!(deleted));
    LedgerEntry {
        method: LedgerMethod::ExpireApply,
        policy: None,
        relation: None,
        rows: 0,
        hold_ids: vec![],
        actor,
        run_id: None,
        detail: Value::Object(detail),
    }
    .append()
}

/// Records a prepared expire operation (its tombstone is written): from now on its archives
/// expire after the quiescence interval, and only through `expire apply`. Returns when it was
/// prepared.
#[allow(clippy::too_many_arguments)]
#[pg_extern(security_definer, name = "expire_prepare")]
#[search_path(pg_catalog, pg_temp)]
fn expire_prepare_sql(
    operation: Option<Uuid>,
    plan_sha256: Option<&str>,
    quiescence: Option<Interval>,
    archive_ids: Option<Vec<Option<i64>>>,
    objects: Option<i64>,
    bytes: Option<i64>,
    tombstone: Option<&str>,
    actor: Option<&str>,
) -> TimestampWithTimeZone {
    crate::identity::refuse_restricted()
        .and_then(|()| {
            prepare(Prepare {
                operation,
                plan_sha256,
                quiescence,
                archive_ids,
                objects,
                bytes,
                tombstone,
                actor,
            })
        })
        .or_report()
}

/// An expire operation as `retention.expire_operations` has it (catalog/expire_operation.rs):
/// when it was prepared and is ready, its plan digest and archives, its state, the keys its
/// applies deleted and the last apply's outcome; NULL when it was never prepared.
#[pg_extern(security_definer, stable, name = "expire_state")]
#[search_path(pg_catalog, pg_temp)]
fn expire_state_sql(operation: Option<Uuid>) -> Option<pgrx::JsonB> {
    crate::identity::refuse_restricted()
        .and_then(|()| match operation {
            Some(operation) => expire_operation::state(operation),
            None => Ok(None),
        })
        .map(|state| state.map(pgrx::JsonB))
        .or_report()
}

/// Records one apply of an expire operation; a completed one marks its archives expired. An
/// archive is marked expired only when its object now is among the keys the operation deleted
/// (this apply's or an earlier one's): a rewrite recorded for it since the plan (an erasure's
/// supersession) refuses the completion (RT504), and the apply is then recorded refused.
#[pg_extern(security_definer, name = "expire_record")]
#[search_path(pg_catalog, pg_temp)]
fn expire_record_sql(
    operation: Option<Uuid>,
    outcome: Option<&str>,
    deleted_keys: Option<Vec<Option<String>>>,
    detail: Option<pgrx::JsonB>,
    actor: Option<&str>,
) {
    crate::identity::refuse_restricted()
        .and_then(|()| record(operation, outcome, deleted_keys, detail.map(|d| d.0), actor))
        .or_report()
}
