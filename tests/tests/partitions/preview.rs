//! Preview: retention.preview_partitions and partitions_to_drop name exactly the leaves the next
//! run drops, under a cap, a scope and a hold.

use super::*;

#[test]
fn preview_partitions_to_drop_equals_what_the_next_run_drops() {
    let c = Cluster::start(&[]);
    let (_, mut admin) = events(&c);
    // A cap that leaves room for some leaves only, a scope, and a hold on one leaf's row.
    policy(
        &mut admin,
        ", scope => 'tenant >= 0', max_rows_per_run => 100",
    );
    admin
        .batch_execute("SELECT retention.place_hold('events', 'id = 170', 'case', 'legal')")
        .unwrap();
    let listed: Vec<(String, i64, String)> = admin
        .query(
            "SELECT partition, rows, proof FROM retention.preview_partitions('events')",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    let preview = admin
        .query_one(
            "SELECT would_delete, partitions_to_drop FROM retention.preview('events')",
            &[],
        )
        .unwrap();
    let (would_delete, to_drop): (i64, i64) = (preview.get(0), preview.get(1));
    assert_eq!(to_drop, listed.len() as i64);
    assert!(
        (1..4).contains(&to_drop),
        "the cap leaves room for some leaves: {listed:?}"
    );
    assert!(listed.iter().all(|(_, _, proof)| proof == "range_bound"));
    admin.batch_execute("CALL retention.run()").unwrap();
    let dropped = drops(&mut admin);
    let mut listed_drops: Vec<(String, i64)> =
        listed.iter().map(|(p, n, _)| (p.clone(), *n)).collect();
    listed_drops.sort();
    assert_eq!(
        dropped, listed_drops,
        "the run drops exactly the leaves preview listed"
    );
    let removed = count(
        &mut admin,
        "SELECT coalesce(sum(rows), 0)::bigint FROM retention.ledger WHERE method IN ('prune', 'drop_partition')",
    );
    assert_eq!(
        removed, would_delete,
        "would_delete counts dropped and swept rows"
    );
    assert!(would_delete <= 100);
}
