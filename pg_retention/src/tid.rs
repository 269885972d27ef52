//! A row's place in its table (its ctid) as Rust carries it between statements: (block, item).
//! The sweep's watermark, the quota's last row and the archive's claim-time places all use it;
//! statements get it as a parameter (many as one tid[]: `arrays.rs`), or as a literal where SQL
//! text has to carry it.

use pgrx::pg_sys::ItemPointerData;

/// (block, item) of a row.
pub type Tid = (u64, u64);

/// The tid datum of a place; out-of-range parts are clamped (the sweep's "end of table").
pub fn pointer((block, item): Tid) -> ItemPointerData {
    let mut tid = ItemPointerData::default();
    pgrx::itemptr::item_pointer_set_all(
        &mut tid,
        block.min(u64::from(u32::MAX)) as u32,
        item.min(u64::from(u16::MAX)) as u16,
    );
    tid
}

/// The place of a tid datum.
pub fn of(tid: ItemPointerData) -> Tid {
    let (block, item) = pgrx::itemptr::item_pointer_get_both(tid);
    (u64::from(block), u64::from(item))
}

/// A `tid` literal of a place.
pub fn literal((block, item): Tid) -> String {
    format!("'({block},{item})'::tid")
}

/// Parses Postgres's text form of a tid, `(block,item)`.
pub fn parse(text: &str) -> Option<Tid> {
    let inner = text.trim().strip_prefix('(')?.strip_suffix(')')?;
    let (b, i) = inner.split_once(',')?;
    Some((b.trim().parse().ok()?, i.trim().parse().ok()?))
}

#[cfg(any(test, feature = "pg_test"))]
#[pgrx::pg_schema]
mod tests {
    use super::*;
    use pgrx::prelude::*;

    #[pg_test]
    fn tids_round_trip() {
        assert_eq!(parse("(12,7)"), Some((12, 7)));
        assert_eq!(literal((12, 7)), "'(12,7)'::tid");
        assert_eq!(parse("12,7"), None);
        assert_eq!(of(pointer((12, 7))), (12, 7));
    }
}
