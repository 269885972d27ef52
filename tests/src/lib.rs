//! Shared scaffolding for the end-to-end tests: throwaway PostgreSQL clusters with pg_retention
//! preloaded, and throwaway SeaweedFS (S3-compatible) servers. Both clean up on drop.
#![deny(missing_docs, rust_2018_idioms)]

pub mod archiver;
pub mod cluster;
pub mod jobs;
pub mod ports;
pub mod seaweed;
pub mod tls;

pub use cluster::Cluster;
pub use seaweed::Seaweed;

/// The SQLSTATE of a failed statement ("" when the error did not come from the server).
pub fn sqlstate(err: &postgres::Error) -> String {
    err.code().map(|c| c.code().to_owned()).unwrap_or_default()
}

/// Runs `sql` expecting it to fail and returns the SQLSTATE and message.
pub fn expect_error(db: &mut postgres::Client, sql: &str) -> (String, String) {
    match db.batch_execute(sql) {
        Ok(()) => panic!("expected an error from: {sql}"),
        Err(e) => {
            let msg = e
                .as_db_error()
                .map(|d| d.message().to_owned())
                .unwrap_or_else(|| e.to_string());
            (sqlstate(&e), msg)
        }
    }
}

/// A path under the system's temporary directory for one test's files, not used before:
/// `prefix`, this process and a free port make it unique (it is not created).
pub fn temp_dir(prefix: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!(
        "{prefix}-{}-{}",
        std::process::id(),
        ports::free_ports(1)[0]
    ))
}

/// A command running `program` as the postgres OS user (PostgreSQL refuses root).
pub fn as_postgres(program: impl AsRef<std::ffi::OsStr>) -> std::process::Command {
    let mut c = std::process::Command::new("runuser");
    c.args(["-u", "postgres", "--"]).arg(program);
    c
}

/// Runs `command` to completion, panicking with the command and its output unless it succeeds.
pub fn succeed(command: &mut std::process::Command) -> std::process::Output {
    let out = command
        .output()
        .unwrap_or_else(|e| panic!("run {command:?}: {e}"));
    assert!(
        out.status.success(),
        "{command:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Stops the server of data directory `data` at once with `pg_ctl` (as postgres); a server that
/// is already down is fine.
pub fn stop_server(pg_ctl: &std::path::Path, data: &std::path::Path) {
    let _ = as_postgres(pg_ctl)
        .arg("-D")
        .arg(data)
        .args(["-m", "immediate", "-w", "stop"])
        .output();
}

/// The text in the first column of a query's one row.
pub fn text(db: &mut postgres::Client, sql: &str) -> String {
    db.query_one(sql, &[])
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .get(0)
}

/// One bigint from a query.
pub fn scalar(db: &mut postgres::Client, sql: &str) -> i64 {
    db.query_one(sql, &[])
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .get(0)
}

/// The first column of every row of a query.
pub fn column<T: for<'a> postgres::types::FromSql<'a>>(
    db: &mut postgres::Client,
    sql: &str,
) -> Vec<T> {
    db.query(sql, &[])
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// (partition, rows) of every `drop_partition` ledger record, by partition name.
pub fn drops(db: &mut postgres::Client) -> Vec<(String, i64)> {
    db.query(
        "SELECT detail->>'partition', rows FROM retention.ledger WHERE method = 'drop_partition'
          ORDER BY 1",
        &[],
    )
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1)))
    .collect()
}

/// An event trigger that runs `body` (plpgsql; the run's search_path is pg_catalog's alone)
/// at the start of every `DROP TABLE`.
pub fn on_drop_table(db: &mut postgres::Client, body: &str) {
    db.batch_execute(&format!(
        "CREATE FUNCTION on_drop() RETURNS event_trigger LANGUAGE plpgsql AS $$ BEGIN {body} END $$;
         CREATE EVENT TRIGGER on_drop ON ddl_command_start WHEN TAG IN ('DROP TABLE')
             EXECUTE FUNCTION on_drop();"
    ))
    .unwrap();
}

/// Removes what [`on_drop_table`] made.
pub fn no_event_trigger(db: &mut postgres::Client) {
    db.batch_execute("DROP EVENT TRIGGER on_drop; DROP FUNCTION on_drop();")
        .unwrap();
}

/// The manifest `retention.batch_manifest(batch, digest)` renders, as JSON.
pub fn manifest_of(db: &mut postgres::Client, batch: &str, digest: bool) -> serde_json::Value {
    let text: String = db
        .query_one(
            "SELECT retention.batch_manifest($1::text::uuid, $2)::text",
            &[&batch, &digest],
        )
        .unwrap_or_else(|e| panic!("manifest of {batch}: {e}"))
        .get(0);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("manifest of {batch}: {e}"))
}
