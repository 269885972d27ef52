//! `expire plan | prepare | apply | status`: archives past their policy's `archive_keep` leave
//! the store under the same governance as rows leave tables. A plan is a dry run with zero
//! store writes; prepare writes a create-only tombstone and ledgers the operation; apply, once
//! the quiescence interval has passed, rechecks policy, holds and the exact inventory, deletes
//! only the enumerated keys, proves none remain and marks the archives expired. A retry after
//! a partial apply is confined to the keys of the original set that remain. Nothing an apply
//! decides comes from process memory: the plan is read back from the tombstone, progress from
//! the operation's row in the database (`retention.expire_state`).
//!
//! `plan.rs` builds and writes the plan; `apply.rs` holds the steps that act on it (prepare,
//! apply, status).

use crate::error::Error;
use crate::exit::Exit;
use serde::{Deserialize, Serialize};

mod apply;
mod plan;

pub use apply::{apply, prepare, status};
pub use plan::plan;

/// The most keys one delete request may name (S3's bulk-delete limit).
pub const MAX_KEYS_PER_REQUEST: usize = 1000;

/// The bounds of one operation.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct Bounds {
    /// Objects one operation deletes at most.
    pub max_objects: u64,
    /// Bytes one operation deletes at most.
    pub max_bytes: u64,
    /// Keys per delete request (at most 1,000).
    pub keys_per_request: usize,
    /// Seconds an apply may work (the quiescence interval not counted).
    pub max_active_seconds: u64,
}

/// Reports `e` and returns how the expire step ends.
pub fn failed(e: &Error) -> Exit {
    eprintln!("pg-retention-archiver expire: {e}");
    Exit::of_expire(e)
}
