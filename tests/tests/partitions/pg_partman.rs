//! pg_partman: a parent pg_partman manages is retired by the policy while pg_partman keeps
//! premaking future leaves, which are never dropped.

use super::*;

#[test]
fn a_pg_partman_managed_parent_is_retired_while_pg_partman_premakes_new_leaves() {
    let c = Cluster::start(&[]);
    // Set-up by the superuser: pg_partman and the table it manages, handed to `admin` with the
    // leaves pg_partman made.
    c.execute(
        "postgres",
        "CREATE SCHEMA partman;
         CREATE EXTENSION pg_partman SCHEMA partman;
         CREATE TABLE pm (id bigint NOT NULL, created_at timestamptz NOT NULL, PRIMARY KEY (id, created_at))
           PARTITION BY RANGE (created_at);
         SELECT partman.create_parent('public.pm', 'created_at', 'native', 'daily', p_premake := 2,
                                      p_start_partition := (now() - interval '10 days')::text);",
    );
    own_and_grant(&c, &["pm"]);
    let (mut app, mut admin) = c.app_and_admin("postgres");
    app.batch_execute(
        "INSERT INTO pm SELECT g, now() - make_interval(hours => g) FROM generate_series(1, 240) g;",
    )
    .unwrap();
    admin
        .batch_execute(
            "SELECT retention.add_policy(name => 'pm', relation => 'pm', kind => 'age',
                age_column => 'created_at', older_than => '5 days');",
        )
        .unwrap();
    let leaves = |db: &mut Client| -> Vec<String> {
        db.query(
            "SELECT relid::regclass::text FROM pg_partition_tree('pm') WHERE isleaf ORDER BY 1",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
    };
    let before = leaves(&mut admin);
    let to_drop: Vec<String> = admin
        .query(
            "SELECT partition FROM retention.preview_partitions('pm')",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(to_drop.len() >= 5, "the old daily leaves: {to_drop:?}");
    let expired_before = count(
        &mut admin,
        "SELECT count(*) FROM pm WHERE created_at < now() - interval '5 days'",
    );
    admin.batch_execute("CALL retention.run()").unwrap();
    assert_eq!(
        count(
            &mut admin,
            "SELECT count(*) FROM pm WHERE created_at < now() - interval '5 days'"
        ),
        0
    );
    let dropped: Vec<String> = drops(&mut admin).into_iter().map(|d| d.0).collect();
    assert_eq!(sorted(dropped.clone()), sorted(to_drop.clone()));
    let after = leaves(&mut admin);
    assert_eq!(after.len(), before.len() - dropped.len());
    assert!(
        after.iter().any(|l| l == "pm_default"),
        "pg_partman's default partition stays"
    );
    assert_eq!(
        count(&mut admin, "SELECT coalesce(sum(rows), 0)::bigint FROM retention.ledger WHERE method IN ('prune', 'drop_partition')"),
        expired_before
    );
    // pg_partman keeps premaking: more future leaves, which the next run leaves alone. Its
    // configuration and maintenance are pg_partman's (its background worker or a scheduled job,
    // as the role that installed it), not an application's or retention's: the superuser here.
    c.execute(
        "postgres",
        "UPDATE partman.part_config SET premake = 6 WHERE parent_table = 'public.pm';
         SELECT partman.run_maintenance('public.pm');",
    );
    let premade = leaves(&mut admin);
    assert!(
        premade.len() > after.len(),
        "pg_partman premade new leaves: {premade:?}"
    );
    admin.batch_execute("CALL retention.run()").unwrap();
    assert_eq!(
        leaves(&mut admin),
        premade,
        "future leaves are never dropped"
    );
    assert_eq!(
        count(&mut admin, "SELECT count(*) FROM pm"),
        240 - expired_before
    );
}
