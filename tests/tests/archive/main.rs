//! Archive-then-prune inside the extension: fixpoint guards, claimed batches, deterministic
//! frames, the digest-checked prune. The test plays the archiver's part through SQL.
//!
//! Production roles throughout: tables are made by the superuser in set-up, application rows
//! are written by `app` (table privileges only), policies, holds, previews and runs are
//! `admin`'s (a member of `retention_admin`, who also reads the tables and views for the
//! assertions), and the archive protocol is called by `archiver` (a LOGIN only in
//! `retention_archiver`, with no privileges on the governed tables). The superuser stays only
//! where a test needs it, commented: DDL and VACUUM mid-test, bypassing the guard trigger,
//! reading `retention.batches` (a catalog table no role is granted).

use pg_retention_format::{decode_frames, summarize, Row};
use pg_retention_integration::{expect_error, manifest_of, scalar, Cluster};
use postgres::Client;

/// What each path and role may do: the delete path and the archiver role.
mod boundaries;
/// Claiming batches: walking forward and back, gaps, concurrency, leases, failing predicates.
mod claims;
/// Deterministic frames: every common type, composite keys, key order, the slices handed over.
mod frames;
/// The fixpoint guards: the update trigger, the terminal CHECK, declared mutable columns.
mod guards;
/// The digest-checked prune: exactly its batch, refusals, holds, a widened window, undo.
mod prune;
/// The prune's proof by row version and place: rewrites, keyless tables, reused places.
mod row_versions;

/// A connection as `archiver` (made on first use by `Cluster::archiver_url`).
fn archiver(c: &Cluster) -> Client {
    Client::connect(&c.archiver_url("postgres"), postgres::NoTls)
        .unwrap_or_else(|e| panic!("connect as archiver: {e}"))
}

/// Set-up by the superuser (`ddl`: tables, types, functions), then grants to `app` and `admin`;
/// returns connections as `app`, as `admin` and as `archiver`.
fn set_up(c: &Cluster, ddl: &str) -> (Client, Client, Client) {
    c.execute("postgres", ddl);
    c.grant_app_and_admin("postgres");
    let (app, admin) = c.app_and_admin("postgres");
    (app, admin, archiver(c))
}

/// An audit table: rows 1..=n, every 5th still open (NULL closed_at); closed row g closed g days
/// ago. Made by the superuser, the rows written by `app`, the archive policy `admin`'s; returns
/// connections as `app`, `admin` and `archiver`.
fn audit(c: &Cluster, n: i64) -> (Client, Client, Client) {
    let (mut app, mut admin, arch) = set_up(
        c,
        "CREATE TABLE audit (id bigint PRIMARY KEY, status text NOT NULL, closed_at timestamptz, note text);",
    );
    app.batch_execute(&format!(
        "INSERT INTO audit SELECT g, CASE WHEN g % 5 = 0 THEN 'open' ELSE 'closed' END,
                CASE WHEN g % 5 = 0 THEN NULL ELSE now() - make_interval(days => g) END, 'note ' || g
           FROM generate_series(1, {n}) g;"
    ))
    .unwrap();
    admin
        .batch_execute(
            "SELECT retention.add_policy(name => 'audit', relation => 'audit', kind => 'age', age_column => 'closed_at',
                older_than => '30 days', terminal => $$status = 'closed'$$, action => 'archive_then_delete');",
        )
        .unwrap();
    (app, admin, arch)
}

fn claim(db: &mut Client, max_rows: i32) -> Option<String> {
    db.query_one(
        "SELECT retention.claim_batch('audit', $1)::text",
        &[&max_rows],
    )
    .unwrap()
    .get(0)
}

/// The slice of a batch as the archiver would write it, and its summary.
fn slice(db: &mut Client, batch: &str) -> (Vec<u8>, String, i64, i64) {
    let frames: Vec<Vec<u8>> = db
        .query(
            "SELECT f FROM retention.batch_frames($1::text::uuid) f",
            &[&batch],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let (digest, rows, bytes) = summarize(frames.iter().map(Vec::as_slice));
    (frames.concat(), digest, rows as i64, bytes as i64)
}

fn complete(
    db: &mut Client,
    batch: &str,
    digest: &str,
    rows: i64,
    bytes: i64,
) -> Result<i64, postgres::Error> {
    db.query_one(
        "SELECT retention.complete_batch($1::text::uuid, 'test/' || $1, $2, $3, $4)",
        &[&batch, &digest, &rows, &bytes],
    )
    .map(|r| r.get(0))
}

fn batch_ids(db: &mut Client, batch: &str) -> Vec<i64> {
    let (bytes, ..) = slice(db, batch);
    decode_frames(&bytes)
        .unwrap()
        .iter()
        .map(|r| r.key[0].as_deref().unwrap().parse().unwrap())
        .collect()
}
