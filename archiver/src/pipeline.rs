//! One batch, start to finish: claim (the extension renders the slice from the rows it claims),
//! write create-only, read back and verify, then ask the extension to prune. Anything short of
//! a verified archive releases the batch; the extension never deletes a row this pipeline did
//! not prove archived.
//!
//! The prune of one batch runs on a second connection while the next batch is claimed, written
//! and verified on the first, so the database works on both at once. The process still holds
//! the rows of one batch at most: a batch's slice is dropped once verified, before its prune.

use crate::config::Settings;
use crate::db::Db;
use crate::error::{Error, Result};
use crate::fault;
use crate::keys::{manifest_key, slice_key};
use crate::metrics::Metrics;
use crate::store::Store;
use bytes::Bytes;
use pg_retention_format::{check_slice, count_frames, Manifest};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// A batch archived and pruned.
#[derive(Debug, PartialEq, Eq)]
pub struct Pruned {
    /// Rows in the slice.
    pub rows: u64,
    /// Rows the extension deleted (fewer when holds kept some).
    pub deleted: i64,
}

/// Shared by every batch of one archiver process.
pub struct Context {
    /// Settings.
    pub settings: Settings,
    /// Protocol connection: claims, manifests, lease extensions.
    pub db: Arc<Db>,
    /// Second protocol connection: prunes (`complete_batch`), overlapping the next claim.
    pub prune_db: Arc<Db>,
    /// Object store.
    pub store: Store,
    /// Metrics.
    pub metrics: Arc<Metrics>,
}

/// A batch whose slice and manifest are written and read back: only the prune is left.
pub struct Verified {
    policy: String,
    batch: String,
    key: String,
    digest: String,
    rows: u64,
    bytes: u64,
    extender: tokio::task::JoinHandle<()>,
}

impl Verified {
    /// Whether the claim filled the batch. A short batch means the claim caught up with the
    /// eligible rows: claiming again at once would only read the table's unexpired rows again
    /// for the few that aged past the cutoff since.
    pub fn full(&self, batch_rows: i32) -> bool {
        self.rows >= u64::try_from(batch_rows).unwrap_or(0)
    }
}

/// Claims a batch of `policy`, writes its slice and manifest and reads them back. None when
/// nothing is eligible. With `resume` the claim may hand back this owner's unfinished batch; it
/// must be false while another batch of ours is in flight, or it would hand back that one.
pub async fn prepare(ctx: &Context, policy: &str, resume: bool) -> Result<Option<Verified>> {
    let s = &ctx.settings;
    let Some((batch, slice)) = ctx
        .db
        .claim(policy, s.batch_rows, s.lease, &s.owner, resume)
        .await?
    else {
        return Ok(None);
    };
    tracing::info!(policy, batch = %batch, "claimed a batch");
    fault::point("after-claim");
    let extender = spawn_lease_extender(ctx, policy, &batch);
    match write_and_verify(ctx, policy, &batch, Bytes::from(slice)).await {
        Ok(w) => Ok(Some(Verified {
            policy: policy.to_owned(),
            batch,
            key: w.key,
            digest: w.digest,
            rows: w.rows,
            bytes: w.bytes,
            extender,
        })),
        Err(e) => {
            extender.abort();
            failed(ctx, &ctx.db, policy, &batch, &e).await;
            Err(e)
        }
    }
}

/// Asks the extension to prune a verified batch (on the prune connection).
pub async fn finish(ctx: &Context, v: Verified) -> Result<Pruned> {
    if fault::armed("pause-before-complete") {
        // Leaves the fault suite a window to change rows or place holds before the prune.
        tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    }
    let (policy, batch) = (v.policy.as_str(), v.batch.as_str());
    let result = ctx
        .prune_db
        .complete(
            batch,
            &v.key,
            &v.digest,
            v.rows as i64,
            v.bytes as i64,
            &ctx.settings.owner,
        )
        .await;
    v.extender.abort();
    match result {
        Ok(deleted) => {
            tracing::info!(
                policy,
                batch,
                rows = v.rows,
                deleted,
                "batch verified and pruned"
            );
            count_archived(&ctx.metrics, policy, v.rows, deleted);
            Ok(Pruned {
                rows: v.rows,
                deleted,
            })
        }
        Err(e) => {
            failed(ctx, &ctx.prune_db, policy, batch, &e).await;
            Err(e)
        }
    }
}

/// Prunes `previous` while the next batch of `policy` is claimed, written and verified. Returns
/// the prune's outcome (when there was a previous batch) and the next batch.
pub async fn overlapped(
    ctx: &Context,
    previous: Option<Verified>,
    policy: &str,
) -> (Option<Result<Pruned>>, Result<Option<Verified>>) {
    let resume = previous.is_none();
    let pruning = async {
        match previous {
            Some(v) => Some(finish(ctx, v).await),
            None => None,
        }
    };
    tokio::join!(pruning, prepare(ctx, policy, resume))
}

/// Counts an archived and pruned batch.
fn count_archived(m: &Metrics, policy: &str, rows: u64, deleted: i64) {
    m.add(
        "pg_retention_archiver_batches_total",
        &[("policy", policy), ("outcome", "archived")],
        1.0,
    );
    m.add(
        "pg_retention_archiver_rows_archived_total",
        &[("policy", policy)],
        rows as f64,
    );
    m.add(
        "pg_retention_archiver_rows_deleted_total",
        &[("policy", policy)],
        deleted as f64,
    );
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0);
    m.set(
        "pg_retention_archiver_last_success_timestamp_seconds",
        &[("policy", policy)],
        now,
    );
}

/// The batch metric's outcome label for a batch that failed with `e`.
fn outcome(e: &Error) -> &'static str {
    match e {
        Error::Refused { .. } => "refused",
        Error::ForeignOccupant { .. } | Error::Verify { .. } => "released",
        _ => "failed",
    }
}

/// Counts a batch that failed with `e`.
fn count_failure(m: &Metrics, policy: &str, e: &Error) {
    if let Error::Verify { .. } = e {
        m.add(
            "pg_retention_archiver_verify_failures_total",
            &[("policy", policy)],
            1.0,
        );
    }
    let store_reason = match e {
        Error::Store(_) => Some("request"),
        Error::ForeignOccupant { .. } => Some("foreign_occupant"),
        _ => None,
    };
    if let Some(reason) = store_reason {
        m.add(
            "pg_retention_archiver_store_failures_total",
            &[("reason", reason)],
            1.0,
        );
    }
    m.add(
        "pg_retention_archiver_batches_total",
        &[("policy", policy), ("outcome", outcome(e))],
        1.0,
    );
}

/// The reason a failed batch is released with: a refusal is the extension's own word.
fn release_reason(e: &Error) -> String {
    match e {
        Error::Refused { .. } => format!("refused: {e}"),
        _ => format!("archiver: {e}"),
    }
}

/// Counts a failed batch and releases it (best effort: when the database is unreachable the
/// lease runs out instead).
async fn failed(ctx: &Context, db: &Db, policy: &str, batch: &str, e: &Error) {
    count_failure(&ctx.metrics, policy, e);
    match db.release(batch, &release_reason(e)).await {
        Ok(_) => {
            tracing::warn!(policy, batch = %batch, error = %e, "batch released; nothing was deleted")
        }
        Err(re) => {
            tracing::error!(policy, batch = %batch, error = %e, release_error = %re, "batch not released; its lease will expire")
        }
    }
}

/// How often a claimed batch's lease is extended: three times per lease, at most every 200 ms.
fn extension_period(lease: std::time::Duration) -> std::time::Duration {
    (lease / 3).max(std::time::Duration::from_millis(200))
}

fn spawn_lease_extender(ctx: &Context, policy: &str, batch: &str) -> tokio::task::JoinHandle<()> {
    let db = Arc::clone(&ctx.db);
    let metrics = Arc::clone(&ctx.metrics);
    let lease = ctx.settings.lease;
    let (policy, batch) = (policy.to_owned(), batch.to_owned());
    tokio::spawn(async move {
        let every = extension_period(lease);
        loop {
            tokio::time::sleep(every).await;
            match db.extend_lease(&batch, lease).await {
                Ok(()) => metrics.add(
                    "pg_retention_archiver_lease_extensions_total",
                    &[("policy", policy.as_str())],
                    1.0,
                ),
                Err(e) => tracing::warn!(batch = %batch, error = %e, "could not extend the lease"),
            }
        }
    })
}

/// What the prune needs from a written and verified slice.
#[derive(Debug, PartialEq, Eq)]
struct Written {
    key: String,
    digest: String,
    rows: u64,
    bytes: u64,
}

/// Writes the slice and its manifest create-only and reads both back.
async fn write_and_verify(
    ctx: &Context,
    policy: &str,
    batch: &str,
    slice: Bytes,
) -> Result<Written> {
    let manifest = ctx.db.manifest(batch).await?;
    write_checked(&ctx.store, policy, batch, slice, manifest).await
}

/// Checks the slice the extension rendered against its manifest, completes the manifest with
/// the slice's digest and length, writes both create-only and reads them back.
async fn write_checked(
    store: &Store,
    policy: &str,
    batch: &str,
    slice: Bytes,
    mut manifest: Manifest,
) -> Result<Written> {
    // Walking the frames proves the extension's bytes decode before anything is written.
    let rows = count_frames(&slice).map_err(|e| Error::Verify {
        key: batch.to_owned(),
        reason: format!("the slice the extension rendered does not decode: {e}"),
    })?;
    if rows != manifest.rows {
        return Err(Error::Verify {
            key: batch.to_owned(),
            reason: format!(
                "the batch has {} rows but {rows} frames came back",
                manifest.rows
            ),
        });
    }
    let digest = blake3::hash(&slice).to_hex().to_string();
    let bytes = slice.len() as u64;
    manifest.blake3 = digest.clone();
    manifest.bytes = bytes;
    let manifest_bytes = Bytes::from(serde_json::to_vec_pretty(&manifest)?);
    let (skey, mkey) = (slice_key(&manifest), manifest_key(&manifest));
    if fault::armed("mid-upload") {
        // A store that kept half an object before the process died.
        store.overwrite(&skey, fault::first_half(&slice)).await?;
        fault::point("mid-upload");
    }
    let written = store.put_create(&skey, slice.clone()).await?;
    store.put_create(&mkey, manifest_bytes.clone()).await?;
    tracing::info!(policy, batch, key = %skey, rows, bytes, resumed = (written != crate::store::Written::Created), "slice written");
    fault::point("after-upload");
    if fault::armed("corrupt-after-upload") {
        store
            .overwrite(&skey, fault::flip_middle_bit(&slice))
            .await?;
    }
    verify_written(store, &skey, &mkey, &manifest, &manifest_bytes).await?;
    fault::point("after-verify");
    Ok(Written {
        key: skey,
        digest,
        rows,
        bytes,
    })
}

/// Reads both objects back: the slice must decode and hash to the manifest's digest and counts,
/// and the manifest must be byte-identical to ours.
async fn verify_written(
    store: &Store,
    skey: &str,
    mkey: &str,
    manifest: &Manifest,
    manifest_bytes: &Bytes,
) -> Result<()> {
    let back = store.get(skey).await?;
    check_slice(&back, &manifest.blake3, manifest.rows, manifest.bytes).map_err(|e| {
        Error::Verify {
            key: skey.to_owned(),
            reason: e.to_string(),
        }
    })?;
    let mback = store.get(mkey).await?;
    if mback != manifest_bytes {
        return Err(Error::Verify {
            key: mkey.to_owned(),
            reason: "the manifest read back differs".into(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::Options;
    use pg_retention_format::{append_frame, ColumnSpec, FORMAT_VERSION};
    use std::time::Duration;

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

    fn sample(m: &Metrics, line_start: &str) -> Option<f64> {
        m.render(&[])
            .lines()
            .find(|l| l.starts_with(line_start))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
    }

    #[tokio::test]
    async fn a_written_slice_reports_its_key_digest_rows_and_bytes_and_reads_back() {
        let store = memory_store();
        let slice = slice_of(3);
        let w = write_checked(&store, "audit", "b1", slice.clone(), manifest_of(3))
            .await
            .unwrap();
        let mut m = manifest_of(3);
        m.blake3 = blake3::hash(&slice).to_hex().to_string();
        m.bytes = slice.len() as u64;
        assert_eq!(
            w,
            Written {
                key: slice_key(&m),
                digest: m.blake3.clone(),
                rows: 3,
                bytes: slice.len() as u64,
            }
        );
        assert_eq!(store.get(&w.key).await.unwrap(), slice);
        let back: Manifest =
            serde_json::from_slice(&store.get(&manifest_key(&m)).await.unwrap()).unwrap();
        assert_eq!(
            back, m,
            "the manifest carries the slice's digest and length"
        );
    }

    #[tokio::test]
    async fn a_slice_whose_frames_disagree_with_the_batch_is_never_written() {
        let store = memory_store();
        let refused = write_checked(&store, "audit", "b1", slice_of(2), manifest_of(3)).await;
        assert!(matches!(refused, Err(Error::Verify { .. })), "{refused:?}");
        let undecodable = write_checked(
            &store,
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
        let (skey, mkey) = (slice_key(&m), manifest_key(&m));
        store.overwrite(&skey, slice.clone()).await.unwrap();
        store.overwrite(&mkey, mbytes.clone()).await.unwrap();
        verify_written(&store, &skey, &mkey, &m, &mbytes)
            .await
            .unwrap();

        let mut bad = slice.to_vec();
        bad[6] ^= 1;
        store.overwrite(&skey, Bytes::from(bad)).await.unwrap();
        let r = verify_written(&store, &skey, &mkey, &m, &mbytes).await;
        assert!(
            matches!(&r, Err(Error::Verify { key, .. }) if *key == skey),
            "{r:?}"
        );

        store.overwrite(&skey, slice).await.unwrap();
        store
            .overwrite(&mkey, Bytes::from_static(b"{}"))
            .await
            .unwrap();
        let r = verify_written(&store, &skey, &mkey, &m, &mbytes).await;
        assert!(
            matches!(&r, Err(Error::Verify { key, .. }) if *key == mkey),
            "{r:?}"
        );
    }

    #[tokio::test]
    async fn a_batch_is_full_when_the_claim_filled_it() {
        let v = |rows| Verified {
            policy: "p".into(),
            batch: "b".into(),
            key: String::new(),
            digest: String::new(),
            rows,
            bytes: 0,
            extender: tokio::spawn(async {}),
        };
        assert!(v(100).full(100));
        assert!(v(101).full(100));
        assert!(!v(99).full(100));
    }

    #[test]
    fn the_lease_is_extended_three_times_per_lease_and_never_in_a_busy_loop() {
        assert_eq!(
            extension_period(Duration::from_secs(30)),
            Duration::from_secs(10)
        );
        assert_eq!(
            extension_period(Duration::from_millis(300)),
            Duration::from_millis(200)
        );
    }

    #[test]
    fn failures_are_counted_by_outcome_and_reason() {
        let m = Metrics::default();
        let refused = Error::Refused {
            batch: "b".into(),
            reason: "rows changed".into(),
        };
        let foreign = Error::ForeignOccupant {
            key: "k".into(),
            reason: "other bytes".into(),
        };
        let verify = Error::Verify {
            key: "k".into(),
            reason: "digest".into(),
        };
        let io = Error::Io(std::io::Error::other("disk"));
        let request = Error::Store(object_store::Error::Generic {
            store: "S3",
            source: "503".into(),
        });
        for e in [&refused, &foreign, &verify, &io, &request] {
            count_failure(&m, "p", e);
        }
        let batches = |o: &str| {
            sample(
                &m,
                &format!("pg_retention_archiver_batches_total{{policy=\"p\",outcome=\"{o}\"}}"),
            )
        };
        assert_eq!(batches("refused"), Some(1.0));
        assert_eq!(batches("released"), Some(2.0));
        assert_eq!(batches("failed"), Some(2.0));
        assert_eq!(
            sample(
                &m,
                "pg_retention_archiver_verify_failures_total{policy=\"p\"}"
            ),
            Some(1.0)
        );
        assert_eq!(
            sample(
                &m,
                "pg_retention_archiver_store_failures_total{reason=\"foreign_occupant\"}"
            ),
            Some(1.0)
        );
        assert_eq!(
            sample(
                &m,
                "pg_retention_archiver_store_failures_total{reason=\"request\"}"
            ),
            Some(1.0)
        );
        assert!(release_reason(&refused).starts_with("refused: "));
        assert!(release_reason(&io).starts_with("archiver: "));
    }

    #[test]
    fn an_archived_batch_counts_rows_deleted_and_its_time() {
        let m = Metrics::default();
        count_archived(&m, "p", 10, 7);
        count_archived(&m, "p", 5, 5);
        assert_eq!(
            sample(
                &m,
                "pg_retention_archiver_batches_total{policy=\"p\",outcome=\"archived\"}"
            ),
            Some(2.0)
        );
        assert_eq!(
            sample(
                &m,
                "pg_retention_archiver_rows_archived_total{policy=\"p\"}"
            ),
            Some(15.0)
        );
        assert_eq!(
            sample(&m, "pg_retention_archiver_rows_deleted_total{policy=\"p\"}"),
            Some(12.0)
        );
        let at = sample(
            &m,
            "pg_retention_archiver_last_success_timestamp_seconds{policy=\"p\"}",
        )
        .unwrap();
        assert!(at > 1.7e9, "{at}");
    }
}
