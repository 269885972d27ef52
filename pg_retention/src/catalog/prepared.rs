//! Statements a backend runs for every batch (sweeps, archive claims and prunes), parsed and
//! planned once per text.
//!
//! Planning a catalog query costs more than running it (the per-run fingerprint took 0.35 ms a
//! batch, nearly all of it planning). Plans kept here live in Postgres's plan cache, which
//! re-plans them after any DDL they depend on and checks privileges at every execution.

use crate::error::Result;
use pgrx::datum::DatumWithOid;
use pgrx::prelude::*;
use pgrx::spi::{OwnedPreparedStatement, SpiError};
use pgrx::PgOid;
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

thread_local! {
    /// Plans by statement text and argument types: constant statements, and statements built
    /// at run time (they name a table, its predicates, the holds in force).
    static PLANS: RefCell<HashMap<String, Rc<OwnedPreparedStatement>>> =
        RefCell::new(HashMap::new());
}

/// Most plans [`cached`] keeps; past it, it starts over (a change of holds or policies makes
/// new texts, and the old ones are not run again; the constant ones are prepared again).
const MAX_PLANS: usize = 64;

/// A statement prepared from `sql` (argument types `args`); `mutating` for one that writes.
pub fn prepare(sql: &str, args: &[PgOid], mutating: bool) -> Result<OwnedPreparedStatement> {
    Ok(Spi::connect(|client| {
        let plan = if mutating {
            client.prepare_mut(sql, args)?
        } else {
            client.prepare(sql, args)?
        };
        Ok::<_, SpiError>(plan.keep())
    })?)
}

/// The backend's plan of the statement `sql` with arguments of types `args`, prepared on first
/// use and kept while its text and argument types stay the same. After a few runs Postgres
/// settles on a generic plan, which is also what makes a statement with a large array
/// parameter cheap: a custom plan estimates the selectivity of every element (2 ms for 10,000
/// tids). The types are part of the key: one text over rows of two tables (a hold predicate
/// placed on both) is two plans, each reading its own table's columns.
pub fn cached(sql: &str, args: &[PgOid], mutating: bool) -> Result<Rc<OwnedPreparedStatement>> {
    let types: Vec<u32> = args.iter().map(|a| a.value().to_u32()).collect();
    let key = format!("{sql}\u{0}{types:?}\u{0}{mutating}");
    if let Some(plan) = PLANS.with(|p| p.borrow().get(&key).cloned()) {
        return Ok(plan);
    }
    let plan = Rc::new(prepare(sql, args, mutating)?);
    PLANS.with(|p| {
        let mut plans = p.borrow_mut();
        if plans.len() >= MAX_PLANS {
            plans.clear();
        }
        plans.insert(key, Rc::clone(&plan));
    });
    Ok(plan)
}

/// Runs `f` with the plan cache handing out generic plans only (`plan_cache_mode =
/// force_generic_plan`); the setting comes back after it, raised or not (an error raised inside
/// unwinds through the guard's drop). For statements over an array parameter, whose custom
/// plans see its elements: the plan cache may never settle on a generic plan for them, and then
/// plans them again at every call (see `render/tid_plans.rs` and `catalog/hold.rs`).
pub fn generic_plans<T>(f: impl FnOnce() -> T) -> T {
    // Safety: the backend's own setting, read and written on its one thread; restored by the
    // guard's drop on every path out of `f`.
    let _guard = unsafe {
        let before = pg_sys::plan_cache_mode;
        pg_sys::plan_cache_mode =
            pg_sys::PlanCacheMode::PLAN_CACHE_MODE_FORCE_GENERIC_PLAN as std::ffi::c_int;
        GenericPlans { before }
    };
    f()
}

/// The setting [`generic_plans`] puts back.
struct GenericPlans {
    before: std::ffi::c_int,
}

impl Drop for GenericPlans {
    fn drop(&mut self) {
        // Safety: as in `generic_plans`.
        unsafe { pg_sys::plan_cache_mode = self.before };
    }
}

/// Makes the current transaction commit without waiting for its WAL to reach disk
/// (`synchronous_commit = off` until it ends). For transactions whose loss in a crash loses
/// nothing but work that is done again: see the callers.
pub fn commit_unflushed() -> Result<()> {
    let plan = cached(
        "SELECT pg_catalog.set_config('synchronous_commit', 'off', true)",
        &[],
        false,
    )?;
    run(&plan, &[])?;
    Ok(())
}

/// Runs a plan for its effect; returns the rows it processed.
pub fn run(plan: &OwnedPreparedStatement, args: &[DatumWithOid<'_>]) -> Result<usize> {
    Ok(Spi::connect_mut(|client| {
        client.update(plan, None, args).map(|t| t.len())
    })?)
}

/// The first column of the plan's first row; None when it returns no row or NULL.
pub fn one<T: FromDatum + IntoDatum>(
    plan: &OwnedPreparedStatement,
    args: &[DatumWithOid<'_>],
) -> Result<Option<T>> {
    super::optional_one(plan, args)
}
