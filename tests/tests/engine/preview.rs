//! Preview accuracy: what `retention.preview()` says is what the next run deletes.

use super::*;

#[test]
fn preview_equals_the_next_run_for_every_kind() {
    let c = Cluster::start(&[]);
    outbox(&c, 3000);
    let (mut app, mut admin) = set_up(
        &c,
        "CREATE TABLE child (id int PRIMARY KEY, outbox_id bigint REFERENCES outbox);
         CREATE TABLE runs (id int PRIMARY KEY, src int NOT NULL, at timestamptz NOT NULL);
         CREATE TABLE ver (id int PRIMARY KEY, k int NOT NULL, at timestamptz NOT NULL);
         CREATE TABLE ent (id int PRIMARY KEY, e int NOT NULL, at timestamptz NOT NULL);",
    );
    app.batch_execute(
        "INSERT INTO child SELECT g, g * 7 FROM generate_series(100, 200) g;
         INSERT INTO runs SELECT g, g % 7, now() - make_interval(mins => g) FROM generate_series(1, 700) g;
         INSERT INTO ver SELECT g, g % 5, now() - make_interval(days => g) FROM generate_series(1, 500) g;
         INSERT INTO ent SELECT g, g % 40, now() - make_interval(days => 10 + (g % 40) * 3) FROM generate_series(1, 800) g;",
    )
    .unwrap();
    admin.batch_execute(
        "SELECT retention.add_policy(name => 'age', relation => 'outbox', kind => 'age', age_column => 'created_at',
                older_than => '30 days', terminal => $$status = 'sent'$$, batch_size => 333, max_rows_per_run => 1500);
         SELECT retention.place_hold('outbox', 'id % 11 = 0', 'sample', 'tester');
         SELECT retention.add_policy(name => 'kl', relation => 'runs', kind => 'keep_latest', group_by => ARRAY['src'],
                order_by => 'at', keep => 20, batch_size => 50);
         SELECT retention.add_policy(name => 'ver', relation => 'ver', kind => 'versions', group_by => ARRAY['k'],
                order_by => 'at', keep => 50, min_keep => 10, age_column => 'at', older_than => '100 days', batch_size => 40);
         SELECT retention.add_policy(name => 'ent', relation => 'ent', kind => 'entity', group_by => ARRAY['e'],
                age_column => 'at', older_than => '60 days', batch_size => 30, max_rows_per_run => 300);",
    )
    .unwrap();
    let previews: Vec<(String, i64, i64)> = admin
        .query(
            "SELECT policy, would_delete, backlog FROM retention.preview() ORDER BY policy",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    admin.batch_execute("CALL retention.run()").unwrap();
    for (policy, would_delete, _) in &previews {
        let deleted = count(&mut admin, &format!("SELECT coalesce(sum(rows), 0)::bigint FROM retention.ledger WHERE method = 'prune' AND policy = '{policy}'"));
        assert_eq!(
            deleted, *would_delete,
            "policy {policy}: preview said {would_delete}, run deleted {deleted}"
        );
        assert!(*would_delete > 0, "policy {policy} should have had work");
    }
    let age_backlog = previews.iter().find(|p| p.0 == "age").unwrap().2;
    assert!(
        age_backlog > 0,
        "the age policy is capped, so preview reports a backlog"
    );
}
