//! A row's place in its table (its ctid) as Rust carries it between statements: (block, item).
//! The sweep's watermark, the quota's last row and the archive's claim-time places all use it.

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

/// The tid datums of `places`, for a tid[] parameter.
pub fn pointers(places: &[Tid]) -> Vec<ItemPointerData> {
    places.iter().map(|&p| pointer(p)).collect()
}
