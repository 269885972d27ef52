//! A manifest tampered to name a domain (or an array or composite of one) whose input runs
//! code: `restore` refuses it unless the archive records it, or restores the column as text with
//! `--untyped-as-text`.

use super::*;

/// Schema `m`: a probe that records who runs it, a domain `m.evil` whose CHECK calls it (and a
/// composite holding one), a harmless domain `m.positive`, and table `m.t` (its `level` a
/// `m.positive`) with 100 archive-eligible rows, archived by the archiver role in two batches.
/// Returns the two slice keys, oldest first.
fn probed_archive(c: &Cluster, a: &Archiver) -> Vec<String> {
    let mut db = c.connect("postgres");
    db.batch_execute(
        "CREATE SCHEMA m;
         CREATE TABLE m.probe_log (who text, val text);
         GRANT INSERT ON m.probe_log TO PUBLIC;
         GRANT USAGE ON SCHEMA m TO PUBLIC;
         CREATE FUNCTION m.probe(v text) RETURNS boolean LANGUAGE plpgsql AS $$
         BEGIN INSERT INTO m.probe_log VALUES (current_user, v); RETURN true; END $$;
         CREATE DOMAIN m.evil AS text CHECK (m.probe(VALUE));
         CREATE TYPE m.comp AS (v m.evil);
         CREATE DOMAIN m.positive AS int CHECK (VALUE > 0);
         CREATE TABLE m.t (id bigint PRIMARY KEY, status text NOT NULL, closed_at timestamptz,
                           note text, level m.positive);
         INSERT INTO m.t SELECT g, 'closed', now() - interval '40 days', 'n' || g, g
           FROM generate_series(1, 100) g;
         CREATE TABLE m.expected AS SELECT * FROM m.t;
         SELECT retention.add_policy(name => 't', relation => 'm.t', kind => 'age', age_column => 'closed_at',
                older_than => '30 days', terminal => $$status = 'closed'$$, action => 'archive_then_delete');",
    )
    .unwrap();
    let o = a.run(&["once", "--batch-rows", "50"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(scalar(&mut db, "SELECT count(*) FROM m.t"), 0);
    let keys: Vec<String> = column(
        &mut db,
        "SELECT object_key FROM retention.archives ORDER BY id",
    );
    assert_eq!(keys.len(), 2);
    keys
}

/// The type `format_type` gives column `col` of `table`.
fn column_type(db: &mut Client, table: &str, col: &str) -> String {
    db.query_one(
        "SELECT format_type(atttypid, atttypmod) FROM pg_attribute
          WHERE attrelid = $1::text::regclass AND attname = $2 AND attnum > 0",
        &[&table, &col],
    )
    .unwrap_or_else(|e| panic!("{table}.{col}: {e}"))
    .get(0)
}

fn no_table(db: &mut Client, name: &str) -> bool {
    scalar(
        db,
        &format!("SELECT count(*) FROM pg_class WHERE relname = '{name}'"),
    ) == 0
}

/// Rows of `table` that are not in `m.expected` (or the other way round, of the ids it has).
fn differing(db: &mut Client, table: &str) -> i64 {
    let cols = "id, status, closed_at, note::text, level::int";
    scalar(
        db,
        &format!(
            "SELECT count(*) FROM (
               (SELECT {cols} FROM {table} EXCEPT ALL SELECT {cols} FROM m.expected)
               UNION ALL
               (SELECT {cols} FROM m.expected WHERE id IN (SELECT id FROM {table})
                EXCEPT ALL SELECT {cols} FROM {table})) d"
        ),
    )
}

#[test]
fn restore_refuses_a_manifest_that_names_a_domain_the_archive_does_not_record() {
    let c = Cluster::start(&[]);
    let dir = scratch("pg-retention-probe");
    let a = Archiver::new(
        &c.archiver_url("postgres"),
        &format!("file://{}", dir.display()),
    );
    let keys = probed_archive(&c, &a);
    let mut db = c.connect("postgres");
    let probes = |db: &mut Client| scalar(db, "SELECT count(*) FROM m.probe_log");
    // The operator restores as a superuser: what a tampered manifest could make it run.
    let operator = a.clone().with_database_url(&c.url("postgres"));

    // The manifest is not covered by any digest (the slice is, by the manifest): rewrite it in
    // the store so that column `note` (text in the table) names a type whose input runs code.
    let manifest_path = dir.join(manifest_for(&keys[0]));
    let genuine = std::fs::read_to_string(&manifest_path).unwrap();
    let tamper = |type_name: &str| {
        let mut m: serde_json::Value = serde_json::from_str(&genuine).unwrap();
        let note = m["columns"]
            .as_array_mut()
            .unwrap()
            .iter_mut()
            .find(|c| c["name"] == "note")
            .expect("a note column");
        note["type"] = type_name.into();
        std::fs::write(&manifest_path, serde_json::to_vec_pretty(&m).unwrap()).unwrap();
    };
    // A domain whose CHECK is the probe, an array and a composite of it, another column's
    // recorded domain, and the probe's domain spelled otherwise.
    for hostile in [
        "m.evil",
        "m.evil[]",
        "m.comp",
        "m.positive",
        "M.EVIL",
        "\"m\".\"evil\"",
    ] {
        tamper(hostile);
        let o = operator.run(&["restore", &keys[0], "--into", "public.refused"]);
        assert_eq!(o.status.code(), Some(5), "{hostile}: {}", text(&o));
        assert!(
            text(&o).contains("manifest column \"note\""),
            "{hostile}: the refusal names the column: {}",
            text(&o)
        );
        assert!(
            text(&o).contains("--untyped-as-text"),
            "{hostile}: {}",
            text(&o)
        );
        assert!(no_table(&mut db, "refused"), "{hostile}: no DDL ran");
        assert_eq!(probes(&mut db), 0, "{hostile}: the probe never ran");
    }

    // With --untyped-as-text the column is restored as text holding the archived text, and the
    // recorded domain of `level` is kept.
    tamper("m.evil");
    let o = operator.run(&[
        "restore",
        &keys[0],
        "--into",
        "public.as_text",
        "--untyped-as-text",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(column_type(&mut db, "public.as_text", "note"), "text");
    assert_eq!(
        column_type(&mut db, "public.as_text", "level"),
        "m.positive"
    );
    assert_eq!(scalar(&mut db, "SELECT count(*) FROM as_text"), 50);
    assert_eq!(differing(&mut db, "as_text"), 0);
    assert_eq!(probes(&mut db), 0, "the probe never ran");

    // An untampered archive: `level`'s domain is what the database records for that column of
    // the archived table, so it restores through it, without --untyped-as-text.
    let o = operator.run(&["restore", &keys[1], "--into", "public.recorded"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        column_type(&mut db, "public.recorded", "level"),
        "m.positive"
    );
    assert_eq!(column_type(&mut db, "public.recorded", "note"), "text");
    assert_eq!(scalar(&mut db, "SELECT count(*) FROM recorded"), 50);
    assert_eq!(differing(&mut db, "recorded"), 0);

    // The archived table gone (renamed away: for the archive index, which names `m.t`, as good
    // as dropped) and `m.t` made again with `level` an int: the manifest's genuine domain is no
    // longer what the database records, so it is refused like any other domain...
    db.batch_execute(
        "ALTER TABLE m.t RENAME TO t_before;
         CREATE TABLE m.t (id bigint PRIMARY KEY, status text NOT NULL, closed_at timestamptz,
                           note text, level int);",
    )
    .unwrap();
    let o = operator.run(&["restore", &keys[1], "--into", "public.gone"]);
    assert_eq!(o.status.code(), Some(5), "{}", text(&o));
    assert!(
        text(&o).contains("manifest column \"level\""),
        "{}",
        text(&o)
    );
    assert!(no_table(&mut db, "gone"), "no DDL ran");
    // ... and restored as text when asked.
    let o = operator.run(&[
        "restore",
        &keys[1],
        "--into",
        "public.gone",
        "--untyped-as-text",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(column_type(&mut db, "public.gone", "level"), "text");
    assert_eq!(differing(&mut db, "gone"), 0);
    assert_eq!(probes(&mut db), 0, "the probe never ran, as anyone");
    let _ = std::fs::remove_dir_all(dir);
}
