//! A database carried over into another: logical dump and restore into a new database, and
//! pg_upgrade from 15 to 18; policies, holds, ledger, archive index and ids come along.

use super::*;

/// Runs a PostgreSQL client program against the cluster, panicking with its output on failure.
fn client_program(name: &str, args: &[&str]) {
    succeed(std::process::Command::new(Cluster::program(name)).args(args));
}

/// The largest id of a catalog table.
fn max_id(db: &mut Client, table: &str) -> i64 {
    scalar(
        db,
        &format!("SELECT coalesce(max(id), 0) FROM retention.{table}"),
    )
}

/// What a database carried over (dump and restore, pg_upgrade) must still hold.
struct Carried {
    /// Expired outbox rows the hold protects.
    held: i64,
    /// Largest ids of policy_ids, hold_records, ledger_entries, archive_records.
    ids: Vec<i64>,
    /// Ledger entries.
    ledger: i64,
    /// The outbox table's oid.
    outbox_oid: i64,
}

const CARRIED_TABLES: [&str; 4] = [
    "policy_ids",
    "hold_records",
    "ledger_entries",
    "archive_records",
];

/// Two policies, a hold protecting rows, a sweep and one archived batch, then rows that expire
/// only now (after the carrying over the policies must find them). The tables are the
/// superuser's (set-up), the rows `app`'s, the policies, hold and sweep `admin`'s, the batch
/// archived by `archiver`.
fn fill_for_carrying(c: &Cluster, store: &str) -> Carried {
    c.execute(
        "postgres",
        "CREATE TABLE outbox (id bigint PRIMARY KEY, tenant int NOT NULL, status text NOT NULL, created_at timestamptz NOT NULL);
         CREATE TABLE audit (id bigint PRIMARY KEY, state text NOT NULL, closed_at timestamptz NOT NULL);",
    );
    c.grant_app_and_admin("postgres");
    let (mut app, mut admin) = c.app_and_admin("postgres");
    app.batch_execute(
        "INSERT INTO outbox SELECT g, g % 10, 'sent', now() - make_interval(days => g % 60, hours => 12) FROM generate_series(1, 2000) g;
         INSERT INTO audit SELECT g, 'closed', now() - interval '40 days' FROM generate_series(1, 600) g;",
    )
    .unwrap();
    admin
        .batch_execute(
            "SELECT retention.add_policy(name => 'outbox', relation => 'outbox', kind => 'age', age_column => 'created_at',
                older_than => '30 days', terminal => $$status = 'sent'$$);
         SELECT retention.add_policy(name => 'audit', relation => 'audit', kind => 'age', age_column => 'closed_at',
                older_than => '30 days', terminal => $$state = 'closed'$$, action => 'archive_then_delete');
         SELECT retention.place_hold('outbox', 'tenant = 7', 'case 2026-1', 'legal@example.com');",
        )
        .unwrap();
    admin.batch_execute("CALL retention.run('outbox')").unwrap();
    let o = Archiver::new(&c.archiver_url("postgres"), store).run(&[
        "once",
        "--batch-rows",
        "200",
        "--max-batches",
        "1",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    app.batch_execute(
        "INSERT INTO outbox SELECT g, g % 10, 'sent', now() - interval '45 days' FROM generate_series(3001, 3100) g",
    )
    .unwrap();
    let held = scalar(
        &mut admin,
        "SELECT count(*) FROM outbox WHERE tenant = 7 AND created_at < now() - interval '30 days'",
    );
    assert!(held > 0);
    // The largest ids of the catalog tables: only the superuser reads them.
    let mut su = c.connect("postgres");
    Carried {
        held,
        ids: CARRIED_TABLES.iter().map(|t| max_id(&mut su, t)).collect(),
        ledger: scalar(&mut admin, "SELECT count(*) FROM retention.ledger"),
        outbox_oid: scalar(&mut admin, "SELECT 'outbox'::regclass::oid::bigint"),
    }
}

/// A connection with `url`.
fn connect(url: &str) -> Client {
    Client::connect(url, postgres::NoTls).unwrap_or_else(|e| panic!("connect to {url}: {e}"))
}

/// In the carried-over database (`url_as(role)` connects to it as `role`; the roles came
/// along): the policies name its tables, ledger and archive index are intact, a run deletes
/// every expired row but the held ones, the archiver archives the rest and verifies the archive
/// made before, and new ids continue after the carried ones. `admin` runs, reads and registers,
/// `archiver` archives.
fn assert_carried(url_as: &dyn Fn(&str) -> String, store: &str, before: &Carried) {
    let mut dst = connect(&url_as("admin"));
    assert_eq!(
        scalar(&mut dst, "SELECT count(*) FROM retention.policies p WHERE p.relation IN ('outbox'::regclass, 'audit'::regclass)"),
        2,
        "the policies name the tables of this database"
    );
    assert_eq!(
        scalar(&mut dst, "SELECT count(*) FROM retention.ledger"),
        before.ledger,
        "the ledger is intact"
    );
    assert_eq!(
        scalar(&mut dst, "SELECT count(*) FROM retention.archives"),
        1,
        "the archive index is intact"
    );
    dst.batch_execute("CALL retention.run('outbox')").unwrap();
    assert_eq!(
        scalar(
            &mut dst,
            "SELECT count(*) FROM outbox WHERE created_at < now() - interval '30 days'"
        ),
        before.held,
        "only the held rows are left"
    );
    assert!(
        scalar(
            &mut dst,
            &format!("SELECT count(*) FROM retention.ledger WHERE method = 'prune' AND rows > 0 AND id > {}", before.ids[2])
        ) > 0,
        "the run is ledgered after the carried entries"
    );
    let a = Archiver::new(&url_as("archiver"), store);
    let o = a.run(&["once"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(scalar(&mut dst, "SELECT count(*) FROM audit"), 0);
    let o = a.run(&["verify", "--all"]);
    assert!(o.status.success(), "{}", text(&o));
    dst.batch_execute(
        "SELECT retention.place_hold('audit', 'id = 1', 'case 2026-2', 'legal@example.com');
         SELECT retention.add_policy(name => 'outbox2', relation => 'outbox', kind => 'age', age_column => 'created_at',
                older_than => '60 days');",
    )
    .unwrap();
    // The catalog tables' ids: only the superuser reads them.
    let mut su = connect(&url_as("postgres"));
    for (table, max) in CARRIED_TABLES.iter().zip(&before.ids) {
        // Without the sequences carried over these inserts would collide with carried ids.
        let new = scalar(
            &mut su,
            &format!("SELECT count(*) FROM retention.{table} WHERE id > {max}"),
        );
        assert!(new > 0, "{table}: new rows after the carried ones");
    }
}

#[test]
fn a_dump_restored_into_a_new_database_keeps_policies_holds_archives_and_ids() {
    let c = Cluster::start(&[]);
    let dir = std::env::temp_dir().join(format!("pg-retention-dump-{}", c.port()));
    let store = format!("file://{}", dir.display());
    let before = fill_for_carrying(&c, &store);
    let dump = dir.with_extension("dump");
    // Dumping and restoring a whole database (the extension with it) is the superuser's.
    client_program(
        "pg_dump",
        &[
            "-Fc",
            "-d",
            &c.url("postgres"),
            "-f",
            &dump.to_string_lossy(),
        ],
    );
    c.execute("postgres", "CREATE DATABASE restored");
    client_program(
        "pg_restore",
        &[
            "--exit-on-error",
            "-d",
            &c.url("restored"),
            &dump.to_string_lossy(),
        ],
    );
    assert_ne!(
        scalar(
            &mut c.admin("restored"),
            "SELECT 'outbox'::regclass::oid::bigint"
        ),
        before.outbox_oid,
        "the restored table has another oid, so the names were resolved again"
    );
    assert_carried(&|role| c.url_as("restored", role), &store, &before);
    let _ = std::fs::remove_dir_all(dir);
    let _ = std::fs::remove_file(dump);
}

/// Runs `program` as the postgres OS user in `dir`, panicking with its output on failure.
fn run_as_postgres(dir: &std::path::Path, program: &std::path::Path, args: &[&str]) {
    succeed(as_postgres(program).args(args).current_dir(dir));
}

/// Stops the upgraded server when the test ends, passed or not.
struct Upgraded<'a> {
    pg_ctl: PathBuf,
    data: &'a std::path::Path,
}

impl Drop for Upgraded<'_> {
    fn drop(&mut self) {
        stop_server(&self.pg_ctl, self.data);
    }
}

/// pg_upgrade from this suite's PostgreSQL 15 to 18 (both with pg_retention installed by
/// scripts/test): table and role oids are kept, so the catalog comes through as it is.
///
/// Ignored here: pg_upgrade from Debian's 15.20 to PyPI's 18.6 fails for any database, with or
/// without pg_retention (a one-column table suffices): 15.20 stores a `pg_attver` option on
/// every column and 18.6 refuses it ("unrecognized parameter"). Run it with `--ignored` where
/// the two builds agree.
#[test]
#[ignore = "Debian 15.20 -> PyPI 18.6 pg_upgrade fails for every database here (pg_attver column option)"]
fn pg_upgrade_from_15_to_18_keeps_policies_holds_archives_and_ids() {
    let new_bin = PathBuf::from(SCRATCH).join("pg18/bin");
    assert!(
        new_bin.join("pg_upgrade").exists(),
        "PostgreSQL 18 is missing: run scripts/setup"
    );
    let c = Cluster::start(&[]);
    let dir = c.socket_dir().to_path_buf();
    let store = format!("file://{}", dir.join("archive").display());
    let before = fill_for_carrying(&c, &store);
    c.stop();
    let old_bin = Cluster::program("postgres").parent().unwrap().to_path_buf();
    let new_data = dir.join("data18");
    run_as_postgres(
        &dir,
        &new_bin.join("initdb"),
        &[
            "-D",
            &new_data.to_string_lossy(),
            "-A",
            "trust",
            "-U",
            "postgres",
            "-E",
            "UTF8",
            "--no-sync",
            "--no-data-checksums",
        ],
    );
    let ports = pg_retention_integration::ports::free_ports(2);
    run_as_postgres(
        &dir,
        &new_bin.join("pg_upgrade"),
        &[
            "-b",
            &old_bin.to_string_lossy(),
            "-B",
            &new_bin.to_string_lossy(),
            "-d",
            &dir.join("data").to_string_lossy(),
            "-D",
            &new_data.to_string_lossy(),
            "-p",
            &ports[0].to_string(),
            "-P",
            &ports[1].to_string(),
            "-s",
            &dir.to_string_lossy(),
        ],
    );
    let conf = format!(
        "port = {}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{}'\nshared_preload_libraries = 'pg_retention'\n",
        ports[1],
        dir.display()
    );
    let conf_path = new_data.join("postgresql.conf");
    let mut text = std::fs::read_to_string(&conf_path).unwrap();
    text.push_str(&conf);
    std::fs::write(&conf_path, text).unwrap();
    run_as_postgres(
        &dir,
        &new_bin.join("pg_ctl"),
        &[
            "-D",
            &new_data.to_string_lossy(),
            "-l",
            &dir.join("server18.log").to_string_lossy(),
            "-w",
            "start",
        ],
    );
    let _running = Upgraded {
        pg_ctl: new_bin.join("pg_ctl"),
        data: &new_data,
    };
    let url_as = |role: &str| {
        format!(
            "host=127.0.0.1 port={} user={role} dbname=postgres",
            ports[1]
        )
    };
    // The server's version and a table's oid, checked by the superuser that ran pg_upgrade.
    let mut db = connect(&url_as("postgres"));
    let version: String = db.query_one("SHOW server_version_num", &[]).unwrap().get(0);
    assert!(version.starts_with("18"), "{version}");
    assert_eq!(
        scalar(&mut db, "SELECT 'outbox'::regclass::oid::bigint"),
        before.outbox_oid,
        "pg_upgrade keeps table oids"
    );
    assert_carried(&url_as, &store, &before);
}
