//! `retention.candidates` and `retention.prune`: the rows the next run would delete, by key, and
//! a delete of exactly those still eligible — a retry never broadens.
//!
//! Production roles: tables by the superuser, rows by `app`, policies, holds, candidates, prune
//! and runs by `admin` (a member of `retention_admin` with SELECT and DELETE on the tables).

use pg_retention_integration::{expect_error, scalar, Cluster};
use postgres::Client;

fn keys(admin: &mut Client, policy: &str, max_rows: i32) -> Vec<serde_json::Value> {
    admin
        .query(
            "SELECT key::text FROM retention.candidates($1, $2)",
            &[&policy, &max_rows],
        )
        .unwrap()
        .iter()
        .map(|r| serde_json::from_str(r.get(0)).unwrap())
        .collect()
}

fn prune(admin: &mut Client, policy: &str, keys: &[serde_json::Value]) -> i64 {
    admin
        .query_one(
            "SELECT retention.prune($1, $2::text::jsonb)",
            &[
                &policy,
                &serde_json::Value::Array(keys.to_vec()).to_string(),
            ],
        )
        .unwrap()
        .get(0)
}

#[test]
fn candidates_are_what_the_run_deletes_and_prune_deletes_only_those_still_eligible() {
    let c = Cluster::start(&[]);
    c.execute(
        "postgres",
        "CREATE TABLE events (id int PRIMARY KEY, tenant int NOT NULL, at timestamptz NOT NULL);
         CREATE TABLE log (tenant int NOT NULL, at timestamptz NOT NULL);",
    );
    c.grant_app_and_admin("postgres");
    let (mut app, mut admin) = c.app_and_admin("postgres");
    // 100 rows; the odd ones 40 days old; tenant 1's held.
    app.batch_execute(
        "INSERT INTO events SELECT g, g % 4, now() - make_interval(days => CASE WHEN g % 2 = 1 THEN 40 ELSE 1 END)
           FROM generate_series(1, 100) g;
         INSERT INTO log SELECT g % 3, now() - interval '40 days' FROM generate_series(1, 30) g;",
    )
    .unwrap();
    admin
        .batch_execute(
            "SELECT retention.add_policy(name => 'events', relation => 'events', kind => 'age',
                    age_column => 'at', older_than => '30 days');
             SELECT retention.place_hold('events', 'tenant = 1', 'dispute', 'legal');
             SELECT retention.add_policy(name => 'log', relation => 'log', kind => 'age',
                    age_column => 'at', older_than => '30 days');",
        )
        .unwrap();
    let all = keys(&mut admin, "events", 1000);
    assert_eq!(
        all.len() as i64,
        scalar(
            &mut admin,
            "SELECT would_delete FROM retention.preview('events')"
        )
    );
    assert_eq!(all.len(), 25, "50 old rows, 25 of them held");
    assert_eq!(
        keys(&mut admin, "events", 10),
        all[..10].to_vec(),
        "in the same order"
    );

    // Prune the first ten.
    assert_eq!(prune(&mut admin, "events", &all[..10]), 10);
    assert_eq!(
        scalar(&mut admin, "SELECT sum(rows_deleted)::bigint FROM retention.ledger WHERE policy = 'events' AND detail->>'by' = 'retention.prune'"),
        10
    );
    // Again: nothing (they are gone), and nothing else.
    assert_eq!(prune(&mut admin, "events", &all[..10]), 0);
    assert_eq!(scalar(&mut admin, "SELECT count(*) FROM events"), 90);

    // A key that stopped being eligible (made young) is not deleted; nor is a held row's key,
    // nor one that never was a candidate.
    let young = all[10].clone();
    let id: i32 = young[0].as_str().unwrap().parse().unwrap();
    app.execute("UPDATE events SET at = now() WHERE id = $1", &[&id])
        .unwrap();
    let held = serde_json::json!(["1"]);
    let never = serde_json::json!(["2"]);
    assert_eq!(
        prune(&mut admin, "events", &[young.clone(), held, never]),
        0
    );
    assert_eq!(scalar(&mut admin, "SELECT count(*) FROM events"), 90);

    // The run deletes exactly the remaining candidates.
    let rest = keys(&mut admin, "events", 1000);
    assert_eq!(rest, all[11..].to_vec());
    admin.batch_execute("CALL retention.run('events')").unwrap();
    assert_eq!(
        scalar(&mut admin, "SELECT count(*) FROM events"),
        90 - rest.len() as i64
    );
    for key in &rest {
        let id: i32 = key[0].as_str().unwrap().parse().unwrap();
        assert_eq!(
            scalar(
                &mut admin,
                &format!("SELECT count(*) FROM events WHERE id = {id}")
            ),
            0
        );
    }

    // A table without a key: rows are named by place and version; an updated row is another
    // version, and its old key deletes nothing.
    let log = keys(&mut admin, "log", 1000);
    assert_eq!(log.len(), 30);
    assert_eq!(log[0].as_array().unwrap().len(), 2);
    app.batch_execute("UPDATE log SET tenant = 9 WHERE ctid = '(0,1)'")
        .unwrap();
    assert_eq!(prune(&mut admin, "log", &log[..5]), 4);
    assert_eq!(
        scalar(&mut admin, "SELECT count(*) FROM log WHERE tenant = 9"),
        1
    );

    // Refused: keys of another shape, an archive policy.
    for keys in ["{}", "[[1]]", "[[\"1\", \"2\"]]"] {
        let (state, _) = expect_error(
            &mut admin,
            &format!("SELECT retention.prune('events', '{keys}')"),
        );
        assert_eq!(state, "22023", "{keys}");
    }
}

/// `record_keys`: each ledger entry of a delete policy lists the keys of the rows it deleted, by
/// every kind of step (an index walk, block ranges, ranked rows, `retention.prune`), so "which
/// versions of artifact X were pruned" is answerable from the ledger.
#[test]
fn recorded_keys_name_every_row_deleted() {
    let c = Cluster::start(&[]);
    c.execute(
        "postgres",
        "CREATE TABLE builds (id int PRIMARY KEY, at timestamptz NOT NULL);
         CREATE INDEX ON builds (at);
         CREATE TABLE scans (id int PRIMARY KEY, at timestamptz NOT NULL);
         CREATE TABLE versions (artifact text, version int, at timestamptz NOT NULL, PRIMARY KEY (artifact, version));
         CREATE TABLE nokey (at timestamptz NOT NULL);
         CREATE TABLE arch (id int PRIMARY KEY, at timestamptz NOT NULL);",
    );
    c.grant_app_and_admin("postgres");
    let (mut app, mut admin) = c.app_and_admin("postgres");
    app.batch_execute(
        "INSERT INTO builds SELECT g, now() - make_interval(days => g) FROM generate_series(1, 60) g;
         INSERT INTO scans SELECT g, now() - make_interval(days => g) FROM generate_series(1, 60) g;
         INSERT INTO versions SELECT 'a' || (g % 3), g, now() - make_interval(hours => g) FROM generate_series(1, 30) g;",
    )
    .unwrap();
    admin
        .batch_execute(
            "SELECT retention.add_policy(name => 'builds', relation => 'builds', kind => 'age', age_column => 'at',
                    older_than => '30 days', batch_size => 7, record_keys => true);
             SELECT retention.add_policy(name => 'scans', relation => 'scans', kind => 'age', age_column => 'at',
                    older_than => '30 days', batch_size => 7, record_keys => true);
             SELECT retention.add_policy(name => 'versions', relation => 'versions', kind => 'keep_latest',
                    group_by => ARRAY['artifact'], order_by => 'version', keep => 4, record_keys => true);",
        )
        .unwrap();
    for policy in ["builds", "scans", "versions"] {
        admin
            .batch_execute(&format!("CALL retention.run('{policy}')"))
            .unwrap();
    }
    let recorded = |admin: &mut Client, policy: &str| -> (i64, i64) {
        let r = admin
            .query_one(
                "SELECT count(*), count(DISTINCT k) FROM retention.ledger l, jsonb_array_elements(l.detail->'keys') k
                  WHERE l.policy = $1 AND l.method = 'prune'",
                &[&policy],
            )
            .unwrap();
        (r.get(0), r.get(1))
    };
    // builds went by its index on `at`, scans by block ranges.
    for (policy, step) in [("builds", "from_age"), ("scans", "from_tid")] {
        assert!(
            scalar(
                &mut admin,
                &format!("SELECT count(*) FROM retention.ledger WHERE policy = '{policy}' AND method = 'prune' AND detail ? '{step}'")
            ) > 0,
            "{policy}"
        );
    }
    for table in ["builds", "scans"] {
        let gone = 60 - scalar(&mut admin, &format!("SELECT count(*) FROM {table}"));
        assert!(gone >= 30, "{table}: {gone}");
        assert_eq!(recorded(&mut admin, table), (gone, gone), "{table}");
    }
    assert_eq!(recorded(&mut admin, "versions"), (18, 18));
    // Which versions of artifact a1 went: exactly those no longer in the table.
    assert_eq!(
        scalar(
            &mut admin,
            "SELECT count(*) FROM retention.ledger l, jsonb_array_elements(l.detail->'keys') k
              WHERE l.policy = 'versions' AND k->>0 = 'a1'
                AND NOT EXISTS (SELECT 1 FROM versions v WHERE v.artifact = 'a1' AND v.version = (k->>1)::int)"
        ),
        6
    );
    for options in [
        "relation => 'nokey', kind => 'age', age_column => 'at', older_than => '1 day', record_keys => true",
        "relation => 'arch', kind => 'age', age_column => 'at', older_than => '1 day', terminal => 'true', action => 'archive_then_delete', record_keys => true",
    ] {
        let (state, _) = expect_error(
            &mut admin,
            &format!("SELECT retention.add_policy(name => 'x', {options})"),
        );
        assert_eq!(state, "22023", "{options}");
    }
}

/// Where a run walks an index on the age column, candidates come in its order, oldest first:
/// the first `n` candidates are the rows a run capped at `n` rows deletes.
#[test]
fn candidates_come_in_the_order_the_run_takes_them() {
    let c = Cluster::start(&[]);
    c.execute(
        "postgres",
        "CREATE TABLE jobs (id int PRIMARY KEY, at timestamptz NOT NULL);
         CREATE INDEX ON jobs (at);",
    );
    c.grant_app_and_admin("postgres");
    let (mut app, mut admin) = c.app_and_admin("postgres");
    // Ages run against the keys and the places: row 1 is the youngest of the old ones.
    app.batch_execute(
        "INSERT INTO jobs SELECT g, now() - make_interval(days => 30 + g) FROM generate_series(1, 60) g",
    )
    .unwrap();
    admin
        .batch_execute(
            "SELECT retention.add_policy(name => 'jobs', relation => 'jobs', kind => 'age',
                    age_column => 'at', older_than => '30 days', batch_size => 5,
                    max_rows_per_run => 7)",
        )
        .unwrap();
    let first: Vec<serde_json::Value> = keys(&mut admin, "jobs", 7);
    let oldest: Vec<serde_json::Value> = (54..=60)
        .rev()
        .map(|id: i32| serde_json::json!([id.to_string()]))
        .collect();
    assert_eq!(first, oldest, "oldest first");
    admin.batch_execute("CALL retention.run('jobs')").unwrap();
    assert_eq!(
        scalar(&mut admin, "SELECT count(*) FROM jobs WHERE id >= 54"),
        0,
        "the run took exactly the first seven candidates"
    );
    assert_eq!(scalar(&mut admin, "SELECT count(*) FROM jobs"), 53);
}
