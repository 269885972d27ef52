//! What the engine needs to know about a governed table, read from the system catalogs.

use crate::catalog::query_json_kept;
use crate::error::{Result, RetentionError};
use crate::sql_text::ident;
use serde::Deserialize;

/// One column.
#[derive(Debug, Clone, Deserialize)]
pub struct Column {
    /// Column name.
    pub name: String,
    /// Type as `format_type` prints it.
    #[serde(rename = "type")]
    pub type_name: String,
}

/// A foreign key from another table (or this one) that references this table, a partitioned
/// table it is a partition of, or a partition of it: only the constraint as declared, not the
/// copies PostgreSQL keeps per partition (the referencing table is read with its partitions).
#[derive(Debug, Clone, Deserialize)]
pub struct Reference {
    /// Referencing table, quoted and always schema-qualified.
    pub child: String,
    /// Its oid.
    pub child_oid: u32,
    /// Referencing columns.
    pub child_cols: Vec<String>,
    /// Referenced columns of this table, in the same order.
    pub parent_cols: Vec<String>,
    /// What deleting a referenced row does (`pg_constraint.confdeltype`: `a` no action, `r`
    /// restrict, `c` cascade, `n` set null, `d` set default).
    #[serde(default)]
    pub on_delete: String,
}

impl Reference {
    /// Whether PostgreSQL itself refuses to delete a row this key references (NO ACTION,
    /// RESTRICT), instead of changing or deleting the referencing rows.
    pub fn refuses_delete(&self) -> bool {
        matches!(self.on_delete.as_str(), "a" | "r")
    }
}

/// Where a rendered row's batch key is.
#[derive(Debug, Clone)]
pub enum KeyAt {
    /// These columns (positions among the table's), the primary key.
    Columns(Vec<usize>),
    /// The row's place, rendered as a tid's text: a table without a primary key.
    Place,
}

/// A governed table.
#[derive(Debug, Clone, Deserialize)]
pub struct RelationInfo {
    /// Oid.
    pub oid: u32,
    /// Quoted, always schema-qualified name: statements that evaluate predicates run with
    /// `search_path = pg_catalog, pg_temp`, where an unqualified name would not be found.
    pub qualified: String,
    /// `pg_class.relkind`.
    pub relkind: String,
    /// Columns in attribute order.
    pub columns: Vec<Column>,
    /// Primary-key columns in key order (empty when there is none).
    #[serde(default)]
    pub pk: Vec<String>,
    /// Foreign keys referencing this table.
    #[serde(default)]
    pub referenced_by: Vec<Reference>,
}

const DESCRIBE: &str = "
SELECT jsonb_build_object(
    'oid', c.oid::bigint,
    'qualified', (SELECT format('%I.%I', n.nspname, c.relname) FROM pg_namespace n WHERE n.oid = c.relnamespace),
    'relkind', c.relkind::text,
    'columns', (SELECT coalesce(jsonb_agg(jsonb_build_object(
                        'name', a.attname, 'type', format_type(a.atttypid, a.atttypmod)) ORDER BY a.attnum), '[]')
                  FROM pg_attribute a
                 WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped),
    'pk', (SELECT coalesce(jsonb_agg(a.attname ORDER BY k.ord), '[]')
             FROM pg_index i
             CROSS JOIN LATERAL unnest(i.indkey::int2[]) WITH ORDINALITY k(attnum, ord)
             JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum
            WHERE i.indrelid = c.oid AND i.indisprimary),
    'referenced_by', (SELECT coalesce(jsonb_agg(jsonb_build_object(
                        'child', (SELECT format('%I.%I', n.nspname, cc.relname) FROM pg_class cc JOIN pg_namespace n ON n.oid = cc.relnamespace
                                   WHERE cc.oid = con.conrelid),
                        'child_oid', con.conrelid::bigint,
                        'child_cols', (SELECT jsonb_agg(a.attname ORDER BY k.ord)
                                         FROM unnest(con.conkey) WITH ORDINALITY k(attnum, ord)
                                         JOIN pg_attribute a ON a.attrelid = con.conrelid AND a.attnum = k.attnum),
                        'parent_cols', (SELECT jsonb_agg(a.attname ORDER BY k.ord)
                                          FROM unnest(con.confkey) WITH ORDINALITY k(attnum, ord)
                                          JOIN pg_attribute a ON a.attrelid = con.confrelid AND a.attnum = k.attnum),
                        'on_delete', con.confdeltype::text)
                        ORDER BY con.oid), '[]')
                        FROM pg_constraint con
                       WHERE con.contype = 'f' AND con.conparentid = 0
                         AND con.confrelid IN (SELECT retention._tree_of(c.oid))))
  FROM pg_class c WHERE c.oid = $1::bigint::oid";

/// The table with oid `oid` (named `name` for messages) is gone.
fn gone(oid: u32, name: &str) -> RetentionError {
    RetentionError::WrongState {
        message: format!("table {name} (oid {oid}) no longer exists"),
        hint: "Drop the policy, or recreate the table and re-register the policy.".into(),
    }
}

impl RelationInfo {
    /// Describes the table with oid `oid`, or says it no longer exists.
    pub fn load(oid: u32, name_for_errors: &str) -> Result<RelationInfo> {
        query_json_kept(
            DESCRIBE,
            &[pgrx::PgOid::BuiltIn(pgrx::pg_sys::BuiltinOid::INT8OID)],
            &[i64::from(oid).into()],
        )?
        .ok_or_else(|| gone(oid, name_for_errors))
    }

    /// The blocks of the table with oid `oid` now (its main fork's size in pages).
    pub fn blocks(oid: u32) -> Result<u64> {
        let n = crate::catalog::optional_one::<i64, _>(
            "SELECT (pg_catalog.pg_relation_size($1::bigint::oid)
                     / pg_catalog.current_setting('block_size')::int)::bigint",
            &[i64::from(oid).into()],
        )?;
        Ok(crate::error::present(n, "pg_relation_size")?.max(0) as u64)
    }

    /// The quoted, qualified name of the table with oid `oid`, if it still exists.
    pub fn name_if_present(oid: u32) -> Result<Option<String>> {
        crate::catalog::optional_one::<String, _>(
            "SELECT c.oid::regclass::text FROM pg_catalog.pg_class c WHERE c.oid = $1::bigint::oid",
            &[i64::from(oid).into()],
        )
    }

    /// Refuses (42501) a table of pg_retention's own catalog: its records are the product's
    /// evidence, never governed, held or erased through it.
    pub fn ensure_not_catalog(&self) -> Result<()> {
        let ours = crate::catalog::optional_one::<bool, _>(
            "SELECT c.relnamespace = 'retention'::regnamespace FROM pg_catalog.pg_class c
              WHERE c.oid = $1::bigint::oid",
            &[i64::from(self.oid).into()],
        )?;
        if ours == Some(true) {
            return Err(RetentionError::Privilege {
                message: format!("{} is part of pg_retention's catalog", self.qualified),
                hint: "Policies, holds and erasures apply to application tables; the catalog's records are never changed or removed.".into(),
            });
        }
        Ok(())
    }

    /// Whether the table is partitioned: its rows are in its partitions.
    pub fn partitioned(&self) -> bool {
        self.relkind == "p"
    }

    /// What a read of every row of the table scans: the table alone (`ONLY`), or a
    /// partitioned table with its partitions.
    pub fn all_rows(&self) -> String {
        if self.partitioned() {
            self.qualified.clone()
        } else {
            format!("ONLY {}", self.qualified)
        }
    }

    /// The column named `name`.
    pub fn column(&self, name: &str) -> Result<&Column> {
        self.columns.iter().find(|c| c.name == name).ok_or_else(|| {
            RetentionError::UndefinedColumn {
                relation: self.qualified.clone(),
                column: name.to_owned(),
            }
        })
    }

    /// The columns of alias `t` in attribute order (a frame's columns).
    pub fn column_list(&self) -> String {
        self.columns
            .iter()
            .map(|c| format!("t.{}", ident(&c.name)))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Where an archive batch's rows' keys are in a rendered row: the primary-key columns, or
    /// for a table without one the row's place (its ctid at claim time, which the prune's proof
    /// pins to the same version by xmin and relfilenode).
    pub fn key_at(&self) -> Result<KeyAt> {
        if self.pk.is_empty() {
            return Ok(KeyAt::Place);
        }
        self.pk
            .iter()
            .map(|k| {
                self.columns
                    .iter()
                    .position(|c| &c.name == k)
                    .ok_or_else(|| RetentionError::UndefinedColumn {
                        relation: self.qualified.clone(),
                        column: k.clone(),
                    })
            })
            .collect::<Result<Vec<usize>>>()
            .map(KeyAt::Columns)
    }

    /// How many values a batch key has.
    pub fn key_arity(&self) -> usize {
        self.pk.len().max(1)
    }

    /// The names a slice's manifest gives its rows' key values.
    pub fn key_names(&self) -> Vec<String> {
        if self.pk.is_empty() {
            vec!["ctid".into()]
        } else {
            self.pk.clone()
        }
    }

    /// The batch key of alias `t` in key order (for ORDER BY and RETURNING): the primary key,
    /// or the place of a row of a table without one.
    pub fn key_order(&self) -> String {
        if self.pk.is_empty() {
            return "t.ctid".into();
        }
        self.pk
            .iter()
            .map(|c| format!("t.{}", ident(c)))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The primary key of the row aliased `alias` as a jsonb array of its values' texts (the
    /// form `retention.candidates` and recorded keys use).
    pub fn key_json(&self, alias: &str) -> String {
        let cols: Vec<String> = self
            .pk
            .iter()
            .map(|c| format!("{alias}.{}::text", ident(c)))
            .collect();
        format!("jsonb_build_array({})", cols.join(", "))
    }

    /// Compares the batch key of alias `t` with the text[] key `key` (each element back
    /// through its column type's input) as one row comparison: `>` is "after it" in the key's
    /// own order, which an index (or, by place, a TID range) scan can start from.
    pub fn key_compare(&self, op: &str, key: &str) -> Result<String> {
        Ok(format!(
            "({}) {op} {}",
            self.key_order(),
            self.key_row(key)?
        ))
    }

    /// Compares two text[] keys `left` and `right` as rows of the primary key's types.
    pub fn key_row_compare(&self, left: &str, op: &str, right: &str) -> Result<String> {
        Ok(format!(
            "{} {op} {}",
            self.key_row(left)?,
            self.key_row(right)?
        ))
    }

    /// The text[] key `key` as a row of the primary key's types, each element back through
    /// its column type's input (to compare or order keys by).
    pub fn key_row(&self, key: &str) -> Result<String> {
        if self.pk.is_empty() {
            return Ok(format!("(({key})[1]::pg_catalog.tid)"));
        }
        let items = self
            .pk
            .iter()
            .enumerate()
            .map(|(i, c)| Ok(format!("({key})[{}]::{}", i + 1, self.column(c)?.type_name)))
            .collect::<Result<Vec<String>>>()?;
        Ok(format!("({})", items.join(", ")))
    }
}
