//! How batches are claimed and paced: overlapping batches, three archivers archiving at once
//! (one dying mid-batch), and a short batch meaning the archiver has caught up.

use super::*;

/// Many small batches: each batch's prune overlaps the next claim on a second connection, and
/// still every eligible row is claimed, archived and pruned exactly once, across runs.
#[test]
fn overlapping_batches_archive_every_row_once() {
    let c = Cluster::start(&[]);
    let mut db = c.connect("postgres");
    mixed_audit(&mut db, 1200);
    let want = eligible(&mut db);
    let (dir, url) = file_store();
    let a = Archiver::new(&c.archiver_url("postgres"), &url);
    let o = a.run(&["once", "--batch-rows", "60", "--max-batches", "2"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        scalar(&mut db, "SELECT count(*) FROM retention.archives"),
        2
    );
    let o = a.run(&["once", "--batch-rows", "60"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(eligible(&mut db), 0);
    assert_nothing_lost(&mut db);
    let batches = scalar(&mut db, "SELECT count(*) FROM retention.archives");
    assert!(batches >= want / 60, "{batches} batches for {want} rows");
    assert_eq!(
        scalar(&mut db, "SELECT sum(rows)::bigint FROM retention.archives"),
        want
    );
    assert_eq!(
        scalar(
            &mut db,
            "SELECT count(*) FROM retention.ledger WHERE method = 'claim'"
        ),
        batches,
        "one claim per archive: no batch resumed or claimed twice"
    );
    assert_eq!(
        scalar(
            &mut db,
            "SELECT count(*) FROM retention.batches WHERE state <> 'pruned'"
        ),
        0
    );
    assert_eq!(a.slice_keys().len() as i64, batches);
    let o = a.run(&["verify", "--all"]);
    assert!(o.status.success(), "{}", text(&o));
    let _ = std::fs::remove_dir_all(dir);
}

/// Three archivers `run` against one database at once, and one of them dies right after its
/// first claim: no row is claimed twice, no slice written twice, the dead one's batch expires
/// and is completed by the others, the total archived equals the eligible rows, and
/// `verify --all` passes.
#[test]
fn three_archivers_at_once_archive_every_row_once_even_when_one_dies_mid_batch() {
    let c = Cluster::start(&[]);
    let mut db = c.connect("postgres");
    mixed_audit(&mut db, 6000);
    let want = eligible(&mut db);
    let (dir, url) = file_store();
    let base = Archiver::new(&c.archiver_url("postgres"), &url)
        .with_env("PG_RETENTION_LEASE", "3s")
        .with_env("PG_RETENTION_METRICS_ADDR", "127.0.0.1:0");
    let archiver = |owner: &str| Archiver {
        owner: owner.into(),
        ..base.clone()
    };
    let args = ["run", "--batch-rows", "150", "--idle-sleep", "1s"];
    // The one that dies starts first, so it has rows to claim; the others start at once.
    let mut dying = archiver("dying")
        .with_env("PG_RETENTION_ARCHIVER_FAULT", "after-claim")
        .spawn(&args);
    let children: Vec<_> = ["first", "second"]
        .iter()
        .map(|o| archiver(o).spawn(&args))
        .collect();
    assert!(!dying.wait().unwrap().success(), "the fault kills it");
    let done = c.wait_until(std::time::Duration::from_secs(120), || {
        let mut db = c.connect("postgres");
        eligible(&mut db) == 0
            && scalar(
                &mut db,
                "SELECT count(*) FROM retention.batches WHERE state = 'claimed'",
            ) == 0
    });
    for child in &children {
        terminate(child);
    }
    let mut logs = String::new();
    for child in children {
        let o = child.wait_with_output().unwrap();
        assert!(o.status.success(), "{}", text(&o));
        logs.push_str(&text(&o));
    }
    assert!(
        done,
        "the two archivers left finish the work, the dead one's batch included:\n{logs}"
    );
    assert_nothing_lost(&mut db);
    assert_eq!(
        scalar(&mut db, "SELECT sum(rows)::bigint FROM retention.archives"),
        want,
        "every eligible row archived once"
    );
    assert_eq!(
        scalar(
            &mut db,
            "SELECT count(*) FROM retention.batches WHERE owner = 'dying' AND state = 'expired'"
        ),
        1,
        "the dead archiver's batch expired"
    );
    assert!(
        scalar(
            &mut db,
            "SELECT count(*) FROM retention.ledger WHERE method = 'lease_expired'"
        ) >= 1
    );
    assert_eq!(
        scalar(
            &mut db,
            "SELECT count(DISTINCT b.owner) FROM retention.batches b WHERE b.state = 'pruned'"
        ),
        2,
        "both archivers left pruned batches"
    );
    // One slice per archive (the dead one's claim wrote nothing), every slice a distinct key.
    let keys = base.slice_keys();
    let distinct: std::collections::HashSet<&String> = keys.iter().collect();
    assert_eq!(distinct.len(), keys.len());
    assert_eq!(
        keys.len() as i64,
        scalar(&mut db, "SELECT count(*) FROM retention.archives")
    );
    let o = base.run(&["verify", "--all"]);
    assert!(o.status.success(), "{}", text(&o));
    // Restores create tables: the restorer, not the archiver role.
    let restored = base
        .clone()
        .with_database_url(&c.restorer_url("postgres"))
        .restore_all();
    for diff in [
        format!("SELECT * FROM expected EXCEPT ALL ({restored})"),
        format!("({restored}) EXCEPT ALL SELECT * FROM expected"),
    ] {
        assert_eq!(
            scalar(&mut db, &format!("SELECT count(*) FROM ({diff}) d")),
            0,
            "the slices hold exactly the eligible rows, none twice"
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// Rows that keep ageing past the cutoff (a trickle): a short batch means the archiver caught
/// up, so `run` sleeps its idle time instead of claiming again at once (each claim would read the
/// table's unexpired rows again for the one row that aged meanwhile), and `once` stops.
#[test]
fn a_short_batch_means_caught_up() {
    let c = Cluster::start(&[]);
    let mut db = c.connect("postgres");
    db.batch_execute(
        "CREATE TABLE trickle (id int PRIMARY KEY, at timestamptz NOT NULL, done bool NOT NULL DEFAULT true);
         INSERT INTO trickle (id, at) SELECT g, now() - interval '31 days' FROM generate_series(1, 50) g;
         -- one more row ages past the 30-day cutoff every 50 ms for the next 10 s
         INSERT INTO trickle (id, at)
              SELECT 50 + g, now() - interval '30 days' + make_interval(secs => g * 0.05)
                FROM generate_series(1, 200) g;
         SELECT retention.add_policy(name => 'trickle', relation => 'trickle', kind => 'age', age_column => 'at',
                older_than => '30 days', terminal => 'done', action => 'archive_then_delete');",
    )
    .unwrap();
    let (dir, url) = file_store();
    let a = Archiver::new(&c.archiver_url("postgres"), &url);
    let o = a.run(&["once", "--batch-rows", "1000"]);
    assert!(o.status.success(), "{}", text(&o));
    let claims = || "SELECT count(*) FROM retention.ledger WHERE method = 'claim'";
    assert_eq!(
        scalar(&mut db, claims()),
        1,
        "once stops after its short batch"
    );
    let mut child = a
        .clone()
        .with_env("PG_RETENTION_METRICS_ADDR", "127.0.0.1:0")
        .spawn(&["run", "--batch-rows", "1000", "--idle-sleep", "30s"]);
    assert!(c.wait_until(std::time::Duration::from_secs(30), || {
        let mut db = c.connect("postgres");
        scalar(&mut db, claims()) == 2
    }));
    std::thread::sleep(std::time::Duration::from_secs(3));
    assert_eq!(
        scalar(&mut db, claims()),
        2,
        "run sleeps after a short batch while rows keep ageing"
    );
    terminate(&child);
    assert!(child.wait().unwrap().success());
    assert_eq!(
        scalar(
            &mut db,
            "SELECT count(*) FROM retention.batches WHERE state <> 'pruned'"
        ),
        0,
        "both batches pruned"
    );
    let _ = std::fs::remove_dir_all(dir);
}
