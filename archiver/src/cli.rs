//! Command-line surface of the archiver. Every option can also come from a `PG_RETENTION_*`
//! environment variable or the TOML file given with `--config`, in that order of precedence.

use clap::{Args, Parser, Subcommand};
use serde::Deserialize;
use std::path::PathBuf;

/// Archiver sidecar for pg_retention.
///
/// Claims batches of archive-eligible rows from the extension, writes each as a slice plus a
/// manifest to object storage (create-only), reads both back and checks their BLAKE3, and only
/// then asks the extension to delete exactly the rows it archived.
#[derive(Debug, Parser)]
#[command(name = "pg-retention-archiver", version, about, long_about)]
pub struct Cli {
    /// Options shared by every command.
    #[command(flatten)]
    pub options: Options,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Archive forever: claim, write, verify, prune; sleep when nothing is eligible.
    Run,
    /// Archive until nothing is eligible (or --max-batches), then exit.
    Once {
        /// Stop after this many batches.
        #[arg(long)]
        max_batches: Option<u64>,
    },
    /// Serve /metrics, /healthz and /readyz only (the database's metrics, for databases
    /// without archive policies); no archiving.
    ServeMetrics,
    /// List the archive slices in the store.
    Ls,
    /// Print the manifest of a slice, by object key or batch id.
    Inspect {
        /// A slice or manifest key, or a batch id.
        target: String,
    },
    /// Re-read slices and check them against their manifests and retention.archives.
    Verify {
        /// Every slice in the store.
        #[arg(long, conflicts_with = "key")]
        all: bool,
        /// One slice key (as ls prints it), or manifest key.
        key: Option<String>,
    },
    /// Expire archives past their policy's archive_keep: plan, prepare, apply, status.
    Expire {
        /// Bounds of one operation (plan records them; apply keeps to them).
        #[command(flatten)]
        bounds: ExpireBounds,
        /// Who runs it, for the ledger (default: the archiver's owner name).
        #[arg(long, global = true)]
        actor: Option<String>,
        /// The step.
        #[command(subcommand)]
        step: ExpireStep,
    },
    /// List objects under the store prefix that nothing references (no archive record, no live
    /// batch) and that are older than --older-than; with --apply, delete exactly those.
    SweepOrphans {
        /// Only objects last modified at least this long ago (e.g. 7d, 12h).
        #[arg(long)]
        older_than: String,
        /// Delete the listed objects (re-checked against the catalog first) and ledger it;
        /// without it, only report.
        #[arg(long)]
        apply: bool,
    },
    /// Load one slice into a fresh table with the source's column types (those built into
    /// PostgreSQL; a manifest naming any other type is refused unless --untyped-as-text).
    Restore {
        /// The slice key (as ls prints it; or manifest key, or batch id).
        key: String,
        /// Target table, `schema.table`; created when missing, refused when not empty.
        #[arg(long)]
        into: String,
        /// Restore the columns whose type is not built into PostgreSQL (a domain, an
        /// extension's or a user's type, or one this database does not know) as `text` holding
        /// the archived text form, instead of refusing: loading through such a type would run
        /// its code as you.
        #[arg(long)]
        untyped_as_text: bool,
    },
}

/// The steps of an expire operation.
#[derive(Debug, Subcommand)]
pub enum ExpireStep {
    /// Dry run, zero store writes: the archives past archive_keep, their keys, counts, bytes and
    /// inventory digests, written to a new file (mode 0600); prints its SHA-256 last.
    Plan {
        /// The plan file to create (an existing path is refused).
        #[arg(long)]
        output: PathBuf,
    },
    /// Write the operation's create-only tombstone and ledger it; prints the operation id last.
    Prepare {
        /// The plan file.
        #[arg(long)]
        plan: PathBuf,
        /// Its SHA-256 (what `sha256sum` prints), binding the operation to its bytes.
        #[arg(long)]
        plan_sha256: String,
        /// How long after prepare apply refuses (not_ready).
        #[arg(long, default_value = "15m")]
        quiescence: String,
    },
    /// After the quiescence interval: recheck, delete exactly the planned keys, prove them gone.
    Apply {
        /// The id prepare printed.
        #[arg(long)]
        operation_id: String,
        /// The plan's SHA-256.
        #[arg(long)]
        plan_sha256: String,
    },
    /// The operation as the ledger and its tombstone show it.
    Status {
        /// The id prepare printed.
        #[arg(long)]
        operation_id: String,
    },
}

/// Bounds of one expire operation.
#[derive(Debug, Clone, Args)]
pub struct ExpireBounds {
    /// Objects one operation deletes at most.
    #[arg(long, global = true, default_value_t = 100_000)]
    pub max_objects: u64,
    /// Bytes one operation deletes at most (default 10 GiB).
    #[arg(long, global = true, default_value_t = 10 * 1024 * 1024 * 1024)]
    pub max_bytes: u64,
    /// Keys per delete request, 1 to 1000.
    #[arg(long, global = true, default_value_t = 1000)]
    pub keys_per_request: usize,
    /// How long one apply may work (default 15m; quiescence not counted).
    #[arg(long, global = true, default_value = "15m")]
    pub max_active_time: String,
}

/// Options; `None` means "not given here" so the next source can supply it. Its `Debug` shows
/// no value: it holds credentials (`Settings`'s `Debug` shows the rest, redacted).
#[derive(Default, Clone, Args, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Options {
    /// TOML file with any of these options (names with underscores).
    #[arg(long, global = true, env = "PG_RETENTION_CONFIG")]
    #[serde(skip)]
    pub config: Option<PathBuf>,
    /// Database connection, any form tokio-postgres accepts (URL or `host=... dbname=...`).
    /// May hold a password: its environment value is never shown.
    #[arg(
        long,
        global = true,
        env = "PG_RETENTION_DATABASE_URL",
        hide_env_values = true
    )]
    pub database_url: Option<String>,
    /// Object store URL: file:///path (default file://./archive), s3://bucket/prefix,
    /// gs://bucket/prefix, az://container/prefix, memory://.
    #[arg(
        long,
        global = true,
        env = "PG_RETENTION_STORE",
        hide_env_values = true
    )]
    pub store: Option<String>,
    /// S3 endpoint (for S3-compatible servers).
    #[arg(
        long,
        global = true,
        env = "PG_RETENTION_S3_ENDPOINT",
        hide_env_values = true
    )]
    pub s3_endpoint: Option<String>,
    /// S3 region (default us-east-1).
    #[arg(long, global = true, env = "AWS_REGION")]
    pub s3_region: Option<String>,
    /// S3 access key id (a credential: never shown).
    #[arg(long, global = true, env = "AWS_ACCESS_KEY_ID", hide_env_values = true)]
    pub s3_access_key_id: Option<String>,
    /// S3 secret access key (never logged).
    #[arg(
        long,
        global = true,
        env = "AWS_SECRET_ACCESS_KEY",
        hide_env_values = true
    )]
    pub s3_secret_access_key: Option<String>,
    /// Server-side encryption of every object written to an s3:// store: aes256 (SSE-S3, the
    /// store's keys) or aws:kms (SSE-KMS). Refused with other stores.
    #[arg(long, global = true, env = "PG_RETENTION_S3_SSE", value_name = "MODE")]
    pub s3_sse: Option<String>,
    /// The KMS key (id, alias or ARN) of --s3-sse aws:kms (default: the account's key for S3).
    #[arg(
        long,
        global = true,
        env = "PG_RETENTION_S3_SSE_KMS_KEY_ID",
        value_name = "ID"
    )]
    pub s3_sse_kms_key_id: Option<String>,
    /// Per-request timeout of the object store (default 30s).
    #[arg(long, global = true, env = "PG_RETENTION_REQUEST_TIMEOUT")]
    pub request_timeout: Option<String>,
    /// Connect timeout of the object store and the database (default 5s).
    #[arg(long, global = true, env = "PG_RETENTION_CONNECT_TIMEOUT")]
    pub connect_timeout: Option<String>,
    /// Retries per object-store request (default 3).
    #[arg(long, global = true, env = "PG_RETENTION_MAX_RETRIES")]
    pub max_retries: Option<usize>,
    /// Total time one request may spend retrying (default 60s).
    #[arg(long, global = true, env = "PG_RETENTION_RETRY_TIMEOUT")]
    pub retry_timeout: Option<String>,
    /// Name this archiver claims batches under; keep it stable across restarts so unfinished
    /// batches are resumed (default: the host name).
    #[arg(long, global = true, env = "PG_RETENTION_OWNER")]
    pub owner: Option<String>,
    /// Only these archive policies (comma list; default all).
    #[arg(long, global = true, env = "PG_RETENTION_POLICIES")]
    pub policies: Option<String>,
    /// Most rows per batch (default 20000).
    #[arg(long, global = true, env = "PG_RETENTION_BATCH_ROWS")]
    pub batch_rows: Option<i32>,
    /// Lease of a claimed batch (default 10m); extended while working.
    #[arg(long, global = true, env = "PG_RETENTION_LEASE")]
    pub lease: Option<String>,
    /// Pause of `run` when nothing is eligible (default 30s).
    #[arg(long, global = true, env = "PG_RETENTION_IDLE_SLEEP")]
    pub idle_sleep: Option<String>,
    /// Where `run` serves /metrics and /healthz (default 127.0.0.1:9187).
    #[arg(long, global = true, env = "PG_RETENTION_METRICS_ADDR")]
    pub metrics_addr: Option<String>,
    /// Log format: human (default) or json.
    #[arg(long, global = true, env = "PG_RETENTION_LOG_FORMAT")]
    pub log_format: Option<String>,
    /// Directory of the archive-lifecycle figures: `expire` and `sweep-orphans` add theirs to
    /// `lifecycle.json` there, and `run` / `serve-metrics` serve them on /metrics (default:
    /// none, the figures are only logged).
    #[arg(long, global = true, env = "PG_RETENTION_STATE_DIR")]
    pub state_dir: Option<PathBuf>,
    /// Run `run` / `once` on a store that ignores create-only writes (the start-up probe found a
    /// second create of the same key accepted), instead of refusing with exit 7.
    #[arg(
        long,
        global = true,
        env = "PG_RETENTION_ALLOW_OVERWRITING_STORE",
        value_parser = clap::builder::BoolishValueParser::new(),
        num_args = 0..=1,
        default_missing_value = "true"
    )]
    pub allow_overwriting_store: Option<bool>,
}

impl Options {
    /// Fills every option not given here from `other`.
    pub fn or(self, other: Options) -> Options {
        Options {
            config: self.config.or(other.config),
            database_url: self.database_url.or(other.database_url),
            store: self.store.or(other.store),
            s3_endpoint: self.s3_endpoint.or(other.s3_endpoint),
            s3_region: self.s3_region.or(other.s3_region),
            s3_access_key_id: self.s3_access_key_id.or(other.s3_access_key_id),
            s3_secret_access_key: self.s3_secret_access_key.or(other.s3_secret_access_key),
            s3_sse: self.s3_sse.or(other.s3_sse),
            s3_sse_kms_key_id: self.s3_sse_kms_key_id.or(other.s3_sse_kms_key_id),
            request_timeout: self.request_timeout.or(other.request_timeout),
            connect_timeout: self.connect_timeout.or(other.connect_timeout),
            max_retries: self.max_retries.or(other.max_retries),
            retry_timeout: self.retry_timeout.or(other.retry_timeout),
            owner: self.owner.or(other.owner),
            policies: self.policies.or(other.policies),
            batch_rows: self.batch_rows.or(other.batch_rows),
            lease: self.lease.or(other.lease),
            idle_sleep: self.idle_sleep.or(other.idle_sleep),
            metrics_addr: self.metrics_addr.or(other.metrics_addr),
            log_format: self.log_format.or(other.log_format),
            state_dir: self.state_dir.or(other.state_dir),
            allow_overwriting_store: self
                .allow_overwriting_store
                .or(other.allow_overwriting_store),
        }
    }
}

/// A command-line error as printed: redacted, since clap quotes what it could not place (a
/// connection string given without its flag, say).
pub fn usage_error(e: &clap::Error) -> String {
    crate::redact::redact(&e.render().to_string())
}

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Options { .. }")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn help_names_the_credential_variables_but_never_their_values() {
        let command = Cli::command();
        for id in [
            "database_url",
            "store",
            "s3_endpoint",
            "s3_access_key_id",
            "s3_secret_access_key",
        ] {
            let arg = command
                .get_arguments()
                .find(|a| a.get_id() == id)
                .unwrap_or_else(|| panic!("no argument {id}"));
            assert!(arg.is_hide_env_values_set(), "{id} shows its value");
            assert!(arg.get_default_values().is_empty(), "{id} has a default");
        }
    }

    #[test]
    fn allow_overwriting_store_is_a_flag_or_a_boolean_variable() {
        let given = |args: &[&str]| {
            Cli::try_parse_from(args)
                .expect("parses")
                .options
                .allow_overwriting_store
        };
        assert_eq!(given(&["x", "run"]), None);
        assert_eq!(
            given(&["x", "run", "--allow-overwriting-store"]),
            Some(true)
        );
        assert_eq!(
            given(&["x", "once", "--allow-overwriting-store=false"]),
            Some(false)
        );
        let file: Options = toml::from_str("allow_overwriting_store = true").unwrap();
        assert_eq!(file.allow_overwriting_store, Some(true));
    }

    #[test]
    fn server_side_encryption_is_a_flag_a_variable_or_a_file_key() {
        let given = |args: &[&str]| {
            let o = Cli::try_parse_from(args).expect("parses").options;
            (o.s3_sse, o.s3_sse_kms_key_id)
        };
        assert_eq!(given(&["x", "run"]), (None, None));
        assert_eq!(
            given(&["x", "once", "--s3-sse", "aes256"]),
            (Some("aes256".into()), None)
        );
        assert_eq!(
            given(&[
                "x",
                "--s3-sse=aws:kms",
                "--s3-sse-kms-key-id",
                "alias/a",
                "ls"
            ]),
            (Some("aws:kms".into()), Some("alias/a".into()))
        );
        let file: Options =
            toml::from_str("s3_sse = \"aws:kms\"\ns3_sse_kms_key_id = \"k-1\"").unwrap();
        assert_eq!(file.s3_sse.as_deref(), Some("aws:kms"));
        assert_eq!(file.s3_sse_kms_key_id.as_deref(), Some("k-1"));
        let command = Cli::command();
        for (id, env) in [
            ("s3_sse", "PG_RETENTION_S3_SSE"),
            ("s3_sse_kms_key_id", "PG_RETENTION_S3_SSE_KMS_KEY_ID"),
        ] {
            let arg = command
                .get_arguments()
                .find(|a| a.get_id() == id)
                .unwrap_or_else(|| panic!("no argument {id}"));
            assert_eq!(arg.get_env().and_then(|e| e.to_str()), Some(env));
        }
    }

    #[test]
    fn a_usage_error_never_shows_a_connection_strings_secret() {
        for args in [
            vec!["x", "postgres://u:hunter2@h/d?password=hunter3", "run"],
            vec!["x", "run", "host=h password=hunter2"],
            vec!["x", "ls", "s3://bucket/p?secret_access_key=hunter2"],
        ] {
            let e = Cli::try_parse_from(&args).expect_err("not a command line");
            let raw = e.render().to_string();
            assert!(raw.contains("hunter2"), "clap quotes it: {raw}");
            let shown = usage_error(&e);
            assert!(!shown.contains("hunter"), "{shown}");
        }
    }
}
