//! Where an archive expire operation stands: its row in `retention.expire_operations`, which
//! `retention.expire_prepare` makes and each `retention.expire_record` moves, and which
//! `retention.expire_state` reads (the ledger keeps the history, never read for the state).
//! The archiver's own runs of `expire` are tests/tests/expire.rs.

use pg_retention_integration::archiver::{text, Archiver};
use pg_retention_integration::{column, expect_error, scalar, Cluster};
use postgres::Client;

/// 300 closed audit rows archived by `once` in three batches of 100 to a file store, under a
/// policy whose archives are kept one second, and a second past it: three expiry candidates.
fn archived(c: &Cluster) -> Client {
    let dir = pg_retention_integration::temp_dir("pg-retention-expire-state");
    let a = Archiver::new(
        &c.archiver_url("postgres"),
        &format!("file://{}", dir.display()),
    );
    let mut db = c.connect("postgres");
    db.batch_execute(
        "CREATE TABLE audit (id bigint PRIMARY KEY, status text NOT NULL, closed_at timestamptz, note text);
         INSERT INTO audit SELECT g, 'closed', now() - make_interval(days => 40 + g % 20), 'n' || g
           FROM generate_series(1, 300) g;
         SELECT retention.add_policy(name => 'audit', relation => 'audit', kind => 'age', age_column => 'closed_at',
                older_than => '30 days', terminal => $$status = 'closed'$$, action => 'archive_then_delete',
                archive_keep => '1 second');",
    )
    .unwrap();
    let o = a.run(&["once", "--batch-rows", "100"]);
    assert!(o.status.success(), "{}", text(&o));
    std::thread::sleep(std::time::Duration::from_millis(1200));
    db
}

/// An operation's state is its row in `retention.expire_operations` (never the ledger's JSON),
/// and each apply recorded moves it: `prepared`, `not_ready` leaves it so, `partial`,
/// `refused`, `completed` (final: a later apply is recorded but does not undo it). A completion
/// whose archives' objects it did not delete is refused (RT504) and changes nothing; a ledger
/// entry that claims an operation does not make one; each refusal comes straight from the
/// function, with its own SQLSTATE and no PL/pgSQL frame. The calls are the archiver's, as the
/// `archiver` role.
#[test]
fn an_expire_operations_state_is_its_row_and_each_apply_moves_it() {
    let c = Cluster::start(&[]);
    let mut db = archived(&c);
    let mut arch = c.connect_as("postgres", "archiver");
    let op = "6f1c2b9e-0000-4000-8000-0000000000aa";
    let ids: Vec<i64> = column(
        &mut db,
        "SELECT archive_id FROM retention.expiry_candidates() ORDER BY 1",
    );
    assert_eq!(ids.len(), 3);
    let keys: Vec<String> = column(
        &mut db,
        "SELECT object_key FROM retention.archives ORDER BY id",
    );
    let prepare = format!(
        "SELECT retention.expire_prepare('{op}', repeat('b', 64), '0 seconds',
                ARRAY(SELECT archive_id FROM retention.expiry_candidates()), 6, 600, 'tomb', 'archiver-x')"
    );
    arch.batch_execute(&prepare).unwrap();
    let row = |db: &mut Client| -> (String, i64, Vec<String>, Option<String>) {
        let r = db
            .query_one(
                "SELECT state, applies, deleted_keys, last_outcome FROM retention.expire_operations
                  WHERE operation = $1::text::uuid",
                &[&op],
            )
            .unwrap();
        (r.get(0), r.get(1), r.get(2), r.get(3))
    };
    assert_eq!(row(&mut db), ("prepared".into(), 0, vec![], None));
    let (code, message) = expect_error(&mut arch, &prepare);
    assert_eq!(
        (code.as_str(), message),
        (
            "42710",
            format!("expire operation {op} is prepared already")
        )
    );
    let record = |arch: &mut Client, outcome: &str, deleted: &[String]| {
        arch.execute(
            "SELECT retention.expire_record($1::text::uuid, $2, $3, NULL, 'archiver-x')",
            &[&op, &outcome, &deleted],
        )
    };
    record(&mut arch, "not_ready", &[]).unwrap();
    assert_eq!(
        row(&mut db),
        ("prepared".into(), 1, vec![], Some("not_ready".into()))
    );
    record(&mut arch, "partial", &keys[..1]).unwrap();
    assert_eq!(
        row(&mut db),
        (
            "partial".into(),
            2,
            keys[..1].to_vec(),
            Some("partial".into())
        )
    );
    record(&mut arch, "refused", &[]).unwrap();
    assert_eq!(
        row(&mut db),
        (
            "refused".into(),
            3,
            keys[..1].to_vec(),
            Some("refused".into())
        )
    );
    // Completed while the objects of the second and third archive were never deleted: refused,
    // with its detail and hint, and nothing recorded.
    let err = record(&mut arch, "completed", &[]).unwrap_err();
    let e = err.as_db_error().unwrap();
    assert_eq!(e.code().code(), "RT504");
    assert_eq!(
        e.message(),
        format!(
            "expire operation {op} cannot complete: the object of archive {} now is not one it deleted",
            ids[1]
        )
    );
    assert!(e
        .detail()
        .unwrap()
        .starts_with(&format!("Archives {{{},{}}}", ids[1], ids[2])));
    assert!(e.hint().is_some());
    assert!(!e.where_().unwrap_or("").contains("PL/pgSQL"), "{e:?}");
    assert_eq!(row(&mut db).1, 3, "the refused completion recorded nothing");
    record(&mut arch, "completed", &keys[1..]).unwrap();
    let mut all = keys.clone();
    all.sort();
    assert_eq!(
        row(&mut db),
        ("completed".into(), 4, all.clone(), Some("completed".into()))
    );
    assert_eq!(
        scalar(
            &mut db,
            &format!("SELECT count(*) FROM retention.archives WHERE expired_by = '{op}'")
        ),
        3
    );
    // Completed is final: a later apply is recorded, the operation stays completed.
    record(&mut arch, "partial", &[]).unwrap();
    assert_eq!(
        row(&mut db),
        ("completed".into(), 5, all.clone(), Some("partial".into()))
    );
    // expire_state is the row, in the shape the archiver reads.
    let state: serde_json::Value = serde_json::from_str(
        &arch
            .query_one(
                "SELECT retention.expire_state($1::text::uuid)::text",
                &[&op],
            )
            .unwrap()
            .get::<_, String>(0),
    )
    .unwrap();
    assert_eq!(state["state"], "completed");
    assert_eq!(state["applies"], 5);
    assert_eq!(state["ready"], true);
    assert_eq!(state["archives"], serde_json::json!(ids));
    assert_eq!(state["deleted_keys"], serde_json::json!(all));
    assert_eq!(state["outcome"], "partial");
    assert_eq!(state["tombstone"], "tomb");
    assert_eq!(state["prepared_by"], "archiver-x");
    // The ledger has the history: one prepare, five applies (not the refused completion).
    assert_eq!(
        scalar(
            &mut db,
            &format!(
                "SELECT count(*) FILTER (WHERE method = 'expire_prepare') * 10
                        + count(*) FILTER (WHERE method = 'expire_apply')
                   FROM retention.ledger WHERE detail->>'operation' = '{op}'"
            )
        ),
        15
    );
    // A prepare entry written into the ledger (only a superuser can) makes no operation.
    let forged = "6f1c2b9e-0000-4000-8000-0000000000bb";
    db.batch_execute(&format!(
        "INSERT INTO retention.ledger_entries (method, actor, detail)
         VALUES ('expire_prepare', 'forger', jsonb_build_object('operation', '{forged}',
                 'plan_sha256', repeat('b', 64), 'quiescence', '0', 'archives', '[1]', 'tombstone', 't'))"
    ))
    .unwrap();
    assert!(arch
        .query_one(
            "SELECT retention.expire_state($1::text::uuid) IS NULL",
            &[&forged],
        )
        .unwrap()
        .get::<_, bool>(0));
    let (code, message) = expect_error(
        &mut arch,
        &format!("SELECT retention.expire_record('{forged}', 'completed', '{{}}', NULL, 'x')"),
    );
    assert_eq!(
        (code.as_str(), message),
        (
            "42704",
            format!("expire operation {forged} was never prepared")
        )
    );
    // Nobody but the extension writes the table.
    let (code, _) = expect_error(
        &mut arch,
        "UPDATE retention.expire_operations SET state = 'prepared'",
    );
    assert_eq!(code, "42501");
    for (sql, code) in [
        (
            format!("SELECT retention.expire_record('{op}', 'done', NULL, NULL, 'x')"),
            "22023",
        ),
        (
            "SELECT retention.expire_prepare(gen_random_uuid(), 'no digest', '0 seconds', '{1}', 1, 1, 't', 'x')"
                .to_owned(),
            "22023",
        ),
        (
            format!(
                "SELECT retention.expire_prepare(gen_random_uuid(), repeat('b', 64), '0 seconds', '{{{}}}', 1, 1, 't', 'x')",
                ids[0]
            ),
            "55000",
        ),
    ] {
        let err = arch.batch_execute(&sql).unwrap_err();
        let e = err.as_db_error().unwrap();
        assert_eq!(e.code().code(), code, "{sql}: {e:?}");
        assert!(!e.where_().unwrap_or("").contains("PL/pgSQL"), "{e:?}");
    }
}
