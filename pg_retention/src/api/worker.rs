//! Rust helpers of the worker's SQL surface: asking the launcher for a visit, whether workers can run at all,
//! and the overdue check of health().

use crate::catalog::{active_holds, Policy, RelationInfo};
use crate::engine::eligible::{Eligibility, Guards};
use crate::error::Result;
use crate::gucs;
use crate::worker::board::{self, Request};
use pgrx::prelude::*;

/// This database's name.
fn this_database() -> String {
    // Safety: MyDatabaseId is set in every backend connected to a database.
    let name = unsafe { pg_sys::get_database_name(pg_sys::MyDatabaseId) };
    if name.is_null() {
        return String::new();
    }
    // Safety: a palloc'd, NUL-terminated name.
    unsafe { std::ffi::CStr::from_ptr(name) }
        .to_string_lossy()
        .into_owned()
}

/// Whether `database` is one the workers serve: listed in `pg_retention.databases`, or `'*'`.
fn served(database: &str) -> bool {
    gucs::all_databases() || gucs::databases().iter().any(|d| d == database)
}

/// Whether this database is one the workers serve (`health()`, `pg_retention_worker_up`).
#[pg_extern(security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn _served() -> bool {
    served(&this_database())
}

/// Tells the launcher this database wants a visit now (`retention.wake()`). False, with a
/// warning saying why, when no worker can come: not preloaded, disabled, the database not
/// served, no launcher, or the launcher's board full.
#[pg_extern(security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn _wake_launcher() -> bool {
    let database = this_database();
    let why = if !crate::worker::preloaded() {
        "pg_retention is not in shared_preload_libraries"
    } else if !gucs::enabled() {
        "pg_retention.enabled is off"
    } else if !served(&database) {
        "the database is not in pg_retention.databases"
    } else if board::launcher_pid().is_none() {
        "the pg_retention launcher is not running"
    } else if !board::post(&database, Request::Wake) {
        "the launcher's board of requests is full"
    } else {
        return true;
    };
    warning!("pg_retention: no worker will visit database \"{database}\" now: {why}");
    false
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
    if crate::engine::clock::declared(&policy.spec) == 0 {
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
