//! Running a statement and handing each row, its first columns rendered by their types' output
//! functions, to a callback: from SPI's tuple table for a kept plan, or straight from the
//! executor through a DestReceiver for SQL text (no tuple table is built). Kept apart from what
//! the rows are rendered into (`mod.rs`) because this is the unsafe part: raw descriptors,
//! datums and a receiver PostgreSQL calls back.

use super::type_fns::{Order, OutputFn};
use crate::error::{Result, RetentionError};
use crate::tid::{self, Tid};
use pgrx::datum::DatumWithOid;
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::spi::OwnedPreparedStatement;
use pgrx::PgMemoryContexts;

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
    /// Prepared before (see [`crate::catalog::prepared::cached`]).
    Plan(&'a OwnedPreparedStatement),
}

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
    /// The buffer each row's texts are gathered in, kept empty between rows (see [`recycled`]).
    texts: Vec<Option<&'static str>>,
    rows: usize,
    each: &'e mut EachRow<'e>,
}

/// `texts`, empty, as a buffer of any lifetime, keeping its allocation: a claim reads tens of
/// thousands of rows, and a buffer allocated and freed per row was a visible part of its time.
/// (Collecting an emptied vector into one of the same layout reuses its memory.)
fn recycled<'b>(mut texts: Vec<Option<&str>>) -> Vec<Option<&'b str>> {
    texts.clear();
    texts.into_iter().map(|_| None).collect()
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
        // SAFETY: `tupdesc` is live (this function's contract).
        unsafe {
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
                texts: Vec::with_capacity(render),
                rows,
                each,
            })
        }
    }

    /// # Safety
    /// `values` and `nulls` hold one row of this renderer's descriptor, every attribute.
    unsafe fn row(&mut self, values: &[pg_sys::Datum], nulls: &[bool]) -> Result<()> {
        // SAFETY: `values` and `nulls` are one row of this renderer's descriptor (this
        // function's contract).
        unsafe {
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
            let mut texts = recycled(std::mem::take(&mut self.texts));
            // The texts live in a context reset after each row: a batch costs one row's worth of
            // rendered text at a time.
            let result = self.scratch.switch_to(|_| {
                for (i, f) in fns.iter_mut().enumerate().take(render) {
                    texts.push(if nulls[i] {
                        None
                    } else {
                        Some(f.text(values[i])?)
                    });
                }
                each(&texts, place, xmin, rows)
            });
            // Emptied before the texts it pointed to are freed.
            self.texts = recycled(texts);
            self.scratch.reset();
            result
        }
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
pub(super) fn for_each_rendered(
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
    // SAFETY: PostgreSQL calls this with the `Streaming` it was given (see `stream_text`).
    unsafe {
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
}

#[pg_guard]
unsafe extern "C-unwind" fn stream_row(
    slot: *mut pg_sys::TupleTableSlot,
    me: *mut pg_sys::DestReceiver,
) -> bool {
    // SAFETY: PostgreSQL calls this with that `Streaming` and a live slot of its rows.
    unsafe {
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
