//! Leaves that are not dropped whole: the default partition, a leaf a foreign key references,
//! and a leaf a consumer's position pins (until the consumer goes).

use super::*;

#[test]
fn the_default_partition_and_a_foreign_key_referenced_leaf_are_not_dropped() {
    let c = Cluster::start(&[]);
    let (mut app, mut admin) = events(&c);
    // The referencing table is partitioned too: made by the superuser, granted (the policy's
    // owner reads it for the foreign-key guard), its rows written by `app`.
    c.execute(
        "postgres",
        "CREATE TABLE refs (id int NOT NULL, ev_id bigint, ev_at timestamptz, PRIMARY KEY (id),
                            FOREIGN KEY (ev_id, ev_at) REFERENCES events) PARTITION BY HASH (id);
         CREATE TABLE refs_0 PARTITION OF refs FOR VALUES WITH (modulus 2, remainder 0);
         CREATE TABLE refs_1 PARTITION OF refs FOR VALUES WITH (modulus 2, remainder 1);",
    );
    c.grant_app_and_admin("postgres");
    app.batch_execute(
        "INSERT INTO refs SELECT 1, id, created_at FROM events WHERE id = 150;
         INSERT INTO refs SELECT 2, id, created_at FROM events WHERE id = 260;",
    )
    .unwrap();
    policy(&mut admin, "");
    assert_eq!(
        count(
            &mut admin,
            "SELECT partitions_to_drop FROM retention.preview('events')"
        ),
        0,
        "a referenced table's leaves are never dropped whole"
    );
    admin.batch_execute("CALL retention.run()").unwrap();
    assert!(drops(&mut admin).is_empty());
    assert_eq!(
        count(
            &mut admin,
            "SELECT count(*) FROM events WHERE created_at < now() - interval '5 days'"
        ),
        2,
        "only the two referenced rows are left"
    );
    assert_eq!(
        count(
            &mut admin,
            "SELECT count(*) FROM events WHERE id IN (150, 260)"
        ),
        2
    );
    assert!(exists(&mut admin, "events_default"));
    for leaf in WHOLLY_EXPIRED {
        assert!(exists(&mut admin, leaf), "{leaf} is swept, not dropped");
    }
}

#[test]
fn a_leaf_a_consumer_pins_is_not_dropped_and_its_pinned_rows_stay() {
    let c = Cluster::start(&[]);
    let (_, mut admin) = events(&c);
    // The stream's order is id (row i is i hours old): a consumer at 200 pins ids 200 and up,
    // the older rows of m8 (for part of the day), all of m9 and m10, and the default partition.
    policy(&mut admin, ", order_by => 'id'");
    admin.batch_execute(
        "SELECT retention.report_position('events', 'c', retention.register_consumer('events', 'c', '1 hour'), '200')",
    )
    .unwrap();
    let pinned_before = count(&mut admin, "SELECT count(*) FROM events WHERE id >= 200");
    let pinned_expired = count(
        &mut admin,
        "SELECT count(*) FROM events WHERE id >= 200 AND created_at < now() - interval '5 days'",
    );
    assert_eq!(
        count(&mut admin, "SELECT pinned FROM retention.preview('events')"),
        pinned_expired
    );
    let listed: Vec<String> = column(
        &mut admin,
        "SELECT partition FROM retention.preview_partitions('events')",
    );
    assert!(
        listed.contains(&"public.events_m6".to_owned()),
        "{listed:?}"
    );
    assert!(
        !listed.contains(&"public.events_m10".to_owned()),
        "{listed:?}"
    );
    admin.batch_execute("CALL retention.run()").unwrap();
    let dropped: Vec<String> = drops(&mut admin).into_iter().map(|(p, _)| p).collect();
    assert_eq!(dropped, sorted(listed), "the run drops what preview listed");
    assert!(!exists(&mut admin, "events_m6") && !exists(&mut admin, "events_m7"));
    assert!(exists(&mut admin, "events_m9") && exists(&mut admin, "events_m10"));
    assert_eq!(
        count(&mut admin, "SELECT count(*) FROM events WHERE id >= 200"),
        pinned_before,
        "every pinned row stays"
    );
    assert_eq!(
        count(
            &mut admin,
            "SELECT count(*) FROM events WHERE id < 200 AND created_at < now() - interval '5 days'"
        ),
        0,
        "every expired row below the position went"
    );
    // Unpinned, the wholly expired leaves go whole.
    admin
        .batch_execute("SELECT retention.unregister_consumer('events', 'c')")
        .unwrap();
    admin.batch_execute("CALL retention.run()").unwrap();
    assert!(!exists(&mut admin, "events_m9") && !exists(&mut admin, "events_m10"));
}
