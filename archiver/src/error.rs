//! The archiver's one error type (`crate::exit` maps each to an exit code).

use crate::keys::display;
use crate::redact::redact;

/// Result with [`Error`] as the default error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What can go wrong.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Bad flags, environment or configuration file. Shown redacted: a message that quotes a
    /// connection string or a store URL never shows its secrets.
    #[error("configuration: {}", redact(.0))]
    Config(String),
    /// Server-side encryption options that cannot be used as given (a configuration error).
    #[error("configuration: {0}")]
    Sse(#[from] crate::sse::SseError),
    /// The database refused or failed.
    #[error("database: {}", db_message(.0))]
    Db(#[from] tokio_postgres::Error),
    /// The object store failed (after its retries). Shown redacted (its messages may quote an
    /// endpoint URL).
    #[error("object store: {}", redact(&.0.to_string()))]
    Store(#[from] object_store::Error),
    /// An object-store operation did not finish within its bound (`crate::store`: the request
    /// timeout on `file://` and `memory://`, request timeout plus retry budget on HTTP stores).
    #[error("object store: {operation} did not finish within {}", humantime::format_duration(*.after))]
    StoreTimeout {
        /// The operation (get, head, put, list, delete).
        operation: &'static str,
        /// Its bound.
        after: std::time::Duration,
    },
    /// The start-up probe found that the store accepts a second create-only write of the same
    /// key: it ignores `If-None-Match: *`, so create-only cannot be trusted there.
    #[error(
        "the object store ignores create-only writes: a second create of the probe key {} was \
         accepted; refusing to archive there (--allow-overwriting-store runs anyway, relying on \
         the look before each write and the read-back verification)",
        display(.key)
    )]
    StoreNotCreateOnly {
        /// The probe key (under `_retention/probes/`).
        key: String,
    },
    /// An object at a batch's key holds other bytes than the batch's.
    #[error("foreign occupant at {}: {reason}", display(.key))]
    ForeignOccupant { key: String, reason: String },
    /// An object read back does not match what was written or what the manifest says.
    #[error("verification failed for {}: {reason}", display(.key))]
    Verify { key: String, reason: String },
    /// The extension refused to prune a batch.
    #[error("batch {batch} refused: {reason}")]
    Refused { batch: String, reason: String },
    /// The slice asked for was superseded: an erasure rewrote it without the erased rows.
    #[error("{} is superseded by {}: an erasure rewrote it without the erased rows; use the rewrite", display(.key), display(.by))]
    Superseded { key: String, by: String },
    /// A manifest (untrusted bytes) that `restore` will not act on: its column names or types
    /// are not usable.
    #[error("{0}")]
    Manifest(String),
    /// A manifest column whose type is a domain, a composite or a range (or an array of one):
    /// loading rows through it would run SQL-level code (a domain's CHECK) as the restoring role.
    #[error(
        "manifest column {column:?} has type {type_name:?}, which is not built into PostgreSQL: \
         restoring through it would run that type's code (a domain's CHECK, its input function) \
         as you; pass --untyped-as-text to restore such columns as text"
    )]
    UntrustedType { column: String, type_name: String },
    /// A restore target already has rows, or another operator-facing refusal.
    #[error("{0}")]
    Refusal(String),
    /// Local I/O.
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    /// Decoding a slice or manifest.
    #[error("format: {0}")]
    Format(#[from] pg_retention_format::FormatError),
    /// JSON.
    #[error("json: {0}")]
    Json(#[from] serde_json::Error),
    /// The database answered with a state the protocol does not know (an extension of another
    /// version than this archiver's).
    #[error("database: {what} {value:?} is not one this archiver knows")]
    Protocol {
        /// What was answered.
        what: &'static str,
        /// The text.
        value: String,
    },
    /// This database's archive namespace is claimed in the store by another database (or
    /// another cluster): writing, sweeping or expiring there could touch its objects.
    #[error(
        "archive namespace {namespace:?} is claimed by {by} in this store (_retention/namespaces/); \
         this database is {me}: set another namespace with retention.set_archive_namespace()"
    )]
    NamespaceClaimed {
        namespace: String,
        by: String,
        me: String,
    },
}

impl From<crate::keys::UnreadableKey> for Error {
    fn from(e: crate::keys::UnreadableKey) -> Self {
        Error::Config(e.to_string())
    }
}

/// The server's message, SQLSTATE and detail when there is one ("db error" alone says nothing).
fn db_message(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(d) => {
            let mut m = format!("{} (SQLSTATE {})", d.message(), d.code().code());
            if let Some(detail) = d.detail().filter(|s| !s.is_empty()) {
                m.push_str(": ");
                m.push_str(detail);
            }
            m
        }
        // tokio-postgres keeps the cause (a TLS handshake's "invalid peer certificate:
        // UnknownIssuer", a refused connection) out of its own message.
        None => {
            let mut m = e.to_string();
            let mut cause = std::error::Error::source(e);
            while let Some(c) = cause {
                m.push_str(": ");
                m.push_str(&c.to_string());
                cause = c.source();
            }
            m
        }
    }
}
