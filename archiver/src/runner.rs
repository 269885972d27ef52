//! `run` and `once`: the archive loops, graceful shutdown, and the metrics endpoint.

use crate::config::Settings;
use crate::db::Db;
use crate::error::{Error, Result};
use crate::metrics::Metrics;
use crate::pipeline::{finish, overlapped, Context, Verified};
use crate::store::Store;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

async fn context(settings: Settings) -> Result<Context> {
    tracing::info!(
        store = %settings.store,
        database = %settings.database_for_logs(),
        owner = %settings.owner,
        request_timeout = ?settings.request_timeout,
        connect_timeout = ?settings.connect_timeout,
        max_retries = settings.max_retries,
        retry_budget = ?settings.retry_timeout,
        batch_rows = settings.batch_rows,
        lease = ?settings.lease,
        "pg-retention-archiver starting"
    );
    let store = Store::open(&settings)?;
    let db = Arc::new(Db::connect(&settings).await?);
    let prune_db = Arc::new(Db::connect(&settings).await?);
    Ok(Context {
        settings,
        db,
        prune_db,
        store,
        metrics: Arc::new(Metrics::default()),
    })
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
    /// Some claim said there may be more (`Verified::more`).
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
    superseded: crate::supersede::Superseded,
}

/// One pass: first the open supersessions (an erasure outranks archiving more), then each
/// policy claims its next batch while the batch in flight (of whichever policy) is pruned.
/// `go_on` is asked before each policy with the batches claimed so far; with `stop_at_failure`
/// the pass ends at the first failure.
async fn pass(
    ctx: &Context,
    in_flight: &mut Option<Verified>,
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
    for policy in list {
        if !go_on(p.claimed) {
            p.stopped = true;
            break;
        }
        let (pruned, next) = overlapped(ctx, in_flight.take(), &policy).await;
        match pruned {
            Some(Ok(_)) => p.pruned += 1,
            Some(Err(e)) => p.failures.push(e),
            None => {}
        }
        match next {
            Ok(Some(v)) => {
                p.claimed += 1;
                p.progressed |= v.more;
                *in_flight = Some(v);
            }
            Ok(None) => {}
            Err(e) => p.failures.push(e),
        }
        if stop_at_failure && !p.failures.is_empty() {
            break;
        }
    }
    p
}

/// Archives until a pass over the policies claims no batch that says there may be more (every
/// claim came back short of a table's last leaf, or empty: it caught up with the eligible rows) or `max_batches` batches are done. Stops at the
/// first batch that fails or is refused (after releasing it) and returns its error; a batch
/// already verified by then is still pruned first.
pub async fn once(settings: Settings, max_batches: Option<u64>) -> Result<u64> {
    let ctx = context(settings).await?;
    let mut done = 0u64;
    let mut started = 0u64;
    let mut rewritten = 0u64;
    let mut in_flight: Option<Verified> = None;
    let mut first_error: Option<Error> = loop {
        let p = pass(
            &ctx,
            &mut in_flight,
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
    if let Some(v) = in_flight.take() {
        match finish(&ctx, v).await {
            Ok(_) => done += 1,
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
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
    ctx.metrics
        .add("pg_retention_archiver_batch_retries_total", &[], 1.0);
    tracing::error!(error = %e, "batch failed; it will be retried");
}

/// Archives forever, until `shutdown` is cancelled. The batch in progress is always finished
/// (or released) before stopping.
pub async fn run(settings: Settings, shutdown: CancellationToken) -> Result<()> {
    let idle = settings.idle_sleep;
    let addr = settings.metrics_addr.clone();
    let ctx = Arc::new(context(settings).await?);
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .map_err(|e| Error::Config(format!("cannot serve metrics on {addr}: {e}")))?;
    tracing::info!(addr = %listener.local_addr()?, "serving /metrics and /healthz");
    let server = tokio::spawn(serve(listener, Arc::clone(&ctx), shutdown.clone()));
    let mut failures = 0u32;
    let mut in_flight: Option<Verified> = None;
    while !shutdown.is_cancelled() {
        let p = pass(&ctx, &mut in_flight, |_| !shutdown.is_cancelled(), false).await;
        let progressed = p.progressed;
        let mut failed = p.listing.is_some() || !p.failures.is_empty();
        if let Some(e) = &p.listing {
            tracing::error!(error = %e, "cannot list archive policies");
        }
        for e in &p.failures {
            retried(&ctx, e);
        }
        // Nothing is left half done while we wait: the verified batch is pruned now.
        if !progressed || failed || shutdown.is_cancelled() {
            if let Some(v) = in_flight.take() {
                if let Err(e) = finish(&ctx, v).await {
                    failed = true;
                    retried(&ctx, &e);
                }
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

/// A minimal HTTP/1.1 responder: GET /metrics and GET /healthz, one request per connection.
async fn serve(listener: tokio::net::TcpListener, ctx: Arc<Context>, shutdown: CancellationToken) {
    loop {
        let accepted = tokio::select! {
            _ = shutdown.cancelled() => return,
            a = listener.accept() => a,
        };
        let Ok((mut socket, _)) = accepted else {
            continue;
        };
        let ctx = Arc::clone(&ctx);
        tokio::spawn(async move {
            let Ok(Some(head)) =
                tokio::time::timeout(Duration::from_secs(5), read_head(&mut socket)).await
            else {
                return;
            };
            let request = String::from_utf8_lossy(&head);
            let path = request.split_whitespace().nth(1).unwrap_or("/");
            let (status, body) = match path {
                "/metrics" => ("200 OK", metrics_text(&ctx).await),
                "/healthz" if !ctx.db.is_closed() && !ctx.prune_db.is_closed() => {
                    ("200 OK", "ok\n".to_owned())
                }
                "/healthz" => (
                    "503 Service Unavailable",
                    "database connection lost\n".to_owned(),
                ),
                _ => ("404 Not Found", "not found\n".to_owned()),
            };
            let response = format!(
                "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = socket.write_all(response.as_bytes()).await;
        });
    }
}

/// Reads a request up to the end of its headers. A client may send them in several segments;
/// answering after the first one and closing would reset the connection under the client's
/// next write. None when the peer closes first or the head exceeds 8 KiB.
async fn read_head(socket: &mut tokio::net::TcpStream) -> Option<Vec<u8>> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = socket.read(&mut buf).await.ok()?;
        if n == 0 || head.len() + n > 8192 {
            return None;
        }
        head.extend_from_slice(&buf[..n]);
    }
    Some(head)
}

async fn metrics_text(ctx: &Context) -> String {
    let mut extra = Vec::new();
    match ctx.db.extension_figures().await {
        Ok(rows) => {
            for (policy, pruned, batches, backlog, healthy) in rows {
                let l = || vec![("policy", policy.clone())];
                extra.push(("pg_retention_policy_rows_pruned_total", l(), pruned as f64));
                extra.push(("pg_retention_policy_batches_total", l(), batches as f64));
                extra.push((
                    "pg_retention_policy_backlog_rows",
                    l(),
                    backlog.unwrap_or(0) as f64,
                ));
                extra.push((
                    "pg_retention_policy_healthy",
                    l(),
                    if healthy { 1.0 } else { 0.0 },
                ));
            }
        }
        Err(e) => tracing::warn!(error = %e, "cannot read retention.stats for /metrics"),
    }
    ctx.metrics.render(&extra)
}
