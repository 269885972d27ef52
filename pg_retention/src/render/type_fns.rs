//! The type functions a rendered column is read with: its text output function, and its default
//! btree comparison for the least and greatest value of a column. Both are looked up once per
//! statement from a result descriptor and then called on raw datums, so they live together and
//! apart from the row loop that calls them (`stream.rs`).

use crate::error::{Result, RetentionError};
use pgrx::pg_sys;
use std::ffi::CStr;

/// The output function of one result column, looked up once per statement.
pub(super) struct OutputFn {
    finfo: pg_sys::FmgrInfo,
}

impl OutputFn {
    /// # Safety
    /// Inside a transaction, for the type of a live result column.
    pub(super) unsafe fn new(type_oid: pg_sys::Oid) -> OutputFn {
        // SAFETY: inside a transaction, for a live type (this function's contract).
        unsafe {
            let mut func = pg_sys::Oid::INVALID;
            let mut is_varlena = false;
            pg_sys::getTypeOutputInfo(type_oid, &mut func, &mut is_varlena);
            let mut finfo: pg_sys::FmgrInfo = std::mem::zeroed();
            pg_sys::fmgr_info(func, &mut finfo);
            OutputFn { finfo }
        }
    }

    /// # Safety
    /// `datum` is a non-NULL value of this function's type; the text lives in the current
    /// memory context.
    pub(super) unsafe fn text<'a>(&mut self, datum: pg_sys::Datum) -> Result<&'a str> {
        // SAFETY: `datum` is a non-NULL value of this function's type (this function's contract).
        unsafe {
            let text = pg_sys::OutputFunctionCall(&mut self.finfo, datum);
            CStr::from_ptr(text)
                .to_str()
                .map_err(|e| RetentionError::Internal(format!("text output is not UTF-8: {e}")))
        }
    }
}

/// Column `col`'s attribute (0-based). PostgreSQL 18 keeps the attributes after a compact copy
/// of them, reached through TupleDescAttr; before 18 they are the descriptor's array.
///
/// # Safety
/// `tupdesc` is a live descriptor with more than `col` attributes.
unsafe fn attribute(
    tupdesc: pg_sys::TupleDesc,
    col: usize,
) -> Result<*const pg_sys::FormData_pg_attribute> {
    // SAFETY: `tupdesc` is live and has more than `col` attributes (this function's contract).
    unsafe {
        #[cfg(feature = "pg18")]
        {
            let col = std::ffi::c_int::try_from(col)
                .map_err(|_| RetentionError::Internal(format!("column {col} out of range")))?;
            Ok(pg_sys::TupleDescAttr(tupdesc, col))
        }
        #[cfg(not(feature = "pg18"))]
        {
            Ok((*tupdesc).attrs.as_ptr().add(col))
        }
    }
}

/// Running least and greatest datum of one column, by its type's default btree comparison.
pub(super) struct Order {
    pub(super) col: usize,
    cmp: *mut pg_sys::FmgrInfo,
    collation: pg_sys::Oid,
    pub(super) min: Option<pg_sys::Datum>,
    pub(super) max: Option<pg_sys::Datum>,
}

impl Order {
    /// # Safety
    /// `tupdesc` is a live descriptor with more than `col` attributes.
    /// With `streamed`, the rows' datums live only while each row is handed over, so the
    /// column must be of a type passed by value (an age column's: timestamptz, timestamp,
    /// date).
    pub(super) unsafe fn new(
        tupdesc: pg_sys::TupleDesc,
        col: usize,
        streamed: bool,
    ) -> Result<Order> {
        // SAFETY: as for `attribute`; the type cache entry lives as long as the backend.
        unsafe {
            let attr = attribute(tupdesc, col)?;
            let tc = pg_sys::lookup_type_cache(
                (*attr).atttypid,
                pg_sys::TYPECACHE_CMP_PROC_FINFO as i32,
            );
            if tc.is_null() || (*tc).cmp_proc_finfo.fn_oid == pg_sys::Oid::INVALID {
                return Err(RetentionError::Internal(format!(
                    "type {} of result column {} has no btree ordering",
                    u32::from((*attr).atttypid),
                    col + 1
                )));
            }
            if streamed && !(*attr).attbyval {
                return Err(RetentionError::Internal(format!(
                    "result column {} orders a streamed statement but is not passed by value",
                    col + 1
                )));
            }
            Ok(Order {
                col,
                cmp: &mut (*tc).cmp_proc_finfo,
                collation: (*attr).attcollation,
                min: None,
                max: None,
            })
        }
    }

    /// # Safety
    /// `d` is a datum of this column, alive as long as the extremes are used (a datum passed
    /// by value always is).
    pub(super) unsafe fn see(&mut self, d: pg_sys::Datum, null: bool) {
        // SAFETY: `d` is a datum of this column's type (this function's contract).
        unsafe {
            if null {
                return;
            }
            let (f, collation) = (self.cmp, self.collation);
            let cmp = |a: pg_sys::Datum, b: pg_sys::Datum| -> i32 {
                pg_sys::FunctionCall2Coll(f, collation, a, b).value() as i32
            };
            if self.min.is_none_or(|m| cmp(d, m) < 0) {
                self.min = Some(d);
            }
            if self.max.is_none_or(|m| cmp(d, m) > 0) {
                self.max = Some(d);
            }
        }
    }
}
