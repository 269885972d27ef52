//! The fixture the calls point at: the role, application tables and policies made in setup,
//! and the restore that brings them back after every routine.

use super::*;

/// A policy made in setup and restored after every routine.
struct Policy {
    name: &'static str,
    /// The arguments of `add_policy` after `name`.
    add: &'static str,
}

const POLICIES: [Policy; 4] = [
    Policy {
        name: "fuzz_age",
        add: "relation => 'public.fuzz_plain', kind => 'age', age_column => 'created_at',
              older_than => '30 days', scope => 'tenant <> 3', order_by => 'created_at',
              batch_size => 50",
    },
    Policy {
        name: "fuzz_latest",
        add: "relation => 'public.fuzz_ranked', kind => 'keep_latest', group_by => '{tenant}',
              order_by => 'created_at', keep => 5",
    },
    Policy {
        name: "fuzz_parted",
        add: "relation => 'public.fuzz_parted', kind => 'age', age_column => 'created_at',
              older_than => '30 days'",
    },
    Policy {
        name: "fuzz_archive",
        add: "relation => 'public.fuzz_enum', kind => 'age', age_column => 'created_at',
              older_than => '30 days', terminal => 'state = ''done''',
              action => 'archive_then_delete'",
    },
];

/// The application tables, owned by the superuser; `fuzzer` may read, update and delete.
const SCHEMA: &str = "
    CREATE ROLE fuzzer LOGIN
        IN ROLE retention_admin, retention_archiver, retention_consumer, retention_eraser;
    CREATE TYPE fuzz_state AS ENUM ('open', 'done', 'it''s \\ odd');
    CREATE TABLE fuzz_plain (id int PRIMARY KEY, tenant int NOT NULL,
                             created_at timestamptz NOT NULL, note text);
    CREATE INDEX ON fuzz_plain (created_at);
    -- A ranked policy governs its table alone.
    CREATE TABLE fuzz_ranked (LIKE fuzz_plain INCLUDING ALL);
    CREATE TABLE fuzz_parted (id int NOT NULL, created_at timestamptz NOT NULL, note text,
                              PRIMARY KEY (id, created_at)) PARTITION BY RANGE (created_at);
    CREATE TABLE fuzz_parted_old PARTITION OF fuzz_parted
        FOR VALUES FROM (MINVALUE) TO ('2020-01-01');
    CREATE TABLE fuzz_parted_new PARTITION OF fuzz_parted
        FOR VALUES FROM ('2020-01-01') TO ('2100-01-01');
    CREATE TABLE fuzz_parted_default PARTITION OF fuzz_parted DEFAULT;
    CREATE TABLE fuzz_enum (id bigint PRIMARY KEY, state fuzz_state NOT NULL,
                            created_at timestamptz, payload jsonb);
    GRANT SELECT, UPDATE, DELETE ON fuzz_plain, fuzz_ranked, fuzz_parted, fuzz_enum TO fuzzer;
    CREATE TABLE fuzz_gone (id int PRIMARY KEY);";

/// Refills the application tables (rows the fuzzing deleted come back; existing rows stay).
const REFILL: &str = "
    INSERT INTO fuzz_plain
         SELECT g, g % 4, timestamptz '2026-01-01' - g * interval '12 hours', repeat('n', g % 7)
           FROM generate_series(1, 200) g ON CONFLICT DO NOTHING;
    INSERT INTO fuzz_ranked SELECT * FROM fuzz_plain ON CONFLICT DO NOTHING;
    INSERT INTO fuzz_parted
         SELECT g, timestamptz '2019-06-01' + g * interval '5 days', 'p' || g
           FROM generate_series(1, 200) g ON CONFLICT DO NOTHING;
    INSERT INTO fuzz_enum
         SELECT g, CASE WHEN g % 3 = 0 THEN 'open' WHEN g % 3 = 1 THEN 'done'
                        ELSE 'it''s \\ odd' END::fuzz_state,
                timestamptz '2025-01-01' + g * interval '1 day', jsonb_build_object('g', g)
           FROM generate_series(1, 200) g ON CONFLICT DO NOTHING;";

/// What setup made, which the value lists point at.
pub(super) struct World {
    /// (name, id) of each policy.
    pub(super) policies: Vec<(String, i64)>,
    /// (name, oid) of tables worth passing as a relation.
    pub(super) tables: Vec<(String, u32)>,
    /// A table that existed and was dropped.
    pub(super) dropped_oid: u32,
    pub(super) fuzzer_oid: u32,
    pub(super) hold_id: i64,
    /// The batch claimed in setup and left live (values name the current one, [`LIVE`]).
    pub(super) live_batch: String,
    /// A batch archived (completed) and its archive.
    pub(super) done_batch: String,
    pub(super) archive_id: i64,
    pub(super) archive_rows: i64,
    pub(super) archive_bytes: i64,
    pub(super) archive_blake3: String,
    /// Hex of the slices of the live and the archived batch.
    pub(super) live_slice: String,
    pub(super) done_slice: String,
}

/// Creates the role, the tables, the policies, a hold, a consumer, an archived and a live
/// batch, and a sweep state.
pub(super) fn setup(c: &Cluster) -> World {
    let mut db = c.connect("postgres");
    db.batch_execute(SCHEMA).unwrap();
    db.batch_execute(REFILL).unwrap();
    let dropped_oid: u32 = db
        .query_one("SELECT 'fuzz_gone'::regclass::oid", &[])
        .unwrap()
        .get(0);
    db.batch_execute("DROP TABLE fuzz_gone").unwrap();

    let mut f = c.connect_as("postgres", FUZZER);
    for p in &POLICIES {
        f.batch_execute(&format!(
            "SELECT retention.add_policy(name => '{}', {})",
            p.name, p.add
        ))
        .unwrap_or_else(|e| panic!("add policy {}: {e}", p.name));
    }
    let policies = db
        .query(
            "SELECT name::text, id FROM retention.policies ORDER BY id",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let hold_id: i64 = f
        .query_one(
            "SELECT retention.place_hold('fuzz_plain', 'tenant = 1', 'fuzz case', 'fuzzer')",
            &[],
        )
        .unwrap()
        .get(0);
    f.batch_execute("SELECT retention.register_consumer('fuzz_age', 'c1', '1 hour')")
        .unwrap();

    // One batch archived end to end (its digest from its own manifest), one left claimed.
    let row = f
        .query_one(
            "SELECT batch::text, encode(slice, 'hex')
               FROM retention.claim_slice('fuzz_archive', 5, '1 hour', 'fuzz-owner')",
            &[],
        )
        .unwrap();
    let (done_batch, done_slice): (String, String) = (row.get(0), row.get(1));
    let manifest: String = f
        .query_one(
            "SELECT retention.batch_manifest($1::text::uuid, true)::text",
            &[&done_batch],
        )
        .unwrap()
        .get(0);
    let manifest: serde_json::Value = serde_json::from_str(&manifest).unwrap();
    let archive_blake3 = manifest["blake3"].as_str().unwrap().to_owned();
    let archive_rows = manifest["rows"].as_i64().unwrap();
    let archive_bytes = manifest["bytes"].as_i64().unwrap();
    f.execute(
        "SELECT retention.complete_batch($1::text::uuid, 'fuzz/archive-1', $2, $3, $4, 'fuzz-owner')",
        &[&done_batch, &archive_blake3, &archive_rows, &archive_bytes],
    )
    .unwrap();
    let archive_id = scalar(&mut db, "SELECT max(id) FROM retention.archives");
    let row = f
        .query_one(
            "SELECT batch::text, encode(slice, 'hex')
               FROM retention.claim_slice('fuzz_archive', 5, '1 hour', 'fuzz-owner-2')",
            &[],
        )
        .unwrap();
    let (live_batch, live_slice): (String, String) = (row.get(0), row.get(1));

    let tables = db
        .query(
            "SELECT c.relname::text, c.oid FROM pg_class c
              WHERE c.relname IN ('fuzz_plain', 'fuzz_parted', 'fuzz_parted_old', 'fuzz_enum',
                                  'pg_class', 'pg_authid', 'policy_versions', 'ledger_entries')
              ORDER BY 1",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let fuzzer_oid: u32 = db
        .query_one("SELECT 'fuzzer'::regrole::oid", &[])
        .unwrap()
        .get(0);
    World {
        policies,
        tables,
        dropped_oid,
        fuzzer_oid,
        hold_id,
        live_batch,
        done_batch,
        archive_id,
        archive_rows,
        archive_bytes,
        archive_blake3,
        live_slice,
        done_slice,
    }
}

/// Brings back what earlier calls may have dropped, disabled, deleted or ended, so later
/// routines still find policies, rows and a claimed batch (best effort: errors are ignored).
/// Returns the batch kept claimed now.
pub(super) fn restore(c: &Cluster, seq: usize, live: &str) -> String {
    if let Ok(mut db) = fuzz_session(c, "postgres", seq) {
        let _ = db.batch_execute(REFILL);
    }
    let Ok(mut f) = fuzz_session(c, FUZZER, seq) else {
        return live.to_owned();
    };
    for p in &POLICIES {
        let _ = f.batch_execute(&format!(
            "SELECT retention.add_policy(name => '{0}', {1})
              WHERE NOT EXISTS (SELECT FROM retention.policies WHERE name = '{0}');
             SELECT retention.enable_policy(name) FROM retention.policies
              WHERE name = '{0}' AND NOT enabled;",
            p.name, p.add
        ));
    }
    let still_claimed = f
        .execute(
            "SELECT retention.extend_lease($1::text::uuid, '1 hour')",
            &[&live],
        )
        .is_ok();
    if still_claimed {
        return live.to_owned();
    }
    f.query_one(
        "SELECT batch::text FROM retention.claim_slice('fuzz_archive', 5, '1 hour', 'fuzz-owner-2')",
        &[],
    )
    .ok()
    .and_then(|r| r.get::<_, Option<String>>(0))
    .unwrap_or_else(|| live.to_owned())
}
