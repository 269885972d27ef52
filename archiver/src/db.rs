//! The archive protocol over one dedicated database connection.

use crate::config::Settings;
use crate::error::{Error, Result};
use std::str::FromStr;
use std::time::Duration;
use tokio_postgres::Client;

/// A connection speaking the protocol.
pub struct Db {
    client: Client,
}

/// A claimed batch.
pub struct Claim {
    /// The batch id.
    pub batch: String,
    /// Its slice's length (the slice itself: [`Db::claimed_slice`]).
    pub bytes: i64,
    /// Its manifest (JSON) without the digest and sizes: the pipeline computes those from the
    /// frames.
    pub manifest: String,
    /// Whether claiming again at once may find more (the batch is full, or the table is
    /// partitioned and leaves after this one are left): a pass that claims nothing with more
    /// has caught up.
    pub more: bool,
}

/// A verified archive as the extension recorded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchiveRecord {
    /// Object key of the slice.
    pub object_key: String,
    /// BLAKE3 hex.
    pub blake3: String,
    /// Frames.
    pub rows: i64,
    /// Slice length.
    pub bytes: i64,
}

/// libpq's connection keywords: an unknown option is named only when it is one of these (a
/// misplaced `=` can make part of a password look like an option's name).
const LIBPQ_KEYWORDS: [&str; 45] = [
    "host",
    "hostaddr",
    "port",
    "dbname",
    "user",
    "password",
    "passfile",
    "require_auth",
    "channel_binding",
    "connect_timeout",
    "client_encoding",
    "options",
    "application_name",
    "fallback_application_name",
    "keepalives",
    "keepalives_idle",
    "keepalives_interval",
    "keepalives_count",
    "tcp_user_timeout",
    "replication",
    "gssencmode",
    "sslmode",
    "sslnegotiation",
    "sslcompression",
    "sslcert",
    "sslkey",
    "sslkeylogfile",
    "sslpassword",
    "sslcertmode",
    "sslrootcert",
    "sslcrl",
    "sslcrldir",
    "sslsni",
    "requirepeer",
    "requiressl",
    "ssl_min_protocol_version",
    "ssl_max_protocol_version",
    "min_protocol_version",
    "max_protocol_version",
    "krbsrvname",
    "gsslib",
    "gssdelegation",
    "service",
    "target_session_attrs",
    "load_balance_hosts",
];

/// Why tokio-postgres could not parse a connection string, without quoting it: an unknown
/// option is named only when it is a libpq keyword, and a stray character is not shown.
fn parse_error(e: &tokio_postgres::Error) -> String {
    let cause = std::error::Error::source(e)
        .map(ToString::to_string)
        .unwrap_or_else(|| e.to_string());
    if let Some(rest) = cause.strip_prefix("unknown option `") {
        let name = rest.strip_suffix('`').unwrap_or(rest);
        return match LIBPQ_KEYWORDS.contains(&name) {
            true => format!("unsupported option `{name}`"),
            false => "an unknown option (its name is not shown: it may be part of a secret)".into(),
        };
    }
    match cause.split_once(" but got") {
        Some((head, _)) => head.to_owned(),
        None => cause,
    }
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

impl Db {
    /// Connects (with the configured connect timeout) and spawns the connection task.
    pub async fn connect(settings: &Settings) -> Result<Db> {
        let (conninfo, tls) = crate::tls::split(settings.database()?)?;
        let mut config = tokio_postgres::Config::from_str(&conninfo).map_err(|e| {
            Error::Config(format!("database connection string: {}", parse_error(&e)))
        })?;
        config.ssl_mode(tls.postgres_mode());
        config.connect_timeout(settings.connect_timeout);
        if config.get_application_name().is_none() {
            config.application_name("pg-retention-archiver");
        }
        let (client, connection) = config.connect(tls.connector()?).await?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::error!(error = %e, "database connection ended");
            }
        });
        Ok(Db { client })
    }

    /// Whether the connection is gone.
    pub fn is_closed(&self) -> bool {
        self.client.is_closed()
    }

    /// The underlying client, for the operator commands.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Enabled archive policies.
    pub async fn archive_policies(&self) -> Result<Vec<String>> {
        let rows = self
            .client
            .query("SELECT p FROM retention.archive_policies() p", &[])
            .await?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    /// Claims a batch (or, with `resume`, takes back this owner's unfinished one). The claim
    /// renders the batch's slice from the rows it read and keeps it in its backend for
    /// [`Db::claimed_slice`]; the manifest comes with the claim.
    pub async fn claim(
        &self,
        policy: &str,
        rows: i32,
        lease: Duration,
        owner: &str,
        resume: bool,
    ) -> Result<Option<Claim>> {
        let row = self
            .client
            .query_one(
                "SELECT c.batch::text, c.bytes, c.more, c.manifest::text FROM retention.claim_next($1, $2, make_interval(secs => $3), $4, $5) c",
                &[&policy, &rows, &secs(lease), &owner, &resume],
            )
            .await?;
        Ok(row.get::<_, Option<String>>(0).map(|batch| Claim {
            batch,
            bytes: row.get::<_, Option<i64>>(1).unwrap_or(0),
            // Never NULL beside a batch; if it were, going on is the safe reading.
            more: row.get::<_, Option<bool>>(2).unwrap_or(true),
            manifest: row.get::<_, Option<String>>(3).unwrap_or_default(),
        }))
    }

    /// The slice of the batch this connection just claimed, `bytes` long. `claimed_slice` hands
    /// it over in pieces (through the claim's SQL wrapper every layer copied it whole); should
    /// it not be there, the batch is rendered again from its key set.
    pub async fn claimed_slice(&self, batch: &str, bytes: i64) -> Result<Vec<u8>> {
        let pieces = self
            .client
            .query("SELECT retention.claimed_slice($1::text::uuid)", &[&batch])
            .await?;
        if pieces.is_empty() {
            return Ok(self
                .client
                .query_one("SELECT retention.batch_slice($1::text::uuid)", &[&batch])
                .await?
                .get::<_, Option<Vec<u8>>>(0)
                .unwrap_or_default());
        }
        let mut slice = Vec::with_capacity(usize::try_from(bytes).unwrap_or(0));
        for piece in &pieces {
            slice.extend_from_slice(piece.get::<_, &[u8]>(0));
        }
        Ok(slice)
    }

    /// Extends the batch's lease.
    pub async fn extend_lease(&self, batch: &str, lease: Duration) -> Result<()> {
        self.client
            .execute(
                "SELECT retention.extend_lease($1::text::uuid, make_interval(secs => $2))",
                &[&batch, &secs(lease)],
            )
            .await?;
        Ok(())
    }

    /// Gives a batch up with a reason (ledgered).
    pub async fn release(&self, batch: &str, reason: &str) -> Result<bool> {
        let row = self
            .client
            .query_one(
                "SELECT retention.release_batch($1::text::uuid, $2)",
                &[&batch, &reason],
            )
            .await?;
        Ok(row.get(0))
    }

    /// Asks the extension to verify and prune the batch. Refusals become [`Error::Refused`].
    pub async fn complete(
        &self,
        batch: &str,
        key: &str,
        blake3: &str,
        rows: i64,
        bytes: i64,
        owner: &str,
    ) -> Result<i64> {
        let result = self
            .client
            .query_one(
                "SELECT retention.complete_batch($1::text::uuid, $2, $3, $4, $5, $6)",
                &[&batch, &key, &blake3, &rows, &bytes, &owner],
            )
            .await;
        match result {
            Ok(row) => Ok(row.get(0)),
            Err(e) => match e.code().map(|c| c.code()) {
                Some("RT502") | Some("RT503") => Err(Error::Refused {
                    batch: batch.to_owned(),
                    reason: e
                        .as_db_error()
                        .map(|d| d.message().to_owned())
                        .unwrap_or_else(|| e.to_string()),
                }),
                _ => Err(e.into()),
            },
        }
    }

    /// The open supersessions, oldest first, one per archive (`retention.open_supersessions`).
    pub async fn open_supersessions(&self, max: i32) -> Result<Vec<crate::supersede::Open>> {
        let rows = self
            .client
            .query(
                "SELECT id, archive_id, state, object_key, blake3, rows, bytes, replaced_key, rewrite_key, expired, policy
                   FROM retention.open_supersessions($1)",
                &[&max],
            )
            .await?;
        Ok(rows
            .iter()
            .map(|r| crate::supersede::Open {
                id: r.get(0),
                archive_id: r.get(1),
                state: r.get(2),
                object_key: r.get(3),
                blake3: r.get(4),
                rows: r.get(5),
                bytes: r.get(6),
                replaced_key: r.get(7),
                rewrite_key: r.get(8),
                expired: r.get(9),
                policy: r.get(10),
            })
            .collect())
    }

    /// The 0-based positions of the slice's rows that supersession `id`'s erasure matches.
    pub async fn supersession_matches(
        &self,
        id: i64,
        slice: &[u8],
        columns: &[String],
    ) -> Result<Vec<i32>> {
        let row = self
            .client
            .query_one(
                "SELECT retention.supersession_matches($1, $2, $3)",
                &[&id, &slice, &columns],
            )
            .await?;
        Ok(row.get(0))
    }

    /// Supersession `id` had nothing to rewrite.
    pub async fn supersession_unaffected(&self, id: i64, reason: &str) -> Result<()> {
        self.client
            .execute(
                "SELECT retention.supersession_unaffected($1, $2)",
                &[&id, &reason],
            )
            .await?;
        Ok(())
    }

    /// Records supersession `id`'s verified rewrite.
    #[allow(clippy::too_many_arguments)]
    pub async fn supersession_rewritten(
        &self,
        id: i64,
        replaced_key: &str,
        object_key: &str,
        blake3: &str,
        rows: u64,
        bytes: u64,
        supersedes: &str,
    ) -> Result<()> {
        let (rows, bytes) = (rows as i64, bytes as i64);
        self.client
            .execute(
                "SELECT retention.supersession_rewritten($1, $2, $3, $4, $5, $6, $7)",
                &[
                    &id,
                    &replaced_key,
                    &object_key,
                    &blake3,
                    &rows,
                    &bytes,
                    &supersedes,
                ],
            )
            .await?;
        Ok(())
    }

    /// Supersession `id`'s replaced objects are deleted.
    pub async fn supersession_done(&self, id: i64, actor: &str) -> Result<()> {
        self.client
            .execute("SELECT retention.supersession_done($1, $2)", &[&id, &actor])
            .await?;
        Ok(())
    }

    /// What the index says of an object key: `("current" | "superseded", the archive's key
    /// now)`, or None when no archive knows it.
    pub async fn object_state(&self, key: &str) -> Result<Option<(String, String)>> {
        let row = self
            .client
            .query_opt(
                "SELECT state, current_key FROM retention.archive_object_state($1)",
                &[&key],
            )
            .await?;
        Ok(row.map(|r| (r.get(0), r.get(1))))
    }

    /// The archive record of a batch, if it was completed.
    pub async fn archive_record(&self, batch: &str) -> Result<Option<ArchiveRecord>> {
        let row = self
            .client
            .query_opt(
                "SELECT object_key, blake3, rows, bytes FROM retention.archives WHERE batch = $1::text::uuid",
                &[&batch],
            )
            .await?;
        Ok(row.map(|r| ArchiveRecord {
            object_key: r.get(0),
            blake3: r.get(1),
            rows: r.get(2),
            bytes: r.get(3),
        }))
    }

    /// The slice key of a completed batch.
    pub async fn key_of_batch(&self, batch: &str) -> Result<Option<String>> {
        Ok(self.archive_record(batch).await?.map(|r| r.object_key))
    }

    /// Every sample of `retention.metrics()`, in family order.
    pub async fn metrics(&self) -> Result<Vec<crate::metrics::DbSample>> {
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
                Ok(crate::metrics::DbSample {
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
                    kind: r.get(4),
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_string_that_does_not_parse_is_not_quoted() {
        let why = |conninfo: &str| match tokio_postgres::Config::from_str(conninfo) {
            Ok(_) => panic!("{conninfo} parsed"),
            Err(e) => parse_error(&e),
        };
        // `password=ab zq9x=x`: libpq reads an option named `zq9x`.
        let e = why("host='h' password='ab' zq9x='x'");
        assert!(!e.contains("zq9x"), "{e}");
        assert!(e.contains("unknown option"), "{e}");
        assert_eq!(why("host='h' sslcrl='/c'"), "unsupported option `sslcrl`");
        assert!(why("host='h' port='x'").contains("`port`"));
        let e = why("postgres://u:pw@h/d?password");
        assert!(!e.contains("pw"), "{e}");
    }
}
