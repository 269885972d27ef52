//! Archived rows read back into the database, where predicates (holds, erasures) are evaluated
//! over them. An archiver hands over a slice it read from the store: its bytes are untrusted,
//! so it is checked against the archive's record first. Its rows become rows of the table's
//! current shape: each column of the table now is cast (its type's input function) from the
//! archived column of that name, NULL when the archive has no such column; archived columns
//! the table no longer has are not seen.

use crate::catalog::RelationInfo;
use crate::error::{Result, RetentionError};
use crate::sql_text::ident;

/// The name of the column that numbers the rows, from 1 in slice order.
pub const ORDINAL: &str = "pg_retention frame";

/// An archive's object as the index records it.
pub struct Recorded<'a> {
    /// How messages name it (`of archive 12`).
    pub label: String,
    /// BLAKE3 (hex).
    pub blake3: &'a str,
    /// Rows.
    pub rows: i64,
    /// Bytes.
    pub bytes: i64,
}

/// A slice's rows, ready to be read as a query.
pub struct SideLoaded {
    /// `SELECT <the table's columns>, <ORDINAL> FROM ...`, reading parameter `$1`.
    pub source: String,
    /// The value of `$1`: the rows, each a JSON array of its values' text (frame order).
    pub values: pgrx::JsonB,
    /// How many rows.
    pub rows: usize,
}

/// Checks `slice` against `recorded` and reads its rows (whose manifest names their columns
/// `columns`, in frame order) as rows of `rel`.
pub fn side_load(
    slice: &[u8],
    recorded: &Recorded<'_>,
    columns: &[String],
    rel: &RelationInfo,
) -> Result<SideLoaded> {
    let rows = pg_retention_format::verify_slice(
        slice,
        recorded.blake3,
        recorded.rows.max(0) as u64,
        recorded.bytes.max(0) as u64,
    )
    .map_err(|e| RetentionError::ArchiveMismatch {
        batch: recorded.label.clone(),
        reason: format!("the slice given is not the archived one: {e}"),
    })?;
    let mut values = Vec::with_capacity(rows.len());
    for row in &rows {
        if row.columns.len() != columns.len() {
            return Err(RetentionError::ArchiveMismatch {
                batch: recorded.label.clone(),
                reason: format!(
                    "a row has {} values, the manifest names {} columns",
                    row.columns.len(),
                    columns.len()
                ),
            });
        }
        values.push(serde_json::Value::from(row.columns.clone()));
    }
    if rel.columns.iter().any(|c| c.name == ORDINAL) {
        return Err(RetentionError::invalid(
            format!("{} has a column named {ORDINAL}", rel.qualified),
            "Archived rows are numbered in a column of that name when they are read back.",
            "Rename the column.",
        ));
    }
    let select: Vec<String> = rel
        .columns
        .iter()
        .map(|c| match columns.iter().position(|a| *a == c.name) {
            Some(i) => format!("(o.r->>{i})::{} AS {}", c.type_name, ident(&c.name)),
            None => format!("NULL::{} AS {}", c.type_name, ident(&c.name)),
        })
        .collect();
    Ok(SideLoaded {
        source: format!(
            "SELECT {}, o.n AS {} FROM jsonb_array_elements($1) WITH ORDINALITY o(r, n)",
            select.join(", "),
            ident(ORDINAL)
        ),
        values: pgrx::JsonB(serde_json::Value::Array(values)),
        rows: rows.len(),
    })
}
