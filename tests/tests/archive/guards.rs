//! The fixpoint guards on an archive policy's table: the trigger refusing updates of eligible
//! rows, the CHECK refusing a terminal row without age, declared mutable columns and their guard.

use super::*;

#[test]
fn the_guard_refuses_updates_of_eligible_rows_and_allows_the_rest() {
    let c = Cluster::start(&[]);
    let (mut app, mut admin, _) = audit(&c, 100);
    let (code, msg) = expect_error(&mut app, "UPDATE audit SET note = 'changed' WHERE id = 41");
    assert_eq!(code, "RT501");
    assert!(msg.contains("audit"), "{msg}");
    app.batch_execute("UPDATE audit SET note = 'changed' WHERE id IN (3, 45)")
        .unwrap();
    app.batch_execute("DELETE FROM audit WHERE id = 41")
        .unwrap();
    assert_eq!(
        scalar(
            &mut admin,
            "SELECT count(*) FROM audit WHERE note = 'changed'"
        ),
        2
    );
}

#[test]
fn the_check_refuses_a_terminal_row_without_age_and_registration_counts_violators() {
    let c = Cluster::start(&[]);
    let (mut app, mut admin, _) = audit(&c, 20);
    let (code, _) = expect_error(
        &mut app,
        "INSERT INTO audit VALUES (1000, 'closed', NULL, 'x')",
    );
    assert_eq!(code, "23514");
    // A second table with violating rows: made by the superuser, granted, written by `app`.
    c.execute(
        "postgres",
        "CREATE TABLE dirty (id int PRIMARY KEY, status text, closed_at timestamptz);",
    );
    c.grant_app_and_admin("postgres");
    app.batch_execute(
        "INSERT INTO dirty VALUES (1, 'closed', NULL), (2, 'closed', NULL), (3, 'open', NULL);",
    )
    .unwrap();
    let (code, msg) = expect_error(
        &mut admin,
        "SELECT retention.add_policy(name => 'dirty', relation => 'dirty', kind => 'age', age_column => 'closed_at',
                older_than => '1 day', terminal => $$status = 'closed'$$, action => 'archive_then_delete')",
    );
    assert_eq!(code, "23514");
    assert!(msg.starts_with("2 rows"), "{msg}");
    assert_eq!(
        scalar(
            &mut admin,
            "SELECT count(*) FROM retention.policies WHERE name = 'dirty'"
        ),
        0
    );
    // Dropping the policy removes both guards.
    admin
        .batch_execute("SELECT retention.drop_policy('audit')")
        .unwrap();
    app.batch_execute(
        "INSERT INTO audit VALUES (1000, 'closed', NULL, 'x'); UPDATE audit SET note = 'y' WHERE id = 41",
    )
    .unwrap();
}

/// Columns that may change after the fixpoint (reference 000's detectability boundary): a
/// declared mutable column changes on an eligible row, guarded by the table's own trigger; any
/// other column is still refused; a change between claim and prune is a new version (the prune
/// refuses), and the slice claimed again carries the value at archive time.
#[test]
fn a_declared_mutable_column_changes_on_an_eligible_row_and_the_slice_keeps_the_archived_value() {
    let c = Cluster::start(&[]);
    let (mut app, mut admin, mut arch) = set_up(
        &c,
        "CREATE TABLE audit (id bigint PRIMARY KEY, status text NOT NULL, closed_at timestamptz,
                             note text, invalidated_at timestamptz);
         CREATE FUNCTION invalidate_once() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             IF OLD.invalidated_at IS NOT NULL AND NEW.invalidated_at IS DISTINCT FROM OLD.invalidated_at THEN
                 RAISE EXCEPTION 'invalidated_at is set once';
             END IF;
             RETURN NEW;
         END $$;
         CREATE TRIGGER invalidate_once BEFORE UPDATE ON audit FOR EACH ROW EXECUTE FUNCTION invalidate_once();",
    );
    app.batch_execute(
        "INSERT INTO audit SELECT g, 'closed', now() - interval '60 days', 'n' || g, NULL FROM generate_series(1, 20) g",
    )
    .unwrap();
    let policy = "SELECT retention.add_policy(name => 'audit', relation => 'audit', kind => 'age', age_column => 'closed_at',
                  older_than => '30 days', terminal => $$status = 'closed'$$, action => 'archive_then_delete'";
    for (extra, state) in [
        (
            ", mutable_columns => ARRAY['invalidated_at'], mutable_guard => 'no_such'",
            "22023",
        ),
        (
            ", mutable_columns => ARRAY['id'], mutable_guard => 'invalidate_once'",
            "22023",
        ),
        (
            ", mutable_columns => ARRAY['nope'], mutable_guard => 'invalidate_once'",
            "42703",
        ),
        (", mutable_columns => ARRAY['invalidated_at']", "22023"),
    ] {
        let (found, message) = expect_error(&mut admin, &format!("{policy}{extra})"));
        assert_eq!(found, state, "{extra}: {message}");
    }
    admin
        .batch_execute(&format!(
            "{policy}, mutable_columns => ARRAY['invalidated_at'], mutable_guard => 'invalidate_once')"
        ))
        .unwrap();
    app.batch_execute("UPDATE audit SET invalidated_at = now() - interval '1 day' WHERE id = 1")
        .unwrap();
    let (state, _) = expect_error(&mut app, "UPDATE audit SET note = 'x' WHERE id = 1");
    assert_eq!(state, "RT501", "other columns stay frozen");
    let (state, _) = expect_error(
        &mut app,
        "UPDATE audit SET invalidated_at = now() WHERE id = 1",
    );
    assert_eq!(
        state, "P0001",
        "the table's own guard holds the mutable column to its rule"
    );

    // Changed between claim and prune: another version, refused; claimed again, archived as it is.
    let batch = claim(&mut arch, 5).unwrap();
    let (_, digest, rows, bytes) = slice(&mut arch, &batch);
    app.batch_execute("UPDATE audit SET invalidated_at = now() WHERE id = 2")
        .unwrap();
    let err = complete(&mut arch, &batch, &digest, rows, bytes).unwrap_err();
    assert_eq!(err.code().map(|c| c.code()), Some("RT502"), "{err}");
    arch.batch_execute(&format!(
        "SELECT retention.release_batch('{batch}', 'refused: rows changed', 'refused')"
    ))
    .unwrap();
    let batch = claim(&mut arch, 5).unwrap();
    let (bytes_, digest, rows, bytes) = slice(&mut arch, &batch);
    let frames = decode_frames(&bytes_).unwrap();
    let second = frames
        .iter()
        .find(|r| r.key[0].as_deref() == Some("2"))
        .unwrap();
    assert!(
        second.columns[4].is_some(),
        "the slice has the value at archive time"
    );
    assert_eq!(
        complete(&mut arch, &batch, &digest, rows, bytes).unwrap(),
        5
    );
}
