//! Enforced holds (`place_hold(..., enforce => true)`): every UPDATE, DELETE and TRUNCATE of the
//! rows they cover is refused (RT402) for every writer but an erasure — here the application
//! itself, a non-superuser with table privileges only — and lifting one says what it protected.
//!
//! Production roles: tables by the superuser, rows by `app`, holds and policies by `admin` (a
//! member of `retention_admin`), the erasure by `dpo` (a member of `retention_eraser` only).

use pg_retention_integration::{expect_error, scalar, Cluster};

#[test]
fn an_enforced_hold_refuses_every_writer_but_an_erasure() {
    let c = Cluster::start(&[]);
    c.execute(
        "postgres",
        "CREATE TABLE cases (id int PRIMARY KEY, customer int NOT NULL, note text NOT NULL);
         CREATE TABLE parts (id int, customer int NOT NULL, at date NOT NULL) PARTITION BY RANGE (at);
         CREATE TABLE parts_2025 PARTITION OF parts FOR VALUES FROM ('2025-01-01') TO ('2026-01-01');
         CREATE TABLE parts_2026 PARTITION OF parts FOR VALUES FROM ('2026-01-01') TO ('2027-01-01');",
    );
    c.grant_app_and_admin("postgres");
    let (mut app, mut admin) = c.app_and_admin("postgres");
    app.batch_execute(
        "INSERT INTO cases SELECT g, g % 4, 'n' || g FROM generate_series(1, 40) g;
         INSERT INTO parts SELECT g, g % 4, DATE '2025-06-01' + g * 10 FROM generate_series(1, 40) g;",
    )
    .unwrap();
    let hold: i64 = admin
        .query_one(
            "SELECT retention.place_hold('cases', 'customer = 1', 'litigation 42', 'legal', enforce => true)",
            &[],
        )
        .unwrap()
        .get(0);
    // A plain hold beside it refuses nothing.
    admin
        .batch_execute("SELECT retention.place_hold('cases', 'customer = 2', 'audit', 'legal')")
        .unwrap();

    for sql in [
        "DELETE FROM cases WHERE id = 1",
        "UPDATE cases SET note = 'x' WHERE id = 5",
        "DELETE FROM cases",
    ] {
        let (state, message) = expect_error(&mut app, sql);
        assert_eq!(state, "RT402", "{sql}: {message}");
        assert!(message.contains(&format!("hold {hold}")), "{message}");
    }
    // TRUNCATE is the owner's (here the superuser's): refused to it too.
    let (state, message) = expect_error(&mut c.connect("postgres"), "TRUNCATE cases");
    assert_eq!(state, "RT402", "{message}");
    // Rows it does not cover are the application's to change.
    app.batch_execute(
        "UPDATE cases SET note = 'y' WHERE customer = 2; DELETE FROM cases WHERE customer = 3",
    )
    .unwrap();
    assert_eq!(scalar(&mut admin, "SELECT count(*) FROM cases"), 30);
    assert_eq!(
        scalar(
            &mut admin,
            "SELECT count(*) FROM retention.holds WHERE enforced AND active"
        ),
        1
    );

    // An erasure outranks it (and is ledgered as a collision with it).
    c.execute(
        "postgres",
        "DO $$ BEGIN CREATE ROLE dpo LOGIN IN ROLE retention_eraser; EXCEPTION WHEN duplicate_object THEN NULL; END $$;
         GRANT SELECT, DELETE ON cases TO dpo;",
    );
    let mut dpo = c.connect_as("postgres", "dpo");
    assert_eq!(
        scalar(
            &mut dpo,
            "SELECT retention.erase('cases', 'id = 1', 'DSR-1', 'dpo')"
        ),
        1
    );
    // After the erasure, the application is refused again.
    let (state, _) = expect_error(&mut app, "DELETE FROM cases WHERE id = 5");
    assert_eq!(state, "RT402");

    // Lifting it removes the triggers (what it says: lifting_a_hold_notices_its_reason).
    admin
        .batch_execute(&format!(
            "SELECT retention.lift_hold({hold}, 'legal', 'case closed')"
        ))
        .unwrap();
    assert_eq!(
        scalar(
            &mut admin,
            "SELECT count(*) FROM pg_trigger WHERE tgrelid = 'cases'::regclass AND tgname LIKE 'pg_retention_hold_%'"
        ),
        0
    );
    app.batch_execute("DELETE FROM cases WHERE id = 5").unwrap();

    // On a partitioned table a hold on the parent covers every partition's rows.
    admin
        .batch_execute(
            "SELECT retention.place_hold('parts', 'customer = 0', 'litigation 43', 'legal', enforce => true)",
        )
        .unwrap();
    let (state, _) = expect_error(&mut app, "DELETE FROM parts_2026 WHERE customer = 0");
    assert_eq!(state, "RT402");
    let (state, _) = expect_error(&mut app, "UPDATE parts SET customer = 9 WHERE customer = 0");
    assert_eq!(state, "RT402");
    app.batch_execute("DELETE FROM parts WHERE customer = 1")
        .unwrap();
    assert_eq!(scalar(&mut admin, "SELECT count(*) FROM parts"), 30);

    // The product's own sweep goes around the held rows, as with any hold.
    admin
        .batch_execute(
            "SELECT retention.add_policy(name => 'parts', relation => 'parts', kind => 'age',
                    age_column => 'at', older_than => '1 day')",
        )
        .unwrap();
    admin.batch_execute("CALL retention.run('parts')").unwrap();
    assert_eq!(
        scalar(&mut admin, "SELECT count(*) FROM parts WHERE customer <> 0"),
        0
    );
    assert_eq!(
        scalar(&mut admin, "SELECT count(*) FROM parts WHERE customer = 0"),
        10
    );
}

/// Lifting a hold tells the lifter, as a NOTICE, who placed it and why.
#[test]
fn lifting_a_hold_notices_its_reason() {
    let c = Cluster::start(&[]);
    c.execute("postgres", "CREATE TABLE t (id int PRIMARY KEY)");
    c.grant_app_and_admin("postgres");
    let url = c.url_as("postgres", "admin");
    let notices = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let seen = notices.clone();
    let mut config: postgres::Config = url.parse().unwrap();
    drop(c.admin("postgres"));
    config.notice_callback(move |n| seen.lock().unwrap().push(n.message().to_owned()));
    let mut admin = config.connect(postgres::NoTls).unwrap();
    let hold: i64 = admin
        .query_one(
            "SELECT retention.place_hold('t', 'id < 10', 'subpoena 7 until the trial', 'legal')",
            &[],
        )
        .unwrap()
        .get(0);
    admin
        .batch_execute(&format!(
            "SELECT retention.lift_hold({hold}, 'legal', 'trial over')"
        ))
        .unwrap();
    let notices = notices.lock().unwrap();
    assert!(
        notices
            .iter()
            .any(|n| n.contains("placed by legal because: subpoena 7 until the trial")),
        "{notices:?}"
    );
}
