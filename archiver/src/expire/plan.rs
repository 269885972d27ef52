//! `expire plan`: the archives past their policy's keep that no hold covers, within the
//! bounds, written to a file the later steps are bound to by its SHA-256. Reads only: zero
//! store writes.

use super::Bounds;
use crate::config::Settings;
use crate::db::{Db, Sqlstate};
use crate::error::{Error, Result};
use crate::exit::Exit;
use crate::keys::{is_product_name, manifest_for};
use crate::lifecycle::{Reason, Tally};
use crate::store::Store;
use pg_retention_format::Manifest;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// What the plan file says it is.
const PLAN_FORMAT: &str = "pg_retention.expire_plan.v1";

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
    pub(super) fn archive_ids(&self) -> Vec<i64> {
        self.archives().map(|a| a.archive_id).collect()
    }

    pub(super) fn archives(&self) -> impl Iterator<Item = &PlannedArchive> {
        self.policies.iter().flat_map(|p| p.archives.iter())
    }

    /// Every planned key, in plan order.
    pub(super) fn keys(&self) -> Vec<String> {
        self.archives()
            .flat_map(|a| a.objects.iter().map(|o| o.key.clone()))
            .collect()
    }

    pub(super) fn bytes(&self) -> u64 {
        self.policies.iter().map(|p| p.bytes).sum()
    }
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

/// The holds that match rows of an archive, from its slice and manifest in the store; Err when
/// they cannot be read (the archive is then refused, not expired).
pub(super) async fn holds_over(
    db: &Db,
    store: &Store,
    archive_id: i64,
    slice_key: &str,
) -> Result<Vec<i64>> {
    let manifest: Manifest = serde_json::from_slice(&store.get(&manifest_for(slice_key)).await?)?;
    let slice = store.get(slice_key).await?;
    let columns: Vec<String> = manifest.columns.iter().map(|c| c.name.clone()).collect();
    db.archive_holds(archive_id, &slice, &columns).await
}

/// An archive's inventory: every object beside its slice named after its batch; `planned`:
/// only those named as this product names objects (its slice, manifest and their rewrites:
/// [`is_product_name`]), the only ones a plan deletes. Apply compares the whole inventory
/// with the plan, so another object named after the batch refuses the apply, never goes.
pub(super) async fn inventory(
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
async fn build_plan(settings: &Settings, bounds: Bounds, tally: &mut Tally) -> Result<Plan> {
    let db = Db::connect(settings).await?;
    let store = Store::open(settings)?;
    // Refuses (exit 6) when this database's namespace is another database's in the store.
    crate::namespace::own(&db, &store).await?;
    let database = db.current_database().await?;
    let mut policies: Vec<PolicyPlan> = Vec::new();
    let mut refused = Vec::new();
    let (mut objects, mut bytes, mut deferred) = (0u64, 0u64, 0u64);
    for c in db.expiry_candidates().await? {
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
                tally.refuse(Reason::Held);
                refused.push(refuse(holds, "held".into()));
                continue;
            }
            Ok(_) => {}
            // A slice that cannot be read or checked is not expired on a guess.
            Err(e @ (Error::Store(_) | Error::StoreTimeout { .. } | Error::Json(_))) => {
                tally.refuse(Reason::Unreadable);
                refused.push(refuse(vec![], format!("unreadable: {e}")));
                continue;
            }
            Err(e) if Sqlstate::of_error(&e) == Some(Sqlstate::ArchiveMismatch) => {
                tally.refuse(Reason::Unreadable);
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
/// prints its SHA-256 as the last line. `tally` counts its refusals and, once the file is
/// written, the objects and bytes planned.
pub async fn plan(
    settings: &Settings,
    bounds: Bounds,
    output: &Path,
    tally: &mut Tally,
) -> Result<Exit> {
    let plan = build_plan(settings, bounds, tally).await?;
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
    tally.planned_objects = plan.keys().len() as u64;
    tally.planned_bytes = plan.bytes();
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
pub(super) fn read_plan(bytes: &[u8], sha256: &str) -> Result<Plan> {
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
