//! Rendering rows into slice frames. Every value is its type's text output (the type's output
//! function, called from Rust on the datums SPI returns, as COPY does), NULL stays NULL, columns
//! in attribute order, rows in primary-key order. The SQL wrappers pin TimeZone, DateStyle,
//! IntervalStyle, extra_float_digits and bytea_output so the same rows render to the same bytes
//! in any session.

use crate::catalog::RelationInfo;
use crate::error::{Result, RetentionError};
use crate::sql_text::ident;
use pg_retention_format::append_frame;
use pgrx::datum::DatumWithOid;
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::PgMemoryContexts;
use std::ffi::CStr;

/// The output function of one result column, looked up once per statement.
struct OutputFn {
    finfo: pg_sys::FmgrInfo,
}

impl OutputFn {
    /// # Safety
    /// Inside a transaction, for the type of a live result column.
    unsafe fn new(type_oid: pg_sys::Oid) -> OutputFn {
        let mut func = pg_sys::Oid::INVALID;
        let mut is_varlena = false;
        pg_sys::getTypeOutputInfo(type_oid, &mut func, &mut is_varlena);
        let mut finfo: pg_sys::FmgrInfo = std::mem::zeroed();
        pg_sys::fmgr_info(func, &mut finfo);
        OutputFn { finfo }
    }
}

/// Runs `sql` and calls `each` once per result row with every column rendered to its text
/// output (None for NULL). The strings live in a memory context reset after each row, so a
/// batch costs one row's worth of rendered text at a time.
pub fn for_each_rendered(
    sql: &str,
    args: &[DatumWithOid<'_>],
    mut each: impl FnMut(&[Option<&str>]) -> Result<()>,
) -> Result<()> {
    Spi::connect_mut(|client| {
        let table = client.update(sql, None, args)?;
        let n = table.len();
        if n == 0 {
            return Ok(());
        }
        // SAFETY: SPI_tuptable is the result of the statement just run and stays valid until the
        // next SPI call, which nothing below makes; each tuple is deformed against its own
        // descriptor and every datum goes to the output function of its column's type.
        unsafe {
            let tt = pg_sys::SPI_tuptable;
            let tupdesc = (*tt).tupdesc;
            let natts = (*tupdesc).natts as usize;
            let mut fns: Vec<OutputFn> = (1..=natts)
                .map(|i| OutputFn::new(pg_sys::SPI_gettypeid(tupdesc, i as i32)))
                .collect();
            let mut values = vec![pg_sys::Datum::from(0usize); natts];
            let mut nulls = vec![false; natts];
            let mut scratch = PgMemoryContexts::new("pg_retention render");
            for r in 0..n {
                let tuple = *(*tt).vals.add(r);
                pg_sys::heap_deform_tuple(tuple, tupdesc, values.as_mut_ptr(), nulls.as_mut_ptr());
                let result = scratch.switch_to(|_| {
                    let mut texts: Vec<Option<&str>> = Vec::with_capacity(natts);
                    for (i, f) in fns.iter_mut().enumerate() {
                        if nulls[i] {
                            texts.push(None);
                            continue;
                        }
                        let text = pg_sys::OutputFunctionCall(&mut f.finfo, values[i]);
                        texts.push(Some(CStr::from_ptr(text).to_str().map_err(|e| {
                            RetentionError::Internal(format!("text output is not UTF-8: {e}"))
                        })?));
                    }
                    each(&texts)
                });
                scratch.reset();
                result?;
            }
        }
        Ok(())
    })
}

/// Frames rendered from a statement's rows, back to back: the slice they make.
#[derive(Default)]
pub struct Rendered {
    /// The frames, concatenated.
    pub slice: Vec<u8>,
    /// End offset of each frame in `slice`.
    pub ends: Vec<usize>,
    /// The rows' keys one after another (primary-key arity values each), in row order.
    pub keys: Vec<Option<String>>,
    /// Each row's trailing column past the table's own (its ctid), when the statement has one.
    pub extra: Vec<Option<String>>,
}

impl Rendered {
    /// BLAKE3 hex, row count and byte count of the slice.
    pub fn summary(&self) -> (String, u64, u64) {
        pg_retention_format::summarize_slice(&self.slice, self.ends.len() as u64)
    }

    /// The frames one by one.
    pub fn frames(&self) -> impl Iterator<Item = &[u8]> {
        let mut start = 0;
        self.ends.iter().map(move |&end| {
            let frame = &self.slice[start..end];
            start = end;
            frame
        })
    }
}

/// Renders the rows of `sql` (every column of `rel` in attribute order, then optionally one
/// extra column) into frames.
fn render_frames(rel: &RelationInfo, sql: &str, args: &[DatumWithOid<'_>]) -> Result<Rendered> {
    let pk = pk_positions(rel)?;
    let n = rel.columns.len();
    let mut out = Rendered::default();
    for_each_rendered(sql, args, |values| {
        let columns = values.get(..n).ok_or_else(|| {
            RetentionError::Internal(format!("expected {n} columns, got {}", values.len()))
        })?;
        let key: Vec<Option<&str>> = pk.iter().map(|&i| columns[i]).collect();
        out.keys.extend(key.iter().map(|k| k.map(str::to_owned)));
        append_frame(&mut out.slice, &key, columns)
            .map_err(|e| RetentionError::Internal(e.to_string()))?;
        out.ends.push(out.slice.len());
        if let Some(extra) = values.get(n) {
            out.extra.push(extra.map(str::to_owned));
        }
        Ok(())
    })?;
    Ok(out)
}

/// The columns of alias `t` in attribute order (a frame's columns).
pub fn column_list(rel: &RelationInfo) -> String {
    rel.columns
        .iter()
        .map(|c| format!("t.{}", ident(&c.name)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Positions of the primary-key columns among the table's columns.
pub fn pk_positions(rel: &RelationInfo) -> Result<Vec<usize>> {
    rel.pk
        .iter()
        .map(|k| {
            rel.columns
                .iter()
                .position(|c| &c.name == k)
                .ok_or_else(|| RetentionError::UndefinedColumn {
                    relation: rel.qualified.clone(),
                    column: k.clone(),
                })
        })
        .collect()
}

/// The primary key of alias `t` in key order (for ORDER BY).
pub fn pk_order(rel: &RelationInfo) -> String {
    rel.pk
        .iter()
        .map(|c| format!("t.{}", ident(c)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Compares the primary key of alias `t` with the text[] key `key` (each element back through
/// its column type's input) as one row comparison: `>` is "after it" in the primary key's own
/// order, which an index range scan can start from.
pub fn key_compare(rel: &RelationInfo, op: &str, key: &str) -> Result<String> {
    let mut left = Vec::new();
    let mut right = Vec::new();
    for (i, c) in rel.pk.iter().enumerate() {
        let ty = &rel.column(c)?.type_name;
        left.push(format!("t.{}", ident(c)));
        right.push(format!("({key})[{}]::{ty}", i + 1));
    }
    Ok(format!("({}) {op} ({})", left.join(", "), right.join(", ")))
}

/// Renders the rows at `ctids` in key order, each with its current `ctid` (in `extra`); `lock`
/// takes row locks. A TID scan: one heap fetch per row, no index probe.
pub fn render_batch(rel: &RelationInfo, ctids: &[Option<String>], lock: bool) -> Result<Rendered> {
    let sql = format!(
        "SELECT {cols}, t.ctid FROM ONLY {table} t WHERE t.ctid = ANY ($1::text[]::tid[])
          ORDER BY {order} {lock}",
        cols = column_list(rel),
        table = rel.qualified,
        order = pk_order(rel),
        lock = if lock { "FOR UPDATE OF t" } else { "" },
    );
    render_frames(rel, &sql, &[ctids.to_vec().into()])
}

/// Frames of up to `limit` rows of the table matching `condition` (over alias `t`).
pub fn sample_frames(rel: &RelationInfo, condition: &str, limit: i64) -> Result<Rendered> {
    let sql = format!(
        "SELECT {cols} FROM ONLY {table} t WHERE {condition} LIMIT {limit}",
        cols = column_list(rel),
        table = rel.qualified,
    );
    render_frames(rel, &sql, &[])
}
