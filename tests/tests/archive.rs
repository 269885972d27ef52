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

#[test]
fn every_common_type_round_trips_through_frames() {
    let c = Cluster::start(&[]);
    let (mut app, mut admin, mut arch) = set_up(
        &c,
        "CREATE DOMAIN positive AS int CHECK (VALUE > 0);
         CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
         CREATE TABLE t (id int PRIMARY KEY, a int2, b int4, c int8, d numeric, e text, f bytea, g bool,
                         h timestamptz NOT NULL, i date, j interval, k uuid, l jsonb, m int[], n text[],
                         o positive, p mood, q float8, done bool NOT NULL DEFAULT true);",
    );
    app.batch_execute(
        "INSERT INTO t VALUES
           (1, -7, 2147483647, -9223372036854775808, 12345.678900, 'héllo wörld ✓ 😀', '\\x00ff10', true,
            now() - interval '40 days', '2020-02-29', '1 year 2 mons 3 days 04:05:06.789', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11',
            '{\"k\": [1, \"two\", null]}', '{1,NULL,3}', '{\"a b\",NULL,\"c,d\"}', 5, 'happy', 0.1, true),
           (2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, now() - interval '41 days', NULL, NULL, NULL, NULL, NULL, NULL,
            NULL, NULL, NULL, true);",
    )
    .unwrap();
    admin
        .batch_execute(
            "SELECT retention.add_policy(name => 'audit', relation => 't', kind => 'age', age_column => 'h',
                older_than => '30 days', terminal => 'done', action => 'archive_then_delete');",
        )
        .unwrap();
    let batch: String = arch
        .query_one("SELECT retention.claim_batch('audit')::text", &[])
        .unwrap()
        .get(0);
    let (bytes, ..) = slice(&mut arch, &batch);
    let rows = decode_frames(&bytes).unwrap();
    assert_eq!(rows.len(), 2);
    // Expected: each column's text output under the settings the protocol pins.
    let db = &mut admin;
    db.batch_execute("SET TimeZone = 'UTC'; SET DateStyle = 'ISO, YMD'; SET IntervalStyle = 'postgres'; SET extra_float_digits = 1; SET bytea_output = 'hex'").unwrap();
    let expected: Vec<Row> = db
        .query(
            "SELECT ARRAY[id::text], ARRAY[format('%s', id), a::text, b::text, c::text, d::text, e, CASE WHEN f IS NULL THEN NULL ELSE format('%s', f) END,
                    CASE WHEN g IS NULL THEN NULL ELSE format('%s', g) END, h::text, i::text, j::text, k::text, l::text, m::text, n::text,
                    o::text, p::text, q::text, format('%s', done)] FROM t ORDER BY id",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| Row { key: r.get::<_, Vec<Option<String>>>(0), columns: r.get::<_, Vec<Option<String>>>(1) })
        .collect();
    assert_eq!(rows, expected);
    assert_eq!(rows[0].columns[5].as_deref(), Some("héllo wörld ✓ 😀"));
    assert_eq!(
        rows[0].columns[7].as_deref(),
        Some("t"),
        "booleans in output form"
    );
    let nulls: Vec<usize> = rows[1]
        .columns
        .iter()
        .enumerate()
        .filter(|(_, v)| v.is_none())
        .map(|(i, _)| i)
        .collect();
    assert_eq!(
        nulls,
        (1..=7).chain(9..=17).collect::<Vec<_>>(),
        "NULLs are nil, and only NULLs"
    );
    // Every value goes back through its type's input function to the same value.
    for (i, col) in [
        "a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n", "o", "p", "q",
    ]
    .iter()
    .enumerate()
    {
        let text = rows[0].columns[i + 1].clone();
        let ty = type_of(db, col);
        let same: bool = db
            .query_one(
                &format!("SELECT $1::text::{ty} IS NOT DISTINCT FROM {col} FROM t WHERE id = 1"),
                &[&text],
            )
            .unwrap()
            .get(0);
        assert!(same, "column {col} does not round-trip: {text:?}");
    }
}

fn type_of(db: &mut Client, col: &str) -> String {
    db.query_one("SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = 't'::regclass AND attname = $1", &[&col])
        .unwrap()
        .get(0)
}

#[test]
fn the_guard_refuses_updates_of_eligible_rows_and_allows_the_rest() {
    let c = Cluster::start(&[]);
    let (mut app, mut admin, _) = audit(&c, 100);
    let (code, msg) = expect_error(&mut app, "UPDATE audit SET note = 'changed' WHERE id = 41");
    assert_eq!(code, "RT501");
    assert!(msg.contains("audit"), "{msg}");
    app.batch_execute("UPDATE audit SET note = 'changed' WHERE id IN (3, 45)")
        .unwrap();
    app.batch_execute("DELETE FROM audit WHERE id = 41")
        .unwrap();
    assert_eq!(
        scalar(
            &mut admin,
            "SELECT count(*) FROM audit WHERE note = 'changed'"
        ),
        2
    );
}

#[test]
fn the_check_refuses_a_terminal_row_without_age_and_registration_counts_violators() {
    let c = Cluster::start(&[]);
    let (mut app, mut admin, _) = audit(&c, 20);
    let (code, _) = expect_error(
        &mut app,
        "INSERT INTO audit VALUES (1000, 'closed', NULL, 'x')",
    );
    assert_eq!(code, "23514");
    // A second table with violating rows: made by the superuser, granted, written by `app`.
    c.execute(
        "postgres",
        "CREATE TABLE dirty (id int PRIMARY KEY, status text, closed_at timestamptz);",
    );
    c.grant_app_and_admin("postgres");
    app.batch_execute(
        "INSERT INTO dirty VALUES (1, 'closed', NULL), (2, 'closed', NULL), (3, 'open', NULL);",
    )
    .unwrap();
    let (code, msg) = expect_error(
        &mut admin,
        "SELECT retention.add_policy(name => 'dirty', relation => 'dirty', kind => 'age', age_column => 'closed_at',
                older_than => '1 day', terminal => $$status = 'closed'$$, action => 'archive_then_delete')",
    );
    assert_eq!(code, "23514");
    assert!(msg.starts_with("2 rows"), "{msg}");
    assert_eq!(
        scalar(
            &mut admin,
            "SELECT count(*) FROM retention.policies WHERE name = 'dirty'"
        ),
        0
    );
    // Dropping the policy removes both guards.
    admin
        .batch_execute("SELECT retention.drop_policy('audit')")
        .unwrap();
    app.batch_execute(
        "INSERT INTO audit VALUES (1000, 'closed', NULL, 'x'); UPDATE audit SET note = 'y' WHERE id = 41",
    )
    .unwrap();
}

#[test]
fn claim_frames_complete_deletes_exactly_the_batch_and_records_the_archive() {
    let c = Cluster::start(&[]);
    let (_, mut admin, mut arch) = audit(&c, 100);
    let batch = claim(&mut arch, 10).unwrap();
    let ids = batch_ids(&mut arch, &batch);
    assert_eq!(
        ids,
        vec![31, 32, 33, 34, 36, 37, 38, 39, 41, 42],
        "eligible rows in key order"
    );
    let (_, digest, rows, bytes) = slice(&mut arch, &batch);
    let manifest = manifest_of(&mut arch, &batch, true);
    assert_eq!(manifest["blake3"].as_str(), Some(digest.as_str()));
    assert_eq!(
        (manifest["rows"].as_i64(), manifest["bytes"].as_i64()),
        (Some(rows), Some(bytes))
    );
    assert_eq!(manifest["key_columns"], serde_json::json!(["id"]));
    assert_eq!(
        complete(&mut arch, &batch, &digest, rows, bytes).unwrap(),
        10
    );
    let left: Vec<i64> = admin
        .query(
            "SELECT id FROM audit WHERE id BETWEEN 30 AND 43 ORDER BY id",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(left, vec![30, 35, 40, 43]);
    assert_eq!(
        scalar(&mut admin, "SELECT deleted FROM retention.archives"),
        10
    );
    assert_eq!(
        scalar(
            &mut admin,
            "SELECT archive_id FROM retention.ledger WHERE method = 'prune'"
        ),
        scalar(&mut admin, "SELECT id FROM retention.archives")
    );
    // Completing again is a no-op and cannot delete anything else.
    assert_eq!(
        complete(&mut arch, &batch, &digest, rows, bytes).unwrap(),
        0
    );
    assert_eq!(
        scalar(&mut admin, "SELECT count(*) FROM retention.archives"),
        1
    );
    // The archive index refuses changes even from a superuser (no other role may write it).
    let (code, _) = expect_error(
        &mut c.connect("postgres"),
        "UPDATE retention.archive_records SET rows = 0",
    );
    assert_eq!(code, "RT401");
}

#[test]
fn an_update_between_claim_and_complete_makes_complete_refuse_and_delete_nothing() {
    let c = Cluster::start(&[]);
    let (_, mut admin, mut arch) = audit(&c, 100);
    let batch = claim(&mut arch, 10).unwrap();
    let (_, digest, rows, bytes) = slice(&mut arch, &batch);
    // A superuser bypasses the guard trigger (session_replication_role is a superuser's).
    c.execute("postgres", "SET session_replication_role = replica; UPDATE audit SET note = 'sneaky' WHERE id = 33; RESET session_replication_role");
    let before = scalar(&mut admin, "SELECT count(*) FROM audit");
    let err = complete(&mut arch, &batch, &digest, rows, bytes).unwrap_err();
    assert_eq!(err.code().map(|c| c.code()), Some("RT502"), "{err}");
    assert_eq!(scalar(&mut admin, "SELECT count(*) FROM audit"), before);
    assert_eq!(
        scalar(&mut admin, "SELECT count(*) FROM retention.archives"),
        0
    );
    // The archiver gives the batch up; the refusal is ledgered and the rows are claimable again.
    // An unknown cause is refused (22023) and releases nothing.
    let unknown = arch
        .batch_execute(&format!(
            "SELECT retention.release_batch('{batch}', 'refused: rows changed', 'because')"
        ))
        .unwrap_err();
    assert_eq!(pg_retention_integration::sqlstate(&unknown), "22023");
    arch.batch_execute(&format!(
        "SELECT retention.release_batch('{batch}', 'refused: rows changed', 'refused')"
    ))
    .unwrap();
    assert_eq!(scalar(&mut admin, "SELECT count(*) FROM retention.ledger WHERE method = 'release' AND detail->>'cause' = 'refused'"), 1);
    // Counted by its cause, whatever its reason says.
    assert_eq!(
        scalar(
            &mut admin,
            "SELECT coalesce((errors_total->>'archive_refused')::bigint, 0) FROM retention.stats"
        ),
        1
    );
    assert!(claim(&mut arch, 10).is_some());
}

#[test]
fn a_wrong_digest_or_count_is_refused() {
    let c = Cluster::start(&[]);
    let (mut app, mut admin, mut arch) = audit(&c, 100);
    let batch = claim(&mut arch, 10).unwrap();
    let (_, digest, rows, bytes) = slice(&mut arch, &batch);
    let wrong = blake3::hash(b"something else").to_hex().to_string();
    for (d, r, b) in [
        (wrong.as_str(), rows, bytes),
        (digest.as_str(), rows - 1, bytes),
        (digest.as_str(), rows, bytes + 1),
    ] {
        let err = complete(&mut arch, &batch, d, r, b).unwrap_err();
        assert_eq!(err.code().map(|c| c.code()), Some("RT502"), "{err}");
    }
    assert_eq!(scalar(&mut admin, "SELECT count(*) FROM audit"), 100);
    // A vanished row is refused too.
    app.batch_execute("DELETE FROM audit WHERE id = 31")
        .unwrap();
    let err = complete(&mut arch, &batch, &digest, rows, bytes).unwrap_err();
    assert!(
        err.to_string().contains("vanished")
            || err
                .as_db_error()
                .is_some_and(|e| e.message().contains("vanished")),
        "{err}"
    );
}

#[test]
fn a_hold_placed_after_the_claim_blocks_only_its_rows() {
    let c = Cluster::start(&[]);
    let (_, mut admin, mut arch) = audit(&c, 100);
    let batch = claim(&mut arch, 10).unwrap();
    let (_, digest, rows, bytes) = slice(&mut arch, &batch);
    let hold = scalar(
        &mut admin,
        "SELECT retention.place_hold('audit', 'id IN (32, 37)', 'subpoena', 'legal')",
    );
    assert_eq!(
        complete(&mut arch, &batch, &digest, rows, bytes).unwrap(),
        8
    );
    assert_eq!(
        scalar(
            &mut admin,
            "SELECT count(*) FROM audit WHERE id IN (32, 37)"
        ),
        2
    );
    assert_eq!(
        scalar(
            &mut admin,
            "SELECT count(*) FROM audit WHERE id IN (31, 33, 34, 36, 38, 39, 41, 42)"
        ),
        0
    );
    assert_eq!(scalar(&mut admin, &format!("SELECT rows FROM retention.ledger WHERE method = 'hold_skip' AND {hold} = ANY (hold_ids)")), 2);
}

/// A window widened between the claim and the prune keeps the rows it no longer covers: they
/// are in the slice (archived) and stay in the table, ledgered as kept; the application may
/// then change or delete them like any row not yet eligible. (The chaos run found its checker
/// counting such a row as deleted by retention.)
#[test]
fn a_window_widened_after_the_claim_keeps_the_rows_it_no_longer_covers() {
    let c = Cluster::start(&[]);
    let (mut app, mut admin, mut arch) = audit(&c, 100);
    let batch = claim(&mut arch, 10).unwrap();
    assert_eq!(
        batch_ids(&mut arch, &batch),
        vec![31, 32, 33, 34, 36, 37, 38, 39, 41, 42]
    );
    let (_, digest, rows, bytes) = slice(&mut arch, &batch);
    admin
        .batch_execute("SELECT retention.alter_policy('audit', older_than => '36 days 12 hours')")
        .unwrap();
    assert_eq!(
        complete(&mut arch, &batch, &digest, rows, bytes).unwrap(),
        5
    );
    assert_eq!(
        scalar(
            &mut admin,
            "SELECT count(*) FROM audit WHERE id IN (31, 32, 33, 34, 36)"
        ),
        5
    );
    assert_eq!(
        scalar(
            &mut admin,
            "SELECT count(*) FROM audit WHERE id IN (37, 38, 39, 41, 42)"
        ),
        0
    );
    assert_eq!(
        scalar(
            &mut admin,
            "SELECT rows * 100 + deleted FROM retention.archives"
        ),
        1005
    );
    assert_eq!(
        scalar(
            &mut admin,
            "SELECT rows FROM retention.ledger WHERE method = 'hold_skip'"
        ),
        5
    );
    assert_eq!(
        scalar(
            &mut admin,
            "SELECT rows FROM retention.ledger WHERE method = 'prune'"
        ),
        5
    );
    // Kept, not frozen: the application's own writes go through.
    assert_eq!(
        app.execute("UPDATE audit SET note = 'again' WHERE id = 32", &[])
            .unwrap(),
        1
    );
    assert_eq!(
        app.execute("DELETE FROM audit WHERE id = 31", &[]).unwrap(),
        1
    );
}

/// The prune deletes first and checks after, in one transaction: a changed row among the rows
/// a hold keeps (rendered after the deletes) still refuses the batch, and the refusal undoes
/// the deletes of the other rows.
#[test]
fn a_changed_row_among_the_held_ones_refuses_the_batch_and_deletes_nothing() {
    let c = Cluster::start(&[]);
    let (_, mut admin, mut arch) = audit(&c, 100);
    let batch = claim(&mut arch, 10).unwrap();
    let (_, digest, rows, bytes) = slice(&mut arch, &batch);
    scalar(
        &mut admin,
        "SELECT retention.place_hold('audit', 'id IN (32, 37)', 'subpoena', 'legal')",
    );
    // A superuser bypasses the guard trigger (session_replication_role is a superuser's).
    c.execute("postgres", "SET session_replication_role = replica; UPDATE audit SET note = 'sneaky' WHERE id = 37; RESET session_replication_role");
    let err = complete(&mut arch, &batch, &digest, rows, bytes).unwrap_err();
    assert_eq!(err.code().map(|c| c.code()), Some("RT502"), "{err}");
    assert_eq!(scalar(&mut admin, "SELECT count(*) FROM audit"), 100);
    assert_eq!(
        scalar(&mut admin, "SELECT count(*) FROM retention.archives"),
        0
    );
    assert_eq!(
        scalar(
            &mut admin,
            "SELECT count(*) FROM retention.ledger WHERE method IN ('prune', 'hold_skip')"
        ),
        0
    );
}

/// Claims continue after the policy's last batch, and rows behind it (a released batch) are
/// claimed once a claim from there finds nothing: every eligible row is claimed exactly once.
#[test]
fn claims_walk_forward_and_come_back_for_released_rows() {
    let c = Cluster::start(&[]);
    let (_, mut admin, mut arch) = audit(&c, 100); // ids 31..100 not multiple of 5: 56 eligible rows
    let eligible = scalar(
        &mut admin,
        "SELECT count(*) FROM audit WHERE status = 'closed' AND closed_at < now() - interval '30 days'",
    );
    assert_eq!(eligible, 56);
    let a = claim(&mut arch, 20).unwrap();
    let b = claim(&mut arch, 20).unwrap();
    let (ids_a, ids_b) = (batch_ids(&mut arch, &a), batch_ids(&mut arch, &b));
    assert!(
        ids_a.iter().max() < ids_b.iter().min(),
        "b continues after a"
    );
    arch.execute(
        "SELECT retention.release_batch($1::text::uuid, 'test')",
        &[&a],
    )
    .unwrap();
    let mut seen = ids_b.clone();
    while let Some(next) = claim(&mut arch, 20) {
        seen.extend(batch_ids(&mut arch, &next));
        assert!(seen.len() <= 56, "no row claimed twice: {seen:?}");
    }
    seen.sort();
    let mut want = ids_a;
    want.extend(ids_b);
    want.extend(
        admin.query(
            "SELECT id FROM audit WHERE status = 'closed' AND closed_at < now() - interval '30 days'",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get::<_, i64>(0)),
    );
    want.sort();
    want.dedup();
    assert_eq!(seen, want, "every eligible row claimed exactly once");
}

/// A claim starts after the policy's previous batch even when it was pruned: a row behind it
/// that became eligible later waits until a claim from there finds nothing, then is claimed.
#[test]
fn a_claim_starts_after_the_last_batch_and_reaches_rows_behind_it_last() {
    let c = Cluster::start(&[]);
    let (mut app, _, mut arch) = audit(&c, 100);
    let first = claim(&mut arch, 10).unwrap();
    assert_eq!(batch_ids(&mut arch, &first).last(), Some(&42));
    let (_, digest, rows, bytes) = slice(&mut arch, &first);
    assert_eq!(
        complete(&mut arch, &first, &digest, rows, bytes).unwrap(),
        10
    );
    // Row 35 (open until now) closes long ago: eligible, but behind the last batch.
    app.batch_execute(
        "UPDATE audit SET status = 'closed', closed_at = now() - interval '35 days' WHERE id = 35",
    )
    .unwrap();
    let next = claim(&mut arch, 10).unwrap();
    let ids = batch_ids(&mut arch, &next);
    assert_eq!(
        ids.first(),
        Some(&43),
        "continues after the pruned batch: {ids:?}"
    );
    let mut later = Vec::new();
    while let Some(b) = claim(&mut arch, 10) {
        later.push(batch_ids(&mut arch, &b));
    }
    assert_eq!(
        later.last(),
        Some(&vec![35]),
        "row 35 comes last, once: {later:?}"
    );
    assert!(later[..later.len() - 1]
        .iter()
        .flatten()
        .all(|&id| id != 35));
}

/// Two-column text/int keys: frames carry both key values, batches are disjoint in key order,
/// batch_slice is batch_frames concatenated, the manifest's age range is the batch's, and
/// complete prunes exactly each batch.
#[test]
fn a_composite_key_batch_round_trips_and_prunes_exactly_its_rows() {
    let c = Cluster::start(&[]);
    let (mut app, mut admin, mut arch) = set_up(
        &c,
        "CREATE TABLE ev (tenant text, seq int, at timestamptz NOT NULL, body text, done bool NOT NULL DEFAULT true,
                          PRIMARY KEY (tenant, seq));",
    );
    app.batch_execute(
        "INSERT INTO ev (tenant, seq, at, body)
              SELECT t, g, now() - make_interval(days => 40 + g), 'b' || g
                FROM unnest(ARRAY['a b', 'z''q']) t, generate_series(1, 7) g;
         INSERT INTO ev (tenant, seq, at, body) SELECT 'm', g, now(), 'young' FROM generate_series(1, 3) g;",
    )
    .unwrap();
    admin
        .batch_execute(
            "SELECT retention.add_policy(name => 'ev', relation => 'ev', kind => 'age', age_column => 'at',
                older_than => '30 days', terminal => 'done', action => 'archive_then_delete');",
        )
        .unwrap();
    admin.batch_execute("SET TimeZone = 'UTC'").unwrap();
    let mut keys = Vec::new();
    for max_rows in [5, 20] {
        let batch: String = arch
            .query_one("SELECT retention.claim_batch('ev', $1)::text", &[&max_rows])
            .unwrap()
            .get(0);
        let (bytes, digest, rows, nbytes) = slice(&mut arch, &batch);
        let whole: Vec<u8> = arch
            .query_one("SELECT retention.batch_slice($1::text::uuid)", &[&batch])
            .unwrap()
            .get(0);
        assert_eq!(whole, bytes, "batch_slice is batch_frames concatenated");
        let decoded = decode_frames(&bytes).unwrap();
        let manifest = manifest_of(&mut arch, &batch, false);
        let range = admin
            .query_one(
                "SELECT min(at)::text, max(at)::text FROM ev
                  WHERE (tenant, seq::text) IN (SELECT * FROM unnest($1::text[], $2::text[]))",
                &[
                    &decoded.iter().map(|r| r.key[0].clone()).collect::<Vec<_>>(),
                    &decoded.iter().map(|r| r.key[1].clone()).collect::<Vec<_>>(),
                ],
            )
            .unwrap();
        let (lo, hi): (String, String) = (range.get(0), range.get(1));
        assert_eq!(manifest["age_min"].as_str(), Some(lo.as_str()));
        assert_eq!(manifest["age_max"].as_str(), Some(hi.as_str()));
        assert_eq!(
            manifest["key_columns"],
            serde_json::json!(["tenant", "seq"])
        );
        keys.extend(decoded.iter().map(|r| r.key.clone()));
        assert_eq!(
            complete(&mut arch, &batch, &digest, rows, nbytes).unwrap(),
            rows
        );
    }
    let want: Vec<Vec<Option<String>>> = ["a b", "z'q"]
        .iter()
        .flat_map(|t| (1..=7).map(move |g| vec![Some(t.to_string()), Some(g.to_string())]))
        .collect();
    assert_eq!(keys, want, "both batches, in key order, every old row once");
    assert_eq!(scalar(&mut admin, "SELECT count(*) FROM ev"), 3);
    assert_eq!(
        scalar(&mut admin, "SELECT count(*) FROM ev WHERE tenant = 'm'"),
        3
    );
}

/// claim_slice renders the claimed rows in the claim itself; the bytes are the ones the key set
/// renders to later (batch_frames), and a resumed batch gets the same slice again.
#[test]
fn claim_slice_renders_what_the_key_set_renders() {
    let c = Cluster::start(&[]);
    let (_, _, mut arch) = audit(&c, 200);
    let claim_slice = |db: &mut Client, owner: &str| -> (String, Vec<u8>) {
        let r = db
            .query_one(
                "SELECT batch::text, slice FROM retention.claim_slice('audit', 25, '10 minutes', $1)",
                &[&owner],
            )
            .unwrap();
        (r.get(0), r.get(1))
    };
    let (batch, bytes) = claim_slice(&mut arch, "one");
    assert_eq!(decode_frames(&bytes).unwrap().len(), 25);
    assert_eq!(slice(&mut arch, &batch).0, bytes);
    let (again, resumed) = claim_slice(&mut arch, "one");
    assert_eq!((again, resumed), (batch.clone(), bytes.clone()), "resumed");
    let (other, other_bytes) = claim_slice(&mut arch, "two");
    assert_ne!(other, batch);
    assert_eq!(slice(&mut arch, &other).0, other_bytes);
    while claim(&mut arch, 1000).is_some() {}
    let nothing: bool = arch
        .query_one(
            "SELECT batch IS NULL AND slice IS NULL FROM retention.claim_slice('audit', 10)",
            &[],
        )
        .unwrap()
        .get(0);
    assert!(nothing, "nothing left: (NULL, NULL)");
}

/// claim_next keeps the slice in the claiming backend: claimed_slice hands it over in pieces
/// that concatenate to the bytes the key set renders, once, only in that session and only to the
/// role that claimed; the manifest comes with the claim. A session without the slice gets no
/// rows (the archiver renders the batch again with batch_slice).
#[test]
fn claim_next_hands_its_slice_over_once_to_the_session_and_role_that_claimed() {
    let c = Cluster::start(&[]);
    let (_, _, mut arch) = audit(&c, 20_000);
    let claim_next = |db: &mut Client, owner: &str| -> (String, i64, bool, String) {
        let r = db
            .query_one(
                "SELECT batch::text, bytes, more, manifest::text FROM retention.claim_next('audit', 10000, '10 minutes', $1, false)",
                &[&owner],
            )
            .unwrap();
        (r.get(0), r.get(1), r.get(2), r.get(3))
    };
    let pieces = |db: &mut Client, batch: &str| -> Vec<Vec<u8>> {
        db.query("SELECT retention.claimed_slice($1::text::uuid)", &[&batch])
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect()
    };
    let (batch, bytes, more, manifest) = claim_next(&mut arch, "one");
    assert!(more, "a full batch says there may be more");
    let manifest: serde_json::Value = serde_json::from_str(&manifest).unwrap();
    assert_eq!(manifest, manifest_of(&mut arch, &batch, false));
    assert_eq!(
        (manifest["batch"].as_str(), manifest["rows"].as_i64()),
        (Some(batch.as_str()), Some(10_000))
    );
    let got = pieces(&mut arch, &batch);
    assert!(
        got.len() > 1,
        "a slice of {bytes} bytes comes in pieces, got {}",
        got.len()
    );
    let whole = got.concat();
    assert_eq!(whole.len() as i64, bytes);
    assert_eq!(decode_frames(&whole).unwrap().len(), 10_000);
    assert_eq!(
        slice(&mut arch, &batch).0,
        whole,
        "the pieces are the batch's slice"
    );
    assert!(pieces(&mut arch, &batch).is_empty(), "given out once");

    // Another role in the same session, or another session, gets nothing. Two roles in one
    // session need a superuser's session that switches between them (SET ROLE): it plays
    // `archiver` and `other`, both only in retention_archiver.
    c.execute(
        "postgres",
        "CREATE ROLE other LOGIN IN ROLE retention_archiver",
    );
    let mut su = c.connect("postgres");
    su.batch_execute("SET ROLE archiver").unwrap();
    let (second, ..) = claim_next(&mut su, "one");
    su.batch_execute("SET ROLE other").unwrap();
    assert!(pieces(&mut su, &second).is_empty(), "not to another role");
    su.batch_execute("SET ROLE archiver").unwrap();
    assert!(
        pieces(&mut arch, &second).is_empty(),
        "not to another session"
    );
    let (_, digest, rows, bytes) = slice(&mut arch, &second);
    assert_eq!(
        complete(&mut arch, &second, &digest, rows, bytes).unwrap(),
        rows
    );
    let kept = pieces(&mut su, &second).concat();
    assert_eq!(
        kept.len() as i64,
        bytes,
        "the session that claimed still has it"
    );
    assert!(pieces(&mut arch, &batch).is_empty());
    let (nothing, none): (Option<String>, Option<String>) = {
        while claim(&mut arch, 10_000).is_some() {}
        let r = arch
            .query_one(
                "SELECT batch::text, manifest::text FROM retention.claim_next('audit')",
                &[],
            )
            .unwrap();
        (r.get(0), r.get(1))
    };
    assert_eq!((nothing, none), (None, None), "nothing left: NULLs");
}

/// Frames are in key order whatever the rows' physical order: rows stored in reverse key order
/// render to the same slice in the claim, in batch_slice and inside complete.
#[test]
fn frames_follow_key_order_not_storage_order() {
    let c = Cluster::start(&[]);
    let (mut app, mut admin, mut arch) = set_up(
        &c,
        "CREATE TABLE rev (id int PRIMARY KEY, at timestamptz NOT NULL, done bool NOT NULL DEFAULT true);",
    );
    app.batch_execute(
        "INSERT INTO rev (id, at) SELECT g, now() - interval '40 days' FROM generate_series(50, 1, -1) g;",
    )
    .unwrap();
    admin
        .batch_execute(
            "SELECT retention.add_policy(name => 'rev', relation => 'rev', kind => 'age', age_column => 'at',
                older_than => '30 days', terminal => 'done', action => 'archive_then_delete');",
        )
        .unwrap();
    let r = arch
        .query_one(
            "SELECT batch::text, slice FROM retention.claim_slice('rev', 20)",
            &[],
        )
        .unwrap();
    let (batch, claimed): (String, Vec<u8>) = (r.get(0), r.get(1));
    let ids: Vec<String> = decode_frames(&claimed)
        .unwrap()
        .into_iter()
        .map(|r| r.key[0].clone().unwrap())
        .collect();
    assert_eq!(ids, (1..=20).map(|i| i.to_string()).collect::<Vec<_>>());
    let (again, digest, rows, bytes) = slice(&mut arch, &batch);
    assert_eq!(again, claimed);
    assert_eq!(
        complete(&mut arch, &batch, &digest, rows, bytes).unwrap(),
        20
    );
    assert_eq!(scalar(&mut admin, "SELECT min(id)::bigint FROM rev"), 21);
}

/// Rows are read back where the claim found them: after a table rewrite moved them, the
/// batch's rows are not there (or other rows are), so complete refuses and deletes nothing.
#[test]
fn a_table_rewritten_after_the_claim_makes_complete_refuse() {
    let c = Cluster::start(&[]);
    let (mut app, mut admin, mut arch) = audit(&c, 100);
    let batch = claim(&mut arch, 10).unwrap();
    let (_, digest, rows, bytes) = slice(&mut arch, &batch);
    // Free the first pages, then rewrite: every row moves (VACUUM FULL is the table owner's: the
    // superuser's).
    app.batch_execute("DELETE FROM audit WHERE id <= 30")
        .unwrap();
    c.execute("postgres", "VACUUM FULL audit");
    let before = scalar(&mut admin, "SELECT count(*) FROM audit");
    let err = complete(&mut arch, &batch, &digest, rows, bytes).unwrap_err();
    let db_err = err.as_db_error().expect("a database error");
    assert_eq!(db_err.code().code(), "RT502", "{db_err:?}");
    assert_eq!(scalar(&mut admin, "SELECT count(*) FROM audit"), before);
    arch.execute(
        "SELECT retention.release_batch($1::text::uuid, 'rewritten')",
        &[&batch],
    )
    .unwrap();
    let again = claim(&mut arch, 10).unwrap();
    assert_eq!(batch_ids(&mut arch, &again).first(), Some(&31));
}

/// A table without a primary key: a batch names its rows by their claim-time places, in
/// storage order; identical rows are distinct rows. An update of a claimed row, or a rewrite
/// that moves rows (keeping their xmin), makes the prune refuse and delete nothing; claimed
/// again, the batch prunes exactly its rows.
#[test]
fn a_keyless_batch_is_named_by_place_and_its_prune_proves_the_versions() {
    let c = Cluster::start(&[]);
    let (mut app, mut admin, mut arch) = set_up(
        &c,
        "CREATE TABLE audit (status text NOT NULL, closed_at timestamptz, note text);",
    );
    // Every row twice: 40 identical pairs, all eligible.
    app.batch_execute(
        "INSERT INTO audit SELECT 'closed', now() - interval '60 days', 'n' || g
           FROM generate_series(1, 40) g, generate_series(1, 2) twice",
    )
    .unwrap();
    admin
        .batch_execute(
            "SELECT retention.add_policy(name => 'audit', relation => 'audit', kind => 'age', age_column => 'closed_at',
                older_than => '30 days', terminal => $$status = 'closed'$$, action => 'archive_then_delete');",
        )
        .unwrap();
    let batch = claim(&mut arch, 10).unwrap();
    let (bytes, digest, rows, nbytes) = slice(&mut arch, &batch);
    let keys: Vec<String> = decode_frames(&bytes)
        .unwrap()
        .iter()
        .map(|r| r.key[0].clone().unwrap())
        .collect();
    let first_places: Vec<String> = admin
        .query(
            "SELECT ctid::text AS place FROM audit ORDER BY ctid LIMIT 10",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(
        keys, first_places,
        "keys are the claimed rows' places, in order"
    );

    // A superuser bypasses the guard trigger (session_replication_role is a superuser's).
    c.execute("postgres", "SET session_replication_role = replica; UPDATE audit SET note = 'changed' WHERE ctid = '(0,3)'; RESET session_replication_role");
    let err = complete(&mut arch, &batch, &digest, rows, nbytes).unwrap_err();
    assert_eq!(err.code().map(|c| c.code()), Some("RT502"), "{err}");
    assert_eq!(scalar(&mut admin, "SELECT count(*) FROM audit"), 80);
    arch.batch_execute(&format!(
        "SELECT retention.release_batch('{batch}', 'refused: rows changed', 'refused')"
    ))
    .unwrap();

    // Rows freed ahead of the batch, then a rewrite: rows move to other places, xmin kept.
    let batch = claim(&mut arch, 10).unwrap();
    let (_, digest, rows, nbytes) = slice(&mut arch, &batch);
    app.batch_execute("DELETE FROM audit WHERE note IN ('n1', 'n2')")
        .unwrap();
    c.execute("postgres", "VACUUM FULL audit");
    let err = complete(&mut arch, &batch, &digest, rows, nbytes).unwrap_err();
    assert_eq!(err.code().map(|c| c.code()), Some("RT502"), "{err}");
    let left = scalar(&mut admin, "SELECT count(*) FROM audit");
    assert_eq!(left, 76);
    arch.batch_execute(&format!(
        "SELECT retention.release_batch('{batch}', 'rewritten', 'refused')"
    ))
    .unwrap();

    // Claimed again: the prune deletes exactly the rendered rows, duplicates counted apart.
    let batch = claim(&mut arch, 10).unwrap();
    let (bytes, digest, rows, nbytes) = slice(&mut arch, &batch);
    let notes: Vec<String> = decode_frames(&bytes)
        .unwrap()
        .iter()
        .map(|r| r.columns[2].clone().unwrap())
        .collect();
    assert_eq!(
        complete(&mut arch, &batch, &digest, rows, nbytes).unwrap(),
        10
    );
    assert_eq!(scalar(&mut admin, "SELECT count(*) FROM audit"), left - 10);
    for note in notes.iter().collect::<std::collections::BTreeSet<_>>() {
        let archived = notes.iter().filter(|n| *n == note).count() as i64;
        let stays = scalar(
            &mut admin,
            &format!("SELECT count(*) FROM audit WHERE note = '{note}'"),
        );
        assert_eq!(stays, 2 - archived, "{note}: each archived copy left once");
    }
}

/// Columns that may change after the fixpoint (reference 000's detectability boundary): a
/// declared mutable column changes on an eligible row, guarded by the table's own trigger; any
/// other column is still refused; a change between claim and prune is a new version (the prune
/// refuses), and the slice claimed again carries the value at archive time.
#[test]
fn a_declared_mutable_column_changes_on_an_eligible_row_and_the_slice_keeps_the_archived_value() {
    let c = Cluster::start(&[]);
    let (mut app, mut admin, mut arch) = set_up(
        &c,
        "CREATE TABLE audit (id bigint PRIMARY KEY, status text NOT NULL, closed_at timestamptz,
                             note text, invalidated_at timestamptz);
         CREATE FUNCTION invalidate_once() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             IF OLD.invalidated_at IS NOT NULL AND NEW.invalidated_at IS DISTINCT FROM OLD.invalidated_at THEN
                 RAISE EXCEPTION 'invalidated_at is set once';
             END IF;
             RETURN NEW;
         END $$;
         CREATE TRIGGER invalidate_once BEFORE UPDATE ON audit FOR EACH ROW EXECUTE FUNCTION invalidate_once();",
    );
    app.batch_execute(
        "INSERT INTO audit SELECT g, 'closed', now() - interval '60 days', 'n' || g, NULL FROM generate_series(1, 20) g",
    )
    .unwrap();
    let policy = "SELECT retention.add_policy(name => 'audit', relation => 'audit', kind => 'age', age_column => 'closed_at',
                  older_than => '30 days', terminal => $$status = 'closed'$$, action => 'archive_then_delete'";
    for (extra, state) in [
        (
            ", mutable_columns => ARRAY['invalidated_at'], mutable_guard => 'no_such'",
            "22023",
        ),
        (
            ", mutable_columns => ARRAY['id'], mutable_guard => 'invalidate_once'",
            "22023",
        ),
        (
            ", mutable_columns => ARRAY['nope'], mutable_guard => 'invalidate_once'",
            "42703",
        ),
        (", mutable_columns => ARRAY['invalidated_at']", "22023"),
    ] {
        let (found, message) = expect_error(&mut admin, &format!("{policy}{extra})"));
        assert_eq!(found, state, "{extra}: {message}");
    }
    admin
        .batch_execute(&format!(
            "{policy}, mutable_columns => ARRAY['invalidated_at'], mutable_guard => 'invalidate_once')"
        ))
        .unwrap();
    app.batch_execute("UPDATE audit SET invalidated_at = now() - interval '1 day' WHERE id = 1")
        .unwrap();
    let (state, _) = expect_error(&mut app, "UPDATE audit SET note = 'x' WHERE id = 1");
    assert_eq!(state, "RT501", "other columns stay frozen");
    let (state, _) = expect_error(
        &mut app,
        "UPDATE audit SET invalidated_at = now() WHERE id = 1",
    );
    assert_eq!(
        state, "P0001",
        "the table's own guard holds the mutable column to its rule"
    );

    // Changed between claim and prune: another version, refused; claimed again, archived as it is.
    let batch = claim(&mut arch, 5).unwrap();
    let (_, digest, rows, bytes) = slice(&mut arch, &batch);
    app.batch_execute("UPDATE audit SET invalidated_at = now() WHERE id = 2")
        .unwrap();
    let err = complete(&mut arch, &batch, &digest, rows, bytes).unwrap_err();
    assert_eq!(err.code().map(|c| c.code()), Some("RT502"), "{err}");
    arch.batch_execute(&format!(
        "SELECT retention.release_batch('{batch}', 'refused: rows changed', 'refused')"
    ))
    .unwrap();
    let batch = claim(&mut arch, 5).unwrap();
    let (bytes_, digest, rows, bytes) = slice(&mut arch, &batch);
    let frames = decode_frames(&bytes_).unwrap();
    let second = frames
        .iter()
        .find(|r| r.key[0].as_deref() == Some("2"))
        .unwrap();
    assert!(
        second.columns[4].is_some(),
        "the slice has the value at archive time"
    );
    assert_eq!(
        complete(&mut arch, &batch, &digest, rows, bytes).unwrap(),
        5
    );
}

/// A rewrite that leaves every row where it was (nothing to compact) still gives the table a
/// new relfilenode, and the prune refuses: the proof is by row version in the claimed storage.
#[test]
fn a_rewrite_that_moves_no_row_makes_complete_refuse() {
    let c = Cluster::start(&[]);
    let (_, mut admin, mut arch) = audit(&c, 100);
    let places = |db: &mut Client| -> Vec<String> {
        db.query(
            "SELECT ctid::text || ':' || xmin::text FROM audit ORDER BY id",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
    };
    let before = places(&mut admin);
    let batch = claim(&mut arch, 10).unwrap();
    let (_, digest, rows, bytes) = slice(&mut arch, &batch);
    // VACUUM FULL is the table owner's: the superuser's.
    c.execute("postgres", "VACUUM FULL audit");
    assert_eq!(
        places(&mut admin),
        before,
        "the rewrite moved rows; the test needs it not to"
    );
    let err = complete(&mut arch, &batch, &digest, rows, bytes).unwrap_err();
    let db_err = err.as_db_error().expect("a database error");
    assert_eq!(db_err.code().code(), "RT502", "{db_err:?}");
    assert!(db_err.message().contains("relfilenode"), "{db_err:?}");
    assert_eq!(scalar(&mut admin, "SELECT count(*) FROM audit"), 100);
}

/// A claimed row deleted and its place taken by a new row with the same key (after a vacuum
/// freed it) is another version: its xmin differs, and the prune refuses and deletes nothing.
#[test]
fn a_new_row_in_a_claimed_rows_place_with_its_key_makes_complete_refuse() {
    let c = Cluster::start(&[]);
    let (mut app, mut admin, mut arch) = audit(&c, 100);
    let batch = claim(&mut arch, 10).unwrap();
    let (_, digest, rows, bytes) = slice(&mut arch, &batch);
    let place = |db: &mut Client| -> String {
        db.query_one("SELECT ctid::text FROM audit WHERE id = 33", &[])
            .unwrap()
            .get(0)
    };
    let was = place(&mut admin);
    app.batch_execute("DELETE FROM audit WHERE id = 33")
        .unwrap();
    // VACUUM is the table owner's: the superuser's.
    c.execute("postgres", "VACUUM audit");
    app.batch_execute(
        "INSERT INTO audit SELECT 33, 'closed', closed_at, 'another row' FROM audit WHERE id = 34",
    )
    .unwrap();
    assert_eq!(
        place(&mut admin),
        was,
        "the new row went elsewhere; the test needs it in the old place"
    );
    let err = complete(&mut arch, &batch, &digest, rows, bytes).unwrap_err();
    let db_err = err.as_db_error().expect("a database error");
    assert_eq!(db_err.code().code(), "RT502", "{db_err:?}");
    assert!(
        db_err.message().contains("other row versions"),
        "{db_err:?}"
    );
    assert_eq!(scalar(&mut admin, "SELECT count(*) FROM audit"), 100);
    assert_eq!(
        scalar(
            &mut admin,
            "SELECT count(*) FROM audit WHERE note = 'another row'"
        ),
        1
    );
}

/// With a hundred live batches, a claim that starts over from the lowest key walks the gaps
/// between them: it takes exactly the rows of a released batch in the middle, stops at the next
/// live batch (a batch never spans one), and says there may be more.
#[test]
fn a_claim_among_a_hundred_live_batches_takes_the_gap_between_them() {
    let c = Cluster::start(&[]);
    let (_, _, mut arch) = audit(&c, 2000);
    let batches: Vec<String> = (0..100).map(|_| claim(&mut arch, 10).unwrap()).collect();
    let middle = batch_ids(&mut arch, &batches[49]);
    for b in [&batches[49], &batches[99]] {
        arch.execute(
            "SELECT retention.release_batch($1::text::uuid, 'test')",
            &[b],
        )
        .unwrap();
    }
    // The latest batch was released: the next claim starts from the lowest key.
    let row = arch
        .query_one(
            "SELECT c.batch::text, c.more FROM retention.claim_slice('audit', 1000, '10 minutes', NULL, false) c",
            &[],
        )
        .unwrap();
    let (again, more): (String, bool) = (row.get(0), row.get(1));
    assert_eq!(batch_ids(&mut arch, &again), middle, "exactly the gap");
    assert!(more, "a live batch bounded the gap");
    let next = claim(&mut arch, 1000).unwrap();
    let after: Vec<i64> = batch_ids(&mut arch, &next);
    let last_live = *batch_ids(&mut arch, &batches[98]).last().unwrap();
    assert!(
        after.iter().all(|&id| id > last_live),
        "then the rows after every live batch"
    );
    // retention.batches is a catalog table no role is granted: the superuser reads it.
    assert_eq!(
        scalar(
            &mut c.connect("postgres"),
            "SELECT count(*) FROM retention.batches WHERE state = 'claimed'"
        ),
        100
    );
}

#[test]
fn concurrent_claims_never_overlap() {
    let c = Cluster::start(&[]);
    let (_, mut admin, mut arch) = audit(&c, 200);
    let mut a = archiver(&c);
    let mut ta = a.transaction().unwrap();
    let first: Option<String> = ta
        .query_one("SELECT retention.claim_batch('audit', 20)::text", &[])
        .unwrap()
        .get(0);
    // The first claim is not committed yet: the second waits for its turn, then starts after
    // the first batch.
    let url = c.archiver_url("postgres");
    let second = std::thread::spawn(move || {
        let mut b = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        let mut tb = b.transaction().unwrap();
        let second: Option<String> = tb
            .query_one("SELECT retention.claim_batch('audit', 20)::text", &[])
            .unwrap()
            .get(0);
        tb.commit().unwrap();
        second
    });
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert!(!second.is_finished(), "the second claim did not wait");
    assert_eq!(
        scalar(
            &mut admin,
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
        ),
        1
    );
    ta.commit().unwrap();
    let second = second.join().unwrap();
    let (first, second) = (first.unwrap(), second.unwrap());
    let x = batch_ids(&mut arch, &first);
    let y = batch_ids(&mut arch, &second);
    assert_eq!((x.len(), y.len()), (20, 20));
    assert!(
        x.iter().all(|id| !y.contains(id)),
        "batches overlap: {x:?} / {y:?}"
    );
    let third = claim(&mut arch, 1000).unwrap();
    let z = batch_ids(&mut arch, &third);
    assert!(z.iter().all(|id| !x.contains(id) && !y.contains(id)));
    // A claim needs to see the batches committed while it waited: not in REPEATABLE READ.
    let (code, _) = expect_error(
        &mut arch,
        "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT retention.claim_batch('audit', 20); COMMIT",
    );
    arch.batch_execute("ROLLBACK").unwrap();
    assert_eq!(code, "55000");
}

#[test]
fn an_expired_lease_is_claimable_again_and_its_old_batch_cannot_complete() {
    let c = Cluster::start(&[]);
    let (_, mut admin, mut arch) = audit(&c, 100);
    let old: String = arch
        .query_one(
            "SELECT retention.claim_batch('audit', 10, '1 second', 'archiver-a')::text",
            &[],
        )
        .unwrap()
        .get(0);
    let (_, digest, rows, bytes) = slice(&mut arch, &old);
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let new: String = arch
        .query_one(
            "SELECT retention.claim_batch('audit', 10, '1 minute', 'archiver-b')::text",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(
        batch_ids(&mut arch, &new),
        vec![31, 32, 33, 34, 36, 37, 38, 39, 41, 42],
        "the same rows, re-claimed"
    );
    let err = complete(&mut arch, &old, &digest, rows, bytes).unwrap_err();
    assert_eq!(err.code().map(|c| c.code()), Some("RT503"), "{err}");
    let err = arch
        .query_one(
            "SELECT retention.complete_batch($1::text::uuid, 'k', $2, $3, $4, 'archiver-a')",
            &[&new, &digest, &rows, &bytes],
        )
        .unwrap_err();
    assert_eq!(
        err.code().map(|c| c.code()),
        Some("RT503"),
        "another owner cannot complete it"
    );
    assert_eq!(complete(&mut arch, &new, &digest, rows, bytes).unwrap(), 10);
    assert_eq!(
        scalar(
            &mut admin,
            "SELECT count(*) FROM retention.ledger WHERE method = 'lease_expired'"
        ),
        1
    );
}

#[test]
fn the_delete_path_never_touches_archive_policy_rows() {
    let c = Cluster::start(&[]);
    let (_, mut admin, mut arch) = audit(&c, 100);
    let preview = admin
        .query_one(
            "SELECT would_delete, backlog, archive_bytes_estimate FROM retention.preview('audit')",
            &[],
        )
        .unwrap();
    assert_eq!(preview.get::<_, i64>(0), 0);
    let backlog: i64 = preview.get(1);
    assert!(backlog > 0);
    // The estimate comes from real frames: close to the real slice of all deletable rows.
    let estimate: i64 = preview.get::<_, Option<i64>>(2).unwrap();
    let batch = claim(&mut arch, 1000).unwrap();
    let (_, _, rows, bytes) = slice(&mut arch, &batch);
    assert_eq!(rows, backlog);
    assert!(
        (estimate - bytes).abs() * 10 < bytes,
        "estimate {estimate} vs real {bytes}"
    );
    arch.batch_execute(&format!(
        "SELECT retention.release_batch('{batch}', 'test')"
    ))
    .unwrap();
    admin.batch_execute("CALL retention.run()").unwrap();
    assert_eq!(scalar(&mut admin, "SELECT count(*) FROM audit"), 100);
}

#[test]
fn the_archiver_role_runs_the_protocol_and_nothing_else() {
    let c = Cluster::start(&[]);
    let (mut app, mut admin, mut arch) = audit(&c, 100);
    let batch = claim(&mut arch, 5).unwrap();
    let (_, digest, rows, bytes) = slice(&mut arch, &batch);
    assert_eq!(
        complete(&mut arch, &batch, &digest, rows, bytes).unwrap(),
        5
    );
    for sql in [
        "SELECT retention.add_policy(name => 'x', relation => 'audit', kind => 'age', age_column => 'closed_at', older_than => '1 day')",
        "SELECT retention.place_hold('audit', 'true', 'r', 'a')",
        "DELETE FROM audit",
        "SELECT count(*) FROM audit",
        "CALL retention.run()",
    ] {
        let (code, _) = expect_error(&mut arch, sql);
        assert_eq!(code, "42501", "{sql}");
    }
    // Neither the application nor a retention administrator may claim.
    for db in [&mut app, &mut admin] {
        let (code, _) = expect_error(db, "SELECT retention.claim_batch('audit')");
        assert_eq!(code, "42501", "only the archiver role may claim");
    }
}

/// A refused prune is an error raised by the function itself (no result value to ignore): a
/// caller that catches it and commits commits none of its deletes.
#[test]
fn a_refused_prune_undoes_its_own_deletes_even_when_its_caller_catches_the_refusal() {
    let c = Cluster::start(&[]);
    let (_, mut admin, mut arch) = audit(&c, 200);
    let batch = claim(&mut arch, 50).expect("a batch");
    let (_, digest, rows, bytes) = slice(&mut arch, &batch);
    let before = scalar(&mut admin, "SELECT count(*) FROM audit");
    // The caller catches the refusal (a PL/pgSQL handler, as a scheduler's wrapper would) and
    // the transaction commits. The archiver may not read the table, so the count inside its
    // transaction needs a superuser's session that calls as `archiver` (SET LOCAL ROLE), then
    // reads as itself.
    let mut su = c.connect("postgres");
    let mut tx = su.transaction().unwrap();
    tx.batch_execute("SET LOCAL ROLE archiver").unwrap();
    tx.batch_execute(&format!(
        "CREATE TEMP TABLE caught (state text);
         DO $$ BEGIN
             PERFORM retention._complete_batch('{batch}', 'test/x', '{digest}00', {rows}, {bytes}, NULL);
         EXCEPTION WHEN OTHERS THEN
             INSERT INTO caught VALUES (SQLSTATE);
         END $$;"
    ))
    .unwrap();
    let result: String = tx
        .query_one("SELECT string_agg(state, ',') FROM caught", &[])
        .unwrap()
        .get(0);
    assert_eq!(result, "RT502", "refused");
    tx.batch_execute("RESET ROLE").unwrap();
    let inside: i64 = tx
        .query_one("SELECT count(*) FROM audit", &[])
        .unwrap()
        .get(0);
    assert_eq!(
        inside, before,
        "the deletes are already undone inside the transaction"
    );
    tx.commit().unwrap();
    assert_eq!(scalar(&mut admin, "SELECT count(*) FROM audit"), before);
    assert_eq!(
        scalar(&mut admin, "SELECT count(*) FROM retention.archives"),
        0
    );
    // The batch is still claimed and completes with the right digest.
    assert_eq!(
        complete(&mut arch, &batch, &digest, rows, bytes).unwrap(),
        rows
    );
}

/// A claim renders its rows as the executor produces them: a predicate that fails on a row in
/// the middle of the batch (after earlier rows were rendered) fails the claim with its own
/// error, claims nothing, and the session claims normally once the predicate is mended.
#[test]
fn a_predicate_failing_mid_claim_fails_the_claim_with_its_error_and_claims_nothing() {
    let c = Cluster::start(&[]);
    let (mut app, _, mut arch) = set_up(
        &c,
        "CREATE FUNCTION audit_ok(bigint) RETURNS boolean LANGUAGE sql IMMUTABLE AS 'SELECT true';
         CREATE TABLE audit (id bigint PRIMARY KEY, status text NOT NULL, closed_at timestamptz, note text);",
    );
    app.batch_execute(
        "INSERT INTO audit SELECT g, 'closed', now() - make_interval(days => 100 + g), 'note ' || g
           FROM generate_series(1, 50) g;",
    )
    .unwrap();
    // A terminal predicate calling a user function is the table owner's (or a superuser's) to
    // register: for anyone else it would run in every writer's CHECK (RT101, docs/security.md,
    // "The fixpoint CHECK constraint"). So the superuser, who owns the table, adds this policy.
    c.execute(
        "postgres",
        "SELECT retention.add_policy(name => 'audit', relation => 'audit', kind => 'age', age_column => 'closed_at',
                older_than => '30 days', terminal => $$status = 'closed' AND public.audit_ok(id)$$,
                action => 'archive_then_delete');",
    );
    // Replacing the function is its owner's: the superuser's.
    c.execute(
        "postgres",
        "CREATE OR REPLACE FUNCTION audit_ok(bigint) RETURNS boolean LANGUAGE plpgsql AS $$
         BEGIN
             IF $1 = 20 THEN RAISE EXCEPTION 'no row 20' USING ERRCODE = '22012'; END IF;
             RETURN true;
         END $$;",
    );
    let claim = "SELECT c.batch FROM retention.claim_slice('audit', 30, '10 minutes', 'a', true) c";
    let (state, message) = expect_error(&mut arch, claim);
    assert_eq!((state.as_str(), message.as_str()), ("22012", "no row 20"));
    // retention.batches is a catalog table no role is granted: the superuser reads it.
    let mut su = c.connect("postgres");
    assert_eq!(scalar(&mut su, "SELECT count(*) FROM retention.batches"), 0);
    c.execute(
        "postgres",
        "CREATE OR REPLACE FUNCTION audit_ok(bigint) RETURNS boolean LANGUAGE sql IMMUTABLE AS 'SELECT true'",
    );
    let row = arch
        .query_one(
            "SELECT c.batch::text, length(c.slice) FROM retention.claim_slice('audit', 30, '10 minutes', 'a', true) c",
            &[],
        )
        .unwrap();
    let (batch, bytes): (Option<String>, Option<i32>) = (row.get(0), row.get(1));
    assert!(bytes.unwrap_or(0) > 0);
    assert_eq!(
        scalar(
            &mut su,
            &format!(
                "SELECT rows FROM retention.batches WHERE id = '{}'",
                batch.unwrap_or_default()
            )
        ),
        30
    );
}
