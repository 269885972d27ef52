//! `verify`: re-reads slices and checks each against its manifest and against
//! retention.archives. `verify --all` with a database checks completeness: every recorded,
//! unexpired archive's slice and manifest must be in the store and verify (one missing is a
//! failure naming its key), and the objects of this database's namespace that nothing
//! references are listed; the result is recorded in the catalog
//! (`retention.record_archive_verification`, read by `retention._missing_archives()`). Without a
//! database there is no record of what must exist: it verifies the manifests it finds and says
//! it could not check completeness.

use crate::config::Settings;
use crate::db::{Db, ObjectState, ObjectStatus, Verification};
use crate::error::{Error, Result};
use crate::keys::{canonical, display, in_namespace, manifest_for, slice_for};
use crate::ops::{read_manifest, resolve_key, Progress};
use crate::store::Store;
use pg_retention_format::verify_slice;
use std::collections::BTreeSet;

/// What a `verify` found wrong.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Slices that are there but do not verify.
    pub failed: usize,
    /// Recorded archives whose slice or manifest is not in the store (their slice keys).
    pub missing: Vec<String>,
}

impl Outcome {
    /// The error the command exits with, if any: a missing archive first (named), then the
    /// count of failures (exit 5 either way).
    pub fn into_result(self) -> Result<()> {
        if let Some(first) = self.missing.first() {
            return Err(Error::Verify {
                key: first.clone(),
                reason: format!(
                    "{} recorded archives are missing from the store (each listed as MISSING above), {} failed verification",
                    self.missing.len(),
                    self.failed
                ),
            });
        }
        match self.failed {
            0 => Ok(()),
            n => Err(Error::Verify {
                key: "(see above)".into(),
                reason: format!("{n} slices failed verification"),
            }),
        }
    }
}

/// `verify --all` or `verify <key>`.
pub async fn verify(settings: &Settings, all: bool, key: Option<&str>) -> Result<Outcome> {
    let store = Store::open(settings)?;
    let db = match settings.database_url {
        Some(_) => Some(Db::connect(settings).await?),
        None => None,
    };
    let keys = match (all, key, &db) {
        (true, _, Some(db)) => return complete(&store, db).await,
        (true, _, None) => {
            println!(
                "completeness not checked: without a database there is no record of which archives must exist \
                 (verify --all with --database-url checks that); verifying the manifests found in the store"
            );
            store
                .manifests()
                .await?
                .iter()
                .map(|k| slice_for(k))
                .collect()
        }
        (false, Some(k), _) => vec![resolve_key(settings, &store, k).await?],
        (false, None, _) => return Err(Error::Config("verify needs --all or a key".into())),
    };
    let mut outcome = Outcome::default();
    let progress = Progress::new(keys.len());
    for (i, key) in keys.iter().enumerate() {
        outcome.failed += usize::from(!report(key, verify_one(&store, db.as_ref(), key).await));
        progress.show(i + 1, "verified");
    }
    println!(
        "{} verified, {} failed",
        keys.len() - outcome.failed,
        outcome.failed
    );
    Ok(outcome)
}

/// Prints one verdict; whether it is not a failure.
fn report(key: &str, verdict: Result<Verdict>) -> bool {
    match verdict {
        Ok(Verdict::Verified(note)) => println!("ok\t{}{note}", display(key)),
        Ok(Verdict::Superseded(by)) => {
            println!("superseded\t{}\tby {}", display(key), display(&by))
        }
        Err(e) => {
            println!("FAILED\t{}\t{e}", display(key));
            return false;
        }
    }
    true
}

/// `verify --all` with a database: the recorded archives, then the rest of the namespace.
async fn complete(store: &Store, db: &Db) -> Result<Outcome> {
    let ns = crate::namespace::own(db, store).await?;
    let recorded = db.unexpired_archive_keys().await?;
    let mut outcome = Outcome::default();
    let mut recorded_failed = 0usize;
    let progress = Progress::new(recorded.len());
    for (i, key) in recorded.iter().enumerate() {
        let absent = absent(store, key).await?;
        if !absent.is_empty() {
            println!(
                "MISSING\t{}\trecorded in retention.archives; not in the store: {}",
                display(key),
                absent
                    .iter()
                    .map(|k| display(k))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            outcome.missing.push(key.clone());
        } else if !report(key, verify_one(store, Some(db), key).await) {
            recorded_failed += 1;
        }
        progress.show(i + 1, "verified");
    }
    // The rest of the namespace: objects kept for a reason (a rewrite's replaced slice, an
    // open supersession's, a live batch's) are verified as before; the others are listed.
    let current: BTreeSet<String> = recorded.iter().map(|k| canonical(k)).collect();
    let refs = db.archived_keys().await?;
    let referenced: BTreeSet<String> = refs.iter().map(|k| canonical(&slice_for(k))).collect();
    let mut unreferenced = 0usize;
    outcome.failed = recorded_failed;
    for (key, _, _) in store.objects(&ns).await? {
        if !in_namespace(&ns, &key) || !key.ends_with(".manifest.json") {
            continue;
        }
        let slice = slice_for(&key);
        if current.contains(&slice) {
            continue;
        }
        if referenced.contains(&slice) {
            if !report(&slice, verify_one(store, Some(db), &slice).await) {
                outcome.failed += 1;
            }
            continue;
        }
        unreferenced += 1;
        println!(
            "unreferenced\t{}\tno archive of this database records it (sweep-orphans deletes such objects)",
            display(&slice)
        );
    }
    let checked = recorded.len();
    println!(
        "{} verified, {recorded_failed} failed, {} missing (of {checked} recorded archives); {unreferenced} unreferenced objects in namespace {ns}",
        checked - outcome.missing.len() - recorded_failed,
        outcome.missing.len(),
    );
    if outcome.failed > recorded_failed {
        println!(
            "{} objects kept for a rewrite or a live batch failed verification",
            outcome.failed - recorded_failed
        );
    }
    let count = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
    db.record_verification(Verification {
        checked: count(checked),
        missing: count(outcome.missing.len()),
        failed: count(recorded_failed),
        unreferenced: count(unreferenced),
    })
    .await?;
    Ok(outcome)
}

/// The keys of `slice_key`'s slice and manifest that are not in the store.
async fn absent(store: &Store, slice_key: &str) -> Result<Vec<String>> {
    let mut absent = Vec::new();
    for key in [slice_key.to_owned(), manifest_for(slice_key)] {
        if !store.exists(&key).await? {
            absent.push(key);
        }
    }
    Ok(absent)
}

/// What `verify` found of a slice that is intact.
enum Verdict {
    /// It is what the index records (or the index does not know it); a note for the listing.
    Verified(String),
    /// An erasure's rewrite replaced it (named); its deletion is pending.
    Superseded(String),
}

async fn verify_one(store: &Store, db: Option<&Db>, key: &str) -> Result<Verdict> {
    let m = read_manifest(store, key).await?;
    let slice = store.get(key).await?;
    verify_slice(&slice, &m.blake3, m.rows, m.bytes).map_err(|e| Error::Verify {
        key: key.to_owned(),
        reason: e.to_string(),
    })?;
    let rewrite = match &m.supersedes {
        Some(digest) => format!("\t(rewritten by an erasure; supersedes manifest {digest})"),
        None => String::new(),
    };
    let Some(db) = db else {
        return Ok(Verdict::Verified(rewrite));
    };
    if let Some(ObjectStatus {
        state: ObjectState::Superseded,
        current_key,
    }) = db.object_state(key).await?
    {
        return Ok(Verdict::Superseded(current_key));
    }
    match db.archive_record(&m.batch).await? {
        None => Ok(Verdict::Verified(
            "\t(not in retention.archives: written but never pruned)".into(),
        )),
        Some(r)
            if r.blake3 == m.blake3
                && r.rows as u64 == m.rows
                && r.bytes as u64 == m.bytes
                && canonical(&r.object_key) == canonical(key) =>
        {
            Ok(Verdict::Verified(rewrite))
        }
        Some(r) => Err(Error::Verify {
            key: key.to_owned(),
            reason: format!(
                "retention.archives says {} rows, {} bytes, blake3 {} at {}",
                r.rows,
                r.bytes,
                r.blake3,
                display(&r.object_key)
            ),
        }),
    }
}
