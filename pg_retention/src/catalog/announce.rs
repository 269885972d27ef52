//! Telling the backends that keep a run's context (`engine/run_context.rs`) that a policy or a
//! hold changed. Those tables are ordinary tables, whose writes Postgres announces to nobody; a
//! write here also queues a relcache invalidation of the table written, which every backend
//! receives at its next transaction start. A step whose backend received no invalidation since
//! it read its context knows the context is still current without reading anything.
//!
//! Nothing depends on the announcement for safety: a hold placed after the context was read
//! trips the step's hold fence, which counts hold records in the deleting statement itself.

use crate::catalog::prepared;
use crate::error::{present, Result};
use pgrx::prelude::*;
use pgrx::PgOid;

/// The catalog tables a run's context is read from.
#[derive(Debug, Clone, Copy)]
pub enum Changed {
    /// `retention.policy_ids`: a policy added or dropped.
    PolicyIds,
    /// `retention.policy_versions`: a policy changed.
    PolicyVersions,
    /// `retention.hold_records`: a hold placed.
    HoldRecords,
    /// `retention.hold_lifts`: a hold lifted.
    HoldLifts,
}

impl Changed {
    fn table(self) -> &'static str {
        match self {
            Changed::PolicyIds => "retention.policy_ids",
            Changed::PolicyVersions => "retention.policy_versions",
            Changed::HoldRecords => "retention.hold_records",
            Changed::HoldLifts => "retention.hold_lifts",
        }
    }
}

/// Queues the invalidation that announces a write to `table`; sent when the writing
/// transaction commits, dropped with it when it rolls back.
pub fn changed(table: Changed) -> Result<()> {
    let plan = prepared::cached(
        "SELECT $1::pg_catalog.regclass::pg_catalog.oid",
        &[PgOid::BuiltIn(pg_sys::BuiltinOid::TEXTOID)],
        false,
    )?;
    let oid = present(
        prepared::one::<pg_sys::Oid>(&plan, &[table.table().into()])?,
        "regclass",
    )?;
    // Safety: a relation that exists (the cast above found it); the call only queues a message.
    unsafe { pg_sys::CacheInvalidateRelcacheByRelid(oid) };
    Ok(())
}

/// How many invalidations this backend has received: unchanged since a context was read means
/// that no policy, hold or table definition changed in a transaction committed since (beyond
/// one whose commit is still under way; the hold fence covers that one).
pub fn invalidations_received() -> u64 {
    // Safety: a plain read of this backend's own counter.
    unsafe { pg_sys::SharedInvalidMessageCounter }
}
