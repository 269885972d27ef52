//! The trust boundary (docs/security.md): user SQL runs with its author's privileges, inside a
//! security-restricted operation with a pinned search path; the SECURITY DEFINER surface
//! cannot be hijacked through `public` or `pg_temp`; a table is archive-class or delete-class.
//!
//! The attacker is `mallory`: a login in `retention_admin` that may create functions in
//! `public` and owns one table, and nothing else.
//!
//! Production roles otherwise: tables are made by the superuser in set-up, application rows
//! are written by `app` (table privileges only, `Cluster::app`), policies, holds, previews and
//! runs are `admin`'s (a member of `retention_admin`, not a superuser, `Cluster::admin`), who
//! also reads the ledger and the tables for the assertions; archive batches are claimed,
//! rendered and completed by `archiver` (only in `retention_archiver`). The test's own roles
//! (`mallory`, `legal`, `reader`, `auditor`) are named apart from the fixture's `app`, `admin`,
//! `archiver` and `restorer`. The superuser stays where it is the point, commented: a
//! superuser's preview, run or policy must not lend its privileges to another role's
//! predicate, and the background worker runs as one.

use pg_retention_integration::{column, expect_error, scalar, Cluster};
use postgres::Client;
use std::time::Duration;

/// A connection as `role`.
fn connect_as(c: &Cluster, role: &str) -> Client {
    c.connect_as("postgres", role)
}

/// The attacker and a victim table owned by the superuser (set-up, with a password hash to
/// steal), its rows written by `app`.
fn attacker(c: &Cluster) {
    c.execute(
        "postgres",
        "ALTER ROLE postgres PASSWORD 'hunter2';
         CREATE ROLE mallory LOGIN IN ROLE retention_admin;
         GRANT CREATE ON SCHEMA public TO mallory;
         CREATE TABLE victim (id int PRIMARY KEY, created_at timestamptz NOT NULL);",
    );
    c.grant_app_and_admin("postgres");
    c.app("postgres")
        .batch_execute(
            "INSERT INTO victim SELECT g, now() - interval '90 days' FROM generate_series(1, 100) g;",
        )
        .unwrap();
}

/// Mallory's table and `steal(int)`: an IMMUTABLE function that reads the superuser's password
/// hash and a server file and, when it could, raises them in its error message (SQLSTATE
/// P0001). Run as mallory it fails on the first read with 42501.
fn plant_steal(c: &Cluster) {
    let mut m = connect_as(c, "mallory");
    m.batch_execute(
        "CREATE TABLE mine (id int PRIMARY KEY, created_at timestamptz NOT NULL);
         INSERT INTO mine SELECT g, now() - interval '90 days' FROM generate_series(1, 100) g;
         CREATE FUNCTION public.steal(x int) RETURNS boolean LANGUAGE plpgsql IMMUTABLE AS $$
         DECLARE pw text; f text;
         BEGIN
             SELECT rolpassword INTO pw FROM pg_catalog.pg_authid WHERE rolname = 'postgres';
             f := pg_catalog.pg_read_file('PG_VERSION');
             RAISE EXCEPTION 'stolen: % %', pw, f;
         END $$;",
    )
    .unwrap();
}

/// The last ledgered error of `policy`: (sqlstate, message).
fn last_error(db: &mut Client, policy: &str) -> Option<(String, String)> {
    db.query_opt(
        "SELECT detail->>'sqlstate', detail->>'error' FROM retention.ledger
          WHERE policy = $1 AND method = 'error' ORDER BY id DESC LIMIT 1",
        &[&policy],
    )
    .unwrap()
    .map(|r| (r.get(0), r.get(1)))
}

#[test]
fn a_scope_predicate_runs_as_its_author_in_preview_and_run() {
    let c = Cluster::start(&[]);
    attacker(&c);
    plant_steal(&c);
    let mut admin = c.admin("postgres");
    let mut m = connect_as(&c, "mallory");
    m.batch_execute(
        "SELECT retention.add_policy(name => 'mine', relation => 'mine', kind => 'age',
                age_column => 'created_at', older_than => '30 days', scope => 'public.steal(id)')",
    )
    .unwrap();
    let owner: String = admin
        .query_one(
            "SELECT owner::text FROM retention.policies WHERE name = 'mine'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(
        owner, "mallory",
        "the policy belongs to the role that registered it"
    );

    let (code, msg) = expect_error(&mut m, "SELECT * FROM retention.preview('mine')");
    assert_eq!(
        code, "42501",
        "preview evaluates the scope as mallory: {msg}"
    );
    // The superuser previewing mallory's policy does not lend it its privileges either (the
    // superuser is the point: its privileges are the ones steal() wants).
    let (code, msg) = expect_error(
        &mut c.connect("postgres"),
        "SELECT * FROM retention.preview('mine')",
    );
    assert_eq!(code, "42501", "{msg}");
    // Nor does an admin's.
    let (code, msg) = expect_error(&mut admin, "SELECT * FROM retention.preview('mine')");
    assert_eq!(code, "42501", "{msg}");

    let (code, msg) = expect_error(&mut m, "CALL retention.run('mine')");
    assert_eq!(code, "RT601", "the run says it failed: {msg}");
    let (code, msg) = last_error(&mut admin, "mine").expect("the failed run is ledgered");
    assert_eq!(code, "42501", "{msg}");
    assert!(!msg.contains("SCRAM"), "{msg}");
    // Mallory's own table: its owner counts it.
    assert_eq!(
        scalar(&mut m, "SELECT count(*) FROM mine"),
        100,
        "nothing deleted"
    );
}

#[test]
fn a_hold_predicate_runs_as_its_placer_and_a_failing_hold_blocks_the_batch() {
    let c = Cluster::start(&[]);
    attacker(&c);
    plant_steal(&c);
    let mut admin = c.admin("postgres");
    // The superuser's policy on the superuser's table, previewed and run by the superuser;
    // mallory places a hold on it. The superuser is the point: were the hold evaluated as the
    // policy's owner or the caller, steal() could read what it wants.
    let mut db = c.connect("postgres");
    db.batch_execute(
        "SELECT retention.add_policy(name => 'victim', relation => 'victim', kind => 'age',
                age_column => 'created_at', older_than => '30 days', batch_size => 10)",
    )
    .unwrap();
    let mut m = connect_as(&c, "mallory");
    // Without read access to the table a hold cannot even be placed.
    let (code, _) = expect_error(
        &mut m,
        "SELECT retention.place_hold('victim', 'id > 0', 'case', 'mallory')",
    );
    assert_eq!(code, "RT101");
    // The table's owner (the superuser) grants it.
    db.batch_execute("GRANT SELECT ON victim TO mallory")
        .unwrap();
    m.batch_execute("SELECT retention.place_hold('victim', 'public.steal(id)', 'case', 'mallory')")
        .unwrap();
    let placed_by: String = admin
        .query_one("SELECT placed_by::text FROM retention.holds", &[])
        .unwrap()
        .get(0);
    assert_eq!(placed_by, "mallory");

    let (code, msg) = expect_error(&mut db, "SELECT * FROM retention.preview('victim')");
    assert_eq!(code, "42501", "the hold is evaluated as mallory: {msg}");
    let (code, msg) = expect_error(&mut db, "CALL retention.run('victim')");
    assert_eq!(code, "RT601", "the run says it failed: {msg}");
    let (code, msg) = last_error(&mut admin, "victim").expect("the blocked batch is ledgered");
    assert_eq!(code, "42501", "{msg}");
    assert_eq!(
        scalar(&mut admin, "SELECT count(*) FROM victim"),
        100,
        "a hold fails closed"
    );
    assert!(
        !msg.contains("stolen"),
        "nothing was read for mallory: {msg}"
    );
}

#[test]
fn a_hold_placed_by_another_role_still_protects_its_rows_and_preview_matches_the_run() {
    let c = Cluster::start(&[]);
    // `legal` is another member of retention_admin, who may read the table and nothing more.
    c.execute(
        "postgres",
        "CREATE ROLE legal LOGIN IN ROLE retention_admin;
         CREATE TABLE t (id int PRIMARY KEY, tenant int NOT NULL, created_at timestamptz NOT NULL);
         GRANT SELECT ON t TO legal;",
    );
    c.grant_app_and_admin("postgres");
    let (mut app, mut admin) = c.app_and_admin("postgres");
    app.batch_execute(
        "INSERT INTO t SELECT g, g % 4, now() - interval '90 days' FROM generate_series(1, 1000) g;",
    )
    .unwrap();
    admin
        .batch_execute(
            "SELECT retention.add_policy(name => 't', relation => 't', kind => 'age',
                    age_column => 'created_at', older_than => '30 days', batch_size => 100)",
        )
        .unwrap();
    connect_as(&c, "legal")
        .batch_execute("SELECT retention.place_hold('t', 'tenant = 1', 'case 7', 'legal')")
        .unwrap();
    let row = admin
        .query_one("SELECT held, would_delete FROM retention.preview('t')", &[])
        .unwrap();
    let (held, would_delete): (i64, i64) = (row.get(0), row.get(1));
    assert_eq!((held, would_delete), (250, 750));
    admin.batch_execute("CALL retention.run('t')").unwrap();
    assert_eq!(
        scalar(&mut app, "SELECT count(*) FROM t"),
        250,
        "the run did what preview said"
    );
    assert_eq!(
        scalar(&mut app, "SELECT count(*) FROM t WHERE tenant <> 1"),
        0
    );
}

#[test]
fn the_background_worker_evaluates_predicates_as_their_author() {
    let c = Cluster::start(&[
        "pg_retention.enabled = on",
        "pg_retention.databases = 'postgres'",
        "pg_retention.naptime = '1h'",
        "pg_retention.jitter = 0",
    ]);
    attacker(&c);
    plant_steal(&c);
    // The worker runs as the superuser (pg_retention.role unset): that is the point, its
    // privileges are not lent to mallory's predicate.
    let mut admin = c.admin("postgres");
    connect_as(&c, "mallory")
        .batch_execute(
            "SELECT retention.add_policy(name => 'mine', relation => 'mine', kind => 'age',
                    age_column => 'created_at', older_than => '30 days', scope => 'public.steal(id)')",
        )
        .unwrap();
    let woken = c.wait_until(Duration::from_secs(30), || {
        admin
            .query_one("SELECT retention.wake()", &[])
            .map(|r| r.get::<_, bool>(0))
            .unwrap_or(false)
    });
    assert!(woken, "the worker is running");
    let failed = c.wait_until(Duration::from_secs(30), || {
        last_error(&mut admin, "mine").is_some()
    });
    assert!(failed, "the worker ledgers the failed sweep");
    let (code, msg) = last_error(&mut admin, "mine").unwrap_or_default();
    assert_eq!(code, "42501", "{msg}");
    assert!(
        !msg.contains("stolen"),
        "the worker read nothing for mallory: {msg}"
    );
    assert_eq!(
        scalar(&mut connect_as(&c, "mallory"), "SELECT count(*) FROM mine"),
        100
    );
}

#[test]
fn an_owner_who_lost_delete_fails_closed_and_the_failure_is_ledgered() {
    let c = Cluster::start(&[]);
    // `reader`: another member of retention_admin who may read the table but not delete from
    // it; it reads the ledger here too.
    c.execute(
        "postgres",
        "CREATE TABLE t (id int PRIMARY KEY, created_at timestamptz NOT NULL);
         CREATE ROLE reader LOGIN IN ROLE retention_admin;
         GRANT SELECT ON t TO reader;",
    );
    c.grant_app_and_admin("postgres");
    let (mut app, mut admin) = c.app_and_admin("postgres");
    app.batch_execute(
        "INSERT INTO t SELECT g, now() - interval '90 days' FROM generate_series(1, 50) g;",
    )
    .unwrap();
    admin
        .batch_execute(
            "SELECT retention.add_policy(name => 't', relation => 't', kind => 'age',
                    age_column => 'created_at', older_than => '30 days')",
        )
        .unwrap();
    drop(admin);
    let mut reader = connect_as(&c, "reader");
    // The table's owner (the superuser) revokes; the run is the superuser's, which is the
    // point: the caller's DELETE is not lent to the policy's owner.
    let mut db = c.connect("postgres");
    db.batch_execute("REVOKE DELETE ON t FROM admin").unwrap();
    let (code, msg) = expect_error(&mut db, "CALL retention.run('t')");
    assert_eq!(code, "RT601", "the run says it failed: {msg}");
    let (code, msg) = last_error(&mut reader, "t").expect("ledgered");
    assert_eq!(code, "42501");
    assert!(msg.contains("admin"), "names the owner: {msg}");
    assert_eq!(
        scalar(&mut reader, "SELECT count(*) FROM t"),
        50,
        "nothing deleted"
    );
    // A dropped owner fails the same way (this cluster's own `admin`, dropped by the superuser).
    db.batch_execute("REVOKE ALL ON t FROM admin; DROP ROLE admin")
        .unwrap();
    let (code, msg) = expect_error(&mut db, "CALL retention.run('t')");
    assert_eq!(code, "RT601", "the run says it failed: {msg}");
    let (code, msg) = last_error(&mut reader, "t").expect("ledgered");
    assert_eq!(code, "42501");
    assert!(msg.contains("no longer exists"), "{msg}");
    assert_eq!(scalar(&mut reader, "SELECT count(*) FROM t"), 50);
    // A registration by a role without DELETE is refused outright.
    let (code, _) = expect_error(
        &mut reader,
        "SELECT retention.add_policy(name => 'r', relation => 't', kind => 'age',
                age_column => 'created_at', older_than => '30 days')",
    );
    assert_eq!(code, "42501");
}

#[test]
fn security_definer_functions_pin_a_search_path_without_public() {
    let c = Cluster::start(&[]);
    // The catalog is readable by anyone: an admin looks.
    let mut db = c.admin("postgres");
    let leaky = scalar(
        &mut db,
        "SELECT count(*) FROM pg_proc WHERE pronamespace = 'retention'::regnamespace AND prosecdef
            AND array_to_string(proconfig, ',') LIKE '%public%'",
    );
    assert_eq!(leaky, 0);
    let unpinned: Vec<String> = column(
        &mut db,
        "SELECT proname::text FROM pg_proc WHERE pronamespace = 'retention'::regnamespace AND prosecdef
            AND NOT coalesce(array_to_string(proconfig, ',') LIKE '%search_path=pg_catalog, pg_temp%', false)",
    );
    assert!(
        unpinned.is_empty(),
        "SECURITY DEFINER without the pinned path: {unpinned:?}"
    );
}

#[test]
fn functions_planted_in_public_and_pg_temp_hijack_nothing() {
    let c = Cluster::start(&[]);
    c.execute(
        "postgres",
        "CREATE TABLE t (id int PRIMARY KEY, status varchar NOT NULL, created_at timestamptz NOT NULL);",
    );
    c.grant_app_and_admin("postgres");
    let (mut app, mut admin) = c.app_and_admin("postgres");
    app.batch_execute(
        "INSERT INTO t SELECT g, CASE WHEN g % 2 = 0 THEN 'SENT' ELSE 'open' END, now() - interval '90 days'
           FROM generate_series(1, 100) g;",
    )
    .unwrap();
    admin
        .batch_execute(
            "SELECT retention.add_policy(name => 't', relation => 't', kind => 'age', age_column => 'created_at',
                older_than => '30 days', terminal => $$lower(status) = 'sent'$$);
         SELECT retention.place_hold('t', $$upper(status) = 'NEVER'$$, 'case', 'legal');",
        )
        .unwrap();
    // Exact-match overloads that would win over pg_catalog's lower(text) for a varchar, and
    // over format(text, VARIADIC "any") for the names the extension formats, if public or
    // pg_temp were searched; each raises if it is ever called. Those in public are planted by
    // the superuser (set-up: schema public takes no one else's functions here), the one in
    // pg_temp by the admin in the session that previews and runs.
    c.execute(
        "postgres",
        "CREATE FUNCTION public.lower(varchar) RETURNS text LANGUAGE plpgsql IMMUTABLE AS
             $$ BEGIN RAISE EXCEPTION 'hijacked through public'; END $$;
         CREATE FUNCTION public.upper(varchar) RETURNS text LANGUAGE plpgsql IMMUTABLE AS
             $$ BEGIN RAISE EXCEPTION 'hijacked through public'; END $$;
         CREATE FUNCTION public.format(text, name, name) RETURNS text LANGUAGE plpgsql AS
             $$ BEGIN RAISE EXCEPTION 'hijacked through public'; END $$;",
    );
    admin
        .batch_execute(
            "CREATE FUNCTION pg_temp.lower(varchar) RETURNS text LANGUAGE plpgsql IMMUTABLE AS
             $$ BEGIN RAISE EXCEPTION 'hijacked through pg_temp'; END $$;",
        )
        .unwrap();
    let would_delete = scalar(
        &mut admin,
        "SELECT would_delete FROM retention.preview('t')",
    );
    assert_eq!(would_delete, 50);
    admin.batch_execute("CALL retention.run('t')").unwrap();
    assert_eq!(scalar(&mut admin, "SELECT count(*) FROM t"), 50);
    assert_eq!(
        scalar(
            &mut admin,
            "SELECT count(*) FROM retention.ledger WHERE method = 'error'"
        ),
        0
    );
}

#[test]
fn a_table_is_archive_class_or_delete_class_never_both() {
    let c = Cluster::start(&[]);
    c.execute(
        "postgres",
        "CREATE TABLE audit (id int PRIMARY KEY, state text NOT NULL, closed_at timestamptz);
         CREATE TABLE outbox (id int PRIMARY KEY, created_at timestamptz NOT NULL);",
    );
    c.grant_app_and_admin("postgres");
    let mut db = c.admin("postgres");
    db.batch_execute(
        "SELECT retention.add_policy(name => 'audit', relation => 'audit', kind => 'age',
                age_column => 'closed_at', older_than => '1 year', terminal => $$state = 'closed'$$,
                action => 'archive_then_delete');
         SELECT retention.add_policy(name => 'outbox', relation => 'outbox', kind => 'age',
                age_column => 'created_at', older_than => '30 days');",
    )
    .unwrap();
    // A delete policy on an archive-class table.
    let (code, msg) = expect_error(
        &mut db,
        "SELECT retention.add_policy(name => 'purge', relation => 'audit', kind => 'age',
                age_column => 'closed_at', older_than => '2 years')",
    );
    assert_eq!(code, "RT102");
    assert!(msg.contains("audit"), "names the other policy: {msg}");
    // An archive policy on a delete-class table (the other order).
    let (code, msg) = expect_error(
        &mut db,
        "SELECT retention.add_policy(name => 'keep', relation => 'outbox', kind => 'age',
                age_column => 'created_at', older_than => '60 days', terminal => 'true',
                action => 'archive_then_delete')",
    );
    assert_eq!(code, "RT102");
    assert!(msg.contains("outbox"), "{msg}");
    // Two policies of one class are fine; altering one to the other class is refused.
    db.batch_execute(
        "SELECT retention.add_policy(name => 'outbox2', relation => 'outbox', kind => 'age',
                age_column => 'created_at', older_than => '60 days')",
    )
    .unwrap();
    let (code, _) = expect_error(
        &mut db,
        "SELECT retention.alter_policy('outbox2', terminal => 'true', action => 'archive_then_delete')",
    );
    assert_eq!(code, "RT102");
    let classes: Vec<(String, String, Vec<String>)> = db
        .query(
            "SELECT relation::text, class, policies FROM retention.tables WHERE policies <> '{}' ORDER BY 1",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(
        classes,
        vec![
            ("audit".into(), "archive".into(), vec!["audit".into()]),
            (
                "outbox".into(),
                "delete".into(),
                vec!["outbox".into(), "outbox2".into()]
            ),
        ]
    );
}

#[test]
fn an_archive_policy_claims_renders_and_prunes_as_its_owner() {
    let c = Cluster::start(&[]);
    // `auditor`: a member of retention_admin with only SELECT and DELETE on the table — all an
    // archive policy's owner needs (claims lock no rows).
    c.execute(
        "postgres",
        "CREATE ROLE auditor LOGIN IN ROLE retention_admin;
         CREATE TABLE audit (id int PRIMARY KEY, state text NOT NULL, closed_at timestamptz);
         GRANT SELECT, DELETE ON audit TO auditor;",
    );
    c.grant_app_and_admin("postgres");
    let (mut app, mut admin) = c.app_and_admin("postgres");
    app.batch_execute(
        "INSERT INTO audit SELECT g, 'closed', now() - interval '90 days' FROM generate_series(1, 100) g;",
    )
    .unwrap();
    let mut auditor = connect_as(&c, "auditor");
    let mut arch = Client::connect(&c.archiver_url("postgres"), postgres::NoTls)
        .unwrap_or_else(|e| panic!("connect as archiver: {e}"));
    let register =
        "SELECT retention.add_policy(name => 'audit', relation => 'audit', kind => 'age',
            age_column => 'closed_at', older_than => '30 days', terminal => $$state = 'closed'$$,
            action => 'archive_then_delete')";
    auditor.batch_execute(register).unwrap();
    // The guard trigger evaluates as the owner, whoever updates.
    let (code, _) = expect_error(&mut app, "UPDATE audit SET state = 'open' WHERE id = 1");
    assert_eq!(code, "RT501");
    let batch: String = arch
        .query_one("SELECT retention.claim_batch('audit', 40)::text", &[])
        .unwrap()
        .get(0);
    let frames: Vec<Vec<u8>> = arch
        .query(
            "SELECT f FROM retention.batch_frames($1::text::uuid) f",
            &[&batch],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let (digest, rows, bytes) = pg_retention_format::summarize(frames.iter().map(Vec::as_slice));
    let deleted: i64 = arch
        .query_one(
            "SELECT retention.complete_batch($1::text::uuid, 'k/' || $1, $2, $3, $4)",
            &[&batch, &digest, &(rows as i64), &(bytes as i64)],
        )
        .unwrap()
        .get(0);
    assert_eq!(deleted, 40);
    assert_eq!(scalar(&mut admin, "SELECT count(*) FROM audit"), 60);
    // The owner loses DELETE (revoked by the table's owner, the superuser): the next claim
    // fails closed.
    c.execute("postgres", "REVOKE DELETE ON audit FROM auditor");
    let (code, msg) = expect_error(&mut arch, "SELECT retention.claim_batch('audit', 40)");
    assert_eq!(code, "42501", "{msg}");
    assert_eq!(scalar(&mut admin, "SELECT count(*) FROM audit"), 60);
}

#[test]
fn an_archive_terminal_on_a_table_the_author_does_not_own_calls_only_built_in_functions() {
    let c = Cluster::start(&[]);
    attacker(&c);
    plant_steal(&c);
    c.execute(
        "postgres",
        "CREATE TABLE journal (id int PRIMARY KEY, state text NOT NULL, closed_at timestamptz);
         GRANT SELECT, UPDATE, DELETE ON journal TO mallory;",
    );
    c.grant_app_and_admin("postgres");
    let mut m = connect_as(&c, "mallory");
    // The terminal predicate becomes the table's CHECK constraint, which every writer
    // evaluates as themselves: mallory's function would run as whoever inserts.
    let (code, msg) = expect_error(
        &mut m,
        "SELECT retention.add_policy(name => 'journal', relation => 'journal', kind => 'age',
                age_column => 'closed_at', older_than => '30 days',
                terminal => $$state = 'closed' AND public.steal(id)$$, action => 'archive_then_delete')",
    );
    assert_eq!(code, "RT101");
    assert!(msg.contains("built into PostgreSQL"), "{msg}");
    m.batch_execute(
        "SELECT retention.add_policy(name => 'journal', relation => 'journal', kind => 'age',
                age_column => 'closed_at', older_than => '30 days',
                terminal => $$lower(state) = 'closed'$$, action => 'archive_then_delete')",
    )
    .unwrap();
    c.app("postgres")
        .batch_execute("INSERT INTO journal VALUES (1, 'closed', now())")
        .unwrap();
}
