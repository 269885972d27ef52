//! Policies as the engine sees them: the spec an operator gives, and the stored current version.
//!
//! This module holds the names a policy is made of ([`Kind`], [`Action`], [`Change`]), parsed
//! once at the boundary. The definition itself and the list of its fields are in `spec.rs`;
//! reading live policies (and the fingerprint a run watches) is in `reads.rs`; new ids, drops
//! and new versions are in `versions.rs`.

mod reads;
mod spec;
mod versions;

pub use reads::fingerprint;
pub use spec::{Policy, PolicySpec, FIELDS};
pub use versions::append_version;

use crate::error::{Result, RetentionError};
use serde::{Deserialize, Serialize};

/// The four policy kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// Rows older than the window.
    Age,
    /// Per group, keep the newest `keep` rows; older terminal rows go.
    KeepLatest,
    /// Per key, at most `keep` versions, never fewer than `min_keep`, optionally also by age.
    Versions,
    /// Whole groups go together when their newest row is older than the window.
    Entity,
    /// Shared rows (chunks, blobs, dimension rows) go when no row of any table whose foreign
    /// key references them does, and they are older than the window (a grace).
    Unreferenced,
    /// Provisional rows (the scope) older than the window (a TTL) whose owning lease is dead.
    Orphan,
}

impl Kind {
    /// Parses the SQL name of a kind (22023 for anything else).
    pub fn parse(s: &str) -> Result<Kind> {
        match s {
            "age" => Ok(Kind::Age),
            "keep_latest" => Ok(Kind::KeepLatest),
            "versions" => Ok(Kind::Versions),
            "entity" => Ok(Kind::Entity),
            "unreferenced" => Ok(Kind::Unreferenced),
            "orphan" => Ok(Kind::Orphan),
            _ => Err(RetentionError::invalid(
                format!("unknown policy kind \"{s}\""),
                "kind must be one of age, keep_latest, versions, entity, unreferenced, orphan.",
                "Pick the kind that matches how rows of this table expire.",
            )),
        }
    }

    /// The kind's SQL name.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Age => "age",
            Kind::KeepLatest => "keep_latest",
            Kind::Versions => "versions",
            Kind::Entity => "entity",
            Kind::Unreferenced => "unreferenced",
            Kind::Orphan => "orphan",
        }
    }

    /// Whether rows of this kind expire one by one by their age (the statements, index walks
    /// and block ranges of `age` sweeps serve them: `unreferenced` needs only the reference
    /// guard every kind has, `orphan` adds its lease condition to the row predicate).
    pub fn by_age(self) -> bool {
        matches!(self, Kind::Age | Kind::Unreferenced | Kind::Orphan)
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a policy does with its eligible rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Sweeps delete them.
    Delete,
    /// Archivers archive them; verified archives are pruned (at once, or after `delete_after`).
    ArchiveThenDelete,
    /// Archivers archive them and they stay (the reference designs' `archive_after`): an
    /// archived row is not archived again.
    Archive,
}

impl Action {
    /// Parses the SQL name of an action (22023 for anything else).
    pub fn parse(s: &str) -> Result<Action> {
        match s {
            "delete" => Ok(Action::Delete),
            "archive_then_delete" => Ok(Action::ArchiveThenDelete),
            "archive" => Ok(Action::Archive),
            _ => Err(RetentionError::invalid(
                format!("unknown action \"{s}\""),
                "action must be delete, archive_then_delete or archive.",
                "Use archive_then_delete for rows that must be archived before they go, archive for rows archived and kept.",
            )),
        }
    }

    /// The action's SQL name.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Delete => "delete",
            Action::ArchiveThenDelete => "archive_then_delete",
            Action::Archive => "archive",
        }
    }

    /// Whether archivers archive the policy's rows (the archive policies).
    pub fn archives(self) -> bool {
        matches!(self, Action::ArchiveThenDelete | Action::Archive)
    }

    /// The retention class of a table governed with this action (`retention.tables.class`).
    pub fn class(self) -> &'static str {
        match self {
            Action::Delete => "delete",
            Action::ArchiveThenDelete | Action::Archive => "archive",
        }
    }
}

impl std::fmt::Display for Action {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a new policy version records (`retention.policy_history.change`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Registered.
    Add,
    /// Definition changed.
    Alter,
    /// Sweeps run it again.
    Enable,
    /// Sweeps leave it alone.
    Disable,
    /// Gone (its history stays).
    Drop,
}

impl Change {
    /// Parses the SQL name of a change.
    pub fn parse(s: &str) -> Result<Change> {
        match s {
            "add" => Ok(Change::Add),
            "alter" => Ok(Change::Alter),
            "enable" => Ok(Change::Enable),
            "disable" => Ok(Change::Disable),
            "drop" => Ok(Change::Drop),
            _ => Err(RetentionError::invalid(
                format!("unknown policy change \"{s}\""),
                "change must be add, alter, enable, disable or drop.",
                "Call retention.add_policy, alter_policy, enable_policy, disable_policy or drop_policy.",
            )),
        }
    }

    /// The change's SQL name.
    pub fn as_str(self) -> &'static str {
        match self {
            Change::Add => "add",
            Change::Alter => "alter",
            Change::Enable => "enable",
            Change::Disable => "disable",
            Change::Drop => "drop",
        }
    }
}

/// Parses the kind and action of a JSON definition, where given: the boundary where their
/// names become [`Kind`] and [`Action`], with typed errors for unknown ones.
pub fn check_names(definition: &serde_json::Value) -> Result<()> {
    if let Some(kind) = definition.get("kind").and_then(serde_json::Value::as_str) {
        Kind::parse(kind)?;
    }
    if let Some(action) = definition.get("action").and_then(serde_json::Value::as_str) {
        Action::parse(action)?;
    }
    // Arrays of names (every text[] field): a NULL element names nothing (22004, not a decode
    // failure).
    for (field, _) in FIELDS.iter().filter(|(_, ty)| *ty == "text[]") {
        if let Some(items) = definition.get(*field).and_then(serde_json::Value::as_array) {
            if items.iter().any(serde_json::Value::is_null) {
                return Err(RetentionError::NullArgument(field));
            }
        }
    }
    Ok(())
}

#[cfg(any(test, feature = "pg_test"))]
#[pgrx::pg_schema]
// A panic is how a #[pg_test] fails (allow-unwrap-in-tests sees only #[test] functions).
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use pgrx::prelude::*;

    fn one_list(sql: &str) -> Vec<String> {
        Spi::get_one::<Vec<String>>(sql)
            .unwrap()
            .unwrap_or_default()
    }

    #[pg_test]
    fn a_policy_field_has_one_definition() {
        let fields: Vec<String> = FIELDS.iter().map(|(n, _)| (*n).to_string()).collect();
        let typed: Vec<String> = FIELDS.iter().map(|(n, t)| format!("{n} {t}")).collect();
        let with = |head: &[&str], list: &[String]| -> Vec<String> {
            head.iter()
                .map(|h| (*h).to_string())
                .chain(list.iter().cloned())
                .collect()
        };
        let args = |f: &str| {
            one_list(&format!(
                "SELECT array_agg(n || ' ' || format_type(t, NULL) ORDER BY i)
                   FROM pg_proc p, unnest(p.proargnames, p.proargtypes::oid[]) WITH ORDINALITY a(n, t, i)
                  WHERE p.oid = 'retention.{f}'::regproc"
            ))
        };
        assert_eq!(
            args("add_policy"),
            with(&["name text", "relation regclass"], &typed),
            "add_policy's arguments"
        );
        assert_eq!(
            args("alter_policy"),
            with(&["name text"], &typed),
            "alter_policy's arguments"
        );
        // Both wrappers pass every field on to the definition.
        for f in ["add_policy", "alter_policy"] {
            let body = Spi::get_one::<String>(&format!(
                "SELECT prosrc FROM pg_proc WHERE oid = 'retention.{f}'::regproc"
            ))
            .unwrap()
            .unwrap();
            for name in &fields {
                assert!(
                    body.contains(&format!("'{name}', {name}")),
                    "{f} does not pass {name}"
                );
            }
        }
        let columns = one_list(
            "SELECT array_agg(attname || ' ' || format_type(atttypid, atttypmod) ORDER BY attnum)
               FROM pg_attribute WHERE attrelid = 'retention.policy_versions'::regclass AND attnum > 0",
        );
        for field in &typed {
            assert!(columns.contains(field), "policy_versions lacks {field}");
        }
        let spec = PolicySpec {
            name: "p".into(),
            relation: 1,
            kind: Kind::Age,
            age_column: None,
            older_than: None,
            scope: None,
            terminal: None,
            group_by: None,
            order_by: None,
            keep: None,
            min_keep: None,
            action: Action::Delete,
            batch_size: 1,
            max_rows_per_run: 1,
            keep_floor: None,
            window_floor: None,
            archive_keep: None,
            lease_table: None,
            lease_key: None,
            lease_expiry: None,
            search_path: None,
            age_expression: None,
            age_table: None,
            age_table_column: None,
            age_pick: None,
            terminal_table: None,
            terminal_table_where: None,
            terminal_table_test: None,
            visible_rows_only: None,
            max_table_rows: None,
            mutable_columns: None,
            mutable_guard: None,
            record_keys: None,
            delete_after: None,
            enabled: true,
        };
        let keys: Vec<String> = serde_json::to_value(&spec)
            .unwrap()
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        let mut expected = with(&["name", "relation", "enabled"], &fields);
        expected.sort();
        let mut keys = keys;
        keys.sort();
        assert_eq!(keys, expected, "PolicySpec's fields");
    }
}
