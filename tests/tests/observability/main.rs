//! Observability (docs/observability.md): the ledger's running totals equal the ledger, and
//! summing `rows_deleted` gives the rows deleted; `retention.metrics()` for pg_monitor, with the
//! signal of a stall; reads stay cheap at a million ledger rows; the archiver's HTTP side (exact
//! paths and methods, `serve-metrics`), every family it declares updated in an end-to-end run;
//! and a real Prometheus scraping the archiver and postgres_exporter (deploy/'s query file),
//! with deploy/'s alert rules, finding every family and firing the alert the test provokes.
//!
//! Production roles throughout: tables are made by the superuser in set-up, application rows
//! are written by `app` (table privileges only), policies, holds, `CALL retention.run()` and
//! every read of the retention views are `admin`'s (a member of `retention_admin`, not a
//! superuser, who also reads the governed tables for the assertions), `retention.metrics()` is
//! read by `mon` (a LOGIN member of `pg_monitor` only, the monitoring role docs/observability.md
//! names; postgres_exporter connects as it), the archiver runs as `archiver` (a LOGIN only in
//! `retention_archiver`) and the erasure is `dpo`'s (a LOGIN only in `retention_eraser`, with
//! SELECT and DELETE on the table). The superuser stays only where a test needs it, commented:
//! reading and loading the catalog tables (`retention.ledger_entries`,
//! `retention.archive_records`) that no role is granted.

use pg_retention_integration::archiver::{terminate, text, Archiver};
use pg_retention_integration::{expect_error, scalar, Cluster};
use postgres::Client;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// retention.stats' running totals equal the ledger, and stay cheap at a million rows.
mod counters;
/// retention.metrics(): read by pg_monitor only, with the signal of a stall.
mod metrics;
/// The archiver's HTTP side, postgres_exporter and a real Prometheus with deploy/'s rules.
mod prometheus;

/// Makes `role` (LOGIN, a member of `member_of` only) unless it exists; by the superuser.
fn login_role(c: &Cluster, role: &str, member_of: &str) {
    c.execute(
        "postgres",
        &format!(
            "DO $$ BEGIN
                 CREATE ROLE {role} LOGIN IN ROLE {member_of};
             EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
             END $$"
        ),
    );
}

/// A connection as `mon`: a LOGIN member of `pg_monitor` only, the role a metrics exporter
/// connects as (docs/observability.md). Made on first use; idempotent.
fn monitor(c: &Cluster) -> Client {
    login_role(c, "mon", "pg_monitor");
    c.connect_as("postgres", "mon")
}

/// Three policies: `outbox` (delete, never run: its rows are 40 days old against a 30-day
/// window, a stall), `events` (delete, run once, with a hold and a row cap), `audit`
/// (archive_then_delete, 300 closed rows of ten subjects, 40 to 60 days old). The tables are
/// made by the superuser, their rows written by `app`, the policies, the hold and the run
/// `admin`'s; returns a connection as `admin`.
fn scene(c: &Cluster) -> Client {
    c.execute(
        "postgres",
        "CREATE TABLE outbox (id bigint PRIMARY KEY, created_at timestamptz NOT NULL);
         CREATE INDEX ON outbox (created_at);
         CREATE TABLE events (id bigint PRIMARY KEY, tenant int, created_at timestamptz NOT NULL);
         CREATE TABLE audit (id bigint PRIMARY KEY, subject int NOT NULL, status text NOT NULL,
                             closed_at timestamptz, note text);",
    );
    c.grant_app_and_admin("postgres");
    let (mut app, mut db) = c.app_and_admin("postgres");
    app.batch_execute(
        "INSERT INTO outbox SELECT g, now() - interval '40 days' FROM generate_series(1, 50) g;
         INSERT INTO events SELECT g, g % 5, now() - interval '10 days' FROM generate_series(1, 500) g;
         INSERT INTO audit SELECT g, g % 10, 'closed', now() - make_interval(days => 40 + g % 20), 'n' || g
           FROM generate_series(1, 300) g;",
    )
    .unwrap();
    db.batch_execute(
        "SELECT retention.add_policy(name => 'outbox', relation => 'outbox', kind => 'age',
                age_column => 'created_at', older_than => '30 days');
         SELECT retention.add_policy(name => 'events', relation => 'events', kind => 'age',
                age_column => 'created_at', older_than => '1 day', batch_size => 50,
                max_rows_per_run => 200);
         SELECT retention.place_hold('events', 'tenant = 0', 'case', 'legal');
         SELECT retention.add_policy(name => 'audit', relation => 'audit', kind => 'age', age_column => 'closed_at',
                older_than => '30 days', terminal => $$status = 'closed'$$, action => 'archive_then_delete');",
    )
    .unwrap();
    // On its own: a CALL that commits cannot share an implicit transaction.
    db.batch_execute("CALL retention.run('events')").unwrap();
    db
}
