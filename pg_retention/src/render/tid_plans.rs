//! Rendering the rows at a list of tids: a statement built at run time whose first parameter is
//! a tid[], planned once per text, and run with generic plans only so that it stays a TID scan
//! (`prepared::generic_plans`). Used by archive batches (render, verify, prune), apart from the
//! general rendering in `mod.rs` because the plan-cache handling is theirs alone.
//!
//! A custom plan of `ctid = ANY ($1) AND <age> < $2` sees the cutoff as a constant and the
//! 10,000 tids as 10,000 elements, and picks the age column's index with the tids as a filter:
//! the first five prunes of a run (before the plan cache settles on a generic plan) each read
//! every eligible row of the table, not their own batch's (a fifth of an archive run's time on
//! a table of a million rows). The generic plan is a TID scan.

use super::{render_frames, render_rows, Rendered, RowLayout, Statement};
use crate::catalog::{prepared, KeyAt, RelationInfo};
use crate::error::Result;
use crate::tid::Tid;
use pgrx::datum::DatumWithOid;
use pgrx::pg_sys;
use pgrx::spi::OwnedPreparedStatement;
use pgrx::PgOid;

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
    prepared::generic_plans(|| render_frames(rel, Statement::Plan(&plan), &[tids], places.len()))
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
    let (rendered, _) =
        prepared::generic_plans(|| render_rows(Statement::Plan(&plan), &args, &layout))?;
    Ok(rendered)
}
