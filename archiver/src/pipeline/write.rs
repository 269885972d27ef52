//! Writing a slice and its manifest create-only, and reading both back: the proof a batch's
//! prune is asked with, and the steps an erasure's rewrite (`crate::supersede`) takes too. No
//! database here: the slice and manifest come in.

use crate::error::{Error, Result};
use crate::fault;
use crate::keys::{manifest_key, slice_key};
use crate::store::Store;
use bytes::Bytes;
use pg_retention_format::{count_frames, Manifest};
use std::time::{Duration, Instant};

/// What the prune needs from a written and verified slice.
#[derive(Debug, PartialEq, Eq)]
pub struct Written {
    /// The slice's key.
    pub key: String,
    /// Its BLAKE3 (hex).
    pub digest: String,
    /// Its rows.
    pub rows: u64,
    /// Its bytes.
    pub bytes: u64,
    /// How long writing, reading back and verifying took.
    pub took: Took,
}

/// A slice and its manifest as they go to the store, under their keys: reading them back must
/// find these bytes.
pub struct Objects {
    /// The slice's key.
    pub slice_key: String,
    /// The manifest's key.
    pub manifest_key: String,
    /// The slice.
    pub slice: Bytes,
    /// The manifest, serialized: it must read back byte-identical.
    pub manifest: Bytes,
    /// The slice's BLAKE3 (hex).
    pub digest: String,
}

/// How long the stages of [`write_checked`] took.
#[derive(Debug, Default, PartialEq, Eq, Clone, Copy)]
pub struct Took {
    /// Writing the slice and manifest.
    pub write: Duration,
    /// Reading both back.
    pub read_back: Duration,
    /// Checking what was read back.
    pub verify: Duration,
}

/// Checks the slice the extension rendered against its manifest, completes the manifest with
/// the slice's digest and length, writes both create-only and reads them back.
pub async fn write_checked(
    store: &Store,
    namespace: &str,
    policy: &str,
    batch: &str,
    slice: Bytes,
    mut manifest: Manifest,
) -> Result<Written> {
    // Walking the frames proves the extension's bytes decode before anything is written.
    let counted = slice.clone();
    let (rows, digest) = apart(
        batch,
        "the slice the extension rendered does not decode",
        move || {
            count_frames(&counted).map(|rows| (rows, blake3::hash(&counted).to_hex().to_string()))
        },
    )
    .await?;
    if rows != manifest.rows {
        return Err(Error::Verify {
            key: batch.to_owned(),
            reason: format!(
                "the batch has {} rows but {rows} frames came back",
                manifest.rows
            ),
        });
    }
    let bytes = slice.len() as u64;
    manifest.blake3 = digest.clone();
    manifest.bytes = bytes;
    let manifest_bytes = Bytes::from(serde_json::to_vec_pretty(&manifest)?);
    let (skey, mkey) = (
        slice_key(namespace, &manifest),
        manifest_key(namespace, &manifest),
    );
    if fault::armed("mid-upload") {
        // A store that kept half an object before the process died.
        store.overwrite(&skey, fault::first_half(&slice)).await?;
        fault::point("mid-upload");
    }
    if fault::armed_once("occupy-once") {
        // Another writer's object at the first batch's key.
        store
            .overwrite(&skey, Bytes::from_static(b"not ours"))
            .await?;
    }
    let objects = Objects {
        slice_key: skey,
        manifest_key: mkey,
        slice,
        manifest: manifest_bytes,
        digest,
    };
    let started = Instant::now();
    let written = put_create(store, &objects, None).await?;
    let write = started.elapsed();
    tracing::info!(policy, batch, key = %objects.slice_key, rows, bytes, resumed = (written != crate::store::Written::Created), "slice written");
    fault::point("after-upload");
    if fault::armed("corrupt-after-upload") || fault::armed_once("corrupt-once-after-upload") {
        store
            .overwrite(&objects.slice_key, fault::flip_middle_bit(&objects.slice))
            .await?;
    }
    let (read_back, verify) = read_back(store, &objects).await?;
    fault::point("after-verify");
    Ok(Written {
        key: objects.slice_key,
        digest: objects.digest,
        rows,
        bytes,
        took: Took {
            write,
            read_back,
            verify,
        },
    })
}

/// Runs `check` of the slice at `key` on tokio's blocking threads: decoding and hashing are the
/// stage's CPU, and on the runtime's threads they held up the claim and the prune polled beside
/// this write. A check that fails, or whose task stops, is a verification failure of `key`,
/// explained as `what` and the reason.
async fn apart<T: Send + 'static>(
    key: &str,
    what: &str,
    check: impl FnOnce() -> pg_retention_format::Result<T> + Send + 'static,
) -> Result<T> {
    let verify = |reason: String| Error::Verify {
        key: key.to_owned(),
        reason: format!("{what}: {reason}"),
    };
    tokio::task::spawn_blocking(check)
        .await
        .map_err(|e| verify(format!("the check stopped: {e}")))?
        .map_err(|e| verify(e.to_string()))
}

/// Writes the slice, then its manifest, create-only (the slice first: a manifest never names
/// a slice that is not there). `between` names a fault point between the two. What the
/// slice's write found.
pub async fn put_create(
    store: &Store,
    objects: &Objects,
    between: Option<&str>,
) -> Result<crate::store::Written> {
    let written = store
        .put_create(&objects.slice_key, objects.slice.clone())
        .await?;
    if let Some(point) = between {
        fault::point(point);
    }
    store
        .put_create(&objects.manifest_key, objects.manifest.clone())
        .await?;
    Ok(written)
}

/// Reads both objects back: each must be byte-identical to what was written (both are still in
/// memory). The slice was decoded and counted against its manifest before it was written, so
/// equal bytes prove what re-decoding or re-hashing them would, and more: a digest compares one
/// value derived from the bytes, this compares every byte. How long reading and comparing took.
pub async fn read_back(store: &Store, objects: &Objects) -> Result<(Duration, Duration)> {
    let (skey, mkey) = (&objects.slice_key, &objects.manifest_key);
    let started = Instant::now();
    let back = store.get(skey).await?;
    let mback = store.get(mkey).await?;
    let read_back = started.elapsed();
    let started = Instant::now();
    if back != objects.slice {
        let reason = if back.len() != objects.slice.len() {
            format!(
                "the slice read back has {} bytes, {} were written",
                back.len(),
                objects.slice.len()
            )
        } else {
            "the slice read back differs from the bytes written".to_owned()
        };
        return Err(Error::Verify {
            key: skey.to_owned(),
            reason,
        });
    }
    if mback != objects.manifest {
        return Err(Error::Verify {
            key: mkey.to_owned(),
            reason: "the manifest read back differs".into(),
        });
    }
    Ok((read_back, started.elapsed()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::Options;
    use crate::config::Settings;
    use pg_retention_format::{append_frame, ColumnSpec, FORMAT_VERSION};

    fn memory_store() -> Store {
        let o = Options {
            store: Some("memory://pfx".into()),
            ..Default::default()
        };
        Store::open(&Settings::resolve(o).unwrap()).unwrap()
    }

    fn slice_of(rows: u64) -> Bytes {
        let mut out = Vec::new();
        for i in 0..rows {
            let id = i.to_string();
            append_frame(&mut out, &[Some(id.as_str())], &[Some(id.as_str()), None]).unwrap();
        }
        Bytes::from(out)
    }

    fn manifest_of(rows: u64) -> Manifest {
        Manifest {
            format: FORMAT_VERSION,
            database: "db".into(),
            relation: "public.audit".into(),
            policy: "audit".into(),
            policy_version: 1,
            batch: "b1".into(),
            columns: vec![ColumnSpec {
                name: "id".into(),
                type_name: "bigint".into(),
            }],
            key_columns: vec!["id".into()],
            rows,
            bytes: 0,
            blake3: String::new(),
            age_min: None,
            age_max: None,
            created_at: "2026-12-01T00:00:00Z".into(),
            supersedes: None,
        }
    }

    #[tokio::test]
    async fn a_written_slice_reports_its_key_digest_rows_and_bytes_and_reads_back() {
        let store = memory_store();
        let slice = slice_of(3);
        let w = write_checked(&store, "ns", "audit", "b1", slice.clone(), manifest_of(3))
            .await
            .unwrap();
        let mut m = manifest_of(3);
        m.blake3 = blake3::hash(&slice).to_hex().to_string();
        m.bytes = slice.len() as u64;
        assert_eq!(
            w,
            Written {
                key: slice_key("ns", &m),
                digest: m.blake3.clone(),
                rows: 3,
                bytes: slice.len() as u64,
                took: w.took,
            }
        );
        assert_eq!(store.get(&w.key).await.unwrap(), slice);
        let back: Manifest =
            serde_json::from_slice(&store.get(&manifest_key("ns", &m)).await.unwrap()).unwrap();
        assert_eq!(
            back, m,
            "the manifest carries the slice's digest and length"
        );
    }

    #[tokio::test]
    async fn a_slice_whose_frames_disagree_with_the_batch_is_never_written() {
        let store = memory_store();
        let refused = write_checked(&store, "ns", "audit", "b1", slice_of(2), manifest_of(3)).await;
        assert!(matches!(refused, Err(Error::Verify { .. })), "{refused:?}");
        let undecodable = write_checked(
            &store,
            "ns",
            "audit",
            "b1",
            Bytes::from_static(b"\0\0\0\x09ab"),
            manifest_of(1),
        )
        .await;
        assert!(
            matches!(undecodable, Err(Error::Verify { .. })),
            "{undecodable:?}"
        );
        assert!(
            store.manifests().await.unwrap().is_empty(),
            "nothing written"
        );
    }

    #[tokio::test]
    async fn read_back_refuses_a_changed_slice_or_a_changed_manifest() {
        let store = memory_store();
        let slice = slice_of(2);
        let mut m = manifest_of(2);
        m.blake3 = blake3::hash(&slice).to_hex().to_string();
        m.bytes = slice.len() as u64;
        let mbytes = Bytes::from(serde_json::to_vec_pretty(&m).unwrap());
        let (skey, mkey) = (slice_key("ns", &m), manifest_key("ns", &m));
        store.overwrite(&skey, slice.clone()).await.unwrap();
        store.overwrite(&mkey, mbytes.clone()).await.unwrap();
        let objects = Objects {
            slice_key: skey.clone(),
            manifest_key: mkey.clone(),
            slice: slice.clone(),
            manifest: mbytes,
            digest: m.blake3.clone(),
        };
        read_back(&store, &objects).await.unwrap();

        let mut bad = slice.to_vec();
        bad[6] ^= 1;
        store.overwrite(&skey, Bytes::from(bad)).await.unwrap();
        let r = read_back(&store, &objects).await;
        assert!(
            matches!(&r, Err(Error::Verify { key, .. }) if *key == skey),
            "{r:?}"
        );

        store.overwrite(&skey, slice).await.unwrap();
        store
            .overwrite(&mkey, Bytes::from_static(b"{}"))
            .await
            .unwrap();
        let r = read_back(&store, &objects).await;
        assert!(
            matches!(&r, Err(Error::Verify { key, .. }) if *key == mkey),
            "{r:?}"
        );
    }
}
