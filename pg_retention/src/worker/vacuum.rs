//! The worker's VACUUM of a table an erasure deleted rows from (`engine/scrub.rs`), and the
//! visit's pass over the erasures still to reach the disk.
//!
//! VACUUM runs at top level, outside any transaction block, as autovacuum's does: the worker
//! starts the transaction VACUUM commits and starts again (it vacuums in transactions of its
//! own), with the table's owner as the user in force — the one role that may always vacuum it
//! (the worker's role may be a non-superuser). `INDEX_CLEANUP ON`: VACUUM would otherwise skip
//! the indexes when few pages have dead versions, and the erased keys would stay in them.

use super::database::tx;
use crate::catalog::scrub::Status;
use pgrx::bgworkers::BackgroundWorker;
use pgrx::pg_sys::panic::CaughtError;
use pgrx::prelude::*;
use pgrx::{PgMemoryContexts, PgTryBuilder};

/// Looks at the open scrubs (at most `catalog::scrub::PER_VISIT`) while `time_left` says so.
pub fn scrub_erasures(time_left: impl Fn() -> bool) {
    let due = tx(|| {
        Spi::connect(|client| {
            client
                .select("SELECT id, relation FROM retention._scrub_due()", None, &[])?
                .map(|row| Ok((row.get::<i64>(1)?, row.get::<pg_sys::Oid>(2)?)))
                .collect::<Result<Vec<_>, pgrx::spi::SpiError>>()
        })
    });
    let due = match due {
        Ok(due) => due,
        Err(e) => {
            warning!("pg_retention: could not list the erasures still to reach the disk: {e}");
            return;
        }
    };
    for (id, relation) in due {
        if !time_left() || BackgroundWorker::sigterm_received() {
            return;
        }
        let (Some(id), Some(relation)) = (id, relation) else {
            continue;
        };
        if let Err(e) = scrub_one(id, relation) {
            warning!("pg_retention: erasure scrub {id}: {e}");
        }
    }
}

/// Checks scrub `id`; when erased versions are left and removable, vacuums its table and
/// checks again.
fn scrub_one(id: i64, relation: pg_sys::Oid) -> Result<(), String> {
    if check(id, false)?.as_deref() != Some(Status::Left.as_str()) {
        return Ok(());
    }
    vacuum(relation)?;
    check(id, true)?;
    Ok(())
}

fn check(id: i64, vacuumed: bool) -> Result<Option<String>, String> {
    tx(move || {
        Spi::get_one_with_args::<String>(
            "SELECT retention._scrub_check($1, $2)",
            &[id.into(), vacuumed.into()],
        )
    })
    .map_err(|e| e.to_string())
}

/// `VACUUM (INDEX_CLEANUP ON)` of table `relation`, as its owner; nothing when it is gone.
/// An error is caught, its transaction aborted, and its message returned.
fn vacuum(relation: pg_sys::Oid) -> Result<(), String> {
    // Safety: the transaction is started here and ends on every path: committed after VACUUM
    // (which commits and starts transactions itself, leaving one started for its caller), or
    // aborted by the catch handler, which also restores the user in force.
    unsafe {
        let mut user = pg_sys::InvalidOid;
        let mut context = 0;
        pg_sys::GetUserIdAndSecContext(&mut user, &mut context);
        // VACUUM keeps what must survive its transactions in a child of PortalContext, which a
        // worker has none of: this one goes, with anything an error left in it, when it drops.
        let portal = PgMemoryContexts::new("pg_retention vacuum");
        pg_sys::PortalContext = portal.value();
        let result = PgTryBuilder::new(|| {
            pg_sys::SetCurrentStatementStartTimestamp();
            pg_sys::StartTransactionCommand();
            let lock = pg_sys::AccessShareLock as pg_sys::LOCKMODE;
            let rel = pg_sys::try_table_open(relation, lock);
            if rel.is_null() {
                pg_sys::CommitTransactionCommand();
                return Ok(());
            }
            let owner = (*(*rel).rd_rel).relowner;
            pg_sys::table_close(rel, lock);
            let stmt = statement(relation);
            pg_sys::SetUserIdAndSecContext(
                owner,
                context
                    | pg_sys::SECURITY_LOCAL_USERID_CHANGE as i32
                    | pg_sys::SECURITY_RESTRICTED_OPERATION as i32,
            );
            pg_sys::ExecVacuum(pg_sys::make_parsestate(std::ptr::null_mut()), stmt, true);
            pg_sys::SetUserIdAndSecContext(user, context);
            pg_sys::CommitTransactionCommand();
            Ok(())
        })
        .catch_others(|e| {
            pg_sys::AbortCurrentTransaction();
            pg_sys::SetUserIdAndSecContext(user, context);
            Err(match e {
                CaughtError::PostgresError(r)
                | CaughtError::ErrorReport(r)
                | CaughtError::RustPanic { ereport: r, .. } => {
                    format!("VACUUM failed: {}", r.message())
                }
            })
        })
        .execute();
        pg_sys::PortalContext = std::ptr::null_mut();
        drop(portal);
        result
    }
}

/// The statement `VACUUM (INDEX_CLEANUP ON)` naming table `relation` by its oid, in the
/// current memory context.
///
/// # Safety
/// In a transaction (the nodes are allocated in its memory).
unsafe fn statement(relation: pg_sys::Oid) -> *mut pg_sys::VacuumStmt {
    // Safety: palloc'd nodes and strings, as the parser would build them.
    unsafe {
        let option = pg_sys::makeDefElem(
            pg_sys::pstrdup(c"index_cleanup".as_ptr()),
            pg_sys::makeString(pg_sys::pstrdup(c"on".as_ptr())).cast(),
            -1,
        );
        let target =
            pg_sys::makeVacuumRelation(std::ptr::null_mut(), relation, std::ptr::null_mut());
        let mut stmt = PgBox::<pg_sys::VacuumStmt>::alloc_node(pg_sys::NodeTag::T_VacuumStmt);
        stmt.options = pg_sys::lappend(std::ptr::null_mut(), option.cast());
        stmt.rels = pg_sys::lappend(std::ptr::null_mut(), target.cast());
        stmt.is_vacuumcmd = true;
        stmt.into_pg()
    }
}
