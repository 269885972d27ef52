//! User SQL runs as its author.
//!
//! Predicates (a policy's scope and terminal, a hold's predicate) are SQL written by a role that
//! may have far less privilege than the extension's owner. Every statement that evaluates one
//! runs through [`run_as`]: the current user becomes the predicate's author for the statement,
//! inside a security-restricted operation, with `search_path = pg_catalog, pg_temp` — the way
//! PostgreSQL evaluates index expressions during VACUUM and ANALYZE since CVE-2022-1552. The
//! statement is still one statement with its predicates inlined (planned, pushed down, run at
//! the speed of the table scan); what changes is whose privileges its executor checks. So a
//! statement run here names only the user's tables and the few `retention` functions granted
//! to `retention_admin` for exactly this (`_batch_quota`, `_batch_bound`, `_hold_count`,
//! `_hold_matches`); it never reads the catalog tables directly.

use crate::catalog::prepared;
use crate::error::{Result, RetentionError};
use pgrx::datum::DatumWithOid;
use pgrx::prelude::*;
use pgrx::{pg_sys, AnyElement, PgOid};
use std::ffi::CStr;

/// The search path every user predicate is parsed and evaluated with: nothing planted in
/// `public` or in a temporary schema can stand in for a catalog object.
pub const SAFE_SEARCH_PATH: &CStr = c"pg_catalog, pg_temp";

/// Restores the caller's user and security context, also when an error unwinds.
struct Restore {
    user: pg_sys::Oid,
    sec_context: i32,
}

impl Drop for Restore {
    fn drop(&mut self) {
        // Safety: resets backend-local state saved by `run_as` in this backend.
        unsafe { pg_sys::SetUserIdAndSecContext(self.user, self.sec_context) };
    }
}

/// `search_path` set to a path until dropped, in a settings nesting level of its own, as a
/// function's `SET` clause applies it (fmgr_security_definer). Dropped, the level is popped:
/// with `keep_local`, what the call set for its transaction (`set_config(.., true)`, such as a
/// sweep step's `synchronous_commit`) stays, as after a function with a `SET` clause; without,
/// every setting made inside goes with it.
pub struct PinnedPath {
    nest_level: i32,
    keep_local: bool,
}

impl PinnedPath {
    /// Sets `path` (a setting's text) for `search_path` until the value is dropped.
    pub fn new(path: &CStr, keep_local: bool) -> PinnedPath {
        // Safety: what fmgr_security_definer does for a function's `SET search_path`; `Drop`
        // pops exactly this nesting level.
        unsafe {
            let nest_level = pg_sys::NewGUCNestLevel();
            pg_sys::set_config_option(
                c"search_path".as_ptr(),
                path.as_ptr(),
                pg_sys::GucContext::PGC_USERSET,
                pg_sys::GucSource::PGC_S_SESSION,
                pg_sys::GucAction::GUC_ACTION_SAVE,
                true,
                0,
                false,
            );
            PinnedPath {
                nest_level,
                keep_local,
            }
        }
    }
}

impl Drop for PinnedPath {
    fn drop(&mut self) {
        // Safety: pops the nesting level `new` pushed. While an error unwinds nothing is kept
        // (its (sub)transaction is rolled back anyway).
        unsafe {
            pg_sys::AtEOXact_GUC(
                self.keep_local && !std::thread::panicking(),
                self.nest_level,
            )
        };
    }
}

/// Runs `f` with the privileges of `role` (an existing role's oid), inside a security-restricted
/// operation and with [`SAFE_SEARCH_PATH`]. Everything `f` executes through SPI is checked
/// against `role`'s privileges; functions it calls cannot change the session (no `SET ROLE`, no
/// temporary objects, no cursors left open). The caller's user and settings come back when `f`
/// returns or raises.
pub fn run_as<T>(role: u32, f: impl FnOnce() -> Result<T>) -> Result<T> {
    run_as_searching(role, None, f)
}

/// [`run_as`] with `search_path` (a setting's text, already validated: a delete policy's
/// schemas, engine/search_path.rs) in force instead of [`SAFE_SEARCH_PATH`]; None: the safe one.
pub fn run_as_searching<T>(
    role: u32,
    search_path: Option<&str>,
    f: impl FnOnce() -> Result<T>,
) -> Result<T> {
    ensure_role_exists(role)?;
    let path = match search_path {
        Some(path) => std::ffi::CString::new(path)
            .map_err(|_| RetentionError::Internal("a search_path with a NUL byte".into()))?,
        None => SAFE_SEARCH_PATH.to_owned(),
    };
    // Safety: reads and sets backend-local state, as vacuum.c and analyze.c do; `Restore` undoes
    // it on every way out of this function.
    let _restore = unsafe {
        let mut user = pg_sys::InvalidOid;
        let mut sec_context: i32 = 0;
        pg_sys::GetUserIdAndSecContext(&mut user, &mut sec_context);
        pg_sys::SetUserIdAndSecContext(
            pg_sys::Oid::from(role),
            sec_context | pg_sys::SECURITY_RESTRICTED_OPERATION as i32,
        );
        Restore { user, sec_context }
    };
    // Declared after `_restore`, so dropped before it: the settings go, then the user.
    let _path = PinnedPath::new(&path, false);
    f()
}

/// Refuses to act for a role that no longer exists (its oid would match no privilege at all,
/// and the error would not say why).
fn ensure_role_exists(role: u32) -> Result<()> {
    // Safety: a syscache probe by oid; it reads the catalog cache and raises nothing.
    let exists = unsafe {
        pg_sys::SearchSysCacheExists(
            pg_sys::SysCacheIdentifier::AUTHOID as i32,
            pg_sys::Datum::from(pg_sys::Oid::from(role)),
            pg_sys::Datum::from(0),
            pg_sys::Datum::from(0),
            pg_sys::Datum::from(0),
        )
    };
    if exists {
        Ok(())
    } else {
        Err(RetentionError::Privilege {
            message: format!("the role (oid {role}) that wrote this predicate no longer exists"),
            hint: "Alter the policy (it then belongs to you) or place the hold again.".into(),
        })
    }
}

/// The name of a role, for messages.
pub fn role_name(role: u32) -> String {
    // Safety: GetUserNameFromId with noerr = true returns NULL rather than raising.
    unsafe {
        let name = pg_sys::GetUserNameFromId(pg_sys::Oid::from(role), true);
        if name.is_null() {
            format!("role {role}")
        } else {
            CStr::from_ptr(name).to_string_lossy().into_owned()
        }
    }
}

/// Whether role `role` is a member of role `of`, with its privileges (may act as it: own its
/// tables, report as it).
pub fn member_of(role: u32, of: u32) -> Result<bool> {
    Ok(Spi::get_one_with_args::<bool>(
        "SELECT pg_catalog.pg_has_role($1::bigint::oid, $2::bigint::oid, 'USAGE')",
        &[i64::from(role).into(), i64::from(of).into()],
    )? == Some(true))
}

/// What a policy's owner needs on its table, archive policies too: SELECT and DELETE (sweeps,
/// claims and prunes read and delete as the owner; claims take no row locks, so no UPDATE).
pub const PRIVILEGES_NEEDED: [&str; 2] = ["SELECT", "DELETE"];

/// The first privilege of [`PRIVILEGES_NEEDED`] that `role` lacks on table `relation`.
pub fn missing_privilege(role: u32, relation: u32) -> Result<Option<&'static str>> {
    for privilege in PRIVILEGES_NEEDED {
        let has = Spi::get_one_with_args::<bool>(
            "SELECT pg_catalog.has_table_privilege($1::bigint::oid, $2::bigint::oid, $3)",
            &[
                i64::from(role).into(),
                i64::from(relation).into(),
                privilege.into(),
            ],
        )?
        // NULL: the table is gone, and a role has no privilege on a table that is not there.
        .unwrap_or(false);
        if !has {
            return Ok(Some(privilege));
        }
    }
    Ok(None)
}

/// Refuses (42501) when a policy's `owner` lost a privilege the policy runs with on its table
/// `relation` (`table` names it): a policy runs with its owner's privileges or not at all; and,
/// unless it opted in to govern only the rows it sees (`visible_rows_only`), when row-level
/// security hides rows from it.
pub fn ensure_owner_privileges(
    owner: u32,
    relation: u32,
    table: &str,
    policy: &str,
    visible_rows_only: bool,
) -> Result<()> {
    ensure_role_exists(owner)?;
    match missing_privilege(owner, relation)? {
        None if visible_rows_only => Ok(()),
        None => ensure_sees_every_row(owner, relation, table),
        Some(privilege) => Err(RetentionError::OwnerPrivilege {
            policy: policy.to_owned(),
            owner: role_name(owner),
            privilege: privilege.to_owned(),
            relation: table.to_owned(),
        }),
    }
}

/// Refuses (42501) a table whose row-level security would hide rows from `role`, the policy's
/// owner: its statements would see — and preview, sweep and archive — only the rows its
/// policies show it, while the policy says it governs the table. Row security applies unless
/// the role owns the table (and security is not forced on owners), has BYPASSRLS, or is a
/// superuser.
pub fn ensure_sees_every_row(role: u32, relation: u32, table: &str) -> Result<()> {
    // Planned once per backend: claims and prunes ask it for every batch.
    let plan = prepared::cached(
        "SELECT (SELECT c.relrowsecurity
                        AND NOT (r.rolsuper OR r.rolbypassrls)
                        AND (c.relforcerowsecurity OR NOT pg_catalog.pg_has_role(r.oid, c.relowner, 'USAGE'))
                   FROM pg_catalog.pg_class c, pg_catalog.pg_roles r
                  WHERE c.oid = $1::bigint::oid AND r.oid = $2::bigint::oid)",
        &[
            PgOid::BuiltIn(pg_sys::BuiltinOid::INT8OID),
            PgOid::BuiltIn(pg_sys::BuiltinOid::INT8OID),
        ],
        false,
    )?;
    let filtered = crate::catalog::optional_one::<bool, _>(
        &*plan,
        &[i64::from(relation).into(), i64::from(role).into()],
    )?;
    if filtered == Some(true) {
        return Err(RetentionError::Privilege {
            message: format!(
                "row-level security on {table} would hide rows from {}, whose policy would then govern only the rows it sees",
                role_name(role)
            ),
            hint: "Register the policy as the table's owner (with row security not forced on it), or as a role with BYPASSRLS; or, to govern only the rows it sees, pass visible_rows_only => true (preview then counts the others as hidden_rows)."
                .into(),
        });
    }
    Ok(())
}

/// Whether `row` (a row of a table, as a composite value) satisfies `predicate` when `role`
/// evaluates it: for the one predicate of a statement that cannot be inlined because its author
/// is not the statement's (a hold placed by another role than the policy's owner), and for the
/// fixpoint guard, which fires as whoever updates the table. The row must be of the type
/// `rowtype`: a caller cannot have a predicate evaluated over a row it made up of another shape.
pub fn row_matches(role: u32, predicate: &str, rowtype: u32, row: AnyElement) -> Result<bool> {
    if row.oid() != pg_sys::Oid::from(rowtype) {
        return Err(RetentionError::invalid(
            "the row is not of the governed table's type",
            format!(
                "Expected a row of type {rowtype}, got one of type {}.",
                row.oid().to_u32()
            ),
            "Pass a row of the table the hold or policy governs.",
        ));
    }
    let sql = format!(
        "SELECT {} FROM (SELECT ($1).*) t",
        crate::sql_text::predicate(predicate)
    );
    run_as(role, || {
        let plan = prepared::cached(&sql, &[PgOid::from(row.oid())], false)?;
        // Safety: the datum is the row this function was called with, of the type it says.
        let arg = unsafe { DatumWithOid::new(row, row.oid()) };
        // The predicate is wrapped in coalesce(…, false): it is never NULL.
        crate::error::present(prepared::one::<bool>(&plan, &[arg])?, "a row predicate")
    })
}
