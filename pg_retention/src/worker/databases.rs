//! Which databases the launcher serves: the list in `pg_retention.databases`, or with `'*'`
//! every database that accepts connections and is not a template, read from the shared catalog
//! `pg_database` the way autovacuum's launcher reads it (the launcher is connected to no
//! database; a database without pg_retention costs one short visit per naptime).

use crate::gucs;
use pgrx::bgworkers::BackgroundWorker;
use pgrx::pg_sys;

/// The databases to serve now; empty when the worker is disabled.
pub fn wanted() -> Vec<String> {
    if !gucs::enabled() {
        return Vec::new();
    }
    let listed = gucs::databases();
    if gucs::all_databases() {
        BackgroundWorker::transaction(|| {
            // Safety: inside a transaction of a process connected to the shared catalogs (the
            // launcher); the scan is opened and closed here, and pg_database rows are plain
            // FormData_pg_database tuples.
            unsafe { connectable() }
        })
    } else {
        listed
    }
}

/// Every database that accepts connections and is not a template.
///
/// # Safety
/// Must run inside a transaction, in a process initialised for catalog access.
unsafe fn connectable() -> Vec<String> {
    let mut names = Vec::new();
    unsafe {
        // A catalog scan needs a snapshot (as autovacuum's get_database_list takes one).
        pg_sys::GetTransactionSnapshot();
        let rel = pg_sys::table_open(
            pg_sys::DatabaseRelationId,
            pg_sys::AccessShareLock as pg_sys::LOCKMODE,
        );
        let scan = pg_sys::table_beginscan_catalog(rel, 0, std::ptr::null_mut());
        loop {
            let tuple = pg_sys::heap_getnext(scan, pg_sys::ScanDirection::ForwardScanDirection);
            if tuple.is_null() {
                break;
            }
            let form = pg_sys::GETSTRUCT(tuple).cast::<pg_sys::FormData_pg_database>();
            if (*form).datallowconn && !(*form).datistemplate {
                let name = std::ffi::CStr::from_ptr((*form).datname.data.as_ptr());
                names.push(name.to_string_lossy().into_owned());
            }
        }
        pg_sys::table_endscan(scan);
        pg_sys::table_close(rel, pg_sys::AccessShareLock as pg_sys::LOCKMODE);
    }
    names.sort();
    names
}
