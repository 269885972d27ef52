//! A throwaway PostgreSQL cluster (15, or 18 with `PG_MAJOR=18`) with pg_retention installed and preloaded, made by
//! `scripts/cluster` (the fixture the benchmark and the demo use too).
//!
//! The cluster runs as the `postgres` OS user (Postgres refuses root) in a private directory
//! under `/var/tmp/pg_retention`, listens on a free loopback port and a private socket
//! directory, trusts local connections, and is stopped and removed when the value is dropped —
//! also when the test panics.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Parent of every test cluster directory; owned by `postgres` (made by `scripts/setup`).
pub const SCRATCH: &str = "/var/tmp/pg_retention";

static SEQ: AtomicU32 = AtomicU32::new(0);

/// A running test cluster.
pub struct Cluster {
    dir: PathBuf,
    port: u16,
}

/// `scripts/cluster` with `args` (the fixture the benchmark and the demo use too).
fn fixture(args: &[&str], conf: &[String]) -> Command {
    let mut c = Command::new("bash");
    c.arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/cluster"))
        .args(args)
        .args(conf);
    c
}

/// A free port and a directory under [`SCRATCH`] named after `kind`, this process, a sequence
/// number and the port, for a new server.
fn fresh(kind: &str) -> (PathBuf, u16) {
    let port = crate::ports::free_ports(1)[0];
    let name = format!(
        "{kind}-{}-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::SeqCst),
        port
    );
    (Path::new(SCRATCH).join(name), port)
}

impl Cluster {
    /// Starts a cluster with pg_retention preloaded and `CREATE EXTENSION pg_retention` run in
    /// the `postgres` database. `settings` are extra `postgresql.conf` lines (`name = value`).
    pub fn start(settings: &[&str]) -> Cluster {
        let cluster = Self::start_bare(settings);
        cluster.execute("postgres", "CREATE EXTENSION pg_retention");
        cluster
    }

    /// Starts a cluster with pg_retention preloaded but the extension not yet created.
    pub fn start_bare(settings: &[&str]) -> Cluster {
        let (dir, port) = fresh("cluster");
        let mut conf = vec![
            "fsync = off".to_owned(),
            "synchronous_commit = off".to_owned(),
            "full_page_writes = off".to_owned(),
            "max_worker_processes = 16".to_owned(),
            "log_min_messages = info".to_owned(),
        ];
        conf.extend(settings.iter().map(|s| (*s).to_owned()));
        crate::succeed(&mut fixture(
            &["start", &dir.to_string_lossy(), &port.to_string()],
            &conf,
        ));
        Cluster { dir, port }
    }

    /// Starts a streaming replica of this cluster (`pg_basebackup`, hot standby, without
    /// pg_retention preloaded; it reports its replay position every second).
    pub fn standby(&self) -> Cluster {
        let (dir, port) = fresh("standby");
        crate::succeed(&mut fixture(
            &[
                "standby",
                &self.dir.to_string_lossy(),
                &self.port.to_string(),
                &dir.to_string_lossy(),
                &port.to_string(),
            ],
            &[],
        ));
        Cluster { dir, port }
    }

    /// A streaming replica like [`Cluster::standby`] with extra `postgresql.conf` lines (e.g.
    /// pg_retention preloaded, so that its worker runs once the replica is promoted).
    pub fn standby_with(&self, settings: &[&str]) -> Cluster {
        let (dir, port) = fresh("standby");
        let conf: Vec<String> = settings.iter().map(|s| (*s).to_owned()).collect();
        crate::succeed(&mut fixture(
            &[
                "standby",
                &self.dir.to_string_lossy(),
                &self.port.to_string(),
                &dir.to_string_lossy(),
                &port.to_string(),
            ],
            &conf,
        ));
        Cluster { dir, port }
    }

    /// Stops the server as a crash would (`pg_ctl stop -m immediate`: no checkpoint, recovery
    /// at the next start). The directory stays.
    pub fn crash(&self) {
        crate::succeed(&mut fixture(
            &["stop", &self.dir.to_string_lossy(), "immediate"],
            &[],
        ));
    }

    /// Starts the stopped server again on its data directory and port.
    pub fn start_again(&self) {
        let data = self.dir.join("data");
        crate::succeed(
            crate::as_postgres(Self::program("pg_ctl"))
                .arg("-D")
                .arg(&data)
                .arg("-l")
                .arg(self.log_path())
                .args(["-w", "-t", "120", "start"]),
        );
    }

    /// Promotes this streaming replica to a primary and waits until it takes writes.
    pub fn promote(&self) {
        crate::succeed(
            crate::as_postgres(Self::program("pg_ctl"))
                .arg("-D")
                .arg(self.dir.join("data"))
                .args(["-w", "-t", "120", "promote"]),
        );
    }

    /// Connection string for a database of this cluster (TCP on loopback, superuser `postgres`).
    pub fn url(&self, db: &str) -> String {
        format!(
            "host=127.0.0.1 port={} user=postgres dbname={db}",
            self.port
        )
    }

    /// Connection string for a database of this cluster as `role` (TCP on loopback; trusted).
    pub fn url_as(&self, db: &str, role: &str) -> String {
        format!("host=127.0.0.1 port={} user={role} dbname={db}", self.port)
    }

    /// Connection string for `db` as `archiver`: a LOGIN role that is a member of
    /// `retention_archiver` and of nothing else, not a superuser — the role the archiver runs
    /// as in production (docs/archiver.md: it needs no privileges on the governed tables). The
    /// role is made on first use, once per cluster; later calls reuse it.
    pub fn archiver_url(&self, db: &str) -> String {
        self.login_role("archiver", "retention_archiver");
        self.url_as(db, "archiver")
    }

    /// Connection string for `db` as `restorer`: the least an operator needs for the archiver's
    /// `restore` into schema `public` — a LOGIN member of `retention_archiver` (restore asks the
    /// archive index whether a key was superseded and which column types the archived table
    /// records) with `CREATE` on schema `public` of `db` (restore creates the table), not a
    /// superuser. Made on first use; idempotent.
    pub fn restorer_url(&self, db: &str) -> String {
        self.login_role("restorer", "retention_archiver");
        self.socket_client(db)
            .batch_execute("GRANT CREATE ON SCHEMA public TO restorer")
            .unwrap_or_else(|e| panic!("grant restorer CREATE on {db}.public: {e}"));
        self.url_as(db, "restorer")
    }

    /// Makes `role` (LOGIN, a member of `member_of` only) unless it exists. Over the private
    /// socket, so it works on a cluster whose TCP needs TLS too.
    fn login_role(&self, role: &str, member_of: &str) {
        self.socket_client("postgres")
            .batch_execute(&format!(
                "DO $$ BEGIN
                     CREATE ROLE {role} LOGIN IN ROLE {member_of};
                 EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
                 END $$"
            ))
            .unwrap_or_else(|e| panic!("create role {role}: {e}"));
    }

    /// A superuser connection to `db` over the private socket.
    fn socket_client(&self, db: &str) -> postgres::Client {
        postgres::Client::connect(&self.socket_url(db), postgres::NoTls)
            .unwrap_or_else(|e| panic!("connect to {db} over the socket: {e}"))
    }

    /// Connection string over the cluster's private Unix socket (no TLS, whatever pg_hba.conf
    /// says about TCP).
    pub fn socket_url(&self, db: &str) -> String {
        format!(
            "host={} port={} user=postgres dbname={db}",
            self.dir.display(),
            self.port
        )
    }

    /// Replaces pg_ident.conf with `text` (apply with [`Cluster::reload`]).
    pub fn replace_ident(&self, text: &str) {
        std::fs::write(self.dir.join("data").join("pg_ident.conf"), text)
            .expect("write pg_ident.conf");
    }

    /// Replaces pg_hba.conf with `text` and reloads.
    pub fn replace_hba(&self, text: &str) {
        std::fs::write(self.dir.join("data").join("pg_hba.conf"), text).expect("write pg_hba.conf");
        self.reload();
    }

    /// A PostgreSQL program of the installation the cluster runs (`$PG_BIN`, as scripts/lib.sh
    /// sets it).
    pub fn program(name: &str) -> PathBuf {
        let bin = std::env::var_os("PG_BIN")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/usr/lib/postgresql/15/bin"));
        bin.join(name)
    }

    /// The port the cluster listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The socket directory.
    pub fn socket_dir(&self) -> &Path {
        &self.dir
    }

    /// Server log file.
    pub fn log_path(&self) -> PathBuf {
        self.dir.join("server.log")
    }

    /// Server log contents so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// A new client connection to `db`.
    pub fn connect(&self, db: &str) -> postgres::Client {
        postgres::Client::connect(&self.url(db), postgres::NoTls)
            .unwrap_or_else(|e| panic!("connect to {db}: {e}"))
    }

    /// A new client connection to `db` as `role`.
    pub fn connect_as(&self, db: &str, role: &str) -> postgres::Client {
        postgres::Client::connect(&format!("{} user={role}", self.url(db)), postgres::NoTls)
            .unwrap_or_else(|e| panic!("connect to {db} as {role}: {e}"))
    }

    /// Runs one or more statements in `db`, panicking on error.
    pub fn execute(&self, db: &str, sql: &str) {
        self.connect(db)
            .batch_execute(sql)
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }

    /// Stops the server (fast shutdown); the directory stays until the value is dropped.
    pub fn stop(&self) {
        crate::succeed(&mut fixture(
            &["stop", &self.dir.to_string_lossy(), "fast"],
            &[],
        ));
    }

    /// Reloads the configuration (SIGHUP to the postmaster).
    pub fn reload(&self) {
        self.execute("postgres", "SELECT pg_reload_conf()");
    }

    /// Appends lines to postgresql.conf (apply with [`Cluster::reload`]).
    pub fn append_conf(&self, lines: &[&str]) {
        let path = self.dir.join("data").join("postgresql.conf");
        let mut text = std::fs::read_to_string(&path).expect("read postgresql.conf");
        for l in lines {
            text.push_str(l);
            text.push('\n');
        }
        std::fs::write(&path, text).expect("write postgresql.conf");
    }

    /// Polls `cond` every 100 ms until it holds or `timeout` passes; returns whether it held.
    pub fn wait_until(&self, timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if cond() {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = fixture(&["stop", &self.dir.to_string_lossy(), "immediate"], &[]).output();
        if std::env::var_os("PG_RETENTION_KEEP_CLUSTER").is_none() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Production roles: the application and the retention administrator.
impl Cluster {
    /// A connection to `db` as `app`: the application's role, a LOGIN with no memberships and
    /// no attributes, which reads and writes application rows through table privileges only
    /// (granted with [`Cluster::grant_app_and_admin`]). Made on first use; idempotent.
    pub fn app(&self, db: &str) -> postgres::Client {
        self.app_role();
        self.connect_as(db, "app")
    }

    /// Makes `app` (LOGIN, no memberships) unless it exists.
    fn app_role(&self) {
        self.socket_client("postgres")
            .batch_execute(
                "DO $$ BEGIN
                     CREATE ROLE app LOGIN;
                 EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
                 END $$",
            )
            .unwrap_or_else(|e| panic!("create role app: {e}"));
    }

    /// A connection to `db` as `admin`: a LOGIN member of `retention_admin` only, not a
    /// superuser — who manages policies and holds, previews and runs `CALL retention.run()` in
    /// production. Made on first use; idempotent.
    pub fn admin(&self, db: &str) -> postgres::Client {
        self.login_role("admin", "retention_admin");
        self.connect_as(db, "admin")
    }

    /// Connections to `db` as `app` and as `admin` ([`Cluster::app`], [`Cluster::admin`]).
    pub fn app_and_admin(&self, db: &str) -> (postgres::Client, postgres::Client) {
        (self.app(db), self.admin(db))
    }

    /// Grants, on every table now in schema `public` of `db` (call again after creating more):
    /// `app` SELECT, INSERT, UPDATE, DELETE and the use of the sequences (an application's
    /// rights); `admin` SELECT and DELETE — exactly what a policy's owner needs, archive policies
    /// included (docs/security.md: SELECT and DELETE on the table and SELECT on the tables
    /// referencing it), so every test proves no more is needed. Makes both roles if need be.
    pub fn grant_app_and_admin(&self, db: &str) {
        self.app_role();
        self.login_role("admin", "retention_admin");
        self.socket_client(db)
            .batch_execute(
                "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO app;
                 GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO app;
                 GRANT SELECT, DELETE ON ALL TABLES IN SCHEMA public TO admin;",
            )
            .unwrap_or_else(|e| panic!("grant app and admin on {db}.public: {e}"));
    }
}
