//! Internal subtransactions: a step that writes, then checks, undoes its own writes when the
//! check fails, whatever its caller does with the error.

use crate::error::Result;
use pgrx::pg_sys;
use pgrx::PgTryBuilder;
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
