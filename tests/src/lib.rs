//! Shared scaffolding for the end-to-end tests: throwaway PostgreSQL clusters with pg_retention
//! preloaded, and throwaway SeaweedFS (S3-compatible) servers. Both clean up on drop.
#![deny(missing_docs, rust_2018_idioms)]

pub mod archiver;
pub mod cluster;
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

/// One bigint from a query.
pub fn scalar(db: &mut postgres::Client, sql: &str) -> i64 {
    db.query_one(sql, &[])
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .get(0)
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
