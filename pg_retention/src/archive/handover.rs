//! Handing a claimed batch's slice to the archiver without the SQL wrapper's copies.
//!
//! `retention.claim_slice` returns the slice through a SQL function (it pins the rendering
//! settings and raises our SQLSTATEs), and every layer of that copies the 2.5 MB value again: a
//! function scan's tuplestore, the SQL function's result, the outer scan's tuplestore (15 % of
//! a claim). `retention.claim_next` claims and renders the same way but keeps the slice here,
//! in the claiming backend, and `retention.claimed_slice` returns it straight from a C function,
//! in pieces.
//!
//! What is kept is only bytes: `complete_batch` still checks the archiver's digest against the
//! one the claim recorded, so a slice taken from here can never prune rows it was not rendered
//! from. It is kept for one batch at a time, for the role that claimed it, and given out once.

use std::cell::RefCell;

/// How `retention.claimed_slice` cuts a slice: one row per 64 kB. A piece is small enough to be
/// copied in cache on its way out, and allocated from memory freed by the piece before; a
/// 2.5 MB value was copied four times through freshly mapped memory (3.5 ms a batch).
pub const PIECE: usize = 64 * 1024;

/// A slice waiting to be taken.
struct Kept {
    batch: String,
    role: u32,
    slice: Vec<u8>,
}

thread_local! {
    // A backend is one thread; the next claim replaces what an earlier one left.
    static KEPT: RefCell<Option<Kept>> = const { RefCell::new(None) };
}

/// Keeps batch `batch`'s slice for the role this session acts as, replacing any other.
pub fn keep(batch: &str, slice: Vec<u8>) {
    let kept = Kept {
        batch: batch.to_owned(),
        role: crate::catalog::caller_oid(),
        slice,
    };
    KEPT.with(|k| *k.borrow_mut() = Some(kept));
}

/// Batch `batch`'s slice, once, if this session claimed it as the role it acts as now. None
/// otherwise (the archiver then renders it again with `retention.batch_slice`).
pub fn take(batch: &str) -> Option<Vec<u8>> {
    let role = crate::catalog::caller_oid();
    KEPT.with(|k| {
        let mut k = k.borrow_mut();
        let ours = k
            .as_ref()
            .is_some_and(|kept| kept.role == role && kept.batch == batch);
        if ours {
            k.take().map(|kept| kept.slice)
        } else {
            None
        }
    })
}
