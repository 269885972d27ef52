//! What `/metrics` and `/readyz` read, over a connection of their own (`crate::http`).

use super::Db;
use crate::error::Result;
use crate::metrics::{DbSample, SampleKind};

impl Db {
    /// Makes this the metrics connection: each statement bounded by `statement_timeout` (a
    /// PostgreSQL interval, e.g. `5s`), and named so in `pg_stat_activity`.
    pub async fn for_metrics(&self, statement_timeout: &str) -> Result<()> {
        self.client
            .batch_execute(&format!(
                "SET statement_timeout = '{statement_timeout}'; SET application_name = 'pg-retention-archiver metrics'"
            ))
            .await?;
        Ok(())
    }

    /// Whether the database answers (`SELECT 1`).
    pub async fn ping(&self) -> Result<()> {
        self.client.simple_query("SELECT 1").await?;
        Ok(())
    }

    /// Every sample of `retention.metrics()`, in family order.
    pub async fn metrics(&self) -> Result<Vec<DbSample>> {
        let rows = self
            .client
            .query(
                "SELECT m.name, m.labels::text, m.value, m.help, m.type FROM retention.metrics() m",
                &[],
            )
            .await?;
        rows.iter()
            .map(|r| {
                let labels: serde_json::Map<String, serde_json::Value> =
                    serde_json::from_str(r.get::<_, &str>(1))?;
                Ok(DbSample {
                    name: r.get(0),
                    labels: labels
                        .into_iter()
                        .map(|(k, v)| {
                            (
                                k,
                                v.as_str()
                                    .map(str::to_owned)
                                    .unwrap_or_else(|| v.to_string()),
                            )
                        })
                        .collect(),
                    value: r.get(2),
                    help: r.get(3),
                    kind: SampleKind::parse(r.get(4)),
                })
            })
            .collect()
    }
}
