//! What a trigger function of ours is called with — its table, arguments, event and rows —
//! read from PostgreSQL's `TriggerData`. The triggers that refuse a change (the fixpoint guard
//! of archive policies, the enforced holds') are C functions written in Rust, so that their
//! refusal is raised by them, with its SQLSTATE, and carries no frame of a procedural language.

use crate::error::{present, Result, RetentionError};
use pgrx::pg_sys;
use pgrx::FromDatum;

/// The calling convention record of every C function declared by hand (version 1).
pub static FINFO_V1: pg_sys::Pg_finfo_record = pg_sys::Pg_finfo_record { api_version: 1 };

/// What fired a trigger.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    Insert,
    Update,
    Delete,
    Truncate,
}

/// One call of a trigger function.
pub struct Fired {
    data: *mut pg_sys::TriggerData,
    /// The table the trigger is on (a partition's own oid for a partition's copy).
    pub relation: u32,
    /// The row type of that table.
    pub rowtype: u32,
    /// The trigger's arguments (`TG_ARGV`).
    pub args: Vec<String>,
    pub event: Event,
}

impl Fired {
    /// Reads the call. Refuses (XX000) a call that is not a trigger's.
    ///
    /// # Safety
    /// `fcinfo` is the call's, as the executor passes it to a C function.
    pub unsafe fn read(fcinfo: pg_sys::FunctionCallInfo) -> Result<Fired> {
        // Safety: fcinfo is valid for the call; its context is a node when set.
        unsafe {
            let context = (*fcinfo).context;
            if context.is_null() || (*context).type_ != pg_sys::NodeTag::T_TriggerData {
                return Err(RetentionError::Internal(
                    "a trigger function was called outside a trigger".into(),
                ));
            }
            let data = context.cast::<pg_sys::TriggerData>();
            let rel = (*data).tg_relation;
            let trigger = (*data).tg_trigger;
            let mut args = Vec::new();
            for i in 0..usize::try_from((*trigger).tgnargs).unwrap_or(0) {
                let arg = *(*trigger).tgargs.add(i);
                args.push(std::ffi::CStr::from_ptr(arg).to_string_lossy().into_owned());
            }
            let event = match (*data).tg_event & pg_sys::TRIGGER_EVENT_OPMASK {
                pg_sys::TRIGGER_EVENT_DELETE => Event::Delete,
                pg_sys::TRIGGER_EVENT_UPDATE => Event::Update,
                pg_sys::TRIGGER_EVENT_TRUNCATE => Event::Truncate,
                _ => Event::Insert,
            };
            Ok(Fired {
                data,
                relation: (*rel).rd_id.to_u32(),
                rowtype: (*(*rel).rd_att).tdtypeid.to_u32(),
                args,
                event,
            })
        }
    }

    /// The row as it was (`OLD`) of an UPDATE or DELETE row trigger.
    pub fn old_row(&self) -> Option<pgrx::AnyElement> {
        // Safety: tg_trigtuple is the row the trigger fired for, or NULL for a statement.
        unsafe { self.row((*self.data).tg_trigtuple) }
    }

    /// The row as it will be (`NEW`) of an UPDATE row trigger.
    pub fn new_row(&self) -> Option<pgrx::AnyElement> {
        // Safety: tg_newtuple is the new row of an UPDATE, or NULL.
        unsafe { self.row((*self.data).tg_newtuple) }
    }

    /// A row of the trigger's table as a composite value, of its row type.
    unsafe fn row(&self, tuple: pg_sys::HeapTuple) -> Option<pgrx::AnyElement> {
        if tuple.is_null() {
            return None;
        }
        // Safety: the tuple is of the trigger's table, whose descriptor this is; the copy is
        // made in the current memory context.
        unsafe {
            let desc = (*(*self.data).tg_relation).rd_att;
            let datum = pg_sys::heap_copy_tuple_as_datum(tuple, desc);
            pgrx::AnyElement::from_polymorphic_datum(datum, false, (*desc).tdtypeid)
        }
    }

    /// What a BEFORE trigger returns to let the change through: the new row of an UPDATE, the
    /// old row of a DELETE, nothing for a statement.
    pub fn proceed(&self) -> pg_sys::Datum {
        // Safety: both are the executor's tuples for this call (or NULL).
        unsafe {
            match self.event {
                Event::Update => pg_sys::Datum::from((*self.data).tg_newtuple),
                Event::Delete | Event::Insert => pg_sys::Datum::from((*self.data).tg_trigtuple),
                Event::Truncate => pg_sys::Datum::from(0),
            }
        }
    }

    /// The table's name as `schema.table` (unquoted, as in a trigger's `TG_TABLE_SCHEMA` and
    /// `TG_TABLE_NAME`), for a refusal.
    pub fn table_name(&self) -> Result<String> {
        present(
            crate::catalog::optional_one::<String, _>(
                "SELECT n.nspname::text || '.' || c.relname::text
                   FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
                  WHERE c.oid = $1::bigint::oid",
                &[i64::from(self.relation).into()],
            )?,
            "the trigger's table",
        )
    }
}

/// Ends a trigger call: lets the change through, or raises the refusal (or the error that kept
/// the trigger from deciding) with its own SQLSTATE.
pub fn answer(fired: Fired, refusal: Result<Option<RetentionError>>) -> pg_sys::Datum {
    match refusal {
        Ok(None) => fired.proceed(),
        Ok(Some(e)) | Err(e) => {
            drop(fired);
            crate::error::raise(e)
        }
    }
}
