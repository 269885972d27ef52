//! The background worker against a real cluster with the library preloaded: scheduling,
//! single pruner, signals, crashes, caps and health.
//!
//! Production roles throughout: tables, indexes, triggers and functions are made by the
//! superuser in set-up, application rows are written by `app` (table privileges only), and
//! policies, `retention.wake()`, `CALL retention.run()`, `retention.health()` and every read of
//! the retention views are `admin`'s (a member of `retention_admin`, not a superuser), who also
//! reads the governed tables for the assertions. What only a monitoring role may see —
//! `pg_stat_activity` and `pg_stat_replication` rows of other roles' backends (the worker's) —
//! is read by `mon`, a LOGIN member of `pg_monitor` (docs/observability.md). The worker runs as
//! the default `pg_retention.role` (the bootstrap superuser), except in
//! `the_worker_sweeps_a_full_cycle_as_a_non_superuser_role`, which is about that role; a run it
//! drives runs each policy as the policy's owner, `admin`. The superuser stays only where a
//! test needs it, commented: configuration and reloads, signalling the worker, DDL mid-test,
//! event triggers, backdating a catalog row, reading catalog tables no role is granted, pausing
//! a standby's replay.

use pg_retention_integration::{column, drops, no_event_trigger, on_drop_table, scalar, Cluster};
use postgres::Client;
use std::time::Duration;

/// Signals, crashes and failures the worker survives without stopping the others.
mod failures;
/// When and as whom the worker sweeps: wake, a single pruner, SIGHUP, a non-superuser role.
mod scheduling;
/// What holds a sweep back: the cycle cap and a lagging streaming replica.
mod throttles;
/// No running worker: disabled, not preloaded, or pg_cron in its place.
mod without_worker;

const WAIT: Duration = Duration::from_secs(60);

/// A connection as `mon`: a LOGIN member of `pg_monitor` only, the role a monitoring agent
/// connects as (docs/observability.md), which sees every backend in `pg_stat_activity` and
/// `pg_stat_replication`. Made by the superuser on first use; idempotent.
fn monitor(c: &Cluster) -> Client {
    c.execute(
        "postgres",
        "DO $$ BEGIN
             CREATE ROLE mon LOGIN IN ROLE pg_monitor;
         EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
         END $$",
    );
    c.connect_as("postgres", "mon")
}

fn worker_cluster(extra: &[&str]) -> Cluster {
    let mut settings = vec![
        "pg_retention.enabled = on",
        "pg_retention.databases = 'postgres'",
        "pg_retention.naptime = '1h'",
        "pg_retention.jitter = 0",
    ];
    settings.extend_from_slice(extra);
    Cluster::start(&settings)
}

/// Waits for the first visit to the database to complete its cycle and end (read by `admin`
/// from `retention.workers`).
fn first_visit(c: &Cluster) {
    let up = c.wait_until(WAIT, || {
        let mut db = c.admin("postgres");
        scalar(
            &mut db,
            "SELECT count(*) FROM retention.workers WHERE NOT running AND state = 'idle' AND last_cycle_end IS NOT NULL",
        ) == 1
    });
    assert!(up, "no visit completed a cycle; server log:\n{}", c.log());
}

fn cycles_ended(db: &mut Client) -> String {
    db.query_one(
        "SELECT coalesce(max(last_cycle_end), '-infinity')::text FROM retention.workers",
        &[],
    )
    .unwrap()
    .get(0)
}

/// Asks for a visit and waits for the cycle it runs to end and the visit with it (as `admin`).
fn wake_and_wait(c: &Cluster) {
    let mut db = c.admin("postgres");
    let before = cycles_ended(&mut db);
    let woke: bool = db.query_one("SELECT retention.wake()", &[]).unwrap().get(0);
    assert!(woke, "wake() did not reach the launcher");
    let done = c.wait_until(WAIT, || {
        let mut db = c.admin("postgres");
        cycles_ended(&mut db) > before
            && scalar(
                &mut db,
                "SELECT count(*) FROM retention.workers WHERE state = 'idle' AND NOT running",
            ) == 1
    });
    assert!(done, "no cycle ended after wake(); log:\n{}", c.log());
}

/// `table` of `n` rows spread over 60 days (about half past the 30-day window), made by the
/// superuser and granted, its rows written by `app`, its policy `admin`'s; returns a
/// connection as `admin`.
fn outbox(c: &Cluster, table: &str, n: i64) -> Client {
    c.execute(
        "postgres",
        &format!(
            "CREATE TABLE {table} (id bigserial PRIMARY KEY, created_at timestamptz NOT NULL);"
        ),
    );
    c.grant_app_and_admin("postgres");
    c.app("postgres")
        .batch_execute(&format!(
            "INSERT INTO {table} (created_at)
             SELECT now() - (g::float8 / {n}) * interval '60 days' FROM generate_series(1, {n}) g;"
        ))
        .unwrap();
    let mut admin = c.admin("postgres");
    admin
        .batch_execute(&format!(
            "SELECT retention.add_policy(name => '{table}', relation => '{table}', kind => 'age',
                    age_column => 'created_at', older_than => '30 days', batch_size => 50);"
        ))
        .unwrap();
    admin
}

fn expired(db: &mut Client, table: &str) -> i64 {
    scalar(
        db,
        &format!("SELECT count(*) FROM {table} WHERE created_at < now() - interval '30 days'"),
    )
}

/// Makes every deletion from `table` take `ms` milliseconds: a trigger made by the superuser
/// (DDL on its table; it fires as the policy's owner).
fn slow_deletes(c: &Cluster, table: &str, ms: u32) {
    c.execute(
        "postgres",
        &format!(
            "CREATE FUNCTION slow_{table}() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN PERFORM pg_sleep({ms} / 1000.0); RETURN OLD; END $$;
             CREATE TRIGGER slow AFTER DELETE ON {table} FOR EACH ROW EXECUTE FUNCTION slow_{table}();"
        ),
    );
}
