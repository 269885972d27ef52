//! The HTTP side, on axum: `GET /metrics`, `GET /healthz`, `GET /readyz` — exact paths (any
//! other is 404) and methods (any other is 405), at most [`MAX_CONNECTIONS`] connections open
//! (more wait in the kernel's backlog) and [`MAX_IN_FLIGHT`] requests at a time (more wait),
//! each answered within [`REQUEST_TIMEOUT`]. The database is read over a
//! connection of its own, never the one batches use, with a statement timeout. `run` serves
//! this beside its archiving; `serve-metrics` serves it alone, for databases without archive
//! policies (the database's metrics, `retention.metrics()`, are the same). With a
//! `--state-dir`, `/metrics` also renders the archive-lifecycle figures `expire` and
//! `sweep-orphans` left there (`crate::lifecycle`). `run`'s `/readyz` also proves the store
//! readable ([`StoreCheck`]).

use crate::config::Settings;
use crate::db::Db;
use crate::error::{Error, Result};
use crate::lifecycle;
use crate::metrics::{self, DbSample, Metrics, SampleKind};
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{Mutex, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

/// Requests served at once; more wait their turn.
pub const MAX_IN_FLIGHT: usize = 4;

/// Connections open at once (a scraper keeps one open); more are accepted as others close.
pub const MAX_CONNECTIONS: usize = 16;

/// A request's budget, database read included.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// The statement timeout of the metrics connection.
const STATEMENT_TIMEOUT: &str = "5s";

/// How long `/readyz` waits for the store's answer (the store's own bound is longer: a
/// readiness probe answers quickly or fails).
pub const STORE_PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// What `/readyz` reads from the store: the namespace's claim object, a known key under the
/// archiver's own `_retention/` prefix (one `head` request).
pub struct StoreCheck {
    /// The store.
    pub store: crate::store::Store,
    /// The claim's key.
    pub key: String,
    /// Set once the namespace is claimed: from then on the claim must be there.
    pub claimed: Arc<tokio::sync::OnceCell<String>>,
}

impl StoreCheck {
    /// Why the store is not ready (None: it is). Before the namespace is claimed (the store
    /// was unreachable at start and nothing has been written since), any answer proves it
    /// readable; after, the claim must be found.
    async fn not_ready(&self) -> Option<String> {
        match self.store.readable(&self.key, STORE_PROBE_TIMEOUT).await {
            Ok(true) => None,
            Ok(false) if self.claimed.initialized() => Some(format!(
                "the object store does not hold this archiver's namespace claim ({}): it is \
                 not the store archived to, or it was emptied",
                crate::keys::display(&self.key)
            )),
            Ok(false) => None,
            Err(e) => Some(format!("the object store is not readable: {e}")),
        }
    }
}

/// What the endpoints read.
pub struct Probe {
    settings: Settings,
    /// The archiver's own metrics (none in `serve-metrics`).
    metrics: Option<Arc<Metrics>>,
    /// The connection for /metrics and /readyz, opened on first use and again after a failure.
    db: Mutex<Option<Db>>,
    /// Whether the process can do its work (`run`: its batch connections are open).
    live: Box<dyn Fn() -> bool + Send + Sync>,
    /// The store `/readyz` reads (`run`; none in `serve-metrics`, which has no store).
    store: Option<StoreCheck>,
}

impl Probe {
    /// A probe for `settings`, with the archiver's `metrics`, its liveness check and the
    /// store `/readyz` reads.
    pub fn new(
        settings: Settings,
        metrics: Option<Arc<Metrics>>,
        live: Box<dyn Fn() -> bool + Send + Sync>,
        store: Option<StoreCheck>,
    ) -> Probe {
        Probe {
            settings,
            metrics,
            db: Mutex::new(None),
            live,
            store,
        }
    }

    /// Runs `read` on the metrics connection (opened when there is none); a failure closes it,
    /// so the next request connects again.
    async fn with_db<T>(
        &self,
        read: impl for<'a> FnOnce(&'a Db) -> futures::future::BoxFuture<'a, Result<T>>,
    ) -> Result<T> {
        let mut slot = self.db.lock().await;
        if slot.as_ref().is_none_or(Db::is_closed) {
            let db = Db::connect(&self.settings).await?;
            db.for_metrics(STATEMENT_TIMEOUT).await?;
            *slot = Some(db);
        }
        let db = slot
            .as_ref()
            .ok_or_else(|| Error::Refusal("no metrics connection".into()))?;
        let result = read(db).await;
        if result.is_err() {
            *slot = None;
        }
        result
    }
}

async fn metrics_endpoint(State(probe): State<Arc<Probe>>) -> impl IntoResponse {
    let mut body = probe
        .metrics
        .as_ref()
        .map(|m| m.render())
        .unwrap_or_default();
    if let Some(dir) = &probe.settings.state_dir {
        match lifecycle::read(dir) {
            Ok(state) => lifecycle::render(&mut body, &state),
            Err(e) => tracing::warn!(error = %e, "cannot read the archive lifecycle figures"),
        }
    }
    let samples = probe
        .with_db(|db| Box::pin(db.metrics()))
        .await
        .inspect_err(|e| tracing::warn!(error = %e, "cannot read retention.metrics()"));
    let reachable = samples.is_ok();
    metrics::render_database(&mut body, samples.as_deref().unwrap_or_default());
    metrics::render_database(
        &mut body,
        &[DbSample {
            name: "pg_retention_archiver_database_reachable".into(),
            labels: vec![],
            value: f64::from(u8::from(reachable)),
            help: "1 when this scrape could read retention.metrics().".into(),
            kind: SampleKind::Gauge,
        }],
    );
    metrics::finish(&mut body);
    ([(header::CONTENT_TYPE, metrics::CONTENT_TYPE)], body)
}

async fn healthz(State(probe): State<Arc<Probe>>) -> impl IntoResponse {
    if (probe.live)() {
        (StatusCode::OK, "ok\n")
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "a database connection of the archiver is lost\n",
        )
    }
}

async fn readyz(State(probe): State<Arc<Probe>>) -> impl IntoResponse {
    let ready = probe.with_db(|db| Box::pin(db.ping())).await;
    let store = match &probe.store {
        Some(check) => check.not_ready().await,
        None => None,
    };
    match ready {
        Ok(()) if (probe.live)() => match store {
            None => (StatusCode::OK, "ready\n".to_owned()),
            Some(reason) => (StatusCode::SERVICE_UNAVAILABLE, format!("{reason}\n")),
        },
        Ok(()) => (
            StatusCode::SERVICE_UNAVAILABLE,
            "a database connection of the archiver is lost\n".to_owned(),
        ),
        Err(e) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("the database is not reachable: {e}\n"),
        ),
    }
}

/// The routes.
pub fn router(probe: Arc<Probe>) -> Router {
    Router::new()
        .route("/metrics", get(metrics_endpoint))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(probe)
        .layer(tower::limit::ConcurrencyLimitLayer::new(MAX_IN_FLIGHT))
        .layer(axum::middleware::from_fn(with_timeout))
}

async fn with_timeout(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    match tokio::time::timeout(REQUEST_TIMEOUT, next.run(request)).await {
        Ok(response) => response,
        Err(_) => (StatusCode::SERVICE_UNAVAILABLE, "timed out\n").into_response(),
    }
}

/// Binds `settings.metrics_addr` (an error if it cannot).
pub async fn bind(settings: &Settings) -> Result<tokio::net::TcpListener> {
    let addr = &settings.metrics_addr;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| Error::Config(format!("cannot serve metrics on {addr}: {e}")))?;
    tracing::info!(addr = %listener.local_addr()?, "serving /metrics, /healthz and /readyz");
    Ok(listener)
}

/// A listener that accepts a connection only while fewer than [`MAX_CONNECTIONS`] are open.
struct Bounded {
    inner: tokio::net::TcpListener,
    permits: Arc<Semaphore>,
}

/// An accepted connection, holding its place until it is dropped.
struct Connection {
    stream: tokio::net::TcpStream,
    _permit: OwnedSemaphorePermit,
}

impl AsyncRead for Connection {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Connection {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

impl axum::serve::Listener for Bounded {
    type Io = Connection;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Connection, std::net::SocketAddr) {
        // The semaphore is never closed: acquiring only waits.
        let permit = match Arc::clone(&self.permits).acquire_owned().await {
            Ok(permit) => permit,
            Err(_) => std::future::pending().await,
        };
        let (stream, addr) = axum::serve::Listener::accept(&mut self.inner).await;
        (
            Connection {
                stream,
                _permit: permit,
            },
            addr,
        )
    }

    fn local_addr(&self) -> std::io::Result<std::net::SocketAddr> {
        self.inner.local_addr()
    }
}

/// Serves until `shutdown` is cancelled.
pub async fn serve(
    listener: tokio::net::TcpListener,
    probe: Arc<Probe>,
    shutdown: CancellationToken,
) -> Result<()> {
    let listener = Bounded {
        inner: listener,
        permits: Arc::new(Semaphore::new(MAX_CONNECTIONS)),
    };
    axum::serve(listener, router(probe))
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await?;
    Ok(())
}

/// `serve-metrics`: the endpoints alone, until SIGTERM or SIGINT.
pub async fn serve_metrics(settings: Settings, shutdown: CancellationToken) -> Result<()> {
    let listener = bind(&settings).await?;
    let probe = Arc::new(Probe::new(settings, None, Box::new(|| true), None));
    serve(listener, probe, shutdown).await
}
