//! Deterministic frames: every common type round-trips, composite keys, key order whatever the
//! storage order, and the slices claim_slice, claim_next and batch_slice render.

use super::*;

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
