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
        Ok((key, digest, rows, bytes)) => Ok(Some(Verified {
            policy: policy.to_owned(),
            batch,
            key,
            digest,
            rows,
            bytes,
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
            archived(ctx, policy, v.rows, deleted);
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

fn archived(ctx: &Context, policy: &str, rows: u64, deleted: i64) {
    let m = &ctx.metrics;
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

/// Counts a failed batch and releases it (best effort: when the database is unreachable the
/// lease runs out instead).
async fn failed(ctx: &Context, db: &Db, policy: &str, batch: &str, e: &Error) {
    let m = &ctx.metrics;
    let outcome = match e {
        Error::Refused { .. } => "refused",
        Error::ForeignOccupant { .. } | Error::Verify { .. } => "released",
        _ => "failed",
    };
    if let Error::Verify { .. } = e {
        m.add(
            "pg_retention_archiver_verify_failures_total",
            &[("policy", policy)],
            1.0,
        );
    }
    if let Error::Store(_) | Error::ForeignOccupant { .. } = e {
        let reason = if matches!(e, Error::Store(_)) {
            "request"
        } else {
            "foreign_occupant"
        };
        m.add(
            "pg_retention_archiver_store_failures_total",
            &[("reason", reason)],
            1.0,
        );
    }
    m.add(
        "pg_retention_archiver_batches_total",
        &[("policy", policy), ("outcome", outcome)],
        1.0,
    );
    let reason = match e {
        Error::Refused { .. } => format!("refused: {e}"),
        _ => format!("archiver: {e}"),
    };
    match db.release(batch, &reason).await {
        Ok(_) => {
            tracing::warn!(policy, batch = %batch, error = %e, "batch released; nothing was deleted")
        }
        Err(re) => {
            tracing::error!(policy, batch = %batch, error = %e, release_error = %re, "batch not released; its lease will expire")
        }
    }
}

fn spawn_lease_extender(ctx: &Context, policy: &str, batch: &str) -> tokio::task::JoinHandle<()> {
    let db = Arc::clone(&ctx.db);
    let metrics = Arc::clone(&ctx.metrics);
    let lease = ctx.settings.lease;
    let (policy, batch) = (policy.to_owned(), batch.to_owned());
    tokio::spawn(async move {
        let every = (lease / 3).max(std::time::Duration::from_millis(200));
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

/// Writes the slice and its manifest create-only and reads both back; returns the slice's key,
/// digest, rows and bytes for the prune.
async fn write_and_verify(
    ctx: &Context,
    policy: &str,
    batch: &str,
    slice: Bytes,
) -> Result<(String, String, u64, u64)> {
    let mut manifest = ctx.db.manifest(batch).await?;
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
        ctx.store
            .overwrite(&skey, slice.slice(..slice.len() / 2))
            .await?;
        fault::point("mid-upload");
    }
    let written = ctx.store.put_create(&skey, slice.clone()).await?;
    ctx.store.put_create(&mkey, manifest_bytes.clone()).await?;
    tracing::info!(policy, batch, key = %skey, rows, bytes, resumed = (written != crate::store::Written::Created), "slice written");
    fault::point("after-upload");
    if fault::armed("corrupt-after-upload") {
        let mut bad = slice.to_vec();
        if let Some(b) = bad.get_mut(bytes as usize / 2) {
            *b ^= 0x01;
        }
        ctx.store.overwrite(&skey, Bytes::from(bad)).await?;
    }
    verify_written(ctx, &skey, &mkey, &manifest, &manifest_bytes).await?;
    fault::point("after-verify");
    Ok((skey, digest, rows, bytes))
}

/// Reads both objects back: the slice must decode and hash to the manifest's digest and counts,
/// and the manifest must be byte-identical to ours.
async fn verify_written(
    ctx: &Context,
    skey: &str,
    mkey: &str,
    manifest: &Manifest,
    manifest_bytes: &Bytes,
) -> Result<()> {
    let back = ctx.store.get(skey).await?;
    check_slice(&back, &manifest.blake3, manifest.rows, manifest.bytes).map_err(|e| {
        Error::Verify {
            key: skey.to_owned(),
            reason: e.to_string(),
        }
    })?;
    let mback = ctx.store.get(mkey).await?;
    if mback != manifest_bytes {
        return Err(Error::Verify {
            key: mkey.to_owned(),
            reason: "the manifest read back differs".into(),
        });
    }
    Ok(())
}
