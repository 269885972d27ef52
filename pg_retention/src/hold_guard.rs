//! Enforced holds: a hold placed with `enforce => true` also refuses (RT402) every UPDATE and
//! DELETE of the rows it covers and every TRUNCATE of its table, by anyone — a library's own
//! cleanup, a hand-written DELETE — but an erasure, which outranks holds. Placing the first
//! enforced hold on a table installs two triggers on it (`pg_retention_hold_enforce`, a BEFORE
//! UPDATE OR DELETE row trigger, and `pg_retention_hold_truncate`, a BEFORE TRUNCATE statement
//! trigger; on a partitioned table the row trigger reaches every partition); lifting its last
//! one removes them. The triggers' functions are `retention._hold_enforce` and
//! `retention._hold_enforce_truncate` (sql/api/guards.sql); each hold's predicate runs as the role that
//! placed it.

use crate::catalog::{query_json, RelationInfo};
use crate::error::{OrReport, Result, RetentionError};
use crate::sql_text::ident;
use crate::trigger_call::{Event, Fired};
use pgrx::prelude::*;
use std::cell::{Cell, RefCell};

const ROW_TRIGGER: &str = "pg_retention_hold_enforce";
const TRUNCATE_TRIGGER: &str = "pg_retention_hold_truncate";

thread_local! {
    /// Set while an erasure deletes: its deletes (and what they cascade to) are not refused.
    static ERASING: Cell<bool> = const { Cell::new(false) };
    /// The enforced holds of a table as one statement saw them.
    static SEEN: RefCell<Option<Seen>> = const { RefCell::new(None) };
}

/// While alive, the triggers of enforced holds let this backend's deletes through: an
/// erasure's. Restored when dropped, also when an error unwinds past it.
pub struct Erasing {
    before: bool,
}

impl Erasing {
    /// Starts letting deletes through.
    pub fn begin() -> Erasing {
        Erasing {
            before: ERASING.with(|e| e.replace(true)),
        }
    }
}

impl Drop for Erasing {
    fn drop(&mut self) {
        ERASING.with(|e| e.set(self.before));
    }
}

/// One enforced hold, as a trigger needs it.
#[derive(Debug, Clone, serde::Deserialize)]
struct Enforced {
    id: i64,
    actor: String,
    reason: String,
    predicate: String,
    placer: u32,
}

/// What one statement read of a table: its enforced holds.
#[derive(Debug, Clone)]
struct Seen {
    at: Statement,
    relation: u32,
    holds: Vec<Enforced>,
}

/// Which statement of which transaction a trigger fires in: holds are read once per statement.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Statement {
    transaction: i64,
    statement: i64,
    command: u32,
}

impl Statement {
    fn now() -> Statement {
        // Safety: reads of the backend's own transaction state, inside a transaction.
        unsafe {
            Statement {
                transaction: pg_sys::GetCurrentTransactionStartTimestamp(),
                statement: pg_sys::GetCurrentStatementStartTimestamp(),
                command: pg_sys::GetCurrentCommandId(false),
            }
        }
    }
}

/// The active enforced holds whose rows include rows of table `relation` (its own, and those
/// of the partitioned tables above it); read once per statement, not per row.
fn enforced_on(relation: u32) -> Result<Seen> {
    let now = Statement::now();
    let cached = SEEN.with(|s| {
        s.borrow()
            .as_ref()
            .filter(|seen| seen.at == now && seen.relation == relation)
            .cloned()
    });
    if let Some(seen) = cached {
        return Ok(seen);
    }
    let holds: Vec<Enforced> = query_json(
        "SELECT coalesce(jsonb_agg(jsonb_build_object(
                    'id', h.id, 'actor', h.actor, 'reason', h.reason, 'predicate', h.predicate,
                    'placer', h.placed_by::bigint) ORDER BY h.id), '[]')
           FROM retention.hold_records h
          WHERE h.enforced
            AND (h.relation = $1::bigint::oid
                 OR h.relation::oid IN (SELECT a.relid FROM pg_catalog.pg_partition_ancestors($1::bigint::oid) a))
            AND NOT EXISTS (SELECT 1 FROM retention.hold_lifts l WHERE l.hold_id = h.id)",
        &[i64::from(relation).into()],
    )?
    .unwrap_or_default();
    let seen = Seen {
        at: now,
        relation,
        holds,
    };
    SEEN.with(|s| *s.borrow_mut() = Some(seen.clone()));
    Ok(seen)
}

/// The hold (id, actor, reason) that refuses a change of `row` of the table `fired` is on
/// (of its row type); None when none does, or an erasure is deleting.
fn refusing(fired: &Fired, row: pgrx::AnyElement) -> Result<Option<Enforced>> {
    if ERASING.with(Cell::get) {
        return Ok(None);
    }
    for hold in enforced_on(fired.relation)?.holds {
        // A partition's columns are its parent's, by name: a hold placed on the parent is
        // evaluated over the partition's row.
        if crate::author::row_matches(hold.placer, &hold.predicate, fired.rowtype, row)? {
            return Ok(Some(hold));
        }
    }
    Ok(None)
}

/// Why the UPDATE or DELETE that fired `retention._hold_enforce` is refused (RT402), if it is.
fn row_refusal(fired: &Fired) -> Result<Option<RetentionError>> {
    let Some(old) = fired.old_row() else {
        return Ok(None);
    };
    let Some(hold) = refusing(fired, old)? else {
        return Ok(None);
    };
    Ok(Some(RetentionError::EnforcedHold {
        subject: format!("row of {}", fired.table_name()?),
        change: if fired.event == Event::Delete {
            "deleted"
        } else {
            "updated"
        },
        hold: hold.id,
        actor: hold.actor,
        reason: hold.reason,
    }))
}

/// Why the TRUNCATE that fired `retention._hold_enforce_truncate` is refused (RT402), if it
/// is: an enforced hold covers rows of the table (or of a table above it).
fn truncate_refusal(fired: &Fired) -> Result<Option<RetentionError>> {
    let Some(hold) = enforced_on(fired.relation)?.holds.into_iter().next() else {
        return Ok(None);
    };
    Ok(Some(RetentionError::EnforcedHold {
        subject: fired.table_name()?,
        change: "truncated",
        hold: hold.id,
        actor: hold.actor,
        reason: hold.reason,
    }))
}

/// `retention._hold_enforce()` (sql/api/guards.sql, SECURITY DEFINER): the BEFORE UPDATE OR DELETE
/// row trigger of a table with enforced holds.
#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn pg_retention_hold_enforce(
    fcinfo: pg_sys::FunctionCallInfo,
) -> pg_sys::Datum {
    // Safety: called by the executor as a trigger function.
    let fired = unsafe { Fired::read(fcinfo) }.or_report();
    let refusal = row_refusal(&fired);
    crate::trigger_call::answer(fired, refusal)
}

/// `retention._hold_enforce_truncate()` (sql/api/guards.sql, SECURITY DEFINER): the BEFORE TRUNCATE
/// statement trigger of a table with enforced holds.
#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn pg_retention_hold_enforce_truncate(
    fcinfo: pg_sys::FunctionCallInfo,
) -> pg_sys::Datum {
    // Safety: called by the executor as a trigger function.
    let fired = unsafe { Fired::read(fcinfo) }.or_report();
    let refusal = truncate_refusal(&fired);
    crate::trigger_call::answer(fired, refusal)
}

/// Calling convention of `retention._hold_enforce()`.
#[unsafe(no_mangle)]
pub extern "C" fn pg_finfo_pg_retention_hold_enforce() -> &'static pg_sys::Pg_finfo_record {
    &crate::trigger_call::FINFO_V1
}

/// Calling convention of `retention._hold_enforce_truncate()`.
#[unsafe(no_mangle)]
pub extern "C" fn pg_finfo_pg_retention_hold_enforce_truncate() -> &'static pg_sys::Pg_finfo_record
{
    &crate::trigger_call::FINFO_V1
}

/// Installs the triggers of enforced holds on `rel`, unless they are there.
pub fn install(rel: &RelationInfo) -> Result<()> {
    if has_trigger(rel.oid, ROW_TRIGGER)? {
        return Ok(());
    }
    Spi::run(&format!(
        "CREATE TRIGGER {t} BEFORE UPDATE OR DELETE ON {table} FOR EACH ROW
             EXECUTE FUNCTION retention._hold_enforce()",
        t = ident(ROW_TRIGGER),
        table = rel.qualified,
    ))?;
    Spi::run(&format!(
        "CREATE TRIGGER {t} BEFORE TRUNCATE ON {table} FOR EACH STATEMENT
             EXECUTE FUNCTION retention._hold_enforce_truncate()",
        t = ident(TRUNCATE_TRIGGER),
        table = rel.qualified,
    ))?;
    Ok(())
}

/// Removes the triggers from table `relation` when no active enforced hold is placed on it.
pub fn remove_if_unused(relation: u32) -> Result<()> {
    let in_use = crate::catalog::optional_one::<bool, _>(
        "SELECT EXISTS (SELECT 1 FROM retention.hold_records h
                         WHERE h.enforced AND h.relation = $1::bigint::oid
                           AND NOT EXISTS (SELECT 1 FROM retention.hold_lifts l WHERE l.hold_id = h.id))",
        &[i64::from(relation).into()],
    )?;
    let table = RelationInfo::name_if_present(relation)?;
    let (Some(false), Some(table)) = (in_use, table) else {
        return Ok(());
    };
    for t in [ROW_TRIGGER, TRUNCATE_TRIGGER] {
        if has_trigger(relation, t)? {
            Spi::run(&format!("DROP TRIGGER {} ON {table}", ident(t)))?;
        }
    }
    Ok(())
}

fn has_trigger(relation: u32, name: &str) -> Result<bool> {
    Ok(crate::catalog::optional_one::<bool, _>(
        "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger t
                         WHERE t.tgrelid = $1::bigint::oid AND t.tgname = $2 AND NOT t.tgisinternal)",
        &[i64::from(relation).into(), name.into()],
    )? == Some(true))
}
