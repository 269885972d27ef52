//! What an `age` batch statement reports besides its row count, through backend-local state
//! (the statement runs in the backend that built it), so it needs no RETURNING:
//!
//! * the row quota of a block-range batch: its DELETE calls `retention._batch_quota` for each row
//!   that passed its other conditions; the first `limit` calls with the statement's token say
//!   yes, and the last row let through becomes the batch's watermark;
//! * the bound of an index batch: its DELETE looks up once the age of the first eligible row
//!   past the batch and hands it to `retention._batch_bound`.

use crate::error::OrReport;
use pgrx::prelude::*;
use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicI64, Ordering};

/// (statement token, rows accepted, last accepted tid as (block, item)).
type Quota = (i64, i64, Option<(u64, u64)>);

thread_local! {
    /// The quota of the batch statement running in this backend.
    static QUOTA: Cell<Quota> = const { Cell::new((i64::MIN, 0, None)) };
}

/// A token no earlier batch statement of this backend used.
pub fn next_token() -> i64 {
    static NEXT: AtomicI64 = AtomicI64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// True for the first `limit` rows offered with the same `token`: bounds an `age` batch's
/// DELETE to `limit` rows, and remembers the last row it let through (the batch's watermark).
/// Volatile, so it is called for each row, after the row's other conditions.
#[pg_extern(volatile, parallel_unsafe)]
fn _batch_quota(limit: i64, token: i64, row: pg_sys::ItemPointerData) -> bool {
    QUOTA.with(|q| {
        let (t, used, last) = q.get();
        let (used, last) = if t == token { (used, last) } else { (0, None) };
        if used < limit {
            q.set((token, used + 1, Some(crate::tid::of(row))));
            true
        } else {
            q.set((token, used, last));
            false
        }
    })
}

/// The last row `_batch_quota` let through for `token`.
pub fn last(token: i64) -> Option<(u64, u64)> {
    QUOTA.with(|q| {
        let (t, _, last) = q.get();
        if t == token {
            last
        } else {
            None
        }
    })
}

thread_local! {
    /// The bound of the index batch statement that ran last in this backend: (statement token,
    /// age of the first eligible row past the batch in the type's text form, if there is one).
    static BOUND: RefCell<Option<(i64, Option<String>)>> = const { RefCell::new(None) };
}

/// Records the bound of an index batch: the age of the first eligible row past the batch's
/// `n`, or NULL when no more than `n` eligible rows are left. Called once per statement, from
/// the bound's subquery; always true.
#[pg_extern(volatile, parallel_unsafe)]
fn _batch_bound(token: Option<i64>, next: Option<&str>) -> bool {
    let token = crate::error::required(token, "token").or_report();
    BOUND.with(|b| *b.borrow_mut() = Some((token, next.map(str::to_owned))));
    true
}

/// The bound the statement with `token` recorded: None when it did not compute one, Some(None)
/// when the batch reaches the last eligible row.
pub fn bound(token: i64) -> Option<Option<String>> {
    BOUND.with(|b| {
        b.borrow()
            .as_ref()
            .filter(|(t, _)| *t == token)
            .map(|(_, next)| next.clone())
    })
}
