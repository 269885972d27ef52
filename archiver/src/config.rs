//! Resolved settings: flags and environment first, then the TOML file, then the defaults below.

use crate::cli::Options;
use crate::error::{Error, Result};
use std::time::Duration;

/// Default object-store request timeout.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Default connect timeout (object store and database).
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Default retries per object-store request.
pub const DEFAULT_MAX_RETRIES: usize = 3;
/// Default retry budget per object-store request.
pub const DEFAULT_RETRY_TIMEOUT: Duration = Duration::from_secs(60);
/// Default rows per batch.
pub const DEFAULT_BATCH_ROWS: i32 = 10_000;
/// Default lease of a claimed batch.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(600);
/// Default pause of `run` when idle.
pub const DEFAULT_IDLE_SLEEP: Duration = Duration::from_secs(30);
/// Default store: a local directory.
pub const DEFAULT_STORE: &str = "file://./archive";
/// Default metrics address (loopback only).
pub const DEFAULT_METRICS_ADDR: &str = "127.0.0.1:9187";

/// Everything the archiver runs with. Its `Debug` redacts the credentials.
#[derive(Clone)]
pub struct Settings {
    /// Database connection string (may hold a password: never log it as is).
    pub database_url: Option<String>,
    /// Store URL.
    pub store: String,
    /// S3 endpoint override.
    pub s3_endpoint: Option<String>,
    /// S3 region.
    pub s3_region: String,
    /// S3 credentials (access key id, secret).
    pub s3_credentials: Option<(String, String)>,
    /// Per-request timeout.
    pub request_timeout: Duration,
    /// Connect timeout.
    pub connect_timeout: Duration,
    /// Retries per request.
    pub max_retries: usize,
    /// Retry budget per request.
    pub retry_timeout: Duration,
    /// Claim owner name.
    pub owner: String,
    /// Policies to archive (empty: all).
    pub policies: Vec<String>,
    /// Rows per batch.
    pub batch_rows: i32,
    /// Lease of a batch.
    pub lease: Duration,
    /// Idle pause of `run`.
    pub idle_sleep: Duration,
    /// /metrics and /healthz address.
    pub metrics_addr: String,
    /// Emit JSON logs.
    pub json_logs: bool,
}

fn duration(name: &str, value: Option<String>, default: Duration) -> Result<Duration> {
    match value {
        None => Ok(default),
        Some(v) => {
            humantime::parse_duration(&v).map_err(|e| Error::Config(format!("{name} = {v:?}: {e}")))
        }
    }
}

fn host_name() -> String {
    std::fs::read_to_string("/etc/hostname")
        .ok()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "archiver".into())
}

impl Settings {
    /// Resolves flags/environment (`given`) over the TOML file it names, over the defaults.
    pub fn resolve(given: Options) -> Result<Settings> {
        let file = match &given.config {
            None => Options::default(),
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| Error::Config(format!("cannot read {}: {e}", path.display())))?;
                toml::from_str(&text)
                    .map_err(|e| Error::Config(format!("{}: {e}", path.display())))?
            }
        };
        let o = given.or(file);
        let database_url = o.database_url;
        let s3_credentials = match (o.s3_access_key_id, o.s3_secret_access_key) {
            (Some(k), Some(s)) => Some((k, s)),
            (None, None) => None,
            _ => {
                return Err(Error::Config(
                    "give both the S3 access key id and the secret, or neither".into(),
                ))
            }
        };
        let json_logs = match o.log_format.as_deref() {
            None | Some("human") => false,
            Some("json") => true,
            Some(other) => {
                return Err(Error::Config(format!(
                    "log format {other:?}: use human or json"
                )))
            }
        };
        let batch_rows = o.batch_rows.unwrap_or(DEFAULT_BATCH_ROWS);
        if batch_rows < 1 {
            return Err(Error::Config(format!(
                "batch_rows = {batch_rows}: must be at least 1"
            )));
        }
        Ok(Settings {
            database_url,
            store: o.store.unwrap_or_else(|| DEFAULT_STORE.into()),
            s3_endpoint: o.s3_endpoint,
            s3_region: o.s3_region.unwrap_or_else(|| "us-east-1".into()),
            s3_credentials,
            request_timeout: duration(
                "request_timeout",
                o.request_timeout,
                DEFAULT_REQUEST_TIMEOUT,
            )?,
            connect_timeout: duration(
                "connect_timeout",
                o.connect_timeout,
                DEFAULT_CONNECT_TIMEOUT,
            )?,
            max_retries: o.max_retries.unwrap_or(DEFAULT_MAX_RETRIES),
            retry_timeout: duration("retry_timeout", o.retry_timeout, DEFAULT_RETRY_TIMEOUT)?,
            owner: o.owner.unwrap_or_else(host_name),
            policies: o
                .policies
                .map(|p| {
                    p.split(',')
                        .map(|s| s.trim().to_owned())
                        .filter(|s| !s.is_empty())
                        .collect()
                })
                .unwrap_or_default(),
            batch_rows,
            lease: duration("lease", o.lease, DEFAULT_LEASE)?,
            idle_sleep: duration("idle_sleep", o.idle_sleep, DEFAULT_IDLE_SLEEP)?,
            metrics_addr: o
                .metrics_addr
                .unwrap_or_else(|| DEFAULT_METRICS_ADDR.into()),
            json_logs,
        })
    }

    /// The database connection string; commands that talk to the database need one.
    pub fn database(&self) -> Result<&str> {
        self.database_url.as_deref().ok_or_else(|| {
            Error::Config(
                "no database: pass --database-url or set PG_RETENTION_DATABASE_URL".into(),
            )
        })
    }

    /// The database target without its password.
    pub fn database_for_logs(&self) -> String {
        self.database_url
            .as_deref()
            .map(redact)
            .unwrap_or_else(|| "(none)".into())
    }
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Settings")
            .field("database_url", &self.database_for_logs())
            .field("store", &self.store)
            .field("s3_endpoint", &self.s3_endpoint)
            .field("s3_region", &self.s3_region)
            .field(
                "s3_credentials",
                &self.s3_credentials.as_ref().map(|_| "***"),
            )
            .field("request_timeout", &self.request_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("max_retries", &self.max_retries)
            .field("retry_timeout", &self.retry_timeout)
            .field("owner", &self.owner)
            .field("policies", &self.policies)
            .field("batch_rows", &self.batch_rows)
            .field("lease", &self.lease)
            .field("idle_sleep", &self.idle_sleep)
            .field("metrics_addr", &self.metrics_addr)
            .field("json_logs", &self.json_logs)
            .finish()
    }
}

/// Hides passwords in a connection string (key-value `password=...` or URL user info).
pub fn redact(conn: &str) -> String {
    if let Ok(mut url) = url::Url::parse(conn) {
        if url.password().is_some() {
            let _ = url.set_password(Some("***"));
        }
        return url.to_string();
    }
    conn.split_whitespace()
        .map(|kv| {
            if kv.starts_with("password=") {
                "password=***"
            } else {
                kv
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_beat_file_beat_defaults() {
        let flags = Options {
            database_url: Some("host=/s dbname=a".into()),
            batch_rows: Some(7),
            ..Default::default()
        };
        let file: Options =
            toml::from_str("batch_rows = 99\nlease = \"2m\"\nstore = \"memory://\"").unwrap();
        let s = Settings::resolve(flags.or(file)).unwrap();
        assert_eq!(s.batch_rows, 7);
        assert_eq!(s.lease, Duration::from_secs(120));
        assert_eq!(s.store, "memory://");
        assert_eq!(s.request_timeout, DEFAULT_REQUEST_TIMEOUT);
    }

    #[test]
    fn bad_values_are_refused() {
        let o = |f: fn(&mut Options)| {
            let mut o = Options {
                database_url: Some("x".into()),
                ..Default::default()
            };
            f(&mut o);
            Settings::resolve(o)
        };
        assert!(o(|o| o.lease = Some("soon".into())).is_err());
        assert!(o(|o| o.batch_rows = Some(0)).is_err());
        assert!(o(|o| o.log_format = Some("xml".into())).is_err());
        assert!(o(|o| o.s3_access_key_id = Some("k".into())).is_err());
        assert!(
            Settings::resolve(Options::default())
                .unwrap()
                .database()
                .is_err(),
            "no database given"
        );
        assert!(toml::from_str::<Options>("no_such_option = 1").is_err());
    }

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(
            redact("host=h user=u password=secret dbname=d"),
            "host=h user=u password=*** dbname=d"
        );
        assert_eq!(redact("postgres://u:secret@h/d"), "postgres://u:***@h/d");
    }
}
