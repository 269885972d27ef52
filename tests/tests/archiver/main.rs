//! The archiver binary end to end against a real cluster, on the file:// store and on a real
//! S3-compatible server, plus the fault suite: after every fault, no row is deleted without a
//! verified archive and no row is lost.
//!
//! The archiver connects as production runs it: as `archiver`, a LOGIN role that is only a
//! member of `retention_archiver` ([`Cluster::archiver_url`]), for `once`, `run`, `ls`, `verify`
//! and every other command but `restore`, which creates a table and so runs as `restorer`
//! ([`Cluster::restorer_url`]: a member of `retention_archiver` with CREATE on schema `public`,
//! not a superuser). The test's own setup and checks use the superuser.

use pg_retention_integration::archiver::{terminate, text, Archiver};
use pg_retention_integration::seaweed::{ACCESS_KEY, SECRET_KEY};
use pg_retention_integration::tls::{tls_only_cluster, Certs};
use pg_retention_integration::{manifest_of, scalar, Cluster, Seaweed};
use postgres::Client;
use std::path::PathBuf;

/// How batches are claimed and paced: overlapping batches, concurrent archivers, catching up.
mod batching;
/// Reaching the store and the database: S3 down, the standard environment, TLS.
mod connections;
/// An archiver killed at each point of a batch, and the one that finishes after it.
mod crashes;
/// What stops or narrows a prune: refusals, foreign or corrupted objects, changed rows, holds.
mod guards;
/// Archive → prune → verify → restore round trips, and restore refusing a type that is not a type.
mod round_trips;
/// The archiver as a service: metrics, health, SIGTERM and `--help`.
mod service;

const ELIGIBLE: &str = "status = 'closed' AND closed_at < now() - interval '30 days'";

/// An audit table of `n` rows of mixed types; about 60% are archive-eligible. `expected` keeps
/// a copy of the eligible rows to compare restores with.
fn mixed_audit(db: &mut Client, n: i64) {
    db.batch_execute(&format!(
        "CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
         CREATE DOMAIN positive AS int CHECK (VALUE > 0);
         CREATE TABLE audit (id bigint PRIMARY KEY, status text NOT NULL, closed_at timestamptz, amount numeric(12,2),
                             note text, flag bool, data jsonb, tags text[], raw bytea, day date, span interval,
                             ref uuid, mood mood, level positive);
         INSERT INTO audit
         SELECT g, CASE WHEN g % 10 = 0 THEN 'open' ELSE 'closed' END,
                CASE WHEN g % 10 = 0 THEN NULL ELSE now() - make_interval(days => g % 90, hours => 12) END,
                g * 1.25, CASE WHEN g % 7 = 0 THEN NULL ELSE 'note ✓ ' || g || E'\\twith tab' END,
                CASE WHEN g % 7 = 0 THEN NULL ELSE g % 2 = 0 END,
                jsonb_build_object('g', g, 'nested', jsonb_build_array(g, 'x')),
                CASE WHEN g % 7 = 0 THEN NULL ELSE ARRAY['a' || g, NULL, 'b,c'] END,
                decode(md5(g::text), 'hex'), DATE '2020-01-01' + g, make_interval(mins => g),
                md5(g::text)::uuid, (ARRAY['sad', 'ok', 'happy'])[1 + g % 3]::mood, 1 + g % 50
           FROM generate_series(1, {n}) g;
         SELECT retention.add_policy(name => 'audit', relation => 'audit', kind => 'age', age_column => 'closed_at',
                older_than => '30 days', terminal => $$status = 'closed'$$, action => 'archive_then_delete');
         CREATE TABLE expected AS SELECT * FROM audit WHERE {ELIGIBLE};"
    ))
    .unwrap();
}

fn eligible(db: &mut Client) -> i64 {
    scalar(db, &format!("SELECT count(*) FROM audit WHERE {ELIGIBLE}"))
}

fn total(db: &mut Client) -> i64 {
    scalar(db, "SELECT count(*) FROM audit")
}

/// The rows of `expected` that are in the table no more are exactly the rows archived.
fn assert_nothing_lost(db: &mut Client) {
    let missing = scalar(
        db,
        "SELECT count(*) FROM expected e WHERE NOT EXISTS (SELECT 1 FROM audit a WHERE a.id = e.id)",
    );
    let archived = scalar(
        db,
        "SELECT coalesce(sum(deleted), 0)::bigint FROM retention.archives",
    );
    assert_eq!(
        missing, archived,
        "every deleted row is in a verified archive, and only those are deleted"
    );
    assert_eq!(
        scalar(db, "SELECT count(*) FROM audit a WHERE NOT (status = 'closed' AND closed_at < now() - interval '30 days')"),
        scalar(db, "SELECT count(*) FROM (SELECT 1 FROM audit) x") - eligible(db),
        "no ineligible row was touched"
    );
}

fn file_store() -> (PathBuf, String) {
    let dir = pg_retention_integration::temp_dir("pg-retention-archive");
    let url = format!("file://{}", dir.display());
    (dir, url)
}
