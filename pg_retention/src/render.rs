//! Rendering rows into slice frames. Every value is its type's text output (the type's output
//! function, called from Rust on the datums SPI returns, as COPY does), NULL stays NULL, columns
//! in attribute order, rows in primary-key order. The SQL wrappers pin TimeZone, DateStyle,
//! IntervalStyle, extra_float_digits and bytea_output so the same rows render to the same bytes
//! in any session.

use crate::catalog::{prepared, KeyAt, RelationInfo};
use crate::error::{Result, RetentionError};
use crate::tid::{self, Tid};
use pg_retention_format::append_frame;
use pgrx::datum::DatumWithOid;
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::spi::OwnedPreparedStatement;
use pgrx::{PgMemoryContexts, PgOid};
use std::collections::HashMap;
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

    /// # Safety
    /// `datum` is a non-NULL value of this function's type; the text lives in the current
    /// memory context.
    unsafe fn text<'a>(&mut self, datum: pg_sys::Datum) -> Result<&'a str> {
        let text = pg_sys::OutputFunctionCall(&mut self.finfo, datum);
        CStr::from_ptr(text)
            .to_str()
            .map_err(|e| RetentionError::Internal(format!("text output is not UTF-8: {e}")))
    }
}

/// Least and greatest value of one result column in its type's btree order, rendered.
#[derive(Debug, Default)]
pub struct Extremes {
    /// Text output of the least non-NULL value.
    pub min: Option<String>,
    /// Text output of the greatest non-NULL value.
    pub max: Option<String>,
}

/// A statement whose rows are rendered: SQL text run once, or a plan kept between calls.
pub enum Statement<'a> {
    /// Planned for this one run.
    Text(&'a str),
    /// Prepared before (see [`prepared::cached`]).
    Plan(&'a OwnedPreparedStatement),
}

/// A row version: where it is and the transaction that wrote it (its `xmin`, as a number).
pub type Version = (Tid, i64);

/// What `each` is called with per row: its first columns rendered (None for NULL), its place,
/// its xmin, and how many rows the statement returns (for a statement rendered as it runs, the
/// most it may return).
type EachRow<'e> = dyn FnMut(&[Option<&str>], Option<Tid>, Option<i64>, usize) -> Result<()> + 'e;

/// Renders rows one at a time against one result descriptor (see [`for_each_rendered`]).
struct RowRenderer<'e> {
    render: usize,
    fns: Vec<OutputFn>,
    place_at: Option<usize>,
    xmin_at: Option<usize>,
    order: Option<Order>,
    scratch: PgMemoryContexts,
    rows: usize,
    each: &'e mut EachRow<'e>,
}

impl<'e> RowRenderer<'e> {
    /// # Safety
    /// `tupdesc` is the live descriptor of the rows to come.
    unsafe fn new(
        tupdesc: pg_sys::TupleDesc,
        render: usize,
        extremes: Option<usize>,
        rows: usize,
        each: &'e mut EachRow<'e>,
        streamed: bool,
    ) -> Result<Self> {
        let natts = (*tupdesc).natts as usize;
        let render = render.min(natts);
        let type_of = |i: usize| pg_sys::SPI_gettypeid(tupdesc, i as i32 + 1);
        let fns: Vec<OutputFn> = (0..natts).map(|i| OutputFn::new(type_of(i))).collect();
        let place_at = (render < natts && type_of(render) == pg_sys::TIDOID).then_some(render);
        let xmin_at = place_at
            .map(|c| c + 1)
            .filter(|&c| c < natts && type_of(c) == pg_sys::XIDOID);
        let order = match extremes {
            Some(c) if c < natts => Some(Order::new(tupdesc, c, streamed)?),
            _ => None,
        };
        Ok(RowRenderer {
            render,
            fns,
            place_at,
            xmin_at,
            order,
            scratch: PgMemoryContexts::new("pg_retention render"),
            rows,
            each,
        })
    }

    /// # Safety
    /// `values` and `nulls` hold one row of this renderer's descriptor, every attribute.
    unsafe fn row(&mut self, values: &[pg_sys::Datum], nulls: &[bool]) -> Result<()> {
        if let Some(o) = self.order.as_mut() {
            o.see(values[o.col], nulls[o.col]);
        }
        let place = self
            .place_at
            .filter(|&c| !nulls[c])
            .map(|c| tid::of(*values[c].cast_mut_ptr::<pg_sys::ItemPointerData>()));
        // An xid is a 32-bit value passed by value.
        let xmin = self
            .xmin_at
            .filter(|&c| !nulls[c])
            .map(|c| i64::from(values[c].value() as u32));
        let (render, rows) = (self.render, self.rows);
        let (fns, each) = (&mut self.fns, &mut self.each);
        // The texts live in a context reset after each row: a batch costs one row's worth of
        // rendered text at a time.
        let result = self.scratch.switch_to(|_| {
            let mut texts: Vec<Option<&str>> = Vec::with_capacity(render);
            for (i, f) in fns.iter_mut().enumerate().take(render) {
                texts.push(if nulls[i] {
                    None
                } else {
                    Some(f.text(values[i])?)
                });
            }
            each(&texts, place, xmin, rows)
        });
        self.scratch.reset();
        result
    }

    /// The extremes seen.
    fn extremes(mut self) -> Result<Extremes> {
        let Some(o) = self.order.take() else {
            return Ok(Extremes::default());
        };
        let f = &mut self.fns[o.col];
        // SAFETY: the extremes are datums of this column's type that outlive the statement:
        // of rows in SPI's tuple table (alive until the connection ends, after this) or, for
        // a streamed statement, passed by value (Order::new checks).
        let owned = |f: &mut OutputFn, d: Option<pg_sys::Datum>| -> Result<Option<String>> {
            d.map(|d| unsafe { f.text(d) }.map(str::to_owned))
                .transpose()
        };
        Ok(Extremes {
            min: owned(f, o.min)?,
            max: owned(f, o.max)?,
        })
    }
}

/// Runs `sql` and calls `each` once per result row with its first `render` columns rendered to
/// their text output (None for NULL; only those), and, when the column after them is a tid,
/// that tid as a [`Tid`], with the xid after it (the row's `xmin`) when there is one, and the
/// statement's row count. With `extremes`, also returns the least and greatest value of that
/// column. A plan's rows come from SPI's tuple table; SQL text is rendered as the executor
/// produces its rows ([`stream_text`]): no tuple table is built (it cost a sixth of a claim),
/// and `rows` is then `most`, the most it may return.
fn for_each_rendered(
    sql: Statement<'_>,
    args: &[DatumWithOid<'_>],
    render: usize,
    extremes: Option<usize>,
    most: usize,
    mut each: impl FnMut(&[Option<&str>], Option<Tid>, Option<i64>, usize) -> Result<()>,
) -> Result<Extremes> {
    let each: &mut EachRow<'_> = &mut each;
    match sql {
        Statement::Text(text) => {
            if !args.is_empty() {
                return Err(RetentionError::Internal(
                    "a rendered SQL text takes no parameters".into(),
                ));
            }
            stream_text(text, render, extremes, most, each)
        }
        Statement::Plan(plan) => Spi::connect_mut(|client| {
            let table = client.update(plan, None, args)?;
            let n = table.len();
            if n == 0 {
                return Ok(Extremes::default());
            }
            // SAFETY: SPI_tuptable is the result of the statement just run and stays valid
            // until the next SPI call, which nothing below makes; each tuple is deformed
            // against its own descriptor into buffers of its width.
            unsafe {
                let tt = pg_sys::SPI_tuptable;
                let tupdesc = (*tt).tupdesc;
                let natts = (*tupdesc).natts as usize;
                let mut renderer = RowRenderer::new(tupdesc, render, extremes, n, each, false)?;
                let mut values = vec![pg_sys::Datum::from(0usize); natts];
                let mut nulls = vec![false; natts];
                for r in 0..n {
                    let tuple = *(*tt).vals.add(r);
                    pg_sys::heap_deform_tuple(
                        tuple,
                        tupdesc,
                        values.as_mut_ptr(),
                        nulls.as_mut_ptr(),
                    );
                    renderer.row(&values, &nulls)?;
                }
                renderer.extremes()
            }
        }),
    }
}

/// A DestReceiver that hands each row to a [`RowRenderer`]. PostgreSQL sees only `base` (the
/// first field, so a pointer to this is a pointer to it).
#[repr(C)]
struct Streaming<'e> {
    base: pg_sys::DestReceiver,
    render: usize,
    extremes: Option<usize>,
    most: usize,
    each: Option<&'e mut EachRow<'e>>,
    /// The context the renderer lives in: the SPI connection's, which outlives the statement
    /// (the executor's own contexts end with it).
    home: pg_sys::MemoryContext,
    renderer: Option<RowRenderer<'e>>,
    /// The first error a row gave; the executor is then told to stop.
    failed: Option<RetentionError>,
}

#[pg_guard]
unsafe extern "C-unwind" fn stream_startup(
    me: *mut pg_sys::DestReceiver,
    _operation: std::ffi::c_int,
    typeinfo: pg_sys::TupleDesc,
) {
    let me = &mut *(me as *mut Streaming<'_>);
    if let Some(each) = me.each.take() {
        let old = pg_sys::MemoryContextSwitchTo(me.home);
        let made = RowRenderer::new(typeinfo, me.render, me.extremes, me.most, each, true);
        pg_sys::MemoryContextSwitchTo(old);
        match made {
            Ok(r) => me.renderer = Some(r),
            Err(e) => me.failed = Some(e),
        }
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn stream_row(
    slot: *mut pg_sys::TupleTableSlot,
    me: *mut pg_sys::DestReceiver,
) -> bool {
    let me = &mut *(me as *mut Streaming<'_>);
    let Some(renderer) = me.renderer.as_mut() else {
        return false;
    };
    let natts = (*(*slot).tts_tupleDescriptor).natts;
    // slot_getallattrs (an inline function): a projected row is already complete, and asking
    // a virtual slot to deform is an error.
    if i32::from((*slot).tts_nvalid) < natts {
        pg_sys::slot_getsomeattrs_int(slot, natts);
    }
    let n = natts as usize;
    let values = std::slice::from_raw_parts((*slot).tts_values, n);
    let nulls = std::slice::from_raw_parts((*slot).tts_isnull, n);
    match renderer.row(values, nulls) {
        Ok(()) => true,
        Err(e) => {
            me.failed = Some(e);
            false
        }
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn stream_nothing(_me: *mut pg_sys::DestReceiver) {}

/// Runs SQL text (no parameters) and renders each row as the executor produces it.
fn stream_text(
    sql: &str,
    render: usize,
    extremes: Option<usize>,
    most: usize,
    each: &mut EachRow<'_>,
) -> Result<Extremes> {
    let text = std::ffi::CString::new(sql)
        .map_err(|_| RetentionError::Internal("a statement with a NUL byte".into()))?;
    Spi::connect_mut(|_client| {
        // Built inside the connection, so the renderer (and its contexts) is dropped before
        // the connection ends, also when the statement fails.
        // SAFETY: the receiver outlives the statement run with it; PostgreSQL calls it only
        // from that run, on this thread, through `base`, the first field of a #[repr(C)] struct.
        let mut receiver = Streaming {
            base: pg_sys::DestReceiver {
                receiveSlot: Some(stream_row),
                rStartup: Some(stream_startup),
                rShutdown: Some(stream_nothing),
                rDestroy: Some(stream_nothing),
                mydest: pg_sys::CommandDest::DestNone,
            },
            render,
            extremes,
            most,
            each: Some(each),
            home: unsafe { pg_sys::CurrentMemoryContext },
            renderer: None,
            failed: None,
        };
        let status = unsafe {
            let options = pg_sys::SPIExecuteOptions {
                dest: &mut receiver.base,
                ..Default::default()
            };
            pg_sys::SPI_execute_extended(text.as_ptr(), &options)
        };
        if status < 0 {
            return Err(RetentionError::Internal(format!(
                "SPI_execute_extended failed: {status}"
            )));
        }
        if let Some(e) = receiver.failed.take() {
            return Err(e);
        }
        match receiver.renderer.take() {
            Some(r) => r.extremes(),
            None => Ok(Extremes::default()),
        }
    })
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

/// Running least and greatest datum of one column, by its type's default btree comparison.
struct Order {
    col: usize,
    cmp: *mut pg_sys::FmgrInfo,
    collation: pg_sys::Oid,
    min: Option<pg_sys::Datum>,
    max: Option<pg_sys::Datum>,
}

impl Order {
    /// # Safety
    /// `tupdesc` is a live descriptor with more than `col` attributes.
    /// With `streamed`, the rows' datums live only while each row is handed over, so the
    /// column must be of a type passed by value (an age column's: timestamptz, timestamp,
    /// date).
    unsafe fn new(tupdesc: pg_sys::TupleDesc, col: usize, streamed: bool) -> Result<Order> {
        let attr = attribute(tupdesc, col)?;
        let tc =
            pg_sys::lookup_type_cache((*attr).atttypid, pg_sys::TYPECACHE_CMP_PROC_FINFO as i32);
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

    /// # Safety
    /// `d` is a datum of this column, alive as long as the extremes are used (a datum passed
    /// by value always is).
    unsafe fn see(&mut self, d: pg_sys::Datum, null: bool) {
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

/// A statement's rows rendered: their keys, their frames back to back (the slice they make;
/// empty when only keys were rendered) and their places.
#[derive(Default)]
pub struct Rendered {
    /// The frames, concatenated.
    pub slice: Vec<u8>,
    /// End offset of each frame in `slice`.
    pub ends: Vec<usize>,
    /// The rows' keys one after another (primary-key arity values each), in row order.
    pub keys: Vec<Option<String>>,
    /// Each row's place (its ctid, the statement's column after the rendered ones), when the
    /// statement has one.
    pub places: Vec<Tid>,
    /// Each row's `xmin` (the column after its ctid), when the statement has one.
    pub xmins: Vec<i64>,
}

impl Rendered {
    /// BLAKE3 hex, row count and byte count of the slice.
    pub fn summary(&self) -> (String, u64, u64) {
        pg_retention_format::summarize_slice(&self.slice, self.ends.len() as u64)
    }

    /// The same rows in the order of `places`, each found by its place; these rows back
    /// unless they are exactly those at `places`.
    pub fn reordered(
        self,
        places: &[Tid],
        arity: usize,
    ) -> std::result::Result<Rendered, Rendered> {
        if self.places == places && self.ends.len() == places.len() {
            // Already in that order (a table whose key order is its storage order).
            return Ok(self);
        }
        self.in_order_of(places, arity).ok_or(self)
    }

    fn in_order_of(&self, places: &[Tid], arity: usize) -> Option<Rendered> {
        if self.ends.len() != places.len() || self.places.len() != places.len() {
            return None;
        }
        let at: HashMap<Tid, usize> = self
            .places
            .iter()
            .enumerate()
            .map(|(i, &p)| (p, i))
            .collect();
        let starts: Vec<usize> = std::iter::once(0)
            .chain(self.ends.iter().copied())
            .collect();
        let mut out = Rendered {
            slice: Vec::with_capacity(self.slice.len()),
            ..Rendered::default()
        };
        for &place in places {
            let i = *at.get(&place)?;
            out.slice
                .extend_from_slice(&self.slice[starts[i]..self.ends[i]]);
            out.ends.push(out.slice.len());
            out.keys
                .extend_from_slice(self.keys.get(i * arity..(i + 1) * arity)?);
            out.places.push(place);
            if let Some(&x) = self.xmins.get(i) {
                out.xmins.push(x);
            }
        }
        Some(out)
    }

    /// Appends the rows of `other` after these.
    pub fn append(&mut self, other: Rendered) {
        let base = self.slice.len();
        self.slice.extend_from_slice(&other.slice);
        self.ends.extend(other.ends.iter().map(|end| base + end));
        self.keys.extend(other.keys);
        self.places.extend(other.places);
        self.xmins.extend(other.xmins);
    }

    /// Each row's version (place and `xmin`), for a statement that returned both.
    pub fn versions(&self) -> impl Iterator<Item = Version> + '_ {
        self.places.iter().copied().zip(self.xmins.iter().copied())
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

/// The most a slice reserves from its first frame's size.
const MAX_SLICE_RESERVE: usize = 64 << 20;

/// Where things are in the rows of a statement rendered by [`render_rows`]: `width` columns,
/// then a ctid when the statement has one.
pub struct RowLayout {
    /// Columns before the ctid.
    pub width: usize,
    /// Where each row's key is: key columns among them, or the row's place.
    pub key_at: KeyAt,
    /// Whether the `width` columns are the table's own, in attribute order, to be framed.
    pub frames: bool,
    /// A column whose least and greatest value to report.
    pub extremes: Option<usize>,
    /// The most rows a SQL text returns (its LIMIT), to size the slice by before the rows are
    /// counted; unused for a plan (its rows are counted first).
    pub most: usize,
}

/// Renders the rows of `sql`: each row's key (and with `frames` its frame) and its place.
pub fn render_rows(
    sql: Statement<'_>,
    args: &[DatumWithOid<'_>],
    layout: &RowLayout,
) -> Result<(Rendered, Extremes)> {
    let width = layout.width;
    let arity = match &layout.key_at {
        KeyAt::Columns(at) => at.len(),
        KeyAt::Place => 1,
    };
    let mut out = Rendered::default();
    let mut first = true;
    let extremes = for_each_rendered(
        sql,
        args,
        width,
        layout.extremes,
        layout.most,
        |values, place, xmin, rows| {
            let columns = values.get(..width).ok_or_else(|| {
                RetentionError::Internal(format!("expected {width} columns, got {}", values.len()))
            })?;
            if first {
                // Every row's key, place and end, sized once for the statement's rows.
                out.keys.reserve(rows.saturating_mul(arity));
                out.places.reserve(if place.is_some() { rows } else { 0 });
                out.xmins.reserve(if xmin.is_some() { rows } else { 0 });
                out.ends.reserve(if layout.frames { rows } else { 0 });
            }
            let place_text;
            let key: Vec<Option<&str>> = match &layout.key_at {
                KeyAt::Columns(at) => at.iter().map(|&i| columns[i]).collect(),
                KeyAt::Place => {
                    let (block, item) = place.ok_or_else(|| {
                        RetentionError::Internal("a row keyed by its place has no ctid".into())
                    })?;
                    place_text = format!("({block},{item})");
                    vec![Some(place_text.as_str())]
                }
            };
            out.keys.extend(key.iter().map(|k| k.map(str::to_owned)));
            if layout.frames {
                append_frame(&mut out.slice, &key, columns)
                    .map_err(|e| RetentionError::Internal(e.to_string()))?;
                if first {
                    // The slice sized from the first frame (with a margin), not grown by
                    // doubling and copied again and again: a 10,000-row slice is a few
                    // megabytes. At most 64 MiB ahead: one wide first row must not reserve
                    // for all.
                    let frame = out.slice.len();
                    out.slice
                        .reserve(frame.saturating_mul(rows + rows / 4).min(MAX_SLICE_RESERVE));
                }
                out.ends.push(out.slice.len());
            }
            first = false;
            out.places.extend(place);
            out.xmins.extend(xmin);
            Ok(())
        },
    )?;
    Ok((out, extremes))
}

/// Renders the rows of `sql` (every column of `rel` in attribute order, then optionally a ctid)
/// into frames.
fn render_frames(
    rel: &RelationInfo,
    sql: Statement<'_>,
    args: &[DatumWithOid<'_>],
    most: usize,
) -> Result<Rendered> {
    let layout = RowLayout {
        width: rel.columns.len(),
        key_at: rel.key_at()?,
        frames: true,
        extremes: None,
        most,
    };
    Ok(render_rows(sql, args, &layout)?.0)
}

/// Renders the rows at `places` (in the scan's order; see [`Rendered::reordered`]), each with
/// its place. A TID scan: one heap fetch per row, no index probe and no sort.
pub fn render_batch(rel: &RelationInfo, places: &[Tid]) -> Result<Rendered> {
    let sql = format!(
        "SELECT {cols}, t.ctid FROM ONLY {table} t WHERE t.ctid = ANY ($1)",
        cols = rel.column_list(),
        table = rel.qualified,
    );
    render_at(rel, &sql, places, false)
}

/// While alive, the plan cache hands out generic plans only (`plan_cache_mode =
/// force_generic_plan`), as [`GenericPlans::run`] uses it around a statement over a tid[].
///
/// A custom plan of `ctid = ANY ($1) AND <age> < $2` sees the cutoff as a constant and the
/// 10,000 tids as 10,000 elements, and picks the age column's index with the tids as a filter:
/// the first five prunes of a run (before the plan cache settles on a generic plan) each read
/// every eligible row of the table, not their own batch's (a fifth of an archive run's time on
/// a table of a million rows). The generic plan is a TID scan.
struct GenericPlans {
    before: std::ffi::c_int,
}

impl GenericPlans {
    /// Runs `f` with generic plans only; the setting comes back after it, raised or not (an
    /// error raised inside unwinds through the guard's drop).
    fn run<T>(f: impl FnOnce() -> T) -> T {
        // Safety: the backend's own setting, read and written on its one thread; restored by
        // the guard's drop on every path out of `f`.
        let _guard = unsafe {
            let before = pg_sys::plan_cache_mode;
            pg_sys::plan_cache_mode =
                pg_sys::PlanCacheMode::PLAN_CACHE_MODE_FORCE_GENERIC_PLAN as std::ffi::c_int;
            GenericPlans { before }
        };
        f()
    }
}

impl Drop for GenericPlans {
    fn drop(&mut self) {
        // Safety: as in `run`.
        unsafe { pg_sys::plan_cache_mode = self.before };
    }
}

/// The plan kept for `sql`, a statement whose first parameter `$1` is a tid[] and whose
/// others are of the types `more`.
fn plan_over_tids(
    sql: &str,
    more: &[PgOid],
    mutating: bool,
) -> Result<std::rc::Rc<OwnedPreparedStatement>> {
    let mut args = vec![PgOid::BuiltIn(pg_sys::BuiltinOid::TIDARRAYOID)];
    args.extend_from_slice(more);
    prepared::cached(sql, &args, mutating)
}

/// Renders the rows of `sql`, a statement built at run time over the tids `$1` (a tid[], the
/// `places`) that returns a table's columns and a ctid, through a plan kept for its text;
/// `mutating` for one that writes.
pub fn render_at(
    rel: &RelationInfo,
    sql: &str,
    places: &[Tid],
    mutating: bool,
) -> Result<Rendered> {
    let plan = plan_over_tids(sql, &[], mutating)?;
    let tids = crate::arrays::tids(places)?;
    GenericPlans::run(|| render_frames(rel, Statement::Plan(&plan), &[tids], places.len()))
}

/// The keys and versions of the rows of `sql`, a statement built at run time over the tids `$1`
/// (a tid[], the `places`) and the parameters `more` after it, that returns the table's
/// primary-key columns, a ctid and an xmin, through a plan kept for its text; `mutating` for
/// one that writes. Nothing else is rendered.
pub fn versions_at(
    rel: &RelationInfo,
    sql: &str,
    places: &[Tid],
    more: Vec<DatumWithOid<'_>>,
    mutating: bool,
) -> Result<Rendered> {
    let types: Vec<PgOid> = more.iter().map(|d| PgOid::from(d.oid())).collect();
    let plan = plan_over_tids(sql, &types, mutating)?;
    let mut args: Vec<DatumWithOid<'_>> = vec![crate::arrays::tids(places)?];
    args.extend(more);
    let layout = RowLayout {
        width: rel.key_arity(),
        key_at: KeyAt::Columns((0..rel.key_arity()).collect()),
        frames: false,
        extremes: None,
        most: places.len(),
    };
    let (rendered, _) = GenericPlans::run(|| render_rows(Statement::Plan(&plan), &args, &layout))?;
    Ok(rendered)
}

/// Frames of up to `limit` rows of the table matching `condition` (over alias `t`).
pub fn sample_frames(rel: &RelationInfo, condition: &str, limit: i64) -> Result<Rendered> {
    let sql = format!(
        "SELECT {cols}, t.ctid FROM {table} t WHERE {condition} LIMIT {limit}",
        cols = rel.column_list(),
        table = rel.all_rows(),
    );
    render_frames(
        rel,
        Statement::Text(&sql),
        &[],
        usize::try_from(limit).unwrap_or(0),
    )
}
