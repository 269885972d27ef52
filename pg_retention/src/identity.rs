//! Who "the caller" is (docs/security.md, "The identity model").
//!
//! The caller of an entry point is the role in force when it is called: `current_user` at the
//! call, never the session's role (a predicate runs as its author while the session's role may
//! be a superuser) and never the extension's owner. Entry points that record or act on the
//! caller (a policy's owner, a hold's placer, a consumer's registrant, an erasure's author, an
//! archive batch's claimant) are therefore not SECURITY DEFINER: [`entry`] notes the role in
//! force and only then takes the extension owner's privileges for the catalog work, as
//! `fmgr_security_definer` would. And no entry point runs inside a security-restricted
//! operation: that is where predicates, index expressions and materialized views are evaluated,
//! so a call from there is user code acting through someone else's session.

use crate::error::{Result, RetentionError};
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::cell::{Cell, RefCell};

thread_local! {
    /// The callers of the entry points running in this backend, innermost last.
    static CALLERS: RefCell<Vec<pg_sys::Oid>> = const { RefCell::new(Vec::new()) };
    /// The extension's owner, read once per backend (it does not change while installed).
    static OWNER: Cell<Option<pg_sys::Oid>> = const { Cell::new(None) };
}

/// Refuses (42501) inside a security-restricted operation: no retention entry point may be
/// called from a predicate, an index expression or any other code PostgreSQL runs on another
/// role's behalf.
pub fn refuse_restricted() -> Result<()> {
    // Safety: reads backend-local state.
    if unsafe { pg_sys::InSecurityRestrictedOperation() } {
        return Err(RetentionError::Privilege {
            message: "pg_retention's functions cannot be called from inside a predicate or another security-restricted operation".into(),
            hint: "Call them directly, not from a scope, terminal, hold or erasure predicate, an index expression or a materialized view.".into(),
        });
    }
    Ok(())
}

/// Gives back the caller and the privileges in force when an entry point returns or raises.
struct Left {
    user: pg_sys::Oid,
    sec_context: i32,
}

impl Drop for Left {
    fn drop(&mut self) {
        CALLERS.with(|c| c.borrow_mut().pop());
        // Safety: restores the backend-local user this entry point saved on its way in.
        unsafe { pg_sys::SetUserIdAndSecContext(self.user, self.sec_context) };
    }
}

/// Runs the body of an entry point that acts for its caller: refuses inside a
/// security-restricted operation, records the role in force as the caller (see [`caller_oid`]),
/// then runs `f` with the extension owner's privileges (the catalog is the owner's). The
/// function itself must not be SECURITY DEFINER, or the role in force would be the owner.
pub fn entry<T>(f: impl FnOnce() -> Result<T>) -> Result<T> {
    refuse_restricted()?;
    let owner = extension_owner()?;
    let mut user = pg_sys::InvalidOid;
    let mut sec_context: i32 = 0;
    // Safety: reads and sets backend-local state, as fmgr_security_definer does; `Left`
    // restores it on every way out (an error also resets it when its transaction aborts).
    let _left = unsafe {
        pg_sys::GetUserIdAndSecContext(&mut user, &mut sec_context);
        CALLERS.with(|c| c.borrow_mut().push(user));
        let left = Left { user, sec_context };
        pg_sys::SetUserIdAndSecContext(
            owner,
            sec_context | pg_sys::SECURITY_LOCAL_USERID_CHANGE as i32,
        );
        left
    };
    crate::error_watch::keeping_codes(f)
}

/// [`entry`] for a call that does not come through SQL: the background worker driving a run
/// (`engine/sweep/driver.rs`) in its own process, as the role `pg_retention.role` names. Also
/// pins `search_path` to `pg_catalog, pg_temp` for the call, as the `SET search_path` of the
/// SQL entry points does (the worker's role's own setting is not the extension's).
pub fn direct_entry<T>(f: impl FnOnce() -> Result<T>) -> Result<T> {
    entry(|| {
        let _pinned = crate::author::PinnedPath::new(crate::author::SAFE_SEARCH_PATH, true);
        f()
    })
}

/// The caller of the innermost running entry point (see [`entry`]); outside one (the
/// background worker, code reached from a SECURITY DEFINER function), the role in force.
pub fn caller_oid() -> u32 {
    CALLERS
        .with(|c| c.borrow().last().copied())
        // Safety: reads backend-local state only.
        .unwrap_or_else(|| unsafe { pg_sys::GetUserId() })
        .to_u32()
}

/// The name of [`caller_oid`], for the ledger and messages.
pub fn caller() -> String {
    crate::author::role_name(caller_oid())
}

/// The role that owns the extension (and so the catalog).
fn extension_owner() -> Result<pg_sys::Oid> {
    if let Some(owner) = OWNER.with(Cell::get) {
        return Ok(owner);
    }
    let owner = Spi::get_one::<pg_sys::Oid>(
        "SELECT e.extowner FROM pg_catalog.pg_extension e WHERE e.extname = 'pg_retention'",
    )?
    .ok_or_else(|| RetentionError::Internal("pg_retention is not installed here".into()))?;
    OWNER.with(|o| o.set(Some(owner)));
    Ok(owner)
}
