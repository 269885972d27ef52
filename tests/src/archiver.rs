//! Running the real `pg-retention-archiver` binary against a test cluster and store.

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};

/// The archiver binary built for this workspace: `cargo build` runs once per test process, so
/// the binary is never older than the sources (a no-op when it is up to date).
pub fn binary() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
            let target = std::env::var_os("CARGO_TARGET_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|| root.join("target"));
            // The rustc beside this cargo: through rustup's proxy, a dependency's own
            // rust-toolchain.toml (flagset pins 1.65) would pick a toolchain that is not here.
            let cargo = PathBuf::from(env!("CARGO"));
            let mut build = Command::new(&cargo);
            if let Some(rustc) = cargo
                .parent()
                .map(|bin| bin.join("rustc"))
                .filter(|p| p.exists())
            {
                build.env("RUSTC", rustc);
            }
            let status = build
                .args(["build", "-q", "-p", "pg-retention-archiver"])
                .current_dir(&root)
                .status()
                .expect("run cargo build");
            assert!(status.success(), "building the archiver failed");
            target.join("debug").join("pg-retention-archiver")
        })
        .clone()
}

/// A configured archiver invocation.
#[derive(Clone)]
pub struct Archiver {
    /// Connection string.
    pub database_url: String,
    /// Store URL.
    pub store: String,
    /// Extra environment (S3 endpoint, credentials, fault points, ...).
    pub env: Vec<(String, String)>,
    /// Owner name.
    pub owner: String,
    /// Another archiver binary (a past release) instead of this workspace's.
    pub program: Option<PathBuf>,
}

impl Archiver {
    /// An archiver for `database_url` writing to `store`.
    pub fn new(database_url: &str, store: &str) -> Archiver {
        Archiver {
            database_url: database_url.into(),
            store: store.into(),
            env: vec![],
            owner: "test-archiver".into(),
            program: None,
        }
    }

    /// An archiver for `database_url` writing to bucket `archive`, prefix `pg`, of the S3 server
    /// at `endpoint` (a [`crate::Seaweed`]), with its credentials.
    pub fn on_s3(database_url: &str, endpoint: &str) -> Archiver {
        Archiver::new(database_url, "s3://archive/pg")
            .with_env("PG_RETENTION_S3_ENDPOINT", endpoint)
            .with_env("AWS_ACCESS_KEY_ID", crate::seaweed::ACCESS_KEY)
            .with_env("AWS_SECRET_ACCESS_KEY", crate::seaweed::SECRET_KEY)
    }

    /// The same archiver (store, environment, owner) connected with `database_url` instead:
    /// another role, for a command that needs other privileges (`restore` creates a table).
    pub fn with_database_url(mut self, database_url: &str) -> Archiver {
        self.database_url = database_url.into();
        self
    }

    /// Adds an environment variable.
    pub fn with_env(mut self, k: &str, v: &str) -> Archiver {
        self.env.push((k.into(), v.into()));
        self
    }

    /// The command with settings in the environment and `args` as flags.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(self.program.clone().unwrap_or_else(binary));
        c.args(args)
            .env("PG_RETENTION_DATABASE_URL", &self.database_url)
            .env("PG_RETENTION_STORE", &self.store)
            .env("PG_RETENTION_OWNER", &self.owner)
            .env("PG_RETENTION_LEASE", "30s")
            .env("PG_RETENTION_IDLE_SLEEP", "1s")
            .env("RUST_BACKTRACE", "0")
            .stdin(Stdio::null());
        for (k, v) in &self.env {
            c.env(k, v);
        }
        c
    }

    /// Runs to completion and returns the output.
    pub fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("start the archiver")
    }

    /// Starts in the background.
    pub fn spawn(&self, args: &[&str]) -> Child {
        self.command(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the archiver")
    }
}

impl Archiver {
    /// The slice keys `ls` lists.
    pub fn slice_keys(&self) -> Vec<String> {
        let o = self.run(&["ls"]);
        assert!(o.status.success(), "{}", text(&o));
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .map(|l| l.split('\t').next().unwrap_or_default().to_owned())
            .collect()
    }

    /// Restores every listed slice into its own table `public.restored_<i>` and returns the
    /// query of all restored rows (`SELECT * FROM restored_0 UNION ALL ...`).
    pub fn restore_all(&self) -> String {
        let mut union = Vec::new();
        for (i, key) in self.slice_keys().iter().enumerate() {
            let o = self.run(&["restore", key, "--into", &format!("public.restored_{i}")]);
            assert!(o.status.success(), "{}", text(&o));
            union.push(format!("SELECT * FROM restored_{i}"));
        }
        union.join(" UNION ALL ")
    }
}

/// Sends SIGTERM to a spawned archiver (a graceful stop: the batch in progress finishes).
pub fn terminate(child: &Child) {
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -TERM {}", child.id());
}

/// stdout + stderr of a finished run, for assertion messages.
pub fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}
