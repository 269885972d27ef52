//! The statement timeout, armed by hand where PostgreSQL does not arm it: a background worker
//! runs no client statements, so `statement_timeout` never starts there by itself. pgrx does not
//! bind `utils/timeout.h`; these are its three functions, and `STATEMENT_TIMEOUT`'s place in
//! `TimeoutId` (the fourth, on PostgreSQL 15 and 18 alike).

use pgrx::pg_sys;

/// `STATEMENT_TIMEOUT` of `enum TimeoutId`.
const STATEMENT_TIMEOUT: u32 = 3;

unsafe extern "C-unwind" {
    fn enable_timeout_after(id: u32, delay_ms: i32);
    fn disable_timeout(id: u32, keep_indicator: bool);
    fn get_timeout_indicator(id: u32, reset_indicator: bool) -> bool;
}

/// Runs `f` with the statement timeout armed for `ms` milliseconds: past it, the statement
/// under way is cancelled (57014, "canceling statement due to statement timeout"), as in a
/// client's session. A timeout that fires after `f` returned cancels nothing.
pub fn within<T>(ms: i32, f: impl FnOnce() -> T) -> T {
    // Safety: arms the timeout every backend registers at start (InitPostgres); its handler
    // only sets flags that the next CHECK_FOR_INTERRUPTS acts on.
    unsafe { enable_timeout_after(STATEMENT_TIMEOUT, ms) };
    let result = f();
    // Safety: as above; disarms it, and drops a cancel it asked for after `f` was done.
    unsafe {
        disable_timeout(STATEMENT_TIMEOUT, false);
        if get_timeout_indicator(STATEMENT_TIMEOUT, true) {
            pg_sys::QueryCancelPending = 0;
        }
    }
    result
}
