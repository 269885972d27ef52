//! The attacker's suite (docs/security.md, "The identity model"): one test per class of attack
//! on the trust boundary, each run as a non-superuser holding only the retention roles, each
//! asserting the attacker gained nothing.
//!
//! The attacker is `attacker`, a login in `retention_admin` that owns schema `m`. Its probe
//! `m.pwn()` makes it a superuser whenever it runs as one, and records the role it ran as in
//! `m.seen` (when the transaction it ran in commits); `m.gate(x)` is IMMUTABLE, calls it and
//! returns true, so it can sit in any predicate.

use pg_retention_integration::{expect_error, scalar, Cluster};
use postgres::Client;

/// The attacker, its schema and its probes, and a superuser-owned table `public.o` that the
/// attacker may read and delete from (a table an admin governs without owning it).
fn attacker(c: &Cluster) -> Client {
    let mut db = c.connect("postgres");
    db.batch_execute(
        "CREATE ROLE attacker LOGIN IN ROLE retention_admin;
         CREATE SCHEMA m AUTHORIZATION attacker;
         CREATE TABLE public.o (id int PRIMARY KEY, status text, closed_at timestamptz);
         INSERT INTO public.o SELECT g, 'done', now() - interval '90 days' FROM generate_series(1, 20) g;
         GRANT SELECT, UPDATE, DELETE ON public.o TO attacker;",
    )
    .unwrap();
    let mut a = c.connect_as("postgres", "attacker");
    a.batch_execute(
        "CREATE TABLE m.seen (who text);
         GRANT INSERT ON m.seen TO PUBLIC;
         GRANT USAGE ON SCHEMA m TO PUBLIC;
         CREATE FUNCTION m.pwn() RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
         BEGIN
             INSERT INTO m.seen VALUES (current_user);
             IF (SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user) THEN
                 ALTER ROLE attacker SUPERUSER;
             END IF;
             RETURN true;
         END $$;
         CREATE FUNCTION m.gate(anyelement) RETURNS boolean LANGUAGE plpgsql IMMUTABLE AS $$
         BEGIN
             PERFORM m.pwn();
             RETURN true;
         END $$;
         GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA m TO PUBLIC;",
    )
    .unwrap();
    a
}

/// Whether the attacker became a superuser, asked of the superuser's session.
fn escalated(c: &Cluster) -> bool {
    let mut db = c.connect("postgres");
    db.query_one(
        "SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = 'attacker'",
        &[],
    )
    .unwrap()
    .get(0)
}

/// The roles the attacker's code ran as (committed probes only); each must be the attacker.
fn seen(c: &Cluster) -> Vec<String> {
    let mut db = c.connect("postgres");
    db.query("SELECT DISTINCT who FROM m.seen ORDER BY who", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

fn assert_nothing_gained(c: &Cluster) {
    assert!(!escalated(c), "the attacker became a superuser");
    for who in seen(c) {
        assert_eq!(who, "attacker", "the attacker's code ran as {who}");
    }
}

/// Class 1: a scope that calls an entry point (here place_hold) while a superuser's run or
/// preview evaluates it is refused there; a hold placed through the attacker's own SECURITY
/// DEFINER function, called by a superuser, belongs to the attacker (the role in force), not to
/// the superuser's session.
#[test]
fn entry_points_refuse_predicates_and_name_the_role_in_force() {
    let c = Cluster::start(&[]);
    let mut a = attacker(&c);
    a.batch_execute(
        "CREATE TABLE m.t (id int PRIMARY KEY, created_at timestamptz NOT NULL);
         INSERT INTO m.t SELECT g, now() - interval '90 days' FROM generate_series(1, 10) g;
         CREATE FUNCTION m.hold_it() RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
         BEGIN
             PERFORM retention.place_hold('m.t', 'm.gate(id)', 'c1', 'attacker');
             RETURN true;
         END $$;
         CREATE FUNCTION m.scope(int) RETURNS boolean LANGUAGE plpgsql IMMUTABLE AS $$
         BEGIN
             PERFORM m.hold_it();
             RETURN true;
         END $$;
         CREATE TABLE m.u (id int PRIMARY KEY, created_at timestamptz NOT NULL);
         INSERT INTO m.u SELECT g, now() - interval '90 days' FROM generate_series(1, 10) g;
         SELECT retention.add_policy(name => 'u', relation => 'm.u', kind => 'age',
                age_column => 'created_at', older_than => '30 days', scope => 'm.scope(id)');",
    )
    .unwrap();
    // The attacker's own call from its own predicate is refused just the same.
    let (code, msg) = expect_error(&mut a, "SELECT * FROM retention.preview('u')");
    assert_eq!(code, "42501", "{msg}");
    let mut db = c.connect("postgres");
    let preview = db.batch_execute("SELECT * FROM retention.preview('u')");
    let run = db.batch_execute("CALL retention.run('u')");
    let _ = (preview, run);
    let placed = scalar(
        &mut db,
        "SELECT count(*) FROM retention.holds WHERE reason = 'c1'",
    );
    assert_eq!(placed, 0, "no hold is placed from inside a predicate");
    assert_eq!(scalar(&mut db, "SELECT count(*) FROM m.u"), 10);
    assert_nothing_gained(&c);

    // The attacker's SECURITY DEFINER function, called by a superuser: the role in force is
    // the attacker, so the hold is the attacker's and its predicate runs as the attacker.
    a.batch_execute(
        "CREATE FUNCTION m.helper() RETURNS bigint LANGUAGE sql SECURITY DEFINER
             SET search_path = pg_catalog AS
             $$ SELECT retention.place_hold('m.t', 'm.gate(id)', 'c2', 'attacker') $$;
         GRANT EXECUTE ON FUNCTION m.helper() TO PUBLIC;",
    )
    .unwrap();
    db.batch_execute("SELECT m.helper()").unwrap();
    let placer: String = db
        .query_one(
            "SELECT h.placed_by::text FROM retention.hold_records h WHERE h.reason = 'c2'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(placer, "attacker");
    // Its predicate runs as the attacker when the superuser previews a policy of that table.
    a.batch_execute(
        "SELECT retention.drop_policy('u');
         SELECT retention.add_policy(name => 't', relation => 'm.t', kind => 'age',
                age_column => 'created_at', older_than => '30 days');",
    )
    .unwrap();
    let held = scalar(&mut db, "SELECT held FROM retention.preview('t')");
    assert_eq!(held, 10);
    assert_nothing_gained(&c);
    assert_eq!(
        seen(&c),
        ["attacker"],
        "the hold's predicate ran, as its placer"
    );
}

/// Class 2: the fixpoint CHECK of an archive policy is validated by PostgreSQL as whoever runs
/// the ALTER TABLE; that is the table's owner (here the attacker), never the extension's owner.
#[test]
fn the_fixpoint_check_is_validated_as_the_table_owner() {
    let c = Cluster::start(&[]);
    let mut a = attacker(&c);
    a.batch_execute(
        "CREATE TABLE m.a (id int PRIMARY KEY, state text, closed_at timestamptz);
         INSERT INTO m.a VALUES (1, 'open', now());
         SELECT retention.add_policy(name => 'a', relation => 'm.a', kind => 'age',
                age_column => 'closed_at', older_than => '30 days', terminal => 'm.gate(id)',
                action => 'archive_then_delete');
         SELECT retention.alter_policy(name => 'a', older_than => '40 days');",
    )
    .unwrap();
    assert_nothing_gained(&c);
    assert!(
        !seen(&c).is_empty(),
        "the probe ran (so the test could see it)"
    );
}

/// Class 4: a predicate is one expression by itself: a dollar quote that would close inside a
/// quoted table or column name of the statement around it is refused.
#[test]
fn a_predicate_that_closes_in_the_surrounding_text_is_refused() {
    let c = Cluster::start(&[]);
    let mut a = attacker(&c);
    a.batch_execute(
        r#"CREATE FUNCTION m.pwn0() RETURNS boolean LANGUAGE sql AS $$ SELECT m.pwn() $$;
           CREATE TABLE m."t$q$ IS NOT NULL) AS x --" (id int PRIMARY KEY,
               "a$q$ IS NULL) OR true);SELECT m.pwn0();--" timestamptz);"#,
    )
    .unwrap();
    let (code, msg) = expect_error(
        &mut a,
        r#"SELECT retention.add_policy(name => 'q', relation => 'm."t$q$ IS NOT NULL) AS x --"',
                kind => 'age', age_column => 'a$q$ IS NULL) OR true);SELECT m.pwn0();--',
                older_than => '30 days', terminal => '$q$', action => 'archive_then_delete')"#,
    );
    assert_eq!(code, "RT101", "{msg}");
    for (what, predicate) in [
        (
            "a statement after it",
            "true); SELECT m.pwn(); SELECT (true",
        ),
        ("an open block comment", "true /*"),
        ("a set operation", "true) UNION SELECT (m.pwn()"),
    ] {
        let (code, msg) = expect_error(
            &mut a,
            &format!("SELECT retention.place_hold('public.o', $x${predicate}$x$, 'r', 'attacker')"),
        );
        assert_eq!(code, "RT101", "{what}: {msg}");
    }
    assert_nothing_gained(&c);
}

/// Class 5: on a table the author does not own, an archive policy's terminal (which every
/// writer evaluates in the table's CHECK) may not build values of a user type: a domain's CHECK
/// is code, and so is a composite carrying one.
#[test]
fn a_domain_cannot_smuggle_code_into_another_roles_table() {
    let c = Cluster::start(&[]);
    let mut a = attacker(&c);
    a.batch_execute(
        "CREATE DOMAIN m.d AS text CHECK (m.gate(VALUE));
         CREATE TYPE m.comp AS (f m.d);",
    )
    .unwrap();
    for terminal in [
        "(status::m.d) IS NOT NULL",
        "(ROW(status)::m.comp) IS NOT NULL",
        "('(x)'::m.comp) IS NOT NULL",
    ] {
        let (code, msg) = expect_error(
            &mut a,
            &format!(
                "SELECT retention.add_policy(name => 'o', relation => 'public.o', kind => 'age',
                        age_column => 'closed_at', older_than => '30 days',
                        terminal => $x${terminal}$x$, action => 'archive_then_delete')"
            ),
        );
        assert!(
            code == "RT101" || code == "42501",
            "{terminal}: {code} {msg}"
        );
    }
    let mut db = c.connect("postgres");
    db.batch_execute("UPDATE public.o SET status = 'done' WHERE id = 1")
        .unwrap();
    assert_nothing_gained(&c);
}

/// Class 6: a size-like argument is bounded: a plain archiver asking for 2^31-1 rows gets a
/// typed error, and the cluster keeps serving.
#[test]
fn batch_sizes_are_bounded() {
    let c = Cluster::start(&[]);
    let mut db = c.connect("postgres");
    db.batch_execute(
        "CREATE ROLE archiver LOGIN IN ROLE retention_archiver;
         CREATE TABLE audit (id int PRIMARY KEY, state text, closed_at timestamptz);
         INSERT INTO audit SELECT g, 'closed', now() - interval '90 days' FROM generate_series(1, 10) g;
         SELECT retention.add_policy(name => 'audit', relation => 'audit', kind => 'age',
                age_column => 'closed_at', older_than => '30 days', terminal => $$state = 'closed'$$,
                action => 'archive_then_delete');",
    )
    .unwrap();
    let mut arch = c.connect_as("postgres", "archiver");
    for sql in [
        "SELECT retention.claim_batch('audit', 2147483647)",
        "SELECT * FROM retention.claim_slice('audit', 2147483647)",
        "SELECT * FROM retention.claim_next('audit', 2147483647)",
        "SELECT retention.claim_batch('audit', 0)",
    ] {
        let (code, msg) = expect_error(&mut arch, sql);
        assert_eq!(code, "22023", "{sql}: {msg}");
    }
    let (code, msg) = expect_error(
        &mut db,
        "SELECT retention.alter_policy(name => 'audit', batch_size => 2000000000)",
    );
    assert_eq!(code, "22023", "{msg}");
    assert_eq!(scalar(&mut db, "SELECT count(*) FROM audit"), 10);
}

/// Class 9: an application role with only its table privileges updates a table an archive
/// policy guards: rows that are not archive-eligible change, eligible ones are refused (RT501).
#[test]
fn the_guard_serves_writers_with_only_table_privileges() {
    let c = Cluster::start(&[]);
    let mut db = c.connect("postgres");
    db.batch_execute(
        "CREATE ROLE app LOGIN;
         CREATE ROLE admin LOGIN IN ROLE retention_admin;
         CREATE TABLE audit (id int PRIMARY KEY, state text, closed_at timestamptz, note text);
         GRANT SELECT, INSERT, UPDATE ON audit TO app;
         GRANT SELECT, UPDATE, DELETE ON audit TO admin;
         INSERT INTO audit VALUES (1, 'closed', now() - interval '90 days', ''),
                                  (2, 'open', NULL, '');",
    )
    .unwrap();
    c.connect_as("postgres", "admin")
        .batch_execute(
            "SELECT retention.add_policy(name => 'audit', relation => 'audit', kind => 'age',
                    age_column => 'closed_at', older_than => '30 days',
                    terminal => $$state = 'closed'$$, action => 'archive_then_delete')",
        )
        .unwrap();
    let mut app = c.connect_as("postgres", "app");
    app.batch_execute(
        "INSERT INTO audit VALUES (3, 'open', NULL, '');
         UPDATE audit SET note = 'changed' WHERE id IN (2, 3);",
    )
    .unwrap();
    let (code, msg) = expect_error(&mut app, "UPDATE audit SET note = 'x' WHERE id = 1");
    assert_eq!(code, "RT501", "{msg}");
    assert_eq!(
        scalar(&mut db, "SELECT count(*) FROM audit WHERE note = 'changed'"),
        2
    );
}

/// Class 12: NULL elements in array arguments and the catalog's own tables are typed refusals,
/// never XX000.
#[test]
fn null_elements_and_catalog_tables_are_typed_refusals() {
    let c = Cluster::start(&[]);
    let mut db = c.connect("postgres");
    db.batch_execute(
        "CREATE ROLE admin LOGIN IN ROLE retention_admin;
         CREATE ROLE eraser LOGIN IN ROLE retention_eraser;
         CREATE ROLE archiver LOGIN IN ROLE retention_archiver;
         CREATE TABLE runs (id int PRIMARY KEY, source int, started_at timestamptz);
         GRANT SELECT, DELETE ON runs TO admin;",
    )
    .unwrap();
    let mut admin = c.connect_as("postgres", "admin");
    let (code, msg) = expect_error(
        &mut admin,
        "SELECT retention.add_policy(name => 'runs', relation => 'runs', kind => 'keep_latest',
                group_by => ARRAY[NULL]::text[], order_by => 'started_at', keep => 5)",
    );
    assert_eq!(code, "22004", "{msg}");
    let (code, msg) = expect_error(
        &mut admin,
        "SELECT retention.place_hold('retention.ledger_entries', 'true', 'r', 'a')",
    );
    assert_eq!(code, "42501", "{msg}");
    let mut arch = c.connect_as("postgres", "archiver");
    for sql in [
        "SELECT retention.archive_holds(1, '\\x'::bytea, ARRAY[NULL]::text[])",
        "SELECT retention.supersession_matches(1, '\\x'::bytea, ARRAY[NULL]::text[])",
    ] {
        let (code, msg) = expect_error(&mut arch, sql);
        assert_eq!(code, "22004", "{sql}: {msg}");
    }
    let mut eraser = c.connect_as("postgres", "eraser");
    let (code, msg) = expect_error(
        &mut eraser,
        "SELECT retention.erase('retention.ledger_entries', 'true', 'req-1', 'dpo')",
    );
    assert_eq!(code, "42501", "{msg}");
}

/// Class 7: the run protocol takes no state from its client. A token names a run of this
/// session only: one made up, or another session's, is refused; the actor is who runs it; the
/// ledger's internals are the engine's alone.
#[test]
fn the_run_protocol_accepts_no_client_made_state() {
    let c = Cluster::start(&[]);
    let mut db = c.connect("postgres");
    db.batch_execute(
        "CREATE ROLE admin LOGIN IN ROLE retention_admin;
         CREATE TABLE t (id int PRIMARY KEY, created_at timestamptz NOT NULL);
         INSERT INTO t SELECT g, now() - interval '90 days' FROM generate_series(1, 10) g;
         GRANT SELECT, DELETE ON t TO admin;",
    )
    .unwrap();
    let mut admin = c.connect_as("postgres", "admin");
    admin
        .batch_execute(
            "SELECT retention.add_policy(name => 't', relation => 't', kind => 'age',
                    age_column => 'created_at', older_than => '30 days')",
        )
        .unwrap();
    let id = scalar(
        &mut admin,
        "SELECT id FROM retention.policies WHERE name = 't'",
    );
    // A run begun in another session: its token is a plain number, and names nothing here.
    let mut other = c.connect_as("postgres", "admin");
    let theirs = scalar(&mut other, &format!("SELECT retention._run_begin({id})"));
    for token in [theirs, 0, -1, 424242, i64::MAX] {
        for sql in [
            format!("SELECT retention._run_advance({token})"),
            format!("SELECT * FROM retention._run_progress({token})"),
            format!("SELECT * FROM retention._run_end({token})"),
        ] {
            let (code, msg) = expect_error(&mut admin, &sql);
            assert_eq!(code, "22023", "{sql}: {msg}");
        }
    }
    other
        .batch_execute(&format!("SELECT * FROM retention._run_end({theirs})"))
        .unwrap();
    for sql in [
        format!("SELECT retention._ledger_pause({id}, 'r', 1e9, 'worker')"),
        format!("SELECT retention._ledger_skip_locked({id}, 'worker')"),
        "SELECT retention._ledger_append('run', 'worker', '{}', NULL)".to_owned(),
    ] {
        let (code, msg) = expect_error(&mut admin, &sql);
        assert_eq!(code, "42501", "{sql}: {msg}");
    }
    // The only run entries are those real runs write, by the admin: the other session's,
    // ended before its first step, and the one CALL retention.run() makes.
    admin.batch_execute("CALL retention.run('t')").unwrap();
    let runs: Vec<(String, i64)> = admin
        .query(
            "SELECT actor, rows FROM retention.ledger WHERE method = 'run' ORDER BY id",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(runs, [("admin".to_owned(), 0), ("admin".to_owned(), 10)]);
    assert_eq!(scalar(&mut db, "SELECT count(*) FROM t"), 0);
}

/// Class 8: a consumer belongs to its reporter role (by default the role that registered it):
/// another consumer role, with the same grants, can neither read its epoch nor report for it.
#[test]
fn a_consumer_reports_only_as_its_own_role() {
    let c = Cluster::start(&[]);
    let mut db = c.connect("postgres");
    db.batch_execute(
        "CREATE ROLE admin LOGIN IN ROLE retention_admin;
         CREATE ROLE mine LOGIN IN ROLE retention_consumer;
         CREATE ROLE other LOGIN IN ROLE retention_consumer;
         CREATE TABLE stream (seq bigint PRIMARY KEY, created_at timestamptz NOT NULL);
         INSERT INTO stream SELECT g, now() - interval '90 days' FROM generate_series(1, 100) g;
         GRANT SELECT, DELETE ON stream TO admin;
         GRANT SELECT (seq) ON stream TO mine, other;",
    )
    .unwrap();
    let mut admin = c.connect_as("postgres", "admin");
    admin
        .batch_execute(
            "SELECT retention.add_policy(name => 'stream', relation => 'stream', kind => 'age',
                    age_column => 'created_at', older_than => '30 days', order_by => 'seq')",
        )
        .unwrap();
    let epoch = scalar(
        &mut admin,
        "SELECT retention.register_consumer('stream', 'c', '1 hour', 'mine')",
    );
    let mut other = c.connect_as("postgres", "other");
    for sql in [
        format!("SELECT retention.report_position('stream', 'c', {epoch}, '100')"),
        "SELECT * FROM retention.consumer_status('stream', 'c')".to_owned(),
    ] {
        let (code, msg) = expect_error(&mut other, &sql);
        assert_eq!(code, "42501", "{sql}: {msg}");
    }
    let mut mine = c.connect_as("postgres", "mine");
    mine.batch_execute(&format!(
        "SELECT retention.report_position('stream', 'c', {epoch}, '50')"
    ))
    .unwrap();
    admin.batch_execute("CALL retention.run('stream')").unwrap();
    assert_eq!(
        scalar(&mut db, "SELECT min(seq) FROM stream"),
        50,
        "rows from the consumer's own position on stay"
    );
}

/// Class 10: the worker honours `statement_timeout` (and `pg_retention.step_timeout`): a policy
/// whose scope never finishes is cancelled and ledgered (57014), and the policies after it are
/// swept in the same cycle.
#[test]
fn a_slow_policy_does_not_stall_the_worker() {
    let c = Cluster::start(&[
        "pg_retention.enabled = on",
        "pg_retention.databases = 'postgres'",
        "pg_retention.naptime = '1h'",
        "pg_retention.jitter = 0",
        "statement_timeout = '2s'",
    ]);
    let mut db = c.connect("postgres");
    let mut a = attacker(&c);
    a.batch_execute(
        "CREATE FUNCTION m.slow(int) RETURNS boolean LANGUAGE plpgsql IMMUTABLE AS $$
         BEGIN
             PERFORM pg_catalog.pg_sleep(30);
             RETURN true;
         END $$;
         CREATE TABLE m.a (id int PRIMARY KEY, created_at timestamptz NOT NULL);
         CREATE TABLE m.b (id int PRIMARY KEY, created_at timestamptz NOT NULL);
         INSERT INTO m.a SELECT g, now() - interval '90 days' FROM generate_series(1, 10) g;
         INSERT INTO m.b SELECT g, now() - interval '90 days' FROM generate_series(1, 10) g;
         SELECT retention.add_policy(name => 'a_slow', relation => 'm.a', kind => 'age',
                age_column => 'created_at', older_than => '30 days', scope => 'm.slow(id)');
         SELECT retention.add_policy(name => 'b_fast', relation => 'm.b', kind => 'age',
                age_column => 'created_at', older_than => '30 days');",
    )
    .unwrap();
    db.batch_execute("SELECT retention.wake()").unwrap();
    let swept = c.wait_until(std::time::Duration::from_secs(20), || {
        let mut db = c.connect("postgres");
        scalar(&mut db, "SELECT count(*) FROM m.b") == 0
    });
    assert!(swept, "the fast policy was not swept; log:\n{}", c.log());
    let code: String = db
        .query_one(
            "SELECT detail->>'sqlstate' FROM retention.ledger
              WHERE policy = 'a_slow' AND method = 'error' ORDER BY id DESC LIMIT 1",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(code, "57014");
    assert_eq!(scalar(&mut db, "SELECT count(*) FROM m.a"), 10);
    // The visit ended normally, its cycle complete: nothing stalled it.
    let ended = c.wait_until(std::time::Duration::from_secs(20), || {
        scalar(
            &mut c.connect("postgres"),
            "SELECT count(*) FROM retention.workers
              WHERE NOT running AND state = 'idle' AND cycle_resume IS NULL AND last_cycle_end IS NOT NULL",
        ) == 1
    });
    assert!(ended, "the visit did not end its cycle; log:\n{}", c.log());
}

/// Class 3: values of a governed table's own types (here a domain whose CHECK is the probe) are
/// made only as the policy's owner: a consumer's positions, the floor the deletes compare with,
/// and the key ranges a claim steps around, whoever runs the run, preview, metrics or claim.
#[test]
fn casts_to_a_tables_types_run_as_the_policy_owner() {
    let c = Cluster::start(&[]);
    let mut db = c.connect("postgres");
    let mut a = attacker(&c);
    db.batch_execute(
        "CREATE ROLE archiver LOGIN IN ROLE retention_archiver;
         GRANT retention_consumer TO attacker;",
    )
    .unwrap();
    a.batch_execute(
        "CREATE DOMAIN m.dpos AS bigint CHECK (m.gate(VALUE));
         CREATE TABLE m.s (seq m.dpos PRIMARY KEY, created_at timestamptz NOT NULL);
         INSERT INTO m.s SELECT g, now() - interval '90 days' FROM generate_series(1, 20) g;
         SELECT retention.add_policy(name => 's', relation => 'm.s', kind => 'age',
                age_column => 'created_at', older_than => '30 days', order_by => 'seq');
         SELECT retention.report_position('s', 'c', retention.register_consumer('s', 'c', '1 hour'), '5');
         CREATE TABLE m.k (id m.dpos PRIMARY KEY, state text, closed_at timestamptz);
         INSERT INTO m.k SELECT g, 'closed', now() - interval '90 days' FROM generate_series(1, 20) g;
         SELECT retention.add_policy(name => 'k', relation => 'm.k', kind => 'age',
                age_column => 'closed_at', older_than => '30 days', terminal => $$state = 'closed'$$,
                action => 'archive_then_delete');",
    )
    .unwrap();
    db.batch_execute(
        "SELECT * FROM retention.preview();
         SELECT * FROM retention.metrics();
         SELECT * FROM retention.health();",
    )
    .unwrap();
    db.batch_execute("CALL retention.run()").unwrap();
    assert_eq!(
        scalar(&mut db, "SELECT min(seq)::bigint FROM m.s"),
        5,
        "the consumer's floor held"
    );
    let mut arch = c.connect_as("postgres", "archiver");
    for owner in ["arch-1", "arch-2"] {
        arch.batch_execute(&format!(
            "SELECT retention.claim_batch('k', 5, '10 minutes', '{owner}')"
        ))
        .unwrap();
    }
    assert_eq!(
        scalar(
            &mut db,
            "SELECT count(*) FROM retention.batches WHERE state = 'claimed'"
        ),
        2
    );
    assert_nothing_gained(&c);
}
