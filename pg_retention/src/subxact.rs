//! Internal subtransactions: a step that writes, then checks, undoes its own writes when the
//! check fails, whatever its caller does with the error.

use crate::error::Result;
use pgrx::pg_sys;
use pgrx::pg_sys::panic::CaughtError;
use pgrx::{PgSqlErrorCode, PgTryBuilder};
use std::panic::AssertUnwindSafe;

/// Runs `f` in a subtransaction: released when `f` returns `Ok`, rolled back when it returns
/// `Err` or raises (the error then goes on up). The caller's memory context and resource owner
/// come back either way, as in PL/pgSQL's exception blocks.
pub fn atomically<T>(f: impl FnOnce() -> Result<T>) -> Result<T> {
    subtransaction(f, |_| true, None)
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
    subtransaction(
        || f().map(|v| v.map_or(Attempt::Declined, Attempt::Done)),
        |a| matches!(a, Attempt::Done(_)),
        Some(|| Attempt::Busy),
    )
}

/// Runs `f` in a subtransaction, released when it returns `Ok(r)` with `keep(&r)`, rolled
/// back otherwise. With `busy`, a lock not granted in time is caught: rolled back, and
/// `busy()` returned. Anything else raised rolls back and goes on up.
fn subtransaction<R>(
    f: impl FnOnce() -> Result<R>,
    keep: impl Fn(&R) -> bool,
    busy: Option<fn() -> R>,
) -> Result<R> {
    // Safety: the begin/release/rollback calls pair up on every path below, in the same
    // backend and at the same SPI level (`f` closes every SPI connection it opens); the saved
    // context and owner are the caller's and outlive the subtransaction. A catch handler that
    // rolls back says so, and the paths after `execute` then do nothing more.
    unsafe {
        let restore = begin();
        let mut builder = PgTryBuilder::new(AssertUnwindSafe(|| f().map(|r| (r, false))));
        if let Some(busy) = busy {
            let caught = move |_| {
                pg_sys::RollbackAndReleaseCurrentSubTransaction();
                restore();
                Ok((busy(), true))
            };
            builder = builder
                .catch_when(PgSqlErrorCode::ERRCODE_LOCK_NOT_AVAILABLE, caught)
                .catch_when(PgSqlErrorCode::ERRCODE_T_R_DEADLOCK_DETECTED, caught);
        }
        let result = builder
            .catch_others(|e| {
                pg_sys::RollbackAndReleaseCurrentSubTransaction();
                restore();
                e.rethrow()
            })
            .execute();
        match result {
            Ok((r, true)) => Ok(r),
            Ok((r, false)) if keep(&r) => {
                pg_sys::ReleaseCurrentSubTransaction();
                restore();
                Ok(r)
            }
            other => {
                pg_sys::RollbackAndReleaseCurrentSubTransaction();
                restore();
                other.map(|(r, _)| r)
            }
        }
    }
}

/// Begins an internal subtransaction in the caller's memory context; returns what puts the
/// caller's context and resource owner back after its release or rollback.
///
/// Safety: the caller pairs it with exactly one release or rollback, at the same SPI level.
unsafe fn begin() -> impl Fn() + Copy {
    // SAFETY: the backend's own globals, on its one thread; the pairing is the caller's
    // contract (above).
    let (context, owner) = unsafe {
        let context = pg_sys::CurrentMemoryContext;
        let owner = pg_sys::CurrentResourceOwner;
        pg_sys::BeginInternalSubTransaction(std::ptr::null());
        pg_sys::MemoryContextSwitchTo(context);
        (context, owner)
    };
    move || {
        // SAFETY: called after the release or rollback, when the context and the owner saved
        // above are the caller's again.
        unsafe {
            pg_sys::MemoryContextSwitchTo(context);
            pg_sys::CurrentResourceOwner = owner;
        }
    }
}

/// An error [`or_error`] caught.
#[derive(Debug)]
pub struct Failure {
    /// The error's SQLSTATE (five characters).
    pub condition: String,
    /// Its message.
    pub message: String,
}

impl Failure {
    /// The error again, with its SQLSTATE, to raise once the caller has cleaned up.
    pub fn again(self) -> crate::error::RetentionError {
        crate::error::RetentionError::raised(&self.condition, self.message)
    }
}

/// Runs `f` in a subtransaction, released when it returns `Ok`: an error it returns or raises
/// rolls the subtransaction back and comes back as a [`Failure`], for a caller that records
/// it and goes on. A cancel (57014: a user's cancel request, a statement timeout) is rolled back
/// and goes on up, as PL/pgSQL's `WHEN OTHERS` leaves it; so does a Rust panic.
pub fn or_error<T>(f: impl FnOnce() -> Result<T>) -> Result<std::result::Result<T, Failure>> {
    caught(f, false)
}

/// As [`or_error`], but a cancel is caught too: for the worker, whose steps run under its own
/// timeout (a cancelled step is one that failed; the worker goes on).
pub fn or_error_or_cancel<T>(
    f: impl FnOnce() -> Result<T>,
) -> Result<std::result::Result<T, Failure>> {
    caught(f, true)
}

fn caught<T>(
    f: impl FnOnce() -> Result<T>,
    cancel_too: bool,
) -> Result<std::result::Result<T, Failure>> {
    // Safety: as in `subtransaction`, begin/release/rollback pair up on every path, in the same
    // backend and at the same SPI level, and the caller's context and owner come back.
    // An error raised below keeps its SQLSTATE, also one pgrx does not know.
    let _watch = crate::error_watch::Watch::start();
    unsafe {
        let restore = begin();
        // The flag: whether a handler below has rolled back already.
        let result = PgTryBuilder::new(AssertUnwindSafe(|| match f() {
            Ok(v) => Ok((Ok(v), false)),
            Err(e) => Ok((
                Err(Failure {
                    condition: e.sqlstate().into_owned(),
                    message: e.to_string(),
                }),
                false,
            )),
        }))
        .catch_others(|e| {
            pg_sys::RollbackAndReleaseCurrentSubTransaction();
            restore();
            match e {
                CaughtError::PostgresError(ref r) | CaughtError::ErrorReport(ref r)
                    if !cancel_too
                        && r.sql_error_code() == PgSqlErrorCode::ERRCODE_QUERY_CANCELED =>
                {
                    e.rethrow()
                }
                CaughtError::PostgresError(r) | CaughtError::ErrorReport(r) => Ok((
                    Err(Failure {
                        condition: crate::error_watch::named(r.sql_error_code()),
                        message: r.message().to_owned(),
                    }),
                    true,
                )),
                panic @ CaughtError::RustPanic { .. } => panic.rethrow(),
            }
        })
        .execute();
        match result {
            Ok((Ok(v), _)) => {
                pg_sys::ReleaseCurrentSubTransaction();
                restore();
                Ok(Ok(v))
            }
            Ok((Err(failure), rolled_back)) => {
                if !rolled_back {
                    pg_sys::RollbackAndReleaseCurrentSubTransaction();
                    restore();
                }
                Ok(Err(failure))
            }
            Err(e) => Err(e),
        }
    }
}
