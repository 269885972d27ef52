//! The SQLSTATE of an error raised under our own calls, when pgrx's guard cannot name it.
//!
//! An ERROR that PostgreSQL raises inside a call we make through pgrx (a governed table's
//! trigger under a sweep's or an erasure's DELETE, a predicate's function) comes back to us as
//! a Rust panic whose SQLSTATE pgrx maps onto its own list of codes: one of ours (class RT) or
//! a user's own (`ERRCODE = 'U0001'`) becomes XX000. So while an entry point or a contained
//! step runs, an error-context callback of ours notes the SQLSTATE of each error raised below
//! it (PostgreSQL calls every such callback before it jumps), and [`named`] gives it back in
//! place of the XX000.

use crate::error::{Result, RetentionError};
use pgrx::pg_sys;
use pgrx::pg_sys::panic::CaughtError;
use pgrx::{PgSqlErrorCode, PgTryBuilder};
use std::cell::Cell;
use std::ffi::{c_int, c_void};

thread_local! {
    /// The packed SQLSTATE of the last error raised while a [`Watch`] stood.
    static LAST: Cell<Option<c_int>> = const { Cell::new(None) };
    /// How many [`Watch`]es stand: outside any, nothing noted is current.
    static WATCHES: Cell<u32> = const { Cell::new(0) };
}

// Called from inside PostgreSQL's error handling, where pgrx's guard is not wanted: it cannot
// fail.
unsafe extern "C-unwind" {
    fn geterrcode() -> c_int;
}

/// Notes the SQLSTATE of the error being raised, unless it is a notice or warning's (classes
/// 00, 01 and 02: their callbacks run too).
unsafe extern "C-unwind" fn note(_arg: *mut c_void) {
    // Safety: PostgreSQL calls error-context callbacks with an error being reported, which
    // geterrcode reads.
    let code = unsafe { geterrcode() };
    // The class is the first two characters, six bits each, lowest first.
    let class = (code & 0x3F, (code >> 6) & 0x3F);
    if !matches!(class, (0, 0) | (0, 1) | (0, 2)) {
        LAST.with(|l| l.set(Some(code)));
    }
}

/// While it stands, errors raised below are noted (see the module doc). Dropped, it takes its
/// callback off PostgreSQL's stack again.
pub struct Watch {
    callback: Option<Box<pg_sys::ErrorContextCallback>>,
}

impl Watch {
    /// Puts the callback on the stack.
    pub fn start() -> Self {
        LAST.with(|l| l.set(None));
        WATCHES.with(|w| w.set(w.get() + 1));
        // Safety: the backend's own stack of callbacks; the box stays where it is until `drop`
        // takes it off (an error that jumps past us leaves the stack as it was before, as
        // PostgreSQL restores it, and the box leaks).
        unsafe {
            let mut callback = Box::new(pg_sys::ErrorContextCallback {
                previous: pg_sys::error_context_stack,
                callback: Some(note),
                arg: std::ptr::null_mut(),
            });
            pg_sys::error_context_stack = &mut *callback;
            Watch {
                callback: Some(callback),
            }
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        WATCHES.with(|w| w.set(w.get().saturating_sub(1)));
        let Some(callback) = self.callback.take() else {
            return;
        };
        // Safety: as in `start`. Calls take what they put on the stack off again as they
        // return, so ours is on top; should it not be, it stays where it is (leaked), so the
        // stack never points at freed memory.
        unsafe {
            if std::ptr::eq(pg_sys::error_context_stack, &*callback) {
                pg_sys::error_context_stack = callback.previous;
            } else {
                Box::leak(callback);
            }
        }
    }
}

/// The code noted below a standing [`Watch`], if pgrx cannot name it (it would say XX000).
fn unnamed() -> Option<c_int> {
    let internal = PgSqlErrorCode::ERRCODE_INTERNAL_ERROR;
    LAST.with(|l| l.get())
        .filter(|_| WATCHES.with(|w| w.get()) > 0)
        .filter(|&noted| noted != internal as c_int && PgSqlErrorCode::from(noted) == internal)
}

/// The five characters of a packed SQLSTATE.
fn unpacked(packed: c_int) -> String {
    // Safety: unpack_sql_state writes the five characters into a static buffer and returns it.
    unsafe {
        std::ffi::CStr::from_ptr(pg_sys::unpack_sql_state(packed))
            .to_string_lossy()
            .into_owned()
    }
}

/// The five-character SQLSTATE of a caught error whose code pgrx gives as `code`: the code
/// noted below a standing [`Watch`] when pgrx could not name it (it then says XX000), else its
/// own.
pub fn named(code: PgSqlErrorCode) -> String {
    match unnamed() {
        Some(noted) if code == PgSqlErrorCode::ERRCODE_INTERNAL_ERROR => unpacked(noted),
        _ => unpacked(code as c_int),
    }
}

/// Runs `f`; an error PostgreSQL raised below it whose SQLSTATE pgrx could not name (it says
/// XX000: one of class RT, or a user's own code, raised by a trigger or a function under our
/// statements) comes back as that error with its own SQLSTATE, message, detail and hint.
pub fn keeping_codes<T>(f: impl FnOnce() -> Result<T>) -> Result<T> {
    let _watch = Watch::start();
    PgTryBuilder::new(std::panic::AssertUnwindSafe(f))
        .catch_others(|e| match e {
            CaughtError::PostgresError(ref r)
                if r.sql_error_code() == PgSqlErrorCode::ERRCODE_INTERNAL_ERROR =>
            {
                match unnamed() {
                    Some(noted) => Err(RetentionError::Raised {
                        sqlstate: unpacked(noted),
                        message: r.message().to_owned(),
                        detail: r.detail().map(str::to_owned),
                        hint: r.hint().map(str::to_owned),
                    }),
                    None => e.rethrow(),
                }
            }
            other => other.rethrow(),
        })
        .execute()
}
