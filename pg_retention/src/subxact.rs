//! Internal subtransactions: a step that writes, then checks, undoes its own writes when the
//! check fails, whatever its caller does with the error.

use crate::error::Result;
use pgrx::pg_sys;
use pgrx::{PgSqlErrorCode, PgTryBuilder};
use std::panic::AssertUnwindSafe;

/// Runs `f` in a subtransaction: released when `f` returns `Ok`, rolled back when it returns
/// `Err` or raises (the error then goes on up). The caller's memory context and resource owner
/// come back either way, as in PL/pgSQL's exception blocks.
pub fn atomically<T>(f: impl FnOnce() -> Result<T>) -> Result<T> {
    // Safety: the begin/release/rollback calls pair up on every path below, in the same
    // backend and at the same SPI level (`f` closes every SPI connection it opens); the saved
    // context and owner are the caller's and outlive the subtransaction.
    unsafe {
        let context = pg_sys::CurrentMemoryContext;
        let owner = pg_sys::CurrentResourceOwner;
        let restore = move || {
            pg_sys::MemoryContextSwitchTo(context);
            pg_sys::CurrentResourceOwner = owner;
        };
        pg_sys::BeginInternalSubTransaction(std::ptr::null());
        pg_sys::MemoryContextSwitchTo(context);
        let result = PgTryBuilder::new(AssertUnwindSafe(f))
            .catch_others(|e| {
                pg_sys::RollbackAndReleaseCurrentSubTransaction();
                restore();
                e.rethrow()
            })
            .execute();
        match result {
            Ok(value) => {
                pg_sys::ReleaseCurrentSubTransaction();
                restore();
                Ok(value)
            }
            Err(e) => {
                pg_sys::RollbackAndReleaseCurrentSubTransaction();
                restore();
                Err(e)
            }
        }
    }
}

/// What [`unless_busy`] did.
pub enum Attempt<T> {
    /// `f` returned a value; its writes and locks stay.
    Done(T),
    /// `f` declined (returned None); its writes and locks are undone.
    Declined,
    /// A lock `f` needed was not granted in time (`lock_timeout`, or a deadlock); undone.
    Busy,
}

/// Runs `f` in a subtransaction that is kept only when `f` returns `Ok(Some(_))`: declining,
/// an `Err`, or a lock that is not granted (55P03, 40P01) roll it back with every lock it took.
/// Any other error raised inside goes on up, as in [`atomically`].
pub fn unless_busy<T>(f: impl FnOnce() -> Result<Option<T>>) -> Result<Attempt<T>> {
    // Safety: as in `atomically`; the catch handlers roll back and restore, and the paths
    // after `execute` handle only what no handler has.
    unsafe {
        let context = pg_sys::CurrentMemoryContext;
        let owner = pg_sys::CurrentResourceOwner;
        let restore = move || {
            pg_sys::MemoryContextSwitchTo(context);
            pg_sys::CurrentResourceOwner = owner;
        };
        pg_sys::BeginInternalSubTransaction(std::ptr::null());
        pg_sys::MemoryContextSwitchTo(context);
        let busy = move |_| {
            pg_sys::RollbackAndReleaseCurrentSubTransaction();
            restore();
            Ok(Attempt::Busy)
        };
        let result = PgTryBuilder::new(AssertUnwindSafe(|| {
            f().map(|v| match v {
                Some(v) => Attempt::Done(v),
                None => Attempt::Declined,
            })
        }))
        .catch_when(PgSqlErrorCode::ERRCODE_LOCK_NOT_AVAILABLE, busy)
        .catch_when(PgSqlErrorCode::ERRCODE_T_R_DEADLOCK_DETECTED, busy)
        .catch_others(|e| {
            pg_sys::RollbackAndReleaseCurrentSubTransaction();
            restore();
            e.rethrow()
        })
        .execute();
        match result {
            Ok(Attempt::Busy) => Ok(Attempt::Busy),
            Ok(Attempt::Done(value)) => {
                pg_sys::ReleaseCurrentSubTransaction();
                restore();
                Ok(Attempt::Done(value))
            }
            Ok(Attempt::Declined) | Err(_) => {
                pg_sys::RollbackAndReleaseCurrentSubTransaction();
                restore();
                result
            }
        }
    }
}
