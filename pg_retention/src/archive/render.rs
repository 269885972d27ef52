//! Rendering rows into slice frames. Every value is its type's text output (`format('%s', v)`
//! calls the output function), NULL stays NULL, columns in attribute order, rows in primary-key
//! order. The SQL wrappers pin TimeZone, DateStyle, IntervalStyle, extra_float_digits and
//! bytea_output so the same rows render to the same bytes in any session.

use crate::catalog::RelationInfo;
use crate::error::Result;
use crate::sql_text::ident;
use pg_retention_format::{encode_frame, Row};
use pgrx::prelude::*;

/// The text output of column `col` of alias `t`, NULL for NULL.
fn text_of(col: &str) -> String {
    let c = ident(col);
    format!("CASE WHEN num_nulls(t.{c}) = 1 THEN NULL ELSE format('%s', t.{c}) END")
}

/// `ARRAY[...]` of the primary-key values of alias `t` as text: the key of a claimed row.
pub fn key_array(rel: &RelationInfo) -> String {
    format!(
        "ARRAY[{}]::text[]",
        rel.pk
            .iter()
            .map(|c| text_of(c))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

fn columns_array(rel: &RelationInfo) -> String {
    format!(
        "ARRAY[{}]::text[]",
        rel.columns
            .iter()
            .map(|c| text_of(&c.name))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// The primary key of alias `t` in key order (for ORDER BY).
pub fn pk_order(rel: &RelationInfo) -> String {
    rel.pk
        .iter()
        .map(|c| format!("t.{}", ident(c)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Compares the primary key of alias `t` with the text[] key `key` (each element back through
/// its column type's input) as one row comparison: `=` matches a batch key, `>` is "after it"
/// in the primary key's own order, which an index range scan can start from.
fn key_compare(rel: &RelationInfo, op: &str, key: &str) -> Result<String> {
    let mut left = Vec::new();
    let mut right = Vec::new();
    for (i, c) in rel.pk.iter().enumerate() {
        let ty = &rel.column(c)?.type_name;
        left.push(format!("t.{}", ident(c)));
        right.push(format!("({key})[{}]::{ty}", i + 1));
    }
    Ok(format!("({}) {op} ({})", left.join(", "), right.join(", ")))
}

/// Matches alias `t` with the batch key `k.key`.
pub fn key_match(rel: &RelationInfo) -> Result<String> {
    key_compare(rel, "=", "k.key")
}

/// True when the primary key of alias `t` comes after the key in text[] parameter `param`.
pub fn key_after(rel: &RelationInfo, param: &str) -> Result<String> {
    key_compare(rel, ">", &format!("{param}::text[]"))
}

/// Rows of batch `batch` (joined through its keys), in key order; `lock` takes row locks.
pub fn batch_rows(rel: &RelationInfo, batch: &str, lock: bool) -> Result<Vec<Row>> {
    let sql = format!(
        "SELECT {key}, {cols} FROM ONLY {table} t
           JOIN retention.batch_keys k ON k.batch_id = $1::uuid AND {matches}
          ORDER BY {order} {lock}",
        key = key_array(rel),
        cols = columns_array(rel),
        table = rel.qualified,
        matches = key_match(rel)?,
        order = pk_order(rel),
        lock = if lock { "FOR UPDATE OF t" } else { "" },
    );
    select_rows(&sql, &[batch.into()])
}

/// Up to `limit` rows of the table matching `condition` (over alias `t`).
pub fn sample_rows(rel: &RelationInfo, condition: &str, limit: i64) -> Result<Vec<Row>> {
    let sql = format!(
        "SELECT {key}, {cols} FROM ONLY {table} t WHERE {condition} LIMIT {limit}",
        key = key_array(rel),
        cols = columns_array(rel),
        table = rel.qualified,
    );
    select_rows(&sql, &[])
}

fn select_rows(sql: &str, args: &[pgrx::datum::DatumWithOid<'_>]) -> Result<Vec<Row>> {
    let rows = Spi::connect_mut(|client| {
        client
            .update(sql, None, args)?
            .map(|r| {
                Ok(Row {
                    key: r.get::<Vec<Option<String>>>(1)?.unwrap_or_default(),
                    columns: r.get::<Vec<Option<String>>>(2)?.unwrap_or_default(),
                })
            })
            .collect::<Result<Vec<Row>, pgrx::spi::SpiError>>()
    })?;
    Ok(rows)
}

/// Frames of `rows`, each complete with its length prefix.
pub fn frames(rows: &[Row]) -> Result<Vec<Vec<u8>>> {
    rows.iter()
        .map(|r| encode_frame(r).map_err(|e| crate::error::RetentionError::Internal(e.to_string())))
        .collect()
}
