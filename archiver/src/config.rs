//! Resolved settings: flags and environment first, then the TOML file, then the defaults below.

use crate::cli::Options;
use crate::error::{Error, Result};
use crate::redact::redact;
use crate::sse::ServerSideEncryption;
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
pub const DEFAULT_BATCH_ROWS: i32 = 20_000;
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
    /// Server-side encryption asked of an S3 store (`crate::sse`); none: the store's default
    /// (or object_store's own `AWS_SERVER_SIDE_ENCRYPTION`).
    pub s3_sse: Option<ServerSideEncryption>,
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
    /// Directory of the archive-lifecycle figures (`crate::lifecycle`); none: only logged.
    pub state_dir: Option<std::path::PathBuf>,
    /// Run on a store that ignores create-only writes (default false: refused, exit 7).
    pub allow_overwriting_store: bool,
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
                parse_file(&text).map_err(|e| Error::Config(format!("{}: {e}", path.display())))?
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
        let store = o.store.unwrap_or_else(|| DEFAULT_STORE.into());
        let s3_sse = ServerSideEncryption::resolve(
            o.s3_sse.as_deref(),
            o.s3_sse_kms_key_id.as_deref(),
            &store,
        )?;
        let batch_rows = o.batch_rows.unwrap_or(DEFAULT_BATCH_ROWS);
        if batch_rows < 1 {
            return Err(Error::Config(format!(
                "batch_rows = {batch_rows}: must be at least 1"
            )));
        }
        Ok(Settings {
            database_url,
            store,
            s3_endpoint: o.s3_endpoint,
            s3_region: o.s3_region.unwrap_or_else(|| "us-east-1".into()),
            s3_credentials,
            s3_sse,
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
            state_dir: o.state_dir,
            allow_overwriting_store: o.allow_overwriting_store.unwrap_or(false),
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

    /// The database target without its secrets.
    pub fn database_for_logs(&self) -> String {
        self.database_url
            .as_deref()
            .map(redact)
            .unwrap_or_else(|| "(none)".into())
    }

    /// The store URL without its secrets.
    pub fn store_for_logs(&self) -> String {
        redact(&self.store)
    }
}

/// The options of a TOML configuration file. A file that does not parse is reported by line,
/// column and key path only: never its text, nor the parser's message (which quotes the line,
/// or the value: a connection string, a secret key).
fn parse_file(text: &str) -> std::result::Result<Options, String> {
    toml::from_str(text).map_err(|e| {
        let (table, syntax) = toml::de::DeTable::parse_recoverable(text);
        let reason = if !syntax.is_empty() {
            "not valid TOML"
        } else if e.message().starts_with("unknown field") {
            "not an option"
        } else {
            "a value of the wrong type"
        };
        let Some(span) = e.span() else {
            return reason.to_owned();
        };
        let (line, column) = line_column(text, span.start);
        let mut path = Vec::new();
        key_path(table.get_ref(), span.start, &mut path);
        let key = match path.is_empty() {
            true => String::new(),
            false => format!(", key {}", redact(&path.join("."))),
        };
        format!("line {line}, column {column}{key}: {reason}")
    })
}

/// 1-based line and column (in characters) of byte `at` of `text`.
fn line_column(text: &str, at: usize) -> (usize, usize) {
    let before = text.get(..at.min(text.len())).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().unwrap_or("").chars().count() + 1;
    (line, column)
}

/// The keys leading to the entry of `table` at byte `at`, outermost first.
fn key_path(table: &toml::de::DeTable<'_>, at: usize, path: &mut Vec<String>) {
    for (key, value) in table {
        let (k, v) = (key.span(), value.span());
        if (k.start..=k.end).contains(&at) || (v.start..=v.end).contains(&at) {
            path.push(key.get_ref().to_string());
            if let Some(inner) = value.get_ref().as_table() {
                key_path(inner, at, path);
            }
            return;
        }
    }
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Settings")
            .field("database_url", &self.database_for_logs())
            .field("store", &self.store_for_logs())
            .field("s3_endpoint", &self.s3_endpoint.as_deref().map(redact))
            .field("s3_region", &self.s3_region)
            .field(
                "s3_credentials",
                &self.s3_credentials.as_ref().map(|_| "***"),
            )
            .field("s3_sse", &self.s3_sse)
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
            .field("state_dir", &self.state_dir)
            .field("allow_overwriting_store", &self.allow_overwriting_store)
            .finish()
    }
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
    fn server_side_encryption_is_resolved_for_s3_and_refused_elsewhere() {
        use crate::sse::SseError;
        let with = |store: Option<&str>, mode: Option<&str>, key: Option<&str>| {
            Settings::resolve(Options {
                store: store.map(Into::into),
                s3_sse: mode.map(Into::into),
                s3_sse_kms_key_id: key.map(Into::into),
                ..Default::default()
            })
        };
        let s3 = Some("s3://bucket/p");
        assert_eq!(with(s3, None, None).unwrap().s3_sse, None);
        assert_eq!(
            with(s3, Some("aes256"), None).unwrap().s3_sse,
            Some(ServerSideEncryption::Aes256)
        );
        let kms = with(s3, Some("aws:kms"), Some("alias/archives")).unwrap();
        assert_eq!(
            kms.s3_sse,
            Some(ServerSideEncryption::Kms {
                key_id: Some("alias/archives".into())
            })
        );
        // The key id is not a secret: shown, so an operator sees which key is used.
        assert!(format!("{kms:?}").contains("alias/archives"));
        // The default store is a file store: refused, and so is a file store named.
        for store in [None, Some("file:///var/lib/archive")] {
            let e = with(store, Some("aes256"), None).unwrap_err();
            assert!(matches!(e, Error::Sse(SseError::NotS3 { .. })), "{e}");
            assert_eq!(crate::exit::Exit::of(&e).code(), 2);
        }
        let e = with(s3, Some("aes256"), Some("k")).unwrap_err();
        assert!(matches!(e, Error::Sse(SseError::KeyIdWithoutKms)), "{e}");
        let e = with(s3, None, Some("k")).unwrap_err();
        assert!(matches!(e, Error::Sse(SseError::KeyIdWithoutKms)), "{e}");
        let e = with(s3, Some("des"), None).unwrap_err();
        assert!(matches!(e, Error::Sse(SseError::UnknownMode(_))), "{e}");
        // From the file, like every option.
        let file: Options = toml::from_str("store = \"s3://b\"\ns3_sse = \"aws:kms\"").unwrap();
        assert_eq!(
            Settings::resolve(file).unwrap().s3_sse,
            Some(ServerSideEncryption::Kms { key_id: None })
        );
    }

    #[test]
    fn debug_and_logs_show_no_secret_of_any_setting() {
        let o = Options {
            database_url: Some("postgres://u:pw1@h/d?password=pw2&sslmode=require".into()),
            store: Some("s3://bucket/p?secret_access_key=pw3".into()),
            s3_endpoint: Some("http://minio:pw4@127.0.0.1:9000".into()),
            s3_access_key_id: Some("pw5".into()),
            s3_secret_access_key: Some("pw6".into()),
            ..Default::default()
        };
        let s = Settings::resolve(o).unwrap();
        let shown = format!(
            "{s:?} {} {} {:?}",
            s.database_for_logs(),
            s.store_for_logs(),
            Options::default()
        );
        for secret in ["pw1", "pw2", "pw3", "pw4", "pw5", "pw6"] {
            assert!(!shown.contains(secret), "{secret} in {shown}");
        }
        assert!(shown.contains("sslmode=require"), "{shown}");
        let kv = Settings::resolve(Options {
            database_url: Some("host=h password = 'se cret' dbname=d".into()),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(kv.database_for_logs(), "host=h password = *** dbname=d");
    }

    #[test]
    fn a_bad_configuration_file_is_reported_by_line_column_and_key_only() {
        let cases = [
            (
                "store = \"memory://\"\ndatabase_url = 42\n",
                "line 2, column 16, key database_url: a value of the wrong type",
            ),
            (
                "batch_rows = \"postgres://u:pw@h/d?password=hunter2\"\n",
                "line 1, column 14, key batch_rows: a value of the wrong type",
            ),
            (
                "database_url = \"postgres://u:pw@h/d?password=hunter2\"\nbatch_rows = \"x\"",
                "line 2, column 14, key batch_rows: a value of the wrong type",
            ),
            (
                "password = \"hunter2\"\n",
                "line 1, column 1, key password: not an option",
            ),
            (
                "database_url = \"postgres://u:hunter2@h/d\n",
                "not valid TOML",
            ),
        ];
        for (text, want) in cases {
            let got = parse_file(text).map(|_| ()).unwrap_err();
            if want.starts_with("line ") {
                assert_eq!(got, want, "{text}");
            } else {
                assert!(got.ends_with(want), "{got}");
            }
            for leak in ["hunter2", "pw@", "42", "memory"] {
                assert!(!got.contains(leak), "{leak} in {got:?}");
            }
        }
        assert!(parse_file("batch_rows = 3\nlease = \"1m\"").is_ok());
    }
}
