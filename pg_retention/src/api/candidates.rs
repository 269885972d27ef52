//! `retention.candidates(policy, max_rows)` and `retention.prune(policy, keys)`
//! (engine/candidates.rs).

use crate::catalog::Policy;
use crate::error::OrReport;
use pgrx::prelude::*;

/// The rows the next run of `policy` would delete, in place order: the table (or partition)
/// and the key of each.
#[pg_extern]
#[search_path(pg_catalog, pg_temp)]
fn candidates(
    policy: &str,
    max_rows: default!(i32, 1000),
) -> TableIterator<'static, (name!(relation, String), name!(key, pgrx::JsonB))> {
    let rows = crate::identity::entry(|| {
        let policy = Policy::by_name(policy)?;
        crate::engine::candidates::candidates(&policy, i64::from(max_rows))
    })
    .or_report();
    TableIterator::new(rows)
}

/// Deletes those of `keys` that are still eligible; the rows deleted.
#[pg_extern]
#[search_path(pg_catalog, pg_temp)]
fn _prune(policy: &str, keys: pgrx::JsonB) -> i64 {
    let pruned = crate::identity::entry(|| {
        let policy = Policy::by_name(policy)?;
        crate::engine::candidates::prune(&policy, &keys.0)
    });
    // Nothing of ours may be left to drop when an error is raised (error::raise).
    drop(keys);
    pruned.or_report()
}
