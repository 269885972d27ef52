//! A library's own DELETE trigger, run under the search_path its policy names.

use super::*;

#[test]
fn a_librarys_own_delete_trigger_runs_with_the_search_path_the_policy_names() {
    let c = Cluster::start(&[]);
    c.grant_app_and_admin("postgres");
    // A library's schema: its jobs table, and a DELETE trigger (the library's) that names its
    // log table without a schema, as the library's migrations wrote it.
    c.execute(
        "postgres",
        "CREATE SCHEMA lib;
         CREATE TABLE lib.jobs (id int PRIMARY KEY, finished_at timestamptz NOT NULL);
         CREATE TABLE lib.job_log (job_id int, gone_at timestamptz DEFAULT now());
         CREATE FUNCTION lib.log_delete() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             INSERT INTO job_log (job_id) VALUES (OLD.id);
             RETURN OLD;
         END $$;
         CREATE TRIGGER log_delete BEFORE DELETE ON lib.jobs FOR EACH ROW EXECUTE FUNCTION lib.log_delete();
         CREATE SCHEMA app_owned AUTHORIZATION app;",
    );
    c.execute(
        "postgres",
        "GRANT USAGE ON SCHEMA lib TO app, admin;
         GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA lib TO app;
         GRANT SELECT, DELETE ON lib.jobs TO admin; GRANT INSERT ON lib.job_log TO admin;",
    );
    let (mut app, mut admin) = c.app_and_admin("postgres");
    app.batch_execute(
        "INSERT INTO lib.jobs SELECT g, now() - make_interval(days => g) FROM generate_series(1, 20) g",
    )
    .unwrap();
    admin
        .batch_execute(
            "SELECT retention.add_policy(name => 'jobs', relation => 'lib.jobs', kind => 'age',
                    age_column => 'finished_at', older_than => '10 days 12 hours')",
        )
        .unwrap();
    // Under the pinned search_path the trigger finds no job_log: the run fails, typed and
    // ledgered, naming the trigger.
    let (state, _) = expect_error(&mut admin, "CALL retention.run()");
    assert_eq!(state, "RT601");
    let error = text(
        &mut admin,
        "SELECT detail->>'sqlstate' || ' ' || (detail->>'error') FROM retention.ledger
          WHERE method = 'error' ORDER BY id DESC LIMIT 1",
    );
    assert!(
        error.starts_with("42P01") && error.contains("log_delete"),
        "{error}"
    );
    assert_eq!(scalar(&mut admin, "SELECT count(*) FROM lib.jobs"), 20);
    // A schema someone else than the table's owner owns is refused.
    let (state, _) = expect_error(
        &mut admin,
        "SELECT retention.alter_policy('jobs', search_path => ARRAY['app_owned'])",
    );
    assert_eq!(state, "42501");
    let (state, _) = expect_error(
        &mut admin,
        "SELECT retention.alter_policy('jobs', search_path => ARRAY['lib', 'pg_catalog'])",
    );
    assert_eq!(state, "22023");
    // The library's schema: the trigger runs as its authors intended.
    admin
        .batch_execute("SELECT retention.alter_policy('jobs', search_path => ARRAY['lib'])")
        .unwrap();
    admin.batch_execute("CALL retention.run()").unwrap();
    assert_eq!(scalar(&mut admin, "SELECT count(*) FROM lib.jobs"), 10);
    assert_eq!(
        scalar(
            &mut c.connect("postgres"),
            "SELECT count(*) FROM lib.job_log"
        ),
        10
    );
    assert_eq!(
        text(
            &mut admin,
            "SELECT array_to_string(search_path, ',') FROM retention.policies WHERE name = 'jobs'"
        ),
        "lib"
    );
}
