//! `sweep-orphans --older-than D [--apply]`: objects under the store prefix that nothing in the
//! catalog references — no archive record (its slice and manifest), no live (claimed) batch
//! (objects are named after their batch) — and that are older than D: objects of batches that
//! never became archives (released: a refused prune, a lapsed lease, an archiver that gave up)
//! and half-written uploads. By default it only reports; with `--apply` it reads
//! the references again, deletes exactly the objects still unreferenced among those listed,
//! and ledgers `orphan_object_sweep` with their count, bytes and keys. Only objects of this
//! database's namespace (`crate::namespace`) with the shape of this product's objects
//! ([`in_namespace`]) are candidates: another database's objects, keys written before
//! namespaces, foreign files and control objects (`_retention/`) never are.

use crate::config::Settings;
use crate::db::Db;
use crate::error::Result;
use crate::expire::MAX_KEYS_PER_REQUEST;
use crate::keys::{canonical, display, in_namespace, manifest_for, slice_for};
use crate::lifecycle::{self, Command, Reason, Tally};
use crate::store::Store;
use std::collections::BTreeSet;
use std::time::Duration;

/// Where control objects live; never swept.
const CONTROL_PREFIX: &str = "_retention/";

/// What the catalog references now.
struct References {
    /// Slice and manifest keys of every archive record, as listings give keys back
    /// ([`canonical`]).
    archived: BTreeSet<String>,
    /// Ids of live (claimed) batches.
    live_batches: Vec<String>,
}

impl References {
    async fn read(db: &Db) -> Result<References> {
        let refs = db.references().await?;
        Ok(References::new(refs.archived, refs.live_batches))
    }

    /// The references of the slice keys the database records and its live batches. Keys are
    /// compared as the store lists them: the recorded text, not an encoding of it.
    fn new(slices: Vec<String>, live_batches: Vec<String>) -> References {
        let mut archived = BTreeSet::new();
        for s in slices {
            archived.insert(canonical(&manifest_for(&s)));
            archived.insert(canonical(&slice_for(&s)));
        }
        References {
            archived,
            live_batches,
        }
    }

    /// Whether `key` (as listed) is referenced: an archive's object, or named after a live
    /// batch.
    fn holds(&self, key: &str) -> bool {
        if key.starts_with(CONTROL_PREFIX) || self.archived.contains(&canonical(key)) {
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

/// Reports (and with `apply`, deletes and ledgers) the unreferenced objects older than `age`;
/// its figures go to `crate::lifecycle` whatever the outcome.
pub async fn sweep(settings: &Settings, age: Duration, apply: bool) -> Result<()> {
    let mut tally = Tally::default();
    let result = sweep_counted(settings, age, apply, &mut tally).await;
    if let Err(e) = &result {
        tally.ended(e);
    }
    lifecycle::record(settings, Command::SweepOrphans, &tally);
    result
}

async fn sweep_counted(
    settings: &Settings,
    age: Duration,
    apply: bool,
    tally: &mut Tally,
) -> Result<()> {
    let db = Db::connect(settings).await?;
    let store = Store::open(settings)?;
    let ns = crate::namespace::own(&db, &store).await?;
    let objects: Vec<_> = store
        .objects(&ns)
        .await?
        .into_iter()
        .filter(|(key, _, _)| in_namespace(&ns, key))
        .collect();
    let listed = unreferenced(&objects, &References::read(&db).await?, age);
    for (key, size) in &listed {
        println!("orphan\t{}\t{size}", display(key));
    }
    let bytes: u64 = listed.iter().map(|(_, s)| s).sum();
    tally.planned_objects = listed.len() as u64;
    tally.planned_bytes = bytes;
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
    let (doomed, kept): (Vec<_>, Vec<_>) = listed
        .into_iter()
        .partition(|(key, _): &(String, u64)| !refs.holds(key));
    for _ in &kept {
        tally.refuse(Reason::Referenced);
    }
    let keys: Vec<String> = doomed.iter().map(|(k, _)| k.clone()).collect();
    let bytes: u64 = doomed.iter().map(|(_, s)| s).sum();
    for (chunk, sized) in keys
        .chunks(MAX_KEYS_PER_REQUEST)
        .zip(doomed.chunks(MAX_KEYS_PER_REQUEST))
    {
        if let Err(e) = store.delete(chunk).await {
            tally.partial = true;
            return Err(e);
        }
        tally.deleted_objects += chunk.len() as u64;
        tally.deleted_bytes += sized.iter().map(|(_, s)| s).sum::<u64>();
    }
    db.ledger_orphan_objects(&keys, bytes, &settings.owner)
        .await?;
    tally.succeeded = true;
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
        let refs = References::new(vec!["a/b1.slice".into()], vec!["b2".into()]);
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

    /// A live archive of a table named `we"ird<TAB>tab<LF>name%2F/x`, written and listed
    /// through the store (in memory and on disk), is referenced by the key the database
    /// recorded; the same object under another batch is an orphan.
    #[tokio::test]
    async fn an_archive_with_a_weird_table_name_is_never_an_orphan() {
        use crate::cli::Options;
        use crate::config::Settings;
        use crate::keys::WEIRD_RELATION;
        use bytes::Bytes;
        let recorded = format!("app/{WEIRD_RELATION}/2026/11/30/b1.slice");
        let debris = format!("app/{WEIRD_RELATION}/2026/11/30/b9.slice");
        let dir = std::env::temp_dir().join(format!("pg-retention-orphans-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for url in [
            "memory://pfx".to_owned(),
            format!("file://{}", dir.display()),
        ] {
            let settings = Settings::resolve(Options {
                store: Some(url),
                ..Default::default()
            })
            .unwrap();
            let store = Store::open(&settings).unwrap();
            for key in [&recorded, &manifest_for(&recorded), &debris] {
                store
                    .put_create(key, Bytes::from_static(b"x"))
                    .await
                    .unwrap();
            }
            let mut objects = store.objects("").await.unwrap();
            for o in &mut objects {
                o.2 -= chrono::Duration::days(1);
            }
            let refs = References::new(vec![recorded.clone()], vec![]);
            assert_eq!(
                unreferenced(&objects, &refs, Duration::from_secs(60)),
                vec![(debris.clone(), 1)],
                "only the debris is an orphan"
            );
            store.delete(std::slice::from_ref(&debris)).await.unwrap();
            assert_eq!(
                store.objects("").await.unwrap().len(),
                2,
                "the archive stays"
            );
        }
        let _ = std::fs::remove_dir_all(dir);
    }
}
