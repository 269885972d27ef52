//! Reading and appending the catalog. Every `retention.*` table has one home here (and its DDL
//! in `sql/catalog.sql` or `sql/archive.sql`): policies and their versions (`policy/`), holds
//! and lifts (`hold.rs`), archive batches, their key sets and archive records (`batch.rs`), the
//! ledger (`ledger.rs`), window links (`link.rs`), pull consumers (`consumer.rs`), the WAL
//! budget of paced sweeps (`wal_budget.rs`), erasures that reach archives (`supersession.rs`) and the tables' pages (`scrub.rs`),
//! the archiver's expire operations (`expire_operation.rs`),
//! leaves detached to be dropped whole (`retiring.rs`), the gauges metrics() keeps between
//! scrapes (`gauges.rs`).
//! `tree.rs` reads a table's partition tree without locks (`retention._below`, `_tree_of`).
//! `announce.rs` tells the backends that keep a run's context that a policy or hold changed.
//! `relation.rs` describes governed tables from the system catalogs. The worker's state
//! (`worker_state.rs`) is written through the worker's SQL functions in `sql/api/runs.sql`.

pub mod announce;
pub mod archived_rows;
pub mod batch;
pub mod class;
pub mod consumer;
pub mod expire_operation;
pub mod gauges;
pub mod hold;
pub mod ledger;
pub mod link;
pub mod partition;
pub mod policy;
pub mod prepared;
pub mod relation;
pub mod retiring;
pub mod scrub;
pub mod supersession;
pub mod tree;
pub mod wal_budget;
pub mod worker_state;

pub use batch::{ArchiveRecord, Batch, BatchState, ClaimedRows, NewBatch, StoredArchive, Texts};
pub use hold::{active_holds, Hold, HoldFence};
pub use ledger::{LedgerEntry, LedgerMethod};
pub use partition::Leaf;
pub use policy::{Action, Change, Kind, Policy, PolicySpec};
pub use relation::{KeyAt, Reference, RelationInfo};

use crate::error::{Result, RetentionError};
use pgrx::prelude::*;
use serde::de::DeserializeOwned;

/// Runs a statement that returns one jsonb value (or no row) and decodes it.
pub fn query_json<T: DeserializeOwned>(
    sql: &str,
    args: &[pgrx::datum::DatumWithOid<'_>],
) -> Result<Option<T>> {
    decode(optional_one::<pgrx::JsonB, _>(sql, args)?)
}

/// [`query_json`] for a constant statement read often (a policy, a table's description, its
/// holds): planned once per backend and kept (`prepared::cached`), its arguments of `types`.
pub fn query_json_kept<T: DeserializeOwned>(
    sql: &str,
    types: &[pgrx::PgOid],
    args: &[pgrx::datum::DatumWithOid<'_>],
) -> Result<Option<T>> {
    let plan = prepared::cached(sql, types, false)?;
    decode(optional_one::<pgrx::JsonB, _>(&*plan, args)?)
}

fn decode<T: DeserializeOwned>(value: Option<pgrx::JsonB>) -> Result<Option<T>> {
    match value {
        None => Ok(None),
        Some(j) if j.0.is_null() => Ok(None),
        Some(j) => serde_json::from_value(j.0).map(Some).map_err(|e| {
            let what = std::any::type_name::<T>();
            // Which read failed, so a catalog row that decodes wrongly can be found.
            RetentionError::Internal(format!("catalog decode of {what}: {e}"))
        }),
    }
}

/// The first column of the first row of a statement (SQL text or a kept plan), or None when
/// it returns no row or NULL. Read-write SPI: some callers lock (FOR UPDATE) or modify
/// (UPDATE ... RETURNING).
pub fn optional_one<T, Q>(query: Q, args: &[pgrx::datum::DatumWithOid<'_>]) -> Result<Option<T>>
where
    T: pgrx::datum::FromDatum + pgrx::datum::IntoDatum,
    Q: for<'conn> pgrx::spi::Query<'conn>,
{
    Ok(Spi::connect_mut(|client| {
        let table = client.update(query, Some(1), args)?;
        if table.is_empty() {
            Ok::<_, pgrx::spi::SpiError>(None)
        } else {
            table.first().get_one::<T>()
        }
    })?)
}

/// The caller of the running entry point: the role in force when it was called.
pub use crate::identity::{caller, caller_oid};
