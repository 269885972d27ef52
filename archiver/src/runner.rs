//! `run` and `once`: the archive loops and graceful shutdown (`run` serves `http.rs` beside).

use crate::config::Settings;
use crate::db::Db;
use crate::error::{Error, Result};
use crate::metrics::Metrics;
use crate::pipeline::{advance, drain, Context, Flight, Unwritten};
use crate::store::Store;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

async fn context(settings: Settings) -> Result<Context> {
    tracing::info!(
        store = %settings.store_for_logs(),
        database = %settings.database_for_logs(),
        owner = %settings.owner,
        request_timeout = ?settings.request_timeout,
        connect_timeout = ?settings.connect_timeout,
        max_retries = settings.max_retries,
        retry_budget = ?settings.retry_timeout,
        server_side_encryption = %settings
            .s3_sse
            .as_ref()
            .map_or_else(|| "the store's default".to_owned(), ToString::to_string),
        batch_rows = settings.batch_rows,
        lease = ?settings.lease,
        "pg-retention-archiver starting"
    );
    let store = Store::open(&settings)?;
    let db = Arc::new(Db::connect(&settings).await?);
    let prune_db = Arc::new(Db::connect(&settings).await?);
    let namespace = crate::namespace::read(&db).await?;
    let ctx = Context {
        settings,
        db,
        prune_db,
        store,
        namespace,
        claimed: Arc::default(),
        metrics: Arc::new(Metrics::default()),
    };
    // At once: a store that ignores create-only writes, or another database's namespace, is
    // refused before anything is claimed. A store that cannot be reached now is tried again
    // before the first write (`pipeline::write`), where failing releases the batch as any
    // failed write does.
    match crate::trust::prepare(&ctx).await {
        Ok(_) => {}
        Err(e @ (Error::NamespaceClaimed { .. } | Error::StoreNotCreateOnly { .. })) => {
            return Err(e)
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot probe the store or claim the archive namespace yet; trying again before the first write")
        }
    }
    Ok(ctx)
}

async fn policies(ctx: &Context) -> Result<Vec<String>> {
    let all = ctx.db.archive_policies().await?;
    Ok(if ctx.settings.policies.is_empty() {
        all
    } else {
        all.into_iter()
            .filter(|p| ctx.settings.policies.contains(p))
            .collect()
    })
}

/// What one pass over the archive policies did.
#[derive(Default)]
struct Pass {
    /// Some policy's turn ended on a claim that said there may be more (`Claimed::more`): its
    /// turn ran out, or a failure ended it. A turn whose last claim caught up needs no further
    /// pass: claiming again at once would come back empty.
    progressed: bool,
    /// Batches pruned.
    pruned: u64,
    /// Batches claimed (the last one may still be in flight).
    claimed: u64,
    /// The policies could not be listed.
    listing: Option<Error>,
    /// Batches that failed or were refused (each already released), in order.
    failures: Vec<Error>,
    /// `go_on` said stop before the pass was over.
    stopped: bool,
    /// Supersessions finished before claiming.
    superseded: crate::supersede::Done,
}

/// One pass: first the open supersessions (an erasure outranks archiving more), then each
/// policy in turn claims batches, for as long as it has more and at most [`TURN`], while the
/// batches in flight (of whichever policy) are written and pruned.
/// `go_on` is asked before each policy with the batches claimed so far; with `stop_at_failure`
/// the pass ends at the first failure.
async fn pass(
    ctx: &Context,
    flight: &mut Flight,
    mut go_on: impl FnMut(u64) -> bool,
    stop_at_failure: bool,
) -> Pass {
    let mut p = Pass::default();
    match crate::supersede::pass(ctx).await {
        Ok(done) => p.superseded = done,
        Err(e) => {
            p.failures.push(e);
            if stop_at_failure {
                return p;
            }
        }
    }
    let list = match policies(ctx).await {
        Ok(list) => list,
        Err(e) => {
            p.listing = Some(e);
            return p;
        }
    };
    'policies: for policy in list {
        let turn = Instant::now();
        // A two-window policy's archived rows past its delete_after go first.
        match ctx.db.prune_archived(&policy).await {
            Ok(0) => {}
            Ok(rows) => {
                tracing::info!(policy = %policy, rows, "deleted archived rows past delete_after")
            }
            Err(e) => {
                p.failures.push(e);
                if stop_at_failure {
                    break 'policies;
                }
            }
        }
        loop {
            if !go_on(p.claimed) {
                p.stopped = true;
                break 'policies;
            }
            let failures_before = p.failures.len();
            let step = advance(ctx, flight, &policy).await;
            match step.pruned {
                Some(Ok(_)) => p.pruned += 1,
                Some(Err(e)) => p.failures.push(e),
                None => {}
            }
            p.failures.extend(step.unwritten);
            let more = match step.claimed {
                Ok(Some(more)) => {
                    p.claimed += 1;
                    more
                }
                Ok(None) => false,
                Err(e) => {
                    p.failures.push(e);
                    false
                }
            };
            if stop_at_failure && !p.failures.is_empty() {
                break 'policies;
            }
            // A policy keeps its turn while it has more and its turn lasts: the pass's own
            // reads (supersessions, the policy list) then run once per turn, not per batch.
            if !more || p.failures.len() > failures_before || turn.elapsed() >= TURN {
                p.progressed |= more;
                break;
            }
        }
    }
    p
}

/// How long a policy with more to archive keeps claiming before the pass goes on: bounds how
/// long an erasure's supersession and the other policies wait for a busy one.
const TURN: Duration = Duration::from_secs(1);

/// Archives until a pass over the policies ends every policy's turn on a claim that caught up
/// (it came back short of a table's last leaf, or empty: it took the last eligible rows) or
/// `max_batches` batches are done: no further pass only to find nothing to claim. Stops at the
/// first batch that fails or is refused (after releasing it) and returns its error; a batch
/// already verified by then is still pruned first, one claimed and not yet written is released.
pub async fn once(settings: Settings, max_batches: Option<u64>) -> Result<u64> {
    let ctx = context(settings).await?;
    let mut done = 0u64;
    let mut started = 0u64;
    let mut rewritten = 0u64;
    let mut flight = Flight::default();
    let mut first_error: Option<Error> = loop {
        let p = pass(
            &ctx,
            &mut flight,
            |claimed| max_batches.is_none_or(|m| started + claimed < m),
            true,
        )
        .await;
        done += p.pruned;
        started += p.claimed;
        rewritten += p.superseded.rewritten;
        let failure = p.listing.or_else(|| p.failures.into_iter().next());
        if failure.is_some() || p.stopped || !p.progressed {
            break failure;
        }
    };
    let unwritten = if first_error.is_some() {
        Unwritten::Release
    } else {
        Unwritten::Finish
    };
    let (pruned, failures) = drain(&ctx, &mut flight, unwritten).await;
    done += pruned;
    if let Some(e) = failures.into_iter().next() {
        first_error.get_or_insert(e);
    }
    if let Some(e) = first_error {
        return Err(e);
    }
    tracing::info!(
        batches = done,
        slices_rewritten = rewritten,
        "nothing more to archive"
    );
    Ok(done)
}

/// Counts and logs a failed batch of `run` (it is retried by a later pass).
fn retried(ctx: &Context, e: &Error) {
    ctx.metrics.batch_retries.inc();
    tracing::error!(error = %e, "batch failed; it will be retried");
}

/// Archives forever, until `shutdown` is cancelled. The batch in progress is always finished
/// (or released) before stopping.
pub async fn run(settings: Settings, shutdown: CancellationToken) -> Result<()> {
    let idle = settings.idle_sleep;
    let listener = crate::http::bind(&settings).await?;
    let ctx = Arc::new(context(settings).await?);
    let live = {
        let (db, prune_db) = (Arc::clone(&ctx.db), Arc::clone(&ctx.prune_db));
        Box::new(move || !db.is_closed() && !prune_db.is_closed())
    };
    let store = crate::http::StoreCheck {
        store: ctx.store.clone(),
        key: crate::namespace::claim_key(&ctx.namespace.namespace),
        claimed: Arc::clone(&ctx.claimed),
    };
    let probe = crate::http::Probe::new(
        ctx.settings.clone(),
        Some(Arc::clone(&ctx.metrics)),
        live,
        Some(store),
    );
    let server = tokio::spawn(crate::http::serve(
        listener,
        Arc::new(probe),
        shutdown.clone(),
    ));
    let mut failures = 0u32;
    let mut flight = Flight::default();
    while !shutdown.is_cancelled() {
        let mut p = pass(&ctx, &mut flight, |_| !shutdown.is_cancelled(), false).await;
        let progressed = p.progressed;
        let mut failed = p.listing.is_some() || !p.failures.is_empty();
        if let Some(e) = &p.listing {
            tracing::error!(error = %e, "cannot list archive policies");
        }
        for e in &p.failures {
            retried(&ctx, e);
        }
        // Found only now (the store was unreachable at start): not a batch to retry.
        if let Some(i) = p
            .failures
            .iter()
            .position(|e| matches!(e, Error::StoreNotCreateOnly { .. }))
        {
            let _ = drain(&ctx, &mut flight, Unwritten::Release).await;
            server.abort();
            return Err(p.failures.swap_remove(i));
        }
        // Nothing is left half done while we wait: the batches in flight are pruned now.
        if !progressed || failed || shutdown.is_cancelled() {
            let unwritten = if failed {
                Unwritten::Release
            } else {
                Unwritten::Finish
            };
            let (_, failures) = drain(&ctx, &mut flight, unwritten).await;
            for e in &failures {
                failed = true;
                retried(&ctx, e);
            }
        }
        if ctx.db.is_closed() || ctx.prune_db.is_closed() {
            return Err(Error::Refusal(
                "the database connection is gone; exiting so a supervisor restarts us".into(),
            ));
        }
        let pause = if failed {
            failures += 1;
            Duration::from_secs(1u64 << failures.min(5)).min(idle.max(Duration::from_secs(1)))
        } else {
            failures = 0;
            if progressed {
                Duration::ZERO
            } else {
                idle
            }
        };
        tokio::select! {
            _ = shutdown.cancelled() => {}
            _ = tokio::time::sleep(pause) => {}
        }
    }
    tracing::info!("shutting down: no batch in progress");
    server.abort();
    Ok(())
}
