//! Rendering rows into slice frames. Every value is its type's text output (the type's output
//! function, called from Rust on the datums SPI returns, as COPY does), NULL stays NULL, columns
//! in attribute order, rows in primary-key order. The SQL wrappers pin TimeZone, DateStyle,
//! IntervalStyle, extra_float_digits and bytea_output so the same rows render to the same bytes
//! in any session.
//!
//! This module holds the layout of a rendered statement ([`RowLayout`]) and the functions that
//! fill a [`Rendered`] with keys and frames. The per-row machinery that calls the output
//! functions is in `stream.rs` (with the type functions it uses in `type_fns.rs`), the rendered
//! rows themselves in `rendered.rs`, and the statements over a tid[] in `tid_plans.rs`.

mod rendered;
mod stream;
mod tid_plans;
mod type_fns;

pub use rendered::{Rendered, Version};
pub use stream::{Extremes, Statement};
pub use tid_plans::{render_batch, versions_at};

use crate::catalog::{KeyAt, RelationInfo};
use crate::error::{Result, RetentionError};
use pg_retention_format::{append_frame, append_frame_keyed};
use pgrx::datum::DatumWithOid;
use stream::for_each_rendered;

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
    if let KeyAt::Columns(at) = &layout.key_at {
        if let Some(&past) = at.iter().find(|&&i| i >= width) {
            return Err(RetentionError::Internal(format!(
                "key column {past} is not among the {width} rendered"
            )));
        }
    }
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
            // No key is gathered per row: the frame takes the key columns by position (checked
            // above to lie among them).
            let framed = match &layout.key_at {
                KeyAt::Columns(at) => {
                    out.keys
                        .extend(at.iter().map(|&i| columns[i].map(str::to_owned)));
                    layout
                        .frames
                        .then(|| append_frame_keyed(&mut out.slice, at, columns))
                }
                KeyAt::Place => {
                    let (block, item) = place.ok_or_else(|| {
                        RetentionError::Internal("a row keyed by its place has no ctid".into())
                    })?;
                    let place_text = format!("({block},{item})");
                    let frame = layout.frames.then(|| {
                        append_frame(&mut out.slice, &[Some(place_text.as_str())], columns)
                    });
                    out.keys.push(Some(place_text));
                    frame
                }
            };
            if let Some(framed) = framed {
                framed.map_err(|e| RetentionError::Internal(e.to_string()))?;
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
