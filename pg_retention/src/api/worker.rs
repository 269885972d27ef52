//! Rust helpers of the worker's SQL surface: waking a worker, whether workers can run at all,
//! and the overdue check of health().

use crate::catalog::{active_holds, Policy, RelationInfo};
use crate::engine::eligible::{Eligibility, Guards};
use crate::error::Result;
use pgrx::prelude::*;

/// Sets the latch of backend `pid` (a database worker) so it wakes now. Returns whether the
/// process was found.
#[pg_extern(security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn _set_latch(pid: i32) -> bool {
    // Safety: BackendPidGetProc takes ProcArrayLock itself and returns NULL for unknown pids;
    // setting another process's latch is how Postgres itself wakes workers.
    unsafe {
        let proc_ = pg_sys::BackendPidGetProc(pid);
        if proc_.is_null() {
            return false;
        }
        pg_sys::SetLatch(&raw mut (*proc_).procLatch);
    }
    true
}

/// Whether the library was preloaded (shared_preload_libraries), so background workers run.
#[pg_extern(security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn _preloaded() -> bool {
    crate::worker::preloaded()
}

fn overdue(policy_id: i64, grace: &str) -> Result<Option<String>> {
    let Some(mut policy) = Policy::by_id(policy_id)? else {
        return Ok(None);
    };
    let Some(window) = policy.spec.older_than.clone() else {
        return Ok(None);
    };
    if policy.spec.age_column.is_none() {
        return Ok(None);
    }
    let rel = match RelationInfo::load(policy.relation, &policy.relation_name) {
        Ok(rel) => rel,
        Err(e) => return Ok(Some(e.to_string())),
    };
    policy.spec.older_than = Spi::get_one_with_args::<String>(
        "SELECT ($1::interval + $2::interval)::text",
        &[window.as_str().into(), grace.into()],
    )?;
    let holds = active_holds(policy.relation)?;
    let elig = Eligibility::new(&policy, &rel, &holds)?;
    let n = elig.count(Guards::ALL)?;
    Ok((n > 0).then(|| format!("{n} deletable rows are older than the window plus a grace of {grace} (backlog past window)")))
}

/// Why a policy is overdue (deletable rows older than its window plus `grace`), or NULL.
#[pg_extern(security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn _overdue(policy_id: i64, grace: &str) -> Option<String> {
    overdue(policy_id, grace).unwrap_or_else(|e| Some(e.to_string()))
}
