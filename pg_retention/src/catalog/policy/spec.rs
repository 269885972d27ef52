//! A policy's definition ([`PolicySpec`]), the stored current version of a live policy
//! ([`Policy`]), and [`FIELDS`], the one list of definition fields that the SQL surface, the spec
//! and `retention.policy_versions` must agree with. Kept apart from the statements that read
//! and write policies so that adding a field starts, and is checked, in one place.

use super::{Action, Kind};
use serde::{Deserialize, Serialize};

/// A policy definition as given to add/alter and stored in `retention.policy_versions`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PolicySpec {
    /// Policy name.
    pub name: String,
    /// Table oid.
    pub relation: u32,
    /// How rows expire.
    pub kind: Kind,
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
    /// What happens to eligible rows.
    pub action: Action,
    /// Rows per batch.
    pub batch_size: i32,
    /// Rows per run.
    pub max_rows_per_run: i64,
    /// Floor under `keep` and `min_keep`.
    #[serde(default)]
    pub keep_floor: Option<i32>,
    /// Floor under `older_than`, as interval text.
    #[serde(default)]
    pub window_floor: Option<String>,
    /// How long archives are kept (interval text; None: forever). Archive policies only.
    #[serde(default)]
    pub archive_keep: Option<String>,
    /// For `orphan`: the table of the leases that own rows (oid).
    #[serde(default)]
    pub lease_table: Option<u32>,
    /// For `orphan`: the columns of this table holding the owning lease's primary key.
    #[serde(default)]
    pub lease_key: Option<Vec<String>>,
    /// For `orphan`: the lease table's column saying until when a lease lives.
    #[serde(default)]
    pub lease_expiry: Option<String>,
    /// The schemas a delete policy's deletes search (the table's own triggers resolve their
    /// unqualified names through them); None: pg_catalog only.
    #[serde(default)]
    pub search_path: Option<Vec<String>>,
    /// A row's time as an expression over it, instead of `age_column` (engine/clock.rs).
    #[serde(default)]
    pub age_expression: Option<String>,
    /// A row's time read from the rows of this table that reference it (oid) ...
    #[serde(default)]
    pub age_table: Option<u32>,
    /// ... from this column of theirs ...
    #[serde(default)]
    pub age_table_column: Option<String>,
    /// ... their newest (default) or oldest value.
    #[serde(default)]
    pub age_pick: Option<String>,
    /// A row is terminal only if rows of this table (oid) that reference it ...
    #[serde(default)]
    pub terminal_table: Option<u32>,
    /// ... and match this predicate over their columns ...
    #[serde(default)]
    pub terminal_table_where: Option<String>,
    /// ... exist (`exists`, the default) or do not (`not_exists`): engine/related_rows.rs.
    #[serde(default)]
    pub terminal_table_test: Option<String>,
    /// The opt-in to govern only the rows row-level security lets the owner see (preview
    /// counts the others as `hidden_rows`, health notes it); otherwise such a table is refused.
    #[serde(default)]
    pub visible_rows_only: Option<bool>,
    /// A diagnostic budget of the table's rows: `health()` is unhealthy past it; never a
    /// reason to delete anything.
    #[serde(default)]
    pub max_table_rows: Option<i64>,
    /// An archive policy's columns that may still change on an eligible row (guard.rs) ...
    #[serde(default)]
    pub mutable_columns: Option<Vec<String>>,
    /// ... and the constraint or trigger on the table that refuses the writes they must not take.
    #[serde(default)]
    pub mutable_guard: Option<String>,
    /// Whether a delete policy's ledger entries list the keys of the rows they deleted.
    #[serde(default)]
    pub record_keys: Option<bool>,
    /// An `archive_then_delete` policy's second window (interval text, at least `older_than`):
    /// rows are archived after `older_than` and deleted after this, once their archive
    /// verified. None: deleted as soon as archived.
    #[serde(default)]
    pub delete_after: Option<String>,
    /// Whether sweeps run it.
    #[serde(default = "yes")]
    pub enabled: bool,
}

fn yes() -> bool {
    true
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

impl PolicySpec {
    /// Whether the policy governs only the rows row-level security shows its owner.
    pub fn visible_rows_only(&self) -> bool {
        self.visible_rows_only == Some(true)
    }

    /// Whether archived rows stay in the table after their archive verified: an `archive`
    /// policy keeps them, a two-window `archive_then_delete` one until `delete_after`. Their
    /// keys are kept in `retention.archived_rows`, so no row is archived twice.
    pub fn keeps_archived_rows(&self) -> bool {
        self.action == Action::Archive
            || (self.action == Action::ArchiveThenDelete && self.delete_after.is_some())
    }
}

impl Policy {
    /// A two-window policy as the delete after its `delete_after` sees its rows: the same
    /// policy, with `delete_after` as its window (one eligibility for both windows). None for
    /// any other policy.
    pub fn second_window(&self) -> Option<Policy> {
        let after = self
            .delete_after
            .clone()
            .filter(|_| self.action == Action::ArchiveThenDelete)?;
        let mut later = self.clone();
        later.spec.older_than = Some(after);
        Some(later)
    }
}

impl std::ops::Deref for Policy {
    type Target = PolicySpec;
    fn deref(&self) -> &PolicySpec {
        &self.spec
    }
}

/// A policy's definition fields after `name` and `relation`, with their SQL types: the order
/// of `retention.add_policy`'s and `alter_policy`'s arguments, the fields of [`PolicySpec`]
/// and the columns of `retention.policy_versions`. The statements of `reads.rs` and
/// `versions.rs` are built from this list; `a_policy_field_has_one_definition` fails when the
/// SQL surface, the spec or the catalog disagree with it.
pub const FIELDS: [(&str, &str); 32] = [
    ("kind", "text"),
    ("age_column", "text"),
    ("older_than", "interval"),
    ("scope", "text"),
    ("terminal", "text"),
    ("group_by", "text[]"),
    ("order_by", "text"),
    ("keep", "integer"),
    ("min_keep", "integer"),
    ("action", "text"),
    ("batch_size", "integer"),
    ("max_rows_per_run", "bigint"),
    ("keep_floor", "integer"),
    ("window_floor", "interval"),
    ("archive_keep", "interval"),
    ("lease_table", "regclass"),
    ("lease_key", "text[]"),
    ("lease_expiry", "text"),
    ("search_path", "text[]"),
    ("age_expression", "text"),
    ("age_table", "regclass"),
    ("age_table_column", "text"),
    ("age_pick", "text"),
    ("terminal_table", "regclass"),
    ("terminal_table_where", "text"),
    ("terminal_table_test", "text"),
    ("visible_rows_only", "boolean"),
    ("max_table_rows", "bigint"),
    ("mutable_columns", "text[]"),
    ("mutable_guard", "text"),
    ("record_keys", "boolean"),
    ("delete_after", "interval"),
];
