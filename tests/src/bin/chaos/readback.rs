//! Rows read back from a table or a restored slice, and whether each is what the writers
//! wrote (its content follows from its id and version: chaos_note, chaos_amount, chaos_body).

use crate::world::{RowShadow, Table};

/// A row as read back from a table or a restored slice.
#[derive(Clone, Debug)]
pub struct Seen {
    pub id: i64,
    pub subject: i32,
    pub created_us: i64,
    pub version: i32,
    pub open: bool,
    pub consistent: bool,
}

const ROW_SQL: &str =
    "SELECT id, subject, (extract(epoch FROM created_at) * 1000000)::bigint, version";

pub fn read_rows(
    db: &mut postgres::Client,
    table: Table,
    from: &str,
) -> Result<Vec<Seen>, postgres::Error> {
    let (open, consistent) = match table {
        Table::Events => ("false", "note = chaos_note(id, version)"),
        Table::Audit => (
            "state = 'open'",
            "amount = chaos_amount(id, version) AND body = chaos_body(id, version)
             AND (version = 0 OR state = 'closed')",
        ),
    };
    let rows = db.query(
        &format!("{ROW_SQL}, {open}, coalesce({consistent}, false) FROM {from}"),
        &[],
    )?;
    Ok(rows
        .iter()
        .map(|r| Seen {
            id: r.get(0),
            subject: r.get(1),
            created_us: r.get(2),
            version: r.get(3),
            open: r.get(4),
            consistent: r.get(5),
        })
        .collect())
}

/// Checks a row read back against what the writers wrote.
pub fn matches_shadow(seen: &Seen, row: Option<&RowShadow>, final_version: bool) -> bool {
    let Some(row) = row else { return false };
    let version_ok = if final_version {
        row.possible_versions().contains(&seen.version)
    } else {
        row.any_version(seen.version)
    };
    seen.consistent
        && seen.subject == row.subject
        && seen.created_us == row.created_us
        && version_ok
        && (seen.version > 0 || seen.open == row.initially_open)
}
