//! Bounds on size-like arguments: no argument sizes an allocation or a batch without a cap
//! (docs/sql-reference.md, "Limits").

use crate::error::{Result, RetentionError};

/// The most rows one batch may hold: a claim's `max_rows`, a policy's `batch_size`, an
/// erasure's `batch_rows`. A batch is one transaction and, for archives, one slice in memory.
pub const MAX_BATCH_ROWS: i64 = 1_000_000;

/// Refuses (22023) a row count outside `1..=MAX_BATCH_ROWS` for argument `name`.
pub fn batch_rows(name: &str, value: i64) -> Result<()> {
    if (1..=MAX_BATCH_ROWS).contains(&value) {
        return Ok(());
    }
    Err(RetentionError::invalid(
        format!("{name} must be between 1 and {MAX_BATCH_ROWS}, got {value}"),
        "A batch is one transaction (and, for an archive, one slice held in memory): it is bounded.",
        format!("Pass {name} => 10000 or so; at most {MAX_BATCH_ROWS}."),
    ))
}
