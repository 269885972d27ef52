//! One batch, start to finish: claim (the extension renders the slice from the rows it claims),
//! write create-only, read back and verify, then ask the extension to prune. Anything short of
//! a verified archive releases the batch; the extension never deletes a row this pipeline did
//! not prove archived.
//!
//! Batches go through three stages at once ([`Flight`]): batch N is pruned on a second
//! connection while N+1 is written and verified (no database) and N+2 is claimed on the first,
//! so the claim, the store and the prune overlap. The process holds the rows of two batches at
//! most: N+1's slice while N+2's arrives (a slice is dropped once verified, before its prune).

use crate::config::Settings;
use crate::db::{Db, Release};
use crate::error::{Error, Result};
use crate::fault;
use crate::metrics::{Metrics, Stage};
use crate::store::Store;
use bytes::Bytes;
pub use counting::count_failure;
use counting::{count_archived, count_batch_failure, release_reason};
use pg_retention_format::Manifest;
use std::sync::Arc;
use std::time::Instant;
use write::write_checked;

mod counting;
pub mod write;

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
    /// This database's archive namespace (`crate::namespace`), claimed in the store before the
    /// first write ([`Context::claimed`]).
    pub namespace: crate::namespace::Claim,
    /// The namespace once the store is trusted and the namespace claimed (`crate::trust`);
    /// shared with `/readyz`, which then expects the claim in the store.
    pub claimed: Arc<tokio::sync::OnceCell<String>>,
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
    /// How long writing, reading back and verifying took (observed once the batch is pruned).
    took: write::Took,
}

/// A batch claimed, with its slice and manifest: writing it is left.
pub struct Claimed {
    policy: String,
    batch: String,
    slice: Bytes,
    manifest: Manifest,
    /// The claim says claiming again at once may find more (a full batch, or more leaves of a
    /// partitioned table). Otherwise the claim caught up with the eligible rows: claiming again
    /// at once would only read the table's unexpired rows again for the few that aged since.
    pub more: bool,
    extender: tokio::task::JoinHandle<()>,
}

/// Claims a batch of `policy` with its slice and manifest (on the claim connection). None when
/// nothing is eligible. With `resume` the claim may hand back this owner's unfinished batch; it
/// must be false while another batch of ours is in flight, or it would hand back that one.
pub async fn claim(ctx: &Context, policy: &str, resume: bool) -> Result<Option<Claimed>> {
    let s = &ctx.settings;
    let started = Instant::now();
    let Some(crate::db::Claim {
        batch,
        bytes,
        more,
        manifest,
    }) = ctx
        .db
        .claim(policy, s.batch_rows, s.lease, &s.owner, resume)
        .await?
    else {
        return Ok(None);
    };
    fault::point("after-claim");
    let extender = spawn_lease_extender(ctx, policy, &batch);
    let fetched = async {
        let slice = ctx.db.claimed_slice(&batch, bytes).await?;
        Ok::<_, Error>((slice, serde_json::from_str::<Manifest>(&manifest)?))
    };
    match fetched.await {
        Ok((slice, manifest)) => {
            ctx.metrics
                .observe(Stage::Claim, started.elapsed().as_secs_f64());
            tracing::info!(policy, batch = %batch, "claimed a batch");
            Ok(Some(Claimed {
                policy: policy.to_owned(),
                batch,
                slice: Bytes::from(slice),
                manifest,
                more,
                extender,
            }))
        }
        Err(e) => {
            extender.abort();
            failed(ctx, &ctx.db, policy, &batch, &e).await;
            Err(e)
        }
    }
}

/// Writes a claimed batch's slice and manifest create-only and reads them back (no database,
/// unless it fails: then the batch is released on the claim connection).
pub async fn write(ctx: &Context, c: Claimed) -> Result<Verified> {
    let claimed = crate::trust::prepare(ctx).await;
    let written = match claimed {
        Ok(ns) => write_checked(&ctx.store, ns, &c.policy, &c.batch, c.slice, c.manifest).await,
        Err(e) => Err(e),
    };
    match written {
        Ok(w) => Ok(Verified {
            took: w.took,
            policy: c.policy,
            batch: c.batch,
            key: w.key,
            digest: w.digest,
            rows: w.rows,
            bytes: w.bytes,
            extender: c.extender,
        }),
        Err(e) => {
            c.extender.abort();
            failed(ctx, &ctx.db, &c.policy, &c.batch, &e).await;
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

/// [`finish`] of a verified batch, if there is one.
async fn finish_if(ctx: &Context, v: Option<Verified>) -> Option<Result<Pruned>> {
    match v {
        Some(v) => Some(finish(ctx, v).await),
        None => None,
    }
}

/// [`write`] of a claimed batch, if there is one.
async fn write_if(ctx: &Context, c: Option<Claimed>) -> Option<Result<Verified>> {
    match c {
        Some(c) => Some(write(ctx, c).await),
        None => None,
    }
}

/// The batches between the stages: one claimed and not yet written, one verified and not yet
/// pruned.
#[derive(Default)]
pub struct Flight {
    claimed: Option<Claimed>,
    verified: Option<Verified>,
}

impl Flight {
    /// No batch of ours is in flight.
    pub fn is_empty(&self) -> bool {
        self.claimed.is_none() && self.verified.is_none()
    }
}

/// What one [`advance`] did.
pub struct Step {
    /// The verified batch's prune, when there was one.
    pub pruned: Option<Result<Pruned>>,
    /// The claimed batch's write, when there was one and it failed (it was released).
    pub unwritten: Option<Error>,
    /// The new claim: `Some(more)` when a batch was claimed (see [`Claimed::more`]).
    pub claimed: Result<Option<bool>>,
}

/// Moves every batch in `flight` one stage on at once: prunes the verified one, writes the
/// claimed one, and claims the next batch of `policy`.
pub async fn advance(ctx: &Context, flight: &mut Flight, policy: &str) -> Step {
    let resume = flight.is_empty();
    let (verified, claimed) = (flight.verified.take(), flight.claimed.take());
    let (pruned, written, next) = tokio::join!(
        finish_if(ctx, verified),
        write_if(ctx, claimed),
        claim(ctx, policy, resume)
    );
    let unwritten = match written {
        Some(Ok(v)) => {
            flight.verified = Some(v);
            None
        }
        Some(Err(e)) => Some(e),
        None => None,
    };
    let claimed = next.map(|c| {
        c.map(|c| {
            let more = c.more;
            flight.claimed = Some(c);
            more
        })
    });
    Step {
        pruned,
        unwritten,
        claimed,
    }
}

/// What [`drain`] does with a batch claimed and not yet written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unwritten {
    /// Write it and prune it: the pass ended because it caught up.
    Finish,
    /// Release it, nothing written: the pass stopped at a failure. (Its claim ran beside the
    /// failed batch and may have taken that batch's rows once it was released.)
    Release,
}

/// Ends every batch in `flight`: prunes the verified one and, as `unwritten` says, writes and
/// then prunes the claimed one or releases it. The batches pruned and the failures, in order.
pub async fn drain(ctx: &Context, flight: &mut Flight, unwritten: Unwritten) -> (u64, Vec<Error>) {
    let (mut pruned, mut failures) = (0, Vec::new());
    let (verified, mut claimed) = (flight.verified.take(), flight.claimed.take());
    if unwritten == Unwritten::Release {
        if let Some(c) = claimed.take() {
            c.extender.abort();
            if let Err(e) = ctx.db.release(&c.batch, &Release::Stopped).await {
                tracing::error!(batch = %c.batch, error = %e, "batch not released; its lease will expire");
            }
        }
    }
    let (first, written) = tokio::join!(finish_if(ctx, verified), write_if(ctx, claimed));
    let last = match written {
        Some(Ok(v)) => Some(finish(ctx, v).await),
        Some(Err(e)) => Some(Err(e)),
        None => None,
    };
    for outcome in [first, last].into_iter().flatten() {
        match outcome {
            Ok(_) => pruned += 1,
            Err(e) => failures.push(e),
        }
    }
    (pruned, failures)
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
