//! Tables that belong to another extension (its member tables) governed like any other:
//! pg_cron's run history, `cron.job_run_details`, which grows by a row per job run and which
//! pg_cron never trims. It has row-level security (each user sees the runs of its own jobs), so
//! the policy is registered by a role that sees every row: `cron_keeper`, a LOGIN member of
//! `retention_admin` with BYPASSRLS (docs/security.md: the ways to govern a table with RLS).
//! The policy keeps working across an `ALTER EXTENSION pg_cron UPDATE` (1.3 to the newest
//! script Debian ships) and a pg_dump / pg_restore of the database into another cluster.
//!
//! The superuser stays for set-up: preloading pg_cron, creating the extensions and the role,
//! the update of pg_cron (its owner's), the dump and the restore, and writing history rows
//! with the times a test needs (pg_cron writes them itself as jobs run).

use pg_retention_integration::{scalar, succeed, Cluster};
use postgres::Client;

/// A cluster with pg_cron (its scheduler serving `postgres`) and pg_retention preloaded.
fn cron_cluster() -> Cluster {
    Cluster::start_bare(&[
        "shared_preload_libraries = 'pg_retention,pg_cron'",
        "cron.database_name = 'postgres'",
    ])
}

/// `n` finished runs of job 1 that ended `days` days ago (written as pg_cron writes them).
fn runs(c: &Cluster, n: i64, days: i64) {
    c.execute(
        "postgres",
        &format!(
            "INSERT INTO cron.job_run_details (jobid, job_pid, database, username, command, status,
                                               return_message, start_time, end_time)
             SELECT 1, 4242, 'postgres', 'postgres', 'VACUUM', 'succeeded', 'VACUUM',
                    now() - make_interval(days => {days}, secs => g + 1),
                    now() - make_interval(days => {days}, secs => g)
               FROM generate_series(1, {n}) g"
        ),
    );
}

fn keeper(c: &Cluster) -> Client {
    c.connect_as("postgres", "cron_keeper")
}

fn history(db: &mut Client) -> i64 {
    scalar(db, "SELECT count(*) FROM cron.job_run_details")
}

/// What `cron_history`'s preview says it would delete, checked against what its run then
/// deletes: `expected` rows, leaving `left` in the history.
fn preview_then_run(db: &mut Client, expected: i64, left: i64) {
    assert_eq!(
        scalar(
            db,
            "SELECT would_delete FROM retention.preview('cron_history')"
        ),
        expected
    );
    db.batch_execute("CALL retention.run('cron_history')")
        .unwrap();
    assert_eq!(history(db), left);
}

#[test]
fn a_member_table_stays_governed_across_its_extensions_update_and_a_dump() {
    let c = cron_cluster();
    c.execute(
        "postgres",
        "CREATE EXTENSION pg_cron VERSION '1.3';
         CREATE EXTENSION pg_retention;
         CREATE ROLE cron_keeper LOGIN BYPASSRLS IN ROLE retention_admin;
         GRANT USAGE ON SCHEMA cron TO cron_keeper;",
    );
    // A member of pg_cron, granted SELECT and DELETE to public by pg_cron itself.
    assert_eq!(
        scalar(
            &mut c.connect("postgres"),
            "SELECT count(*) FROM pg_depend WHERE classid = 'pg_class'::regclass
                AND objid = 'cron.job_run_details'::regclass AND deptype = 'e'"
        ),
        1
    );
    runs(&c, 60, 30);
    runs(&c, 40, 1);
    let mut db = keeper(&c);
    db.batch_execute(
        "SELECT retention.add_policy(name => 'cron_history', relation => 'cron.job_run_details',
                kind => 'age', age_column => 'end_time', older_than => '7 days')",
    )
    .unwrap();
    preview_then_run(&mut db, 60, 40);

    // pg_cron's own update (its scripts alter its tables in place): the policy goes on.
    c.execute("postgres", "ALTER EXTENSION pg_cron UPDATE");
    let version: String = c
        .connect("postgres")
        .query_one(
            "SELECT extversion FROM pg_extension WHERE extname = 'pg_cron'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_ne!(version, "1.3");
    runs(&c, 10, 20);
    let mut db = keeper(&c);
    preview_then_run(&mut db, 10, 40);

    // Dumped and restored into another cluster: pg_cron's history (a configuration table it
    // dumps) and the policy come back, and the policy names the restored table.
    runs(&c, 5, 20);
    let dump = std::env::temp_dir().join(format!("pg-retention-member-{}.dump", c.port()));
    succeed(
        std::process::Command::new(Cluster::program("pg_dump")).args([
            "-Fc",
            "-d",
            &c.url("postgres"),
            "-f",
            &dump.to_string_lossy(),
        ]),
    );
    let d = cron_cluster();
    // Roles are the cluster's, not the database's: made again, as an operator would.
    d.execute("postgres", "CREATE ROLE cron_keeper LOGIN BYPASSRLS;");
    succeed(
        std::process::Command::new(Cluster::program("pg_restore")).args([
            "--exit-on-error",
            "-d",
            &d.url("postgres"),
            &dump.to_string_lossy(),
        ]),
    );
    d.execute(
        "postgres",
        "GRANT retention_admin TO cron_keeper; GRANT USAGE ON SCHEMA cron TO cron_keeper;",
    );
    let mut restored = keeper(&d);
    assert_eq!(history(&mut restored), 45);
    assert_eq!(
        scalar(
            &mut restored,
            "SELECT count(*) FROM retention.policies
              WHERE name = 'cron_history' AND relation = 'cron.job_run_details'::regclass"
        ),
        1
    );
    preview_then_run(&mut restored, 5, 40);
    let _ = std::fs::remove_file(dump);
}
