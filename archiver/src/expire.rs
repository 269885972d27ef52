//! `expire plan | prepare | apply | status`: archives past their policy's `archive_keep` leave
//! the store under the same governance as rows leave tables. A plan is a dry run with zero
//! store writes; prepare writes a create-only tombstone and ledgers the operation; apply, once
//! the quiescence interval has passed, rechecks policy, holds and the exact inventory, deletes
//! only the enumerated keys, proves none remain and marks the archives expired. A retry after
//! a partial apply is confined to the keys of the original set that remain. Nothing an apply
//! decides comes from process memory: the plan is read back from the tombstone, progress from
//! the ledger.

use crate::config::Settings;
use crate::db::Db;
use crate::error::{Error, Result};
use crate::keys::{is_product_name, manifest_for};
use crate::store::Store;
use bytes::Bytes;
use pg_retention_format::Manifest;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeSet;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

/// What the plan file says it is.
const PLAN_FORMAT: &str = "pg_retention.expire_plan.v1";
/// What a tombstone says it is.
const TOMBSTONE_FORMAT: &str = "pg_retention.expire_tombstone.v1";
/// The most keys one delete request may name (S3's bulk-delete limit).
pub const MAX_KEYS_PER_REQUEST: usize = 1000;

/// How an expire command ended: its exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Accepted or completed (0).
    Done = 0,
    /// Invalid input: flags, the plan file, its digest (2).
    Invalid = 2,
    /// Refused, or not ready yet (3).
    Refused = 3,
    /// Some of the keys were deleted, not all (4).
    Partial = 4,
    /// The database or the store failed within its bounds (5).
    Failure = 5,
    /// This database's archive namespace is another database's in the store (6, as for every
    /// command).
    NamespaceClaimed = 6,
}

/// The bounds of one operation.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct Bounds {
    /// Objects one operation deletes at most.
    pub max_objects: u64,
    /// Bytes one operation deletes at most.
    pub max_bytes: u64,
    /// Keys per delete request (at most 1,000).
    pub keys_per_request: usize,
    /// Seconds an apply may work (the quiescence interval not counted).
    pub max_active_seconds: u64,
}

/// One object of an archive's inventory.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
pub struct Object {
    /// Key relative to the store prefix.
    pub key: String,
    /// Size in bytes.
    pub size: u64,
}

/// An archive the plan expires.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct PlannedArchive {
    /// Its id in retention.archives.
    pub archive_id: i64,
    /// Its batch.
    pub batch: String,
    /// Its slice's key (retention.archives.object_key).
    pub slice_key: String,
    /// When it was archived (ISO 8601).
    pub archived_at: String,
    /// Rows in it.
    pub rows: i64,
    /// Every object named after its batch, at plan time.
    pub objects: Vec<Object>,
}

/// One policy's part of a plan.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct PolicyPlan {
    /// The policy.
    pub policy: String,
    /// Its version when planned.
    pub policy_version: i32,
    /// Its archive_keep when planned.
    pub archive_keep: String,
    /// Archives planned.
    pub count: u64,
    /// Object bytes planned.
    pub bytes: u64,
    /// The newest planned archive's time.
    pub newest_archived_at: Option<String>,
    /// SHA-256 of the inventory ("key\tsize\n" per object, in key order).
    pub inventory_digest: String,
    /// The archives.
    pub archives: Vec<PlannedArchive>,
}

/// An archive past its keep that the plan does not expire, and why.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Refused {
    /// The policy.
    pub policy: String,
    /// The archive.
    pub archive_id: i64,
    /// Holds that match its rows (empty for other reasons).
    pub hold_ids: Vec<i64>,
    /// Why.
    pub reason: String,
}

/// A plan: the exact facts prepare and apply are bound to, by the SHA-256 of its bytes.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Plan {
    /// [`PLAN_FORMAT`].
    pub format: String,
    /// The database planned against.
    pub database: String,
    /// The operation's bounds.
    pub bounds: Bounds,
    /// Per policy, what expires.
    pub policies: Vec<PolicyPlan>,
    /// What does not, and why.
    pub refused: Vec<Refused>,
    /// Archives past their keep left for a later operation by the bounds.
    pub deferred: u64,
}

impl Plan {
    /// Every planned archive id.
    fn archive_ids(&self) -> Vec<i64> {
        self.archives().map(|a| a.archive_id).collect()
    }

    fn archives(&self) -> impl Iterator<Item = &PlannedArchive> {
        self.policies.iter().flat_map(|p| p.archives.iter())
    }

    /// Every planned key, in plan order.
    fn keys(&self) -> Vec<String> {
        self.archives()
            .flat_map(|a| a.objects.iter().map(|o| o.key.clone()))
            .collect()
    }

    fn bytes(&self) -> u64 {
        self.policies.iter().map(|p| p.bytes).sum()
    }
}

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

/// Lower-case hex SHA-256, what `sha256sum` prints.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The digest of an inventory: "key\tsize\n" per object, in key order.
pub fn inventory_digest<'a>(objects: impl IntoIterator<Item = &'a Object>) -> String {
    let mut sorted: Vec<&Object> = objects.into_iter().collect();
    sorted.sort();
    let mut text = String::new();
    for o in sorted {
        text.push_str(&format!("{}\t{}\n", o.key, o.size));
    }
    sha256_hex(text.as_bytes())
}

/// Maps an error to its exit code: bad input 2, a refusal 3, a service failure 5, the
/// namespace another database's 6.
fn exit_for(e: &Error) -> Exit {
    match e {
        Error::Config(_) => Exit::Invalid,
        Error::NamespaceClaimed { .. } => Exit::NamespaceClaimed,
        Error::Refusal(_) | Error::Refused { .. } => Exit::Refused,
        _ => Exit::Failure,
    }
}

/// Reports `e` and returns its exit code.
pub fn failed(e: &Error) -> Exit {
    eprintln!("pg-retention-archiver expire: {e}");
    exit_for(e)
}

/// The name of the database `db` is connected to.
async fn current_database(db: &Db) -> Result<String> {
    Ok(db
        .client()
        .query_one("SELECT current_database()::text", &[])
        .await?
        .get(0))
}

/// A candidate archive as the database lists it.
struct Candidate {
    policy: String,
    policy_version: i32,
    archive_keep: String,
    archive_id: i64,
    batch: String,
    object_key: String,
    rows: i64,
    archived_at: String,
}

async fn candidates(db: &Db) -> Result<Vec<Candidate>> {
    let rows = db
        .client()
        .query(
            "SELECT policy, policy_version, archive_keep::text, archive_id, batch::text, object_key, rows,
                    to_json(archived_at) #>> '{}'
               FROM retention.expiry_candidates()",
            &[],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| Candidate {
            policy: r.get(0),
            policy_version: r.get(1),
            archive_keep: r.get(2),
            archive_id: r.get(3),
            batch: r.get(4),
            object_key: r.get(5),
            rows: r.get(6),
            archived_at: r.get(7),
        })
        .collect())
}

/// The holds that match rows of an archive, from its slice and manifest in the store; Err when
/// they cannot be read (the archive is then refused, not expired).
async fn holds_over(db: &Db, store: &Store, archive_id: i64, slice_key: &str) -> Result<Vec<i64>> {
    let manifest: Manifest = serde_json::from_slice(&store.get(&manifest_for(slice_key)).await?)?;
    let slice = store.get(slice_key).await?;
    let columns: Vec<String> = manifest.columns.iter().map(|c| c.name.clone()).collect();
    let row = db
        .client()
        .query_one(
            "SELECT retention.archive_holds($1, $2, $3)",
            &[&archive_id, &slice.as_ref(), &columns],
        )
        .await?;
    Ok(row.get(0))
}

/// An archive's inventory: every object beside its slice named after its batch; `planned`:
/// only those named as this product names objects (its slice, manifest and their rewrites:
/// [`is_product_name`]), the only ones a plan deletes. Apply compares the whole inventory
/// with the plan, so another object named after the batch refuses the apply, never goes.
async fn inventory(
    store: &Store,
    slice_key: &str,
    batch: &str,
    planned: bool,
) -> Result<Vec<Object>> {
    Ok(store
        .objects_beside(slice_key, &format!("{batch}."))
        .await?
        .into_iter()
        .filter(|(key, _)| !planned || is_product_name(key.rsplit('/').next().unwrap_or(key)))
        .map(|(key, size)| Object { key, size })
        .collect())
}

/// Builds the plan: per policy, the archives past its keep that no hold covers, within the
/// bounds. Reads only.
async fn build_plan(settings: &Settings, bounds: Bounds) -> Result<Plan> {
    let db = Db::connect(settings).await?;
    let store = Store::open(settings)?;
    // Refuses (exit 6) when this database's namespace is another database's in the store.
    crate::namespace::own(&db, &store).await?;
    let database = current_database(&db).await?;
    let mut policies: Vec<PolicyPlan> = Vec::new();
    let mut refused = Vec::new();
    let (mut objects, mut bytes, mut deferred) = (0u64, 0u64, 0u64);
    for c in candidates(&db).await? {
        if !settings.policies.is_empty() && !settings.policies.contains(&c.policy) {
            continue;
        }
        let refuse = |hold_ids: Vec<i64>, reason: String| Refused {
            policy: c.policy.clone(),
            archive_id: c.archive_id,
            hold_ids,
            reason,
        };
        match holds_over(&db, &store, c.archive_id, &c.object_key).await {
            Ok(holds) if !holds.is_empty() => {
                refused.push(refuse(holds, "held".into()));
                continue;
            }
            Ok(_) => {}
            // A slice that cannot be read or checked is not expired on a guess.
            Err(e @ (Error::Store(_) | Error::Json(_))) => {
                refused.push(refuse(vec![], format!("unreadable: {e}")));
                continue;
            }
            Err(Error::Db(e)) if e.code().is_some_and(|c| c.code() == "RT502") => {
                refused.push(refuse(
                    vec![],
                    "the slice in the store is not the archived one".into(),
                ));
                continue;
            }
            Err(e) => return Err(e),
        }
        let found = inventory(&store, &c.object_key, &c.batch, true).await?;
        let size: u64 = found.iter().map(|o| o.size).sum();
        if objects + found.len() as u64 > bounds.max_objects || bytes + size > bounds.max_bytes {
            deferred += 1;
            continue;
        }
        objects += found.len() as u64;
        bytes += size;
        let archive = PlannedArchive {
            archive_id: c.archive_id,
            batch: c.batch.clone(),
            slice_key: c.object_key.clone(),
            archived_at: c.archived_at.clone(),
            rows: c.rows,
            objects: found,
        };
        match policies.last_mut().filter(|p| p.policy == c.policy) {
            Some(p) => p.archives.push(archive),
            None => policies.push(PolicyPlan {
                policy: c.policy.clone(),
                policy_version: c.policy_version,
                archive_keep: c.archive_keep.clone(),
                count: 0,
                bytes: 0,
                newest_archived_at: None,
                inventory_digest: String::new(),
                archives: vec![archive],
            }),
        }
    }
    for p in &mut policies {
        p.count = p.archives.len() as u64;
        p.bytes = p
            .archives
            .iter()
            .flat_map(|a| &a.objects)
            .map(|o| o.size)
            .sum();
        p.newest_archived_at = p.archives.iter().map(|a| a.archived_at.clone()).max();
        p.inventory_digest = inventory_digest(p.archives.iter().flat_map(|a| &a.objects));
    }
    Ok(Plan {
        format: PLAN_FORMAT.into(),
        database,
        bounds,
        policies,
        refused,
        deferred,
    })
}

/// `expire plan --output F`: writes the plan (mode 0600, never over an existing file) and
/// prints its SHA-256 as the last line.
pub async fn plan(settings: &Settings, bounds: Bounds, output: &Path) -> Result<Exit> {
    let plan = build_plan(settings, bounds).await?;
    let mut bytes = serde_json::to_vec_pretty(&plan)?;
    bytes.push(b'\n');
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(output)
        .map_err(|e| Error::Config(format!("cannot create {}: {e}", output.display())))?;
    file.write_all(&bytes)?;
    file.sync_all()?;
    let archives: u64 = plan.policies.iter().map(|p| p.count).sum();
    println!(
        "planned {archives} archives ({} objects, {} bytes), refused {}, deferred {}",
        plan.keys().len(),
        plan.bytes(),
        plan.refused.len(),
        plan.deferred
    );
    println!("{}", sha256_hex(&bytes));
    Ok(Exit::Done)
}

/// Reads a plan's bytes and checks them against the digest given.
fn read_plan(bytes: &[u8], sha256: &str) -> Result<Plan> {
    let found = sha256_hex(bytes);
    if found != sha256.trim().to_ascii_lowercase() {
        return Err(Error::Config(format!(
            "the plan's SHA-256 is {found}, not {sha256}"
        )));
    }
    let plan: Plan = serde_json::from_slice(bytes)
        .map_err(|e| Error::Config(format!("not an expire plan: {e}")))?;
    if plan.format != PLAN_FORMAT {
        return Err(Error::Config(format!(
            "plan format {:?} is not {PLAN_FORMAT}",
            plan.format
        )));
    }
    Ok(plan)
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
    let database = current_database(&db).await?;
    if database != plan.database {
        return Err(Error::Refusal(format!(
            "the plan is for database {}, this is {database}",
            plan.database
        )));
    }
    let operation_id: String = db
        .client()
        .query_one("SELECT gen_random_uuid()::text", &[])
        .await?
        .get(0);
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
    let prepared = db
        .client()
        .query_one(
            "SELECT to_json(retention.expire_prepare($1::text::uuid, $2, make_interval(secs => $3), $4, $5, $6, $7, $8)) #>> '{}'",
            &[
                &operation_id,
                &tombstone.plan_sha256,
                &(quiescence.as_secs_f64()),
                &ids,
                &(plan.keys().len() as i64),
                &(plan.bytes() as i64),
                &key,
                &actor,
            ],
        )
        .await
        .map_err(refusal_of_55000)?;
    let prepared_at: String = prepared.get(0);
    println!(
        "prepared {} archives at {prepared_at}; apply after {}",
        ids.len(),
        humantime::format_duration(quiescence)
    );
    println!("{operation_id}");
    Ok(Exit::Done)
}

/// A 55000 from the extension (archives no longer past their keep) is a refusal.
fn refusal_of_55000(e: tokio_postgres::Error) -> Error {
    match e.as_db_error() {
        Some(d) if d.code().code() == "55000" => Error::Refusal(d.message().to_owned()),
        _ => Error::Db(e),
    }
}

/// An operation as the ledger knows it.
#[derive(Debug, Deserialize)]
struct State {
    prepared_at: String,
    ready_at: String,
    ready: bool,
    plan_sha256: String,
    archives: Vec<i64>,
    tombstone: String,
    applies: i64,
    deleted_keys: Vec<String>,
    outcome: Option<String>,
}

async fn state(db: &Db, operation_id: &str) -> Result<Option<State>> {
    let row = db
        .client()
        .query_one(
            "SELECT retention.expire_state($1::text::uuid)::text",
            &[&operation_id],
        )
        .await?;
    let text: Option<String> = row.get(0);
    Ok(match text {
        Some(t) => Some(serde_json::from_str(&t)?),
        None => None,
    })
}

async fn record(
    db: &Db,
    operation_id: &str,
    outcome: &str,
    deleted: &[String],
    detail: serde_json::Value,
    actor: &str,
) -> Result<()> {
    db.client()
        .execute(
            "SELECT retention.expire_record($1::text::uuid, $2, $3, $4::text::jsonb, $5)",
            &[
                &operation_id,
                &outcome,
                &deleted,
                &detail.to_string(),
                &actor,
            ],
        )
        .await?;
    Ok(())
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

/// Why the state now differs from the plan (None: it does not). `deleted` are the keys earlier
/// applies of this operation deleted: they must be gone, every other planned object unchanged,
/// and no other object named after a planned batch.
async fn changed(
    db: &Db,
    store: &Store,
    plan: &Plan,
    deleted: &BTreeSet<String>,
) -> Result<Option<(String, Vec<i64>)>> {
    let now: BTreeSet<i64> = candidates(db).await?.iter().map(|c| c.archive_id).collect();
    let gone: Vec<i64> = plan
        .archive_ids()
        .into_iter()
        .filter(|id| !now.contains(id))
        .collect();
    if !gone.is_empty() {
        return Ok(Some((
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
                format!("archive {} is held by holds {holds:?}", a.archive_id),
                holds,
            )));
        }
    }
    Ok(None)
}

/// `expire apply --operation-id ID --plan-sha256 S`.
pub async fn apply(
    settings: &Settings,
    operation_id: &str,
    sha256: &str,
    actor: &str,
) -> Result<Exit> {
    let started = Instant::now();
    let db = Db::connect(settings).await?;
    let store = Store::open(settings)?;
    let Some(st) = state(&db, operation_id).await? else {
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
    if st.outcome.as_deref() == Some("completed") {
        println!("completed (already)");
        return Ok(Exit::Done);
    }
    if !st.ready {
        record(
            &db,
            operation_id,
            "not_ready",
            &[],
            serde_json::json!({ "ready_at": st.ready_at }),
            actor,
        )
        .await?;
        println!("not_ready: quiescence lasts until {}", st.ready_at);
        return Ok(Exit::Refused);
    }
    let plan = plan_from_tombstone(&store, &st.tombstone, &st.plan_sha256).await?;
    if plan.archive_ids() != st.archives {
        return Err(Error::Refusal(
            "the tombstone's plan and the ledger name other archives".into(),
        ));
    }
    let deleted_before: BTreeSet<String> = st.deleted_keys.iter().cloned().collect();
    if let Some((reason, holds)) = changed(&db, &store, &plan, &deleted_before).await? {
        record(
            &db,
            operation_id,
            "refused",
            &[],
            serde_json::json!({ "reason": reason, "hold_ids": holds }),
            actor,
        )
        .await?;
        println!("refused: {reason}");
        return Ok(Exit::Refused);
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
    let detail = serde_json::json!({
        "archives": plan.archive_ids(),
        "deleted": deleted.len(),
        "remaining": remaining.len() - deleted.len() + left.len(),
        "attempt": st.applies + 1,
        "reason": stopped,
    });
    match stopped {
        None => {
            match record(
                &db,
                operation_id,
                "completed",
                &deleted,
                detail.clone(),
                actor,
            )
            .await
            {
                // An archive's object now is a rewrite this operation did not delete (an
                // erasure's supersession recorded since the plan): the archives are not
                // expired. The keys deleted are ledgered; a new plan names the objects now.
                Err(Error::Db(e)) if e.code().is_some_and(|c| c.code() == "RT504") => {
                    let reason = e
                        .as_db_error()
                        .map_or_else(|| e.to_string(), |d| d.message().to_owned());
                    let mut detail = detail;
                    detail["reason"] = serde_json::Value::String(reason.clone());
                    record(&db, operation_id, "refused", &deleted, detail, actor).await?;
                    println!("refused: {reason}; plan again");
                    return Ok(Exit::Refused);
                }
                other => other?,
            }
            println!(
                "completed: {} archives expired, {} keys deleted",
                plan.archive_ids().len(),
                deleted.len()
            );
            Ok(Exit::Done)
        }
        Some(reason) => {
            let done: Vec<String> = deleted.into_iter().filter(|k| !left.contains(k)).collect();
            record(&db, operation_id, "partial", &done, detail, actor).await?;
            println!("partial: {} keys deleted; {reason}", done.len());
            Ok(Exit::Partial)
        }
    }
}

/// `expire status --operation-id ID`: from the ledger and the tombstone.
pub async fn status(settings: &Settings, operation_id: &str) -> Result<Exit> {
    let db = Db::connect(settings).await?;
    let store = Store::open(settings)?;
    let Some(st) = state(&db, operation_id).await? else {
        return Err(Error::Refusal(format!(
            "expire operation {operation_id} was never prepared"
        )));
    };
    let phase = match (st.outcome.as_deref(), st.ready) {
        (Some("completed"), _) => "completed",
        (Some("partial"), _) => "partial",
        (Some("refused"), _) => "refused",
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_inventory_digest_ignores_order_and_sees_every_key_and_size() {
        let a = Object {
            key: "a.slice".into(),
            size: 3,
        };
        let b = Object {
            key: "a.manifest.json".into(),
            size: 5,
        };
        assert_eq!(inventory_digest([&a, &b]), inventory_digest([&b, &a]));
        let bigger = Object {
            key: "a.slice".into(),
            size: 4,
        };
        assert_ne!(inventory_digest([&a, &b]), inventory_digest([&bigger, &b]));
        assert_ne!(inventory_digest([&a, &b]), inventory_digest([&a]));
    }

    #[test]
    fn a_plan_is_bound_to_its_bytes() {
        let bytes = br#"{"format":"x"}"#;
        let sha = sha256_hex(bytes);
        assert_eq!(sha.len(), 64);
        assert!(matches!(
            read_plan(bytes, &"0".repeat(64)),
            Err(Error::Config(_))
        ));
        // The right digest, but not a plan of ours.
        assert!(matches!(read_plan(bytes, &sha), Err(Error::Config(_))));
    }
}
