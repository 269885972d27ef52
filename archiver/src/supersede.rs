//! Archive supersession (the extension's `archive/supersede.rs`): an erasure reaches the rows
//! archived before it. `run` and `once` process the open supersessions before they claim:
//!
//! 1. read the archive's slice and manifest and check both against the index (the bytes of the
//!    store are untrusted);
//! 2. ask the database which rows the erasure matches (its predicate runs there, as its author);
//!    none: the supersession is unaffected, and that is all;
//! 3. write the slice without those rows, and a manifest whose `supersedes` is the BLAKE3 of the
//!    one it replaces, under the key the index mints for the supersession (create-only);
//! 4. read both back and verify them;
//! 5. record the rewrite: from now on it is the archive's object (refused when the archive
//!    expired meanwhile: the rewrite is then deleted, and the supersession is unaffected);
//! 6. delete the replaced slice and manifest, and say so (ledgered `supersede`).
//!
//! Each step starts only after the one before it succeeded, and the index moves only at 5 and
//! 6: a failure or crash anywhere leaves the original in place (before 5) or the rewrite in
//! place (after), the supersession open, and the next pass finishes it. The objects of 3 are
//! deterministic, so a retry finds its own bytes there and accepts them.

use crate::db::{Open, OpenState, Rewrite, RewriteRecorded};
use crate::error::{Error, Result};
use crate::fault;
use crate::keys::manifest_for;
use crate::metrics::{Superseded, SupersededLabels};
use crate::pipeline::write::{put_create, read_back, Objects};
use crate::pipeline::{count_failure, Context};
use bytes::Bytes;
use pg_retention_format::{encode_frame, summarize_slice, verify_slice, Manifest};

/// Open supersessions read per round.
const ROUND: i32 = 100;

/// What a pass over the open supersessions did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Done {
    /// Slices rewritten and their originals deleted.
    pub rewritten: u64,
    /// Supersessions with nothing to rewrite.
    pub unaffected: u64,
}

/// Processes every open supersession, oldest first; stops at the first failure.
pub async fn pass(ctx: &Context) -> Result<Done> {
    let mut done = Done::default();
    loop {
        let open = ctx.db.open_supersessions(ROUND).await?;
        if open.is_empty() {
            return Ok(done);
        }
        for s in &open {
            let outcome = match one(ctx, s).await {
                Ok(outcome) => outcome,
                Err(e) => {
                    count_failure(&ctx.metrics, &s.policy, &e);
                    return Err(e);
                }
            };
            match outcome {
                Superseded::Rewritten => done.rewritten += 1,
                Superseded::Unaffected => done.unaffected += 1,
            }
            ctx.metrics
                .supersessions
                .get_or_create(&SupersededLabels { outcome })
                .inc();
        }
    }
}

/// Finishes supersession `s`: rewritten when a rewrite replaced the archive's object,
/// unaffected when it had nothing to rewrite.
async fn one(ctx: &Context, s: &Open) -> Result<Superseded> {
    let owner = ctx.settings.owner.as_str();
    if s.state == OpenState::Rewritten {
        let replaced = s.replaced_key.as_deref().ok_or_else(|| {
            Error::Refusal(format!(
                "supersession {} is rewritten without a replaced key",
                s.id
            ))
        })?;
        destroy(ctx, s.id, replaced, owner).await?;
        return Ok(Superseded::Rewritten);
    }
    if s.expired {
        ctx.db
            .supersession_unaffected(s.id, "the archive's objects expired")
            .await?;
        return Ok(Superseded::Unaffected);
    }
    // 1. The archive as the index has it.
    let slice = ctx.store.get(&s.object_key).await?;
    let manifest_bytes = ctx.store.get(&manifest_for(&s.object_key)).await?;
    let rows = verify_slice(
        &slice,
        &s.blake3,
        s.rows.max(0) as u64,
        s.bytes.max(0) as u64,
    )
    .map_err(|e| Error::Verify {
        key: s.object_key.clone(),
        reason: e.to_string(),
    })?;
    let manifest: Manifest = serde_json::from_slice(&manifest_bytes)?;
    if manifest.blake3 != s.blake3 || manifest.rows != s.rows as u64 {
        return Err(Error::Verify {
            key: manifest_for(&s.object_key),
            reason: format!(
                "the manifest says {} rows, blake3 {}; the index says {} rows, blake3 {}",
                manifest.rows, manifest.blake3, s.rows, s.blake3
            ),
        });
    }
    // 2. Which rows the erasure matches.
    let columns: Vec<String> = manifest.columns.iter().map(|c| c.name.clone()).collect();
    let mut erased = ctx.db.supersession_matches(s.id, &slice, &columns).await?;
    if erased.is_empty() {
        ctx.db
            .supersession_unaffected(s.id, "no archived row matched")
            .await?;
        return Ok(Superseded::Unaffected);
    }
    erased.sort_unstable();
    // 3. The slice without them, and its manifest.
    let mut rewritten = Vec::with_capacity(slice.len());
    let mut kept = 0u64;
    for (i, row) in rows.iter().enumerate() {
        if erased.binary_search(&(i as i32)).is_err() {
            rewritten.extend_from_slice(&encode_frame(row)?);
            kept += 1;
        }
    }
    let (blake3, rows_kept, bytes) = summarize_slice(&rewritten, kept);
    let mut next = manifest.clone();
    next.rows = rows_kept;
    next.bytes = bytes;
    next.blake3 = blake3.clone();
    next.supersedes = Some(blake3::hash(&manifest_bytes).to_hex().to_string());
    let supersedes = next.supersedes.clone().unwrap_or_default();
    // 3 and 4 are the pipeline's own steps: create-only writes, then both read back.
    let objects = Objects {
        slice_key: s.rewrite_key.clone(),
        manifest_key: manifest_for(&s.rewrite_key),
        slice: Bytes::from(rewritten),
        manifest: Bytes::from(serde_json::to_vec_pretty(&next)?),
        digest: blake3,
    };
    // A store not probed yet (unreachable at start) is probed before this first write.
    crate::trust::prepare(ctx).await?;
    put_create(&ctx.store, &objects, Some("supersede-after-slice")).await?;
    fault::point("supersede-after-write");
    read_back(&ctx.store, &objects).await?;
    // 5. Record. Refused when an expire operation marked the archive expired since it was
    // listed: its objects are deleted, the erased rows with them, and the rewrite is nobody's
    // object. It goes, and the supersession is unaffected.
    let recorded = ctx
        .db
        .supersession_rewritten(
            s.id,
            &Rewrite {
                replaced_key: &s.object_key,
                object_key: &objects.slice_key,
                blake3: &objects.digest,
                rows: rows_kept,
                bytes,
                supersedes: &supersedes,
            },
        )
        .await?;
    if recorded == RewriteRecorded::ArchiveExpired {
        tracing::warn!(
            supersession = s.id,
            archive = s.archive_id,
            "the archive expired while it was rewritten; the rewrite is deleted"
        );
        ctx.store
            .delete(&[objects.slice_key, objects.manifest_key])
            .await?;
        ctx.db
            .supersession_unaffected(s.id, "the archive's objects expired")
            .await?;
        return Ok(Superseded::Unaffected);
    }
    fault::point("supersede-after-record");
    tracing::info!(
        supersession = s.id,
        archive = s.archive_id,
        erased = erased.len(),
        "archive slice rewritten without erased rows"
    );
    // 6. Destroy.
    destroy(ctx, s.id, &s.object_key, owner).await?;
    Ok(Superseded::Rewritten)
}

/// Deletes the slice `replaced` and its manifest, then records the supersession done.
async fn destroy(ctx: &Context, id: i64, replaced: &str, owner: &str) -> Result<()> {
    ctx.store
        .delete(&[replaced.to_owned(), manifest_for(replaced)])
        .await?;
    fault::point("supersede-after-destroy");
    ctx.db.supersession_done(id, owner).await?;
    Ok(())
}
