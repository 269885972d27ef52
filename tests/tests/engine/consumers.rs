//! Consumer floors: registered consumers pin rows from their reported position, with epochs,
//! leases and bootstrap reporting.

use super::*;

/// A stream table: seq 1..100, row `s` created `100.5 - s` days ago, so under a 30-day window
/// rows 1..70 are eligible; the policy orders the stream by seq. Returns the admin's
/// connection.
fn stream(c: &Cluster) -> Client {
    let (mut app, mut admin) = set_up(
        c,
        "CREATE TABLE stream (seq bigint PRIMARY KEY, created_at timestamptz NOT NULL);",
    );
    app.batch_execute(
        "INSERT INTO stream SELECT s, now() - make_interval(days => (101 - s)::int) + interval '12 hours'
                              FROM generate_series(1, 100) s;",
    )
    .unwrap();
    admin
        .batch_execute(
            "SELECT retention.add_policy(name => 'stream', relation => 'stream', kind => 'age',
                    age_column => 'created_at', older_than => '30 days', order_by => 'seq', batch_size => 7);",
        )
        .unwrap();
    admin
}

/// (eligible, pinned, would_delete) of a policy's preview.
fn eligible_pinned_deleted(db: &mut Client, policy: &str) -> (i64, i64, i64) {
    let row = db
        .query_one(
            "SELECT eligible, pinned, would_delete FROM retention.preview($1)",
            &[&policy],
        )
        .unwrap();
    (row.get(0), row.get(1), row.get(2))
}

/// (pinned, would_delete) of the stream policy's preview.
fn pins(db: &mut Client) -> (i64, i64) {
    let (_, pinned, would_delete) = eligible_pinned_deleted(db, "stream");
    (pinned, would_delete)
}

fn report(db: &mut Client, consumer: &str, epoch: i64, position: &str) -> String {
    db.query_one(
        "SELECT retention.report_position('stream', $1, $2, $3)",
        &[&consumer, &epoch, &position],
    )
    .unwrap()
    .get(0)
}

fn run_stream(db: &mut Client) -> (i64, i64) {
    db.batch_execute("CALL retention.run('stream')").unwrap();
    let row = db
        .query_one("SELECT count(*), min(seq) FROM stream", &[])
        .unwrap();
    (row.get(0), row.get(1))
}

#[test]
fn consumer_floors_pin_rows_refuse_stale_epochs_unpin_on_lapse_and_report_bootstrap() {
    let c = Cluster::start(&[]);
    let mut admin = stream(&c);
    let register = |admin: &mut Client, consumer: &str, lease: &str| -> i64 {
        admin
            .query_one(
                "SELECT retention.register_consumer('stream', $1, $2::text::interval)",
                &[&consumer, &lease],
            )
            .unwrap()
            .get(0)
    };
    assert_eq!(pins(&mut admin), (0, 70), "no consumer: the window alone");

    // Registered and not yet reported: every row stays.
    let e1 = register(&mut admin, "c1", "1 hour");
    assert_eq!(pins(&mut admin), (70, 0));
    assert_eq!(
        run_stream(&mut admin),
        (100, 1),
        "nothing deleted before the first report"
    );

    // A report pins from its position on; the rows before it go.
    assert_eq!(report(&mut admin, "c1", e1, "40"), "40");
    assert_eq!(pins(&mut admin), (31, 39));
    assert_eq!(run_stream(&mut admin), (61, 40));

    // A lower or duplicate report never moves progress back.
    assert_eq!(report(&mut admin, "c1", e1, "35"), "40");
    assert_eq!(report(&mut admin, "c1", e1, "40"), "40");
    assert_eq!(
        scalar(
            &mut admin,
            "SELECT position::bigint FROM retention.consumers WHERE consumer = 'c1'"
        ),
        40
    );

    // Registering again is a new epoch: the old one is fenced off, an unissued one refused,
    // and until the new epoch's first report every row stays.
    let e2 = register(&mut admin, "c1", "1 hour");
    assert!(e2 > e1);
    let refused = |admin: &mut Client, sql: &str, state: &str, words: &str| {
        let (s, message) = expect_error(admin, sql);
        assert_eq!(s, state, "{sql}: {message}");
        assert!(message.contains(words), "{sql}: {message}");
    };
    refused(
        &mut admin,
        &format!("SELECT retention.report_position('stream', 'c1', {e1}, '60')"),
        "RT311",
        &format!("epoch {e1} is stale"),
    );
    refused(
        &mut admin,
        &format!(
            "SELECT retention.report_position('stream', 'c1', {}, '60')",
            e2 + 100
        ),
        "RT311",
        "never issued",
    );
    assert_eq!(pins(&mut admin), (31, 0));
    // Past the head (the newest row, 100) is refused; so is a value of another type.
    refused(
        &mut admin,
        &format!("SELECT retention.report_position('stream', 'c1', {e2}, '101')"),
        "RT312",
        "past the head 100",
    );
    refused(
        &mut admin,
        &format!("SELECT retention.report_position('stream', 'c1', {e2}, 'ten')"),
        "22P02",
        "bigint",
    );

    // Two consumers: the lowest live position pins; the window still applies on top.
    assert_eq!(report(&mut admin, "c1", e2, "95"), "95");
    let e3 = register(&mut admin, "c2", "4 seconds");
    assert_eq!(report(&mut admin, "c2", e3, "45"), "45");
    assert_eq!(pins(&mut admin), (26, 5));
    assert_eq!(run_stream(&mut admin), (56, 45));

    // A lapsed lease stops pinning, and the lapsed consumer's reports are refused.
    std::thread::sleep(std::time::Duration::from_millis(4500));
    assert_eq!(
        pins(&mut admin),
        (0, 26),
        "c1 at 95 pins nothing inside the window"
    );
    refused(
        &mut admin,
        &format!("SELECT retention.report_position('stream', 'c2', {e3}, '50')"),
        "RT313",
        "lease lapsed",
    );
    assert_eq!(run_stream(&mut admin), (30, 71), "the window keeps 71..100");

    // Below the oldest surviving row, a consumer must bootstrap.
    let status = |admin: &mut Client, consumer: &str| -> (i64, Option<String>, bool, bool) {
        let r = admin
            .query_one(
                "SELECT epoch, floor, requires_bootstrap, pinning FROM retention.consumer_status('stream', $1)",
                &[&consumer],
            )
            .unwrap();
        (r.get(0), r.get(1), r.get(2), r.get(3))
    };
    assert_eq!(
        status(&mut admin, "c2"),
        (e3, Some("45".into()), true, false)
    );
    assert_eq!(
        status(&mut admin, "c1"),
        (e2, Some("95".into()), false, true)
    );

    // Unregistered, a consumer pins nothing; the ledger has every registration.
    admin
        .batch_execute(
            "SELECT retention.unregister_consumer('stream', 'c1');
         SELECT retention.unregister_consumer('stream', 'c2');",
        )
        .unwrap();
    refused(
        &mut admin,
        "SELECT retention.unregister_consumer('stream', 'c1')",
        "42704",
        "not registered",
    );
    refused(
        &mut admin,
        &format!("SELECT retention.report_position('stream', 'c1', {e2}, '96')"),
        "42704",
        "not registered",
    );
    assert_eq!(
        scalar(&mut admin, "SELECT count(*) FROM retention.ledger WHERE method = 'consumer_register' AND policy = 'stream'"),
        3
    );
    assert_eq!(
        scalar(&mut admin, "SELECT count(*) FROM retention.ledger WHERE method = 'consumer_unregister' AND policy = 'stream'"),
        2
    );

    // Refusals at registration: no order_by, a delete policy only, a positive lease.
    set_up(
        &c,
        "CREATE TABLE plain (id int PRIMARY KEY, at timestamptz NOT NULL);",
    );
    admin
        .batch_execute(
            "SELECT retention.add_policy(name => 'plain', relation => 'plain', kind => 'age',
                age_column => 'at', older_than => '1 day');",
        )
        .unwrap();
    refused(
        &mut admin,
        "SELECT retention.register_consumer('plain', 'c', '1 hour')",
        "22023",
        "has no order_by",
    );
    refused(
        &mut admin,
        "SELECT retention.register_consumer('stream', 'c', '0 seconds')",
        "22023",
        "lease must be a positive interval",
    );

    // Reporting needs the right to read the order column (and to be the consumer's reporter).
    c.execute(
        "postgres",
        "CREATE ROLE reader LOGIN IN ROLE retention_consumer;",
    );
    admin
        .batch_execute("SELECT retention.register_consumer('stream', 'c4', '1 hour', 'reader');")
        .unwrap();
    let e4: i64 = admin
        .query_one(
            "SELECT epoch FROM retention.consumers WHERE consumer = 'c4'",
            &[],
        )
        .unwrap()
        .get(0);
    let mut reader = c.connect_as("postgres", "reader");
    refused(
        &mut reader,
        &format!("SELECT retention.report_position('stream', 'c4', {e4}, '80')"),
        "42501",
        "SELECT on column seq",
    );
    c.execute("postgres", "GRANT SELECT (seq) ON stream TO reader");
    assert_eq!(report(&mut reader, "c4", e4, "80"), "80");
    assert_eq!(pins(&mut admin), (0, 0));
}

#[test]
fn consumer_floors_pin_keep_latest_and_entity_groups() {
    let c = Cluster::start(&[]);
    // Two sources of 10 runs each (seq 1..20, source = seq % 2); keep the newest 2 per source.
    let (mut app, mut admin) = set_up(
        &c,
        "CREATE TABLE runs (seq bigint PRIMARY KEY, src int NOT NULL, at timestamptz NOT NULL);
         CREATE TABLE docs (seq bigint PRIMARY KEY, doc int NOT NULL, at timestamptz NOT NULL);",
    );
    app.batch_execute(
        "INSERT INTO runs SELECT s, s % 2, now() - make_interval(days => (21 - s)::int) FROM generate_series(1, 20) s;
         INSERT INTO docs SELECT s, (s - 1) / 5, now() - make_interval(days => (101 - s)::int) FROM generate_series(1, 100) s;",
    )
    .unwrap();
    admin.batch_execute(
        "SELECT retention.add_policy(name => 'runs', relation => 'runs', kind => 'keep_latest',
                group_by => ARRAY['src'], order_by => 'seq', keep => 2);
         SELECT retention.add_policy(name => 'docs', relation => 'docs', kind => 'entity',
                group_by => ARRAY['doc'], age_column => 'at', older_than => '30 days', order_by => 'seq');
         SELECT retention.report_position('runs', 'r', retention.register_consumer('runs', 'r', '1 hour'), '9');
         SELECT retention.report_position('docs', 'd', retention.register_consumer('docs', 'd', '1 hour'), '33');",
    )
    .unwrap();
    // keep_latest: 16 rows past the newest 2 per source, of which 1..8 are below the floor.
    assert_eq!(eligible_pinned_deleted(&mut admin, "runs"), (16, 8, 8));
    // entity: docs 0..13 (seq 1..70) expired; the group holding seq 33 (doc 6, seq 31..35) and
    // every later one stay whole.
    assert_eq!(eligible_pinned_deleted(&mut admin, "docs"), (70, 40, 30));
    admin.batch_execute("CALL retention.run()").unwrap();
    assert_eq!(scalar(&mut admin, "SELECT min(seq) FROM runs"), 9);
    assert_eq!(scalar(&mut admin, "SELECT count(*) FROM runs"), 12);
    assert_eq!(scalar(&mut admin, "SELECT min(seq) FROM docs"), 31);
    assert_eq!(scalar(&mut admin, "SELECT count(*) FROM docs"), 70);
}
