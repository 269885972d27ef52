//! Erasure reaches the disk. A row an erasure deleted is a dead version in its table's pages
//! until VACUUM removes it, readable meanwhile by anything that reads pages (`pg_dirtyread`, a
//! copy of the data directory). An erasure records each table it deleted from
//! (`catalog/scrub.rs`); the database worker checks each such table here, in a transaction of
//! its own: a scan of every version in the table and its TOAST table, counting those that died
//! (or whose inserting transaction aborted) before the scrub's horizon. None left: the erasure
//! has reached the table's pages, and the ledger says when. Some left and removable: the worker
//! runs VACUUM (`worker/vacuum.rs`) and checks again. Some left and not removable yet (a
//! transaction older than the erasure, a replication slot, a standby's feedback): it waits.

use crate::catalog::scrub::{self, Scrub, Status};
use crate::catalog::{LedgerEntry, LedgerMethod};
use crate::error::Result;
use pgrx::pg_sys;
use serde_json::json;

/// Checks scrub `id` (`vacuumed`: the worker ran VACUUM just before) and records what it found;
/// `None` when the scrub is closed already or has no horizon yet.
pub fn check(id: i64, vacuumed: bool) -> Result<Option<Status>> {
    let Some(open) = scrub::take(id)? else {
        return Ok(None);
    };
    let (status, left) = match dead_before(open.relation, horizon_xid(open.horizon)) {
        Versions::Gone => (Status::Dropped, None),
        Versions::NotHeap => (Status::Unverifiable, None),
        Versions::NotRemovable => (Status::Waiting, None),
        Versions::Counted(0) => (Status::Unreadable, Some(0)),
        Versions::Counted(n) => (Status::Left, Some(n)),
    };
    scrub::checked(id, status, left, vacuumed)?;
    if status.is_final() {
        ledger(&open, status, vacuumed)?;
    }
    Ok(Some(status))
}

/// The ledger entry that says the erased versions of one table are gone.
fn ledger(open: &Scrub, status: Status, vacuumed: bool) -> Result<()> {
    LedgerEntry {
        method: LedgerMethod::ErasureScrub,
        policy: None,
        relation: Some(&open.relation_name),
        rows: 0,
        hold_ids: Vec::new(),
        actor: "worker",
        run_id: None,
        detail: json!({
            "request_ref": open.request_ref, "scrub": open.id, "status": status.as_str(),
            "horizon": open.horizon, "vacuumed": vacuumed,
        }),
    }
    .append()
}

/// The 32-bit transaction id of a full one. A scrub is checked every visit, far within the
/// 2^31 transactions in which 32-bit ids compare correctly.
fn horizon_xid(full: u64) -> pg_sys::TransactionId {
    // Truncation is the conversion: the low 32 bits are the id within its epoch.
    pg_sys::TransactionId::from((full & 0xffff_ffff) as u32)
}

/// What a table's pages hold of versions that died before a horizon.
enum Versions {
    /// The table does not exist any more.
    Gone,
    /// Some transaction that may still see such versions is running: no VACUUM could remove
    /// them, so they were not counted.
    NotRemovable,
    /// The table is not stored by the heap access method: its pages cannot be read here.
    NotHeap,
    /// This many are in the pages (the table's and its TOAST table's).
    Counted(i64),
}

/// Counts the versions of table `oid` and its TOAST table that died before `horizon`.
fn dead_before(oid: u32, horizon: pg_sys::TransactionId) -> Versions {
    let lock = pg_sys::AccessShareLock as pg_sys::LOCKMODE;
    // Safety: the relation is opened and closed here under a lock that keeps it (a DROP waits
    // for it); the scans are begun and ended in this function, in this transaction.
    unsafe {
        let rel = pg_sys::try_table_open(pg_sys::Oid::from(oid), lock);
        if rel.is_null() {
            return Versions::Gone;
        }
        if (*(*rel).rd_rel).relam != pg_sys::HEAP_TABLE_AM_OID {
            pg_sys::table_close(rel, lock);
            return Versions::NotHeap;
        }
        let oldest = pg_sys::GetOldestNonRemovableTransactionId(rel);
        if pg_sys::TransactionIdPrecedes(oldest, horizon) {
            pg_sys::table_close(rel, lock);
            return Versions::NotRemovable;
        }
        let mut n = heap_dead_before(rel, horizon);
        let toast = (*(*rel).rd_rel).reltoastrelid;
        pg_sys::table_close(rel, lock);
        if toast != pg_sys::InvalidOid {
            let toast_rel = pg_sys::try_table_open(toast, lock);
            if !toast_rel.is_null() {
                n += heap_dead_before(toast_rel, horizon);
                pg_sys::table_close(toast_rel, lock);
            }
        }
        Versions::Counted(n)
    }
}

/// Scans every version in `rel`'s pages (as `pgstattuple` does) and counts those that died
/// before `horizon`: deleted or updated by a transaction that committed below it, or inserted
/// by one below it that aborted.
///
/// # Safety
/// `rel` is a heap relation, open and locked by the caller.
unsafe fn heap_dead_before(rel: pg_sys::Relation, horizon: pg_sys::TransactionId) -> i64 {
    // Safety: as the caller promised; every tuple is read while its buffer is pinned by the
    // scan and share-locked here, which HeapTupleSatisfiesVacuumHorizon requires.
    unsafe {
        let flags = pg_sys::ScanOptions::SO_TYPE_SEQSCAN
            | pg_sys::ScanOptions::SO_ALLOW_STRAT
            | pg_sys::ScanOptions::SO_ALLOW_PAGEMODE;
        let scan = pg_sys::heap_beginscan(
            rel,
            &raw mut pg_sys::SnapshotAnyData,
            0,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            flags,
        );
        let mut n = 0i64;
        loop {
            let tuple = pg_sys::heap_getnext(scan, pg_sys::ScanDirection::ForwardScanDirection);
            if tuple.is_null() {
                break;
            }
            let buffer = (*scan.cast::<pg_sys::HeapScanDescData>()).rs_cbuf;
            pg_sys::LockBuffer(buffer, pg_sys::BUFFER_LOCK_SHARE as i32);
            let mut dead_after = pg_sys::InvalidTransactionId;
            let state = pg_sys::HeapTupleSatisfiesVacuumHorizon(tuple, buffer, &mut dead_after);
            let xmin = (*(*tuple).t_data).t_choice.t_heap.t_xmin;
            pg_sys::LockBuffer(buffer, pg_sys::BUFFER_LOCK_UNLOCK as i32);
            let died_before = match state {
                pg_sys::HTSV_Result::HEAPTUPLE_DEAD => pg_sys::TransactionIdPrecedes(xmin, horizon),
                pg_sys::HTSV_Result::HEAPTUPLE_RECENTLY_DEAD => {
                    pg_sys::TransactionIdPrecedes(dead_after, horizon)
                }
                _ => false,
            };
            n += i64::from(died_before);
            pgrx::check_for_interrupts!();
        }
        pg_sys::heap_endscan(scan);
        n
    }
}
