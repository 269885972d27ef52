//! The manifest written next to every slice.

use serde::{Deserialize, Serialize};

/// Version of the slice and manifest format written by this crate.
pub const FORMAT_VERSION: u32 = 1;

/// One column of the archived table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ColumnSpec {
    /// Column name.
    pub name: String,
    /// Postgres type name, as `format_type` prints it.
    #[serde(rename = "type")]
    pub type_name: String,
}

/// Describes one slice: where its rows came from and how to check it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// Format version ([`FORMAT_VERSION`]).
    pub format: u32,
    /// Database the rows were in.
    pub database: String,
    /// Qualified table name.
    pub relation: String,
    /// Policy name.
    pub policy: String,
    /// Policy version that claimed the batch.
    pub policy_version: i64,
    /// Batch id.
    pub batch: String,
    /// Columns in attribute order.
    pub columns: Vec<ColumnSpec>,
    /// Primary-key column names, in key order.
    pub key_columns: Vec<String>,
    /// Number of frames.
    pub rows: u64,
    /// Length of the slice in bytes.
    pub bytes: u64,
    /// Lower-case hex BLAKE3 of the slice.
    pub blake3: String,
    /// Oldest age-column value in the slice (text form), if any.
    pub age_min: Option<String>,
    /// Newest age-column value in the slice (text form), if any.
    pub age_max: Option<String>,
    /// When the manifest was made (RFC 3339).
    pub created_at: String,
    /// Key of a slice this one replaces; reserved for rewrites.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub supersedes: Option<String>,
}
