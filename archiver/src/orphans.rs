//! `sweep-orphans --older-than D [--apply]`: objects under the store prefix that nothing in the
//! catalog references — no archive record (its slice and manifest), no live (claimed) batch
//! (objects are named after their batch) — and that are older than D: debris of archivers
//! that died between writing and pruning. By default it only reports; with `--apply` it reads
//! the references again, deletes exactly the objects still unreferenced among those listed,
//! and ledgers `orphan_object_sweep` with their count, bytes and keys. Control objects
//! (`_retention/`, expire tombstones) are never candidates.

use crate::config::Settings;
use crate::db::Db;
use crate::error::Result;
use crate::expire::MAX_KEYS_PER_REQUEST;
use crate::keys::{manifest_for, slice_for};
use crate::store::Store;
use std::collections::BTreeSet;
use std::time::Duration;

/// Where control objects live; never swept.
const CONTROL_PREFIX: &str = "_retention/";

/// What the catalog references now.
struct References {
    /// Slice and manifest keys of every archive record.
    archived: BTreeSet<String>,
    /// Ids of live (claimed) batches.
    live_batches: Vec<String>,
}

impl References {
    async fn read(db: &Db) -> Result<References> {
        let row = db
            .client()
            .query_one(
                "SELECT r.archived, r.live_batches FROM retention.archive_object_refs() r",
                &[],
            )
            .await?;
        let slices: Vec<String> = row.get(0);
        let mut archived = BTreeSet::new();
        for s in slices {
            archived.insert(manifest_for(&s));
            archived.insert(slice_for(&s));
        }
        Ok(References {
            archived,
            live_batches: row.get(1),
        })
    }

    /// Whether `key` is referenced: an archive's object, or named after a live batch.
    fn holds(&self, key: &str) -> bool {
        if key.starts_with(CONTROL_PREFIX) || self.archived.contains(key) {
            return true;
        }
        let name = key.rsplit('/').next().unwrap_or(key);
        self.live_batches
            .iter()
            .any(|b| name.starts_with(&format!("{b}.")))
    }
}

/// The unreferenced objects older than `age`: (key, size).
fn unreferenced(
    objects: &[(String, u64, chrono::DateTime<chrono::Utc>)],
    refs: &References,
    age: Duration,
) -> Vec<(String, u64)> {
    let now = chrono::Utc::now();
    objects
        .iter()
        .filter(|(key, _, modified)| {
            let old = (now - *modified).to_std().is_ok_and(|a| a >= age);
            old && !refs.holds(key)
        })
        .map(|(key, size, _)| (key.clone(), *size))
        .collect()
}

/// Reports (and with `apply`, deletes and ledgers) the unreferenced objects older than `age`.
pub async fn sweep(settings: &Settings, age: Duration, apply: bool) -> Result<()> {
    let db = Db::connect(settings).await?;
    let store = Store::open(settings)?;
    let objects = store.objects().await?;
    let listed = unreferenced(&objects, &References::read(&db).await?, age);
    for (key, size) in &listed {
        println!("orphan\t{key}\t{size}");
    }
    let bytes: u64 = listed.iter().map(|(_, s)| s).sum();
    if !apply {
        println!(
            "{} unreferenced objects ({bytes} bytes) older than {}; dry run, nothing deleted (--apply deletes them)",
            listed.len(),
            humantime::format_duration(age)
        );
        return Ok(());
    }
    // Just before deleting: what the catalog references now (a batch claimed, or an archive
    // recorded, since the listing keeps its objects).
    let refs = References::read(&db).await?;
    let doomed: Vec<(String, u64)> = listed
        .into_iter()
        .filter(|(key, _)| !refs.holds(key))
        .collect();
    let keys: Vec<String> = doomed.iter().map(|(k, _)| k.clone()).collect();
    let bytes: u64 = doomed.iter().map(|(_, s)| s).sum();
    for chunk in keys.chunks(MAX_KEYS_PER_REQUEST) {
        store.delete(chunk).await?;
    }
    db.client()
        .execute(
            "SELECT retention.ledger_orphan_objects($1, $2, $3, $4)",
            &[
                &(keys.len() as i64),
                &(bytes as i64),
                &keys,
                &settings.owner,
            ],
        )
        .await?;
    println!(
        "deleted {} unreferenced objects ({bytes} bytes)",
        keys.len()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn archives_live_batches_and_control_objects_are_referenced() {
        let refs = References {
            archived: ["a/b1.slice".to_owned(), "a/b1.manifest.json".to_owned()]
                .into_iter()
                .collect(),
            live_batches: vec!["b2".into()],
        };
        assert!(refs.holds("a/b1.slice"));
        assert!(refs.holds("a/b1.manifest.json"));
        assert!(refs.holds("x/y/b2.slice"));
        assert!(refs.holds("_retention/expire/op.tombstone.json"));
        assert!(!refs.holds("a/b3.slice"));
        assert!(!refs.holds("a/b22.slice"), "a batch id is matched whole");
    }

    #[test]
    fn only_objects_older_than_the_age_are_listed() {
        let refs = References {
            archived: BTreeSet::new(),
            live_batches: vec![],
        };
        let now = chrono::Utc::now();
        let objects = vec![
            ("old".to_owned(), 3, now - chrono::Duration::hours(2)),
            ("new".to_owned(), 5, now),
        ];
        assert_eq!(
            unreferenced(&objects, &refs, Duration::from_secs(3600)),
            vec![("old".to_owned(), 3)]
        );
    }
}
