//! Partitioned tables: a policy on the partitioned table governs every leaf (also leaves added
//! later), expired range leaves are dropped whole and ledgered with their exact row counts,
//! holds on the table or on one leaf keep their rows, foreign keys and default partitions keep
//! leaves from being dropped, ranked kinds group across leaves, preview names the leaves the
//! next run drops, a drop never waits behind a long transaction, and pg_partman's trees are
//! retired while pg_partman premakes new leaves.
//!
//! Production roles throughout: tables and partitions are made by the superuser in set-up and
//! handed to `admin` (a whole leaf is dropped only by a policy owner who is a member of the
//! leaf's owner, and detached first only by one who is also a member of the partitioned
//! table's: docs/security.md; `admin` stays a member of `retention_admin` only, not a
//! superuser), application rows are written by `app` (table privileges only), every
//! `retention.*` call is made by `admin`, who also reads the results, and the archiver runs as
//! `archiver` (only in `retention_archiver`) and restores as `restorer`
//! (`Cluster::archiver_url`, `Cluster::restorer_url`). The superuser stays only where a test
//! needs it, commented: DDL mid-test, event triggers that stand in for a failing or stalled
//! `DROP TABLE`, reading `retention.retiring_leaves` (a catalog table no role is granted), and
//! pg_partman's own configuration and maintenance.

use pg_retention_integration::archiver::{self, Archiver};
use pg_retention_integration::{
    column, drops, expect_error, no_event_trigger, on_drop_table, scalar, text, Cluster,
};
use postgres::Client;
use std::time::Duration;

/// Archive policies on partitioned tables: leaf by leaf, restorable, no delete policy above them.
mod archive;
/// Leaves detached by a failed or killed run are attached again, or kept when changed.
mod detached_leaves;
/// Holds on the partitioned table or on one leaf keep their rows and their leaves.
mod holds;
/// Leaves never dropped whole: the default partition, a referenced leaf, a consumer-pinned leaf.
mod kept_leaves;
/// Drops never wait behind other transactions' locks nor lock the partitioned table.
mod locks;
/// A pg_partman-managed table retired while pg_partman premakes new leaves.
mod pg_partman;
/// preview_partitions names exactly the leaves the next run drops.
mod preview;
/// keep_latest, versions and entity policies rank and group across leaves.
mod ranked_kinds;
/// Expired leaves dropped whole and ledgered; a policy on the parent governs leaves added later.
mod whole_leaves;

/// Hands each partitioned table of `parents`, with every partition under it now, to `admin`,
/// then grants every table of schema `public` to `app` and `admin` (`Cluster::grant_app_and_admin`;
/// call again after making more). Run by the superuser, who made them in set-up: in production a
/// partitioned table and its leaves belong to the role that owns their policy, or the engine
/// sweeps expired leaves row by row instead of dropping them (docs/security.md).
fn own_and_grant(c: &Cluster, parents: &[&str]) {
    c.grant_app_and_admin("postgres");
    for parent in parents {
        c.execute(
            "postgres",
            &format!(
                "DO $$
                 DECLARE r regclass;
                 BEGIN
                     FOR r IN SELECT relid FROM pg_partition_tree('{parent}') LOOP
                         EXECUTE format('ALTER TABLE %s OWNER TO admin', r);
                     END LOOP;
                 END $$;"
            ),
        );
    }
}

/// `events`, partitioned by day on `created_at`: one leaf per day from 10 days ago to tomorrow
/// (`events_m10` … `events_p1`, bounds at midnight), a default partition, and 288 rows, row i
/// created i hours ago (rows 241..288, 10 to 12 days old, land in the default partition),
/// tenant = i % 3. Made by the superuser and handed to `admin`, the rows written by `app`;
/// returns connections as `app` and as `admin`.
fn events(c: &Cluster) -> (Client, Client) {
    c.execute(
        "postgres",
        "CREATE TABLE events (id bigint NOT NULL, tenant int NOT NULL, created_at timestamptz NOT NULL,
                              payload text, PRIMARY KEY (id, created_at)) PARTITION BY RANGE (created_at);
         DO $$
         BEGIN
             FOR d IN -10..1 LOOP
                 EXECUTE format('CREATE TABLE %I PARTITION OF events FOR VALUES FROM (%L) TO (%L)',
                                'events_' || CASE WHEN d < 0 THEN 'm' || -d ELSE 'p' || d END,
                                date_trunc('day', now()) + d * interval '1 day',
                                date_trunc('day', now()) + (d + 1) * interval '1 day');
             END LOOP;
         END $$;
         CREATE TABLE events_default PARTITION OF events DEFAULT;",
    );
    own_and_grant(c, &["events"]);
    let (mut app, admin) = c.app_and_admin("postgres");
    // One row an hour, each at the hour's last second: a day's youngest row is at 23:59:59, so
    // the leaf of 5 days ago always holds a row younger than the 5-day cutoff (with rows at
    // now() - g hours, after 23:00 every row of it was older, and it went whole).
    app.batch_execute(
        "INSERT INTO events SELECT g, g % 3, date_trunc('hour', now()) - make_interval(hours => g)
                                             + interval '59 minutes 59 seconds', repeat('x', 20)
           FROM generate_series(1, 288) g;",
    )
    .unwrap();
    (app, admin)
}

fn policy(db: &mut Client, extra: &str) {
    db.batch_execute(&format!(
        "SELECT retention.add_policy(name => 'events', relation => 'events', kind => 'age',
                age_column => 'created_at', older_than => '5 days', batch_size => 50 {extra})"
    ))
    .unwrap();
}

fn count(db: &mut Client, sql: &str) -> i64 {
    scalar(db, sql)
}

fn expired(db: &mut Client) -> i64 {
    count(
        db,
        "SELECT count(*) FROM events WHERE created_at < now() - interval '5 days'",
    )
}

/// The leaves whose whole day lies before the 5-day cutoff, whatever the time of day:
/// 10 to 6 days ago.
const WHOLLY_EXPIRED: [&str; 5] = [
    "events_m10",
    "events_m9",
    "events_m8",
    "events_m7",
    "events_m6",
];

fn exists(db: &mut Client, table: &str) -> bool {
    count(
        db,
        &format!("SELECT count(*) FROM pg_class WHERE relname = '{table}'"),
    ) == 1
}

/// (partition, rows) of each wholly expired leaf now, in the ledger's naming.
fn wholly_expired_rows(db: &mut Client) -> Vec<(String, i64)> {
    WHOLLY_EXPIRED
        .iter()
        .map(|l| {
            let n = count(db, &format!("SELECT count(*) FROM ONLY {l}"));
            (format!("public.{l}"), n)
        })
        .collect()
}

/// (partition, rows) of every `drop_partition` ledger record, by partition name.
fn sorted(mut names: Vec<String>) -> Vec<String> {
    names.sort();
    names
}

fn public(leaves: &[&str]) -> Vec<String> {
    sorted(leaves.iter().map(|l| format!("public.{l}")).collect())
}
