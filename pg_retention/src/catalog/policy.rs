//! Policies as the engine sees them: the spec an operator gives, and the stored current version.

use crate::catalog::query_json;
use crate::error::{Result, RetentionError};
use serde::{Deserialize, Serialize};

/// The four policy kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Rows older than the window.
    Age,
    /// Per group, keep the newest `keep` rows; older terminal rows go.
    KeepLatest,
    /// Per key, at most `keep` versions, never fewer than `min_keep`, optionally also by age.
    Versions,
    /// Whole groups go together when their newest row is older than the window.
    Entity,
}

impl Kind {
    /// Parses the SQL name of a kind.
    pub fn parse(s: &str) -> Option<Kind> {
        match s {
            "age" => Some(Kind::Age),
            "keep_latest" => Some(Kind::KeepLatest),
            "versions" => Some(Kind::Versions),
            "entity" => Some(Kind::Entity),
            _ => None,
        }
    }
}

/// A policy definition as given to add/alter and stored in `retention.policy_versions`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PolicySpec {
    /// Policy name.
    pub name: String,
    /// Table oid.
    pub relation: u32,
    /// `age | keep_latest | versions | entity`.
    pub kind: String,
    /// Column holding the row's age.
    pub age_column: Option<String>,
    /// Window, as interval text.
    pub older_than: Option<String>,
    /// Which rows the policy governs.
    pub scope: Option<String>,
    /// Which rows are finished.
    pub terminal: Option<String>,
    /// Group key columns.
    pub group_by: Option<Vec<String>>,
    /// Ordering column (newest = greatest).
    pub order_by: Option<String>,
    /// Rows/versions kept per group.
    pub keep: Option<i32>,
    /// Floor of versions kept per key.
    pub min_keep: Option<i32>,
    /// `delete | archive_then_delete`.
    pub action: String,
    /// Rows per batch.
    pub batch_size: i32,
    /// Rows per run.
    pub max_rows_per_run: i64,
    /// Whether sweeps run it.
    #[serde(default = "yes")]
    pub enabled: bool,
}

fn yes() -> bool {
    true
}

impl PolicySpec {
    /// The parsed kind (validated at registration).
    pub fn kind(&self) -> Result<Kind> {
        Kind::parse(&self.kind).ok_or_else(|| {
            RetentionError::invalid(
                format!("unknown policy kind \"{}\"", self.kind),
                "kind must be one of age, keep_latest, versions, entity.",
                "Pick the kind that matches how rows of this table expire.",
            )
        })
    }
}

/// The current version of a live policy.
#[derive(Debug, Clone, Deserialize)]
pub struct Policy {
    /// Policy id.
    pub id: i64,
    /// Current version number.
    pub version: i32,
    /// Table name at registration (the table may have been renamed or dropped since).
    pub relation_name: String,
    /// The role the policy's predicates and deletes run as (see `author.rs`).
    pub owner: u32,
    /// The definition.
    #[serde(flatten)]
    pub spec: PolicySpec,
}

impl std::ops::Deref for Policy {
    type Target = PolicySpec;
    fn deref(&self) -> &PolicySpec {
        &self.spec
    }
}

const CURRENT: &str = "
    SELECT to_jsonb(x) FROM (
        SELECT p.id, p.name, v.version, v.relation::bigint AS relation, v.relation_name, v.kind,
               v.age_column, v.older_than::text AS older_than, v.scope, v.terminal, v.group_by,
               v.order_by, v.keep, v.min_keep, v.action, v.batch_size, v.max_rows_per_run, v.enabled,
               v.owner::bigint AS owner
          FROM retention.policy_ids p
          CROSS JOIN LATERAL (SELECT * FROM retention.policy_versions pv
                               WHERE pv.policy_id = p.id ORDER BY pv.version DESC LIMIT 1) v
         WHERE p.dropped_at IS NULL AND";

impl Policy {
    /// The live policy named `name`.
    pub fn by_name(name: &str) -> Result<Policy> {
        query_json(&format!("{CURRENT} p.name = $1) x"), &[name.into()])?
            .ok_or_else(|| RetentionError::UnknownPolicy(name.to_owned()))
    }

    /// The live policy with id `id`, if it still exists.
    pub fn by_id(id: i64) -> Result<Option<Policy>> {
        query_json(&format!("{CURRENT} p.id = $1) x"), &[id.into()])
    }
}
