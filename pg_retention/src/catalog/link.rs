//! `retention.window_links`: producer/consumer pairs whose windows must keep
//! `consumer.older_than >= producer.older_than + margin`.

use crate::catalog::query_json;
use crate::error::{returned_nothing, Result};
use pgrx::prelude::*;

/// A window link a policy takes part in, with both windows as they are now.
#[derive(Debug, serde::Deserialize)]
pub struct Link {
    /// Producer policy name.
    pub producer: String,
    /// Consumer policy name.
    pub consumer: String,
    /// The producer's window.
    pub producer_window: Option<String>,
    /// The consumer's window.
    pub consumer_window: Option<String>,
    /// The margin, as interval text.
    pub margin: String,
    /// Whether the policy asked about is the producer of the link.
    pub is_producer: bool,
}

/// The links policy `policy_id` takes part in.
pub fn links_of(policy_id: i64) -> Result<Vec<Link>> {
    query_json(
        "SELECT coalesce(jsonb_agg(jsonb_build_object(
                    'producer', pp.name, 'consumer', cp.name,
                    'producer_window', pv.older_than::text, 'consumer_window', cv.older_than::text,
                    'margin', l.margin::text, 'is_producer', l.producer_id = $1)), '[]')
           FROM retention.window_links l
           JOIN retention.policies pp ON pp.id = l.producer_id
           JOIN retention.policies cp ON cp.id = l.consumer_id
           JOIN retention.policy_versions pv ON pv.policy_id = pp.id AND pv.version = pp.version
           JOIN retention.policy_versions cv ON cv.policy_id = cp.id AND cv.version = cp.version
          WHERE l.producer_id = $1 OR l.consumer_id = $1",
        &[policy_id.into()],
    )?
    .ok_or_else(|| returned_nothing("reading window links"))
}

/// Records (or re-margins) the link from `producer_id` to `consumer_id`.
pub fn save(producer_id: i64, consumer_id: i64, margin: &str, by: &str) -> Result<()> {
    Spi::run_with_args(
        "INSERT INTO retention.window_links (producer_id, consumer_id, margin, created_by)
         VALUES ($1, $2, $3::interval, $4)
         ON CONFLICT (producer_id, consumer_id) DO UPDATE SET margin = EXCLUDED.margin",
        &[
            producer_id.into(),
            consumer_id.into(),
            margin.into(),
            by.into(),
        ],
    )?;
    Ok(())
}

/// Serializes the changes window links constrain (`link_windows`, and `alter_policy` of a
/// policy that takes part in a link): each one then checks the links against the windows the
/// ones before it committed, so two changes each allowed alone cannot together break a link (a
/// write skew). A transaction-level advisory lock: its first key 21077 is pg_retention's window
/// links (archive claims use 21076). Taken before the windows are read; in READ COMMITTED,
/// each read after it sees what was committed before it was granted.
pub fn serialize_changes() -> Result<()> {
    Ok(Spi::run(
        "SELECT pg_catalog.pg_advisory_xact_lock(21077, 0)",
    )?)
}
