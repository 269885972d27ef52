//! The policy engine against a real cluster: every kind, guards, holds, caps, preview accuracy,
//! refusals. Runs commit per batch, so these live here rather than in #[pg_test]s.
//!
//! Production roles throughout: tables are made by the superuser in set-up, application rows
//! are written by `app` (table privileges only) and every `retention.*` call is made by `admin`
//! (a member of `retention_admin`, not a superuser), who also reads the results
//! (`Cluster::app_and_admin`).

use pg_retention_integration::{expect_error, scalar, Cluster};
use postgres::Client;

/// `age` sweeps: window boundary, block-range and index walks, scope.
mod age_sweeps;
/// Run caps, the WAL rate budget and adaptive pacing.
mod caps_and_pacing;
/// Consumer floors: pinning, epochs, leases, bootstrap.
mod consumers;
/// Foreign keys and linked windows: protection, sweep order, link guards.
mod foreign_keys_and_links;
/// Floors, replay check, append-only ledger, bad inputs and role gates.
mod guards;
/// Holds placed and lifted, before and during a run.
mod holds;
/// The `keep_latest`, `versions`, `entity`, `unreferenced` and `orphan` kinds.
mod kinds;
/// Pruner locks, interrupted and failed runs, and what health() says of them.
mod locks_and_failures;
/// Preview accuracy against the next run, for every kind.
mod preview;

/// An outbox-like table: `n` rows, row i created i hours ago, every 10th row 'pending'. Made by
/// the superuser, granted to `app` and `admin`; the rows are written by `app`.
fn outbox(c: &Cluster, n: i64) {
    c.execute(
        "postgres",
        "CREATE TABLE outbox (id bigserial PRIMARY KEY, tenant int NOT NULL, status text NOT NULL,
                              created_at timestamptz NOT NULL, payload jsonb);",
    );
    c.grant_app_and_admin("postgres");
    c.app("postgres")
        .batch_execute(&format!(
            "INSERT INTO outbox (tenant, status, created_at, payload)
             SELECT g % 3, CASE WHEN g % 10 = 0 THEN 'pending' ELSE 'sent' END,
                    now() - make_interval(hours => g), jsonb_build_object('n', g)
               FROM generate_series(1, {n}) g;"
        ))
        .unwrap();
}

/// A fresh cluster with an [`outbox`] of `n` rows, and an index on its age column when
/// `by_index` (so that sweeps walk it instead of block ranges).
fn outbox_cluster(n: i64, by_index: bool) -> Cluster {
    let c = Cluster::start(&[]);
    outbox(&c, n);
    if by_index {
        c.execute(
            "postgres",
            "CREATE INDEX outbox_created_at ON outbox (created_at)",
        );
    }
    c
}

fn age_policy(db: &mut Client, extra: &str) {
    db.batch_execute(&format!(
        "SELECT retention.add_policy(name => 'outbox', relation => 'outbox', kind => 'age',
                age_column => 'created_at', older_than => '30 days', batch_size => 100 {extra})"
    ))
    .unwrap();
}

fn count(db: &mut Client, sql: &str) -> i64 {
    scalar(db, sql)
}

/// Set-up by the superuser (`ddl`: tables, indexes, functions), then grants to `app` and
/// `admin`; returns connections as `app` and as `admin`.
fn set_up(c: &Cluster, ddl: &str) -> (Client, Client) {
    c.execute("postgres", ddl);
    c.grant_app_and_admin("postgres");
    c.app_and_admin("postgres")
}

/// Table `q`: 1000 expired rows (ids in physical order, tenant = id % 2) whose deletes each take
/// 3 ms and are logged in `del_log` (id, tenant, deleting transaction, time); an `age` policy of
/// 50-row batches. `by_index`: the rows' ages rise with their ids and an index on the age column
/// makes batches walk it (else every row has the same age and no such index exists, and batches
/// walk block ranges). The rows are `app`'s, the policy `admin`'s. Starts `CALL retention.run()`
/// as `admin` in another session and returns (with an `admin` connection) once more than 100
/// rows are gone, so the run is mid-way through its batches.
fn slow_run_under_way(c: &Cluster, by_index: bool) -> (std::thread::JoinHandle<()>, Client) {
    let (mut app, mut admin) = set_up(
        c,
        if by_index {
            "CREATE TABLE q (id int PRIMARY KEY, tenant int NOT NULL, created_at timestamptz NOT NULL);
             CREATE INDEX q_created_at ON q (created_at);"
        } else {
            "CREATE TABLE q (id int PRIMARY KEY, tenant int NOT NULL, created_at timestamptz NOT NULL);"
        },
    );
    app.batch_execute(if by_index {
        "INSERT INTO q SELECT g, g % 2, now() - interval '90 days' + g * interval '1 second'
           FROM generate_series(1, 1000) g;"
    } else {
        "INSERT INTO q SELECT g, g % 2, now() - interval '90 days' FROM generate_series(1, 1000) g;"
    })
    .unwrap();
    c.execute(
        "postgres",
        "
         CREATE TABLE del_log (id int, tenant int, xid xid8, at timestamptz);
         -- Sweeps run user code with search_path = pg_catalog, pg_temp (docs/security.md):
         -- a trigger that names a table in public says where to find it.
         CREATE FUNCTION log_del() RETURNS trigger LANGUAGE plpgsql SET search_path = public AS $$
         BEGIN INSERT INTO del_log VALUES (OLD.id, OLD.tenant, pg_current_xact_id(), clock_timestamp()); PERFORM pg_sleep(0.003); RETURN OLD; END $$;
         CREATE TRIGGER log_del AFTER DELETE ON q FOR EACH ROW EXECUTE FUNCTION log_del();
         -- The trigger fires as the policy's owner (docs/security.md), who writes the log.
         GRANT SELECT, INSERT ON del_log TO admin;",
    );
    admin
        .batch_execute(
            "SELECT retention.add_policy(name => 'q', relation => 'q', kind => 'age', age_column => 'created_at',
                    older_than => '30 days', batch_size => 50);",
        )
        .unwrap();
    let url = c.url_as("postgres", "admin");
    let runner = std::thread::spawn(move || {
        let mut admin = Client::connect(&url, postgres::NoTls).unwrap();
        admin.batch_execute("CALL retention.run()").unwrap();
    });
    assert!(c.wait_until(std::time::Duration::from_secs(30), || count(
        &mut admin,
        "SELECT count(*) FROM del_log"
    ) > 100));
    (runner, admin)
}
