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
use crate::metrics::{Metrics, Stage};
use crate::store::Store;
use bytes::Bytes;
pub use counting::count_failure;
use counting::{count_archived, count_batch_failure, release_reason};
use std::sync::Arc;
use std::time::Instant;
use write::{write_checked, Written};

mod counting;
mod write;

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
    /// The claim says claiming again at once may find more (a full batch, or more leaves of a
    /// partitioned table). Otherwise the claim caught up with the eligible rows: claiming again
    /// at once would only read the table's unexpired rows again for the few that aged since.
    pub more: bool,
    extender: tokio::task::JoinHandle<()>,
    /// How long writing, reading back and verifying took (observed once the batch is pruned).
    took: write::Took,
}

/// Claims a batch of `policy`, writes its slice and manifest and reads them back. None when
/// nothing is eligible. With `resume` the claim may hand back this owner's unfinished batch; it
/// must be false while another batch of ours is in flight, or it would hand back that one.
pub async fn prepare(ctx: &Context, policy: &str, resume: bool) -> Result<Option<Verified>> {
    let s = &ctx.settings;
    let started = Instant::now();
    let Some(crate::db::Claim { batch, slice, more }) = ctx
        .db
        .claim(policy, s.batch_rows, s.lease, &s.owner, resume)
        .await?
    else {
        return Ok(None);
    };
    ctx.metrics
        .observe(Stage::Claim, started.elapsed().as_secs_f64());
    tracing::info!(policy, batch = %batch, "claimed a batch");
    fault::point("after-claim");
    let extender = spawn_lease_extender(ctx, policy, &batch);
    match write_and_verify(ctx, policy, &batch, Bytes::from(slice)).await {
        Ok(w) => Ok(Some(Verified {
            took: w.took,
            policy: policy.to_owned(),
            batch,
            key: w.key,
            digest: w.digest,
            rows: w.rows,
            bytes: w.bytes,
            more,
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
    let started = Instant::now();
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
            let m = &ctx.metrics;
            m.observe(Stage::Write, v.took.write.as_secs_f64());
            m.observe(Stage::ReadBack, v.took.read_back.as_secs_f64());
            m.observe(Stage::Verify, v.took.verify.as_secs_f64());
            m.observe(Stage::Prune, started.elapsed().as_secs_f64());
            count_archived(m, policy, v.rows, v.bytes, deleted);
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

/// Counts a failed batch and releases it (best effort: when the database is unreachable the
/// lease runs out instead).
async fn failed(ctx: &Context, db: &Db, policy: &str, batch: &str, e: &Error) {
    count_batch_failure(&ctx.metrics, policy, e);
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
                Ok(()) => {
                    metrics
                        .lease_extensions
                        .get_or_create(&Metrics::policy(&policy))
                        .inc();
                }
                Err(e) => tracing::warn!(batch = %batch, error = %e, "could not extend the lease"),
            }
        }
    })
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

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
}
