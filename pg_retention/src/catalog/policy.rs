//! Policies as the engine sees them: the spec an operator gives, and the stored current version.

use crate::catalog::{prepared, query_json, query_json_kept};
use crate::error::{returned_nothing, Result, RetentionError};
use pgrx::pg_sys::BuiltinOid;
use pgrx::prelude::*;
use pgrx::PgOid;
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
    /// Archivers archive them; verified archives are pruned.
    ArchiveThenDelete,
}

impl Action {
    /// Parses the SQL name of an action (22023 for anything else).
    pub fn parse(s: &str) -> Result<Action> {
        match s {
            "delete" => Ok(Action::Delete),
            "archive_then_delete" => Ok(Action::ArchiveThenDelete),
            _ => Err(RetentionError::invalid(
                format!("unknown action \"{s}\""),
                "action must be delete or archive_then_delete.",
                "Use archive_then_delete for rows that must be archived before they go.",
            )),
        }
    }

    /// The action's SQL name.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Delete => "delete",
            Action::ArchiveThenDelete => "archive_then_delete",
        }
    }

    /// The retention class of a table governed with this action (`retention.tables.class`).
    pub fn class(self) -> &'static str {
        match self {
            Action::Delete => "delete",
            Action::ArchiveThenDelete => "archive",
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
    // Arrays of names: a NULL element names nothing (22004, not a decode failure).
    for field in ["group_by", "lease_key", "search_path"] {
        if let Some(items) = definition.get(field).and_then(serde_json::Value::as_array) {
            if items.iter().any(serde_json::Value::is_null) {
                return Err(RetentionError::NullArgument(field));
            }
        }
    }
    Ok(())
}

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
}

impl std::ops::Deref for Policy {
    type Target = PolicySpec;
    fn deref(&self) -> &PolicySpec {
        &self.spec
    }
}

/// A policy's definition fields after `name` and `relation`, with their SQL types: the order
/// of `retention.add_policy`'s and `alter_policy`'s arguments, the fields of [`PolicySpec`]
/// and the columns of `retention.policy_versions`. The statements below are built from this
/// list; `a_policy_field_has_one_definition` fails when the SQL surface, the spec or the
/// catalog disagree with it.
pub const FIELDS: [(&str, &str); 31] = [
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
];

/// `v.<field>` for each field, as [`PolicySpec`] reads it (intervals as text).
fn field_selects() -> String {
    FIELDS
        .iter()
        .map(|(name, ty)| match *ty {
            "interval" => format!("v.{name}::text AS {name}"),
            "regclass" => format!("v.{name}::oid::bigint AS {name}"),
            _ => format!("v.{name}"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The current version of every live policy, as jsonb; callers append the condition on `p`.
fn current() -> &'static str {
    static SQL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SQL.get_or_init(|| {
        format!(
            "SELECT to_jsonb(x) FROM (
                SELECT p.id, p.name, v.version, v.relation::bigint AS relation, v.relation_name,
                       {fields}, v.enabled, v.owner::bigint AS owner
                  FROM retention.policy_ids p
                  CROSS JOIN LATERAL (SELECT * FROM retention.policy_versions pv
                                       WHERE pv.policy_id = p.id ORDER BY pv.version DESC LIMIT 1) v
                 WHERE p.dropped_at IS NULL AND",
            fields = field_selects()
        )
    })
}

/// Another policy on a table, as [`Policy::other_on_tree`] finds it.
#[derive(Deserialize)]
struct Other {
    name: String,
    action: Action,
    kind: Kind,
}

impl Policy {
    /// Whether a live policy is named `name`.
    pub fn name_taken(name: &str) -> Result<bool> {
        Spi::get_one_with_args::<bool>(
            "SELECT EXISTS (SELECT 1 FROM retention.policy_ids WHERE name = $1 AND dropped_at IS NULL)",
            &[name.into()],
        )?
        .ok_or_else(|| returned_nothing("EXISTS"))
    }

    /// A new policy id for `name`.
    pub fn new_id(name: &str) -> Result<i64> {
        Spi::get_one_with_args::<i64>(
            "INSERT INTO retention.policy_ids (name) VALUES ($1) RETURNING id",
            &[name.into()],
        )?
        .ok_or_else(|| returned_nothing("policy insert"))
    }

    /// Marks policy `id` dropped (its versions and ledger stay).
    pub fn mark_dropped(id: i64) -> Result<()> {
        Spi::run_with_args(
            "UPDATE retention.policy_ids SET dropped_at = now() WHERE id = $1",
            &[id.into()],
        )?;
        Ok(())
    }

    /// The first (by name) other live policy on table `relation` (or its partition tree) whose
    /// action is not `action`: the table's class is the other one.
    pub fn other_class(
        relation: u32,
        policy_id: Option<i64>,
        action: Action,
    ) -> Result<Option<(String, Action)>> {
        let other = Self::other_on_tree(
            relation,
            policy_id,
            "p.action <> $3",
            action.as_str().into(),
        )?;
        Ok(other.map(|o| (o.name, o.action)))
    }

    /// Another live delete policy on table `relation` (or its partition tree) that a delete
    /// policy of kind `ranked` (keep_latest, versions) or not cannot share it with: any, for a
    /// ranked one; a ranked one, otherwise. Its name and kind.
    pub fn other_delete_policy(
        relation: u32,
        policy_id: Option<i64>,
        ranked: bool,
    ) -> Result<Option<(String, Kind)>> {
        let other = Self::other_on_tree(
            relation,
            policy_id,
            "p.action = 'delete' AND ($3 OR p.kind IN ('keep_latest', 'versions'))",
            ranked.into(),
        )?;
        Ok(other.map(|o| (o.name, o.kind)))
    }

    /// The first (by name) live policy on table `relation` or its partition tree, other than
    /// `policy_id`, that meets `condition` (SQL over `p`, a row of `retention.policies`, with
    /// `argument` as `$3`).
    fn other_on_tree(
        relation: u32,
        policy_id: Option<i64>,
        condition: &str,
        argument: pgrx::datum::DatumWithOid<'_>,
    ) -> Result<Option<Other>> {
        query_json(
            &format!(
                "SELECT to_jsonb(x) FROM (
                     SELECT p.name, p.action, p.kind FROM retention.policies p
                      WHERE p.relation::oid IN (SELECT retention._tree_of($1::bigint::oid))
                        AND p.id IS DISTINCT FROM $2 AND {condition}
                      ORDER BY p.name LIMIT 1) x"
            ),
            &[i64::from(relation).into(), policy_id.into(), argument],
        )
    }

    /// The live policy named `name`.
    pub fn by_name(name: &str) -> Result<Policy> {
        query_json_kept(
            &format!("{} p.name = $1) x", current()),
            &[PgOid::BuiltIn(BuiltinOid::TEXTOID)],
            &[name.into()],
        )?
        .ok_or_else(|| RetentionError::UnknownPolicy(name.to_owned()))
    }

    /// The live policy with id `id`, if it still exists.
    pub fn by_id(id: i64) -> Result<Option<Policy>> {
        query_json_kept(
            &format!("{} p.id = $1) x", current()),
            &[PgOid::BuiltIn(BuiltinOid::INT8OID)],
            &[id.into()],
        )
    }
}

/// One value that changes whenever anything a batch planned with changes. A table's catalog row
/// gets a new xmin from every ALTER (rename, new schema, columns); foreign keys referencing the
/// table (or a table of its partition tree) live in other tables' rows, so they are listed with
/// their tables' xmin; holds are append-only, so counts of hold records and lifts say whether
/// the holds changed; a hold placed on a partition below the table covers that partition's
/// leaves, listed too. A step reads its own leaf afresh, so dropping a leaf changes nothing here.
const FINGERPRINT: &str = "
SELECT concat_ws('|', p.dropped_at IS NULL, v.version, v.enabled, c.xmin,
         (SELECT string_agg(con.oid || ':' || child.xmin, ',' ORDER BY con.oid)
            FROM pg_catalog.pg_constraint con JOIN pg_catalog.pg_class child ON child.oid = con.conrelid
           WHERE con.confrelid = ANY (tree.rels) AND con.contype = 'f'),
         (SELECT string_agg(h.id || ':' || (SELECT string_agg(b::text, ',' ORDER BY b)
                                              FROM retention._below(h.relation) b),
                            ';' ORDER BY h.id)
            FROM retention.hold_records h
           WHERE h.relation::oid = ANY (tree.rels) AND h.relation::oid <> c.oid
             AND NOT h.relation::oid = ANY (tree.above)),
         (SELECT count(*) FROM retention.hold_records h WHERE h.relation::oid = ANY (tree.rels)),
         (SELECT count(*) FROM retention.hold_lifts l JOIN retention.hold_records h ON h.id = l.hold_id
           WHERE h.relation::oid = ANY (tree.rels)))
  FROM retention.policy_ids p
 CROSS JOIN LATERAL (SELECT pv.version, pv.enabled, pv.relation FROM retention.policy_versions pv
                      WHERE pv.policy_id = p.id ORDER BY pv.version DESC LIMIT 1) v
  LEFT JOIN pg_catalog.pg_class c ON c.oid = v.relation
 CROSS JOIN LATERAL (SELECT ARRAY(SELECT retention._tree_of(c.oid)) AS rels,
                            ARRAY(SELECT a.relid FROM pg_catalog.pg_partition_ancestors(c.oid) a) AS above) tree
 WHERE p.id = $1";

/// The fingerprint of policy `policy_id`, its table and its holds (see [`FINGERPRINT`]); None
/// when there never was such a policy.
pub fn fingerprint(policy_id: i64) -> Result<Option<String>> {
    let plan = prepared::cached(FINGERPRINT, &[PgOid::BuiltIn(BuiltinOid::INT8OID)], false)?;
    prepared::one::<String>(&plan, &[policy_id.into()])
}

/// Appends version `max + 1` of policy `policy_id` with definition `spec`; returns its number.
pub fn append_version(
    policy_id: i64,
    spec: &PolicySpec,
    relation_name: &str,
    change: Change,
    owner: u32,
) -> Result<i32> {
    let args = [
        policy_id.into(),
        i64::from(spec.relation).into(),
        relation_name.into(),
        pgrx::JsonB(serde_json::to_value(spec)?).into(),
        change.as_str().into(),
        crate::catalog::caller().into(),
        i64::from(owner).into(),
    ];
    let names: Vec<&str> = FIELDS.iter().map(|(name, _)| *name).collect();
    let record: Vec<String> = FIELDS
        .iter()
        .map(|(name, ty)| format!("{name} {ty}"))
        .collect();
    let sql = format!(
        "INSERT INTO retention.policy_versions
             (policy_id, version, relation, relation_name, {columns}, enabled, change, changed_by, owner)
         SELECT $1, coalesce((SELECT max(version) FROM retention.policy_versions WHERE policy_id = $1), 0) + 1,
                $2::bigint::oid, $3, {values}, s.enabled, $5, $6, $7::bigint::oid
           FROM jsonb_to_record($4) AS s({record}, enabled boolean)
         RETURNING version",
        columns = names.join(", "),
        values = names
            .iter()
            .map(|n| format!("s.{n}"))
            .collect::<Vec<_>>()
            .join(", "),
        record = record.join(", "),
    );
    Spi::get_one_with_args::<i32>(&sql, &args)?
        .ok_or_else(|| returned_nothing("policy version insert"))
}

#[cfg(any(test, feature = "pg_test"))]
#[pgrx::pg_schema]
mod tests {
    use super::*;

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
