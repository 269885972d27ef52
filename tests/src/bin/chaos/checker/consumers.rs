//! Invariant 7: no row at or past a live consumer's reported position was swept.

use super::*;

/// Invariant 7: `id`, swept at `at`, was below every consumer position in force.
pub(super) fn check_consumers(
    report: &mut Report,
    consumers: &[crate::world::ConsumerSeen],
    id: i64,
    at: i64,
) {
    for c in consumers {
        if !surely_in_force(c.registered_us, c.unregister_sent_us, at) {
            continue;
        }
        // The highest position that can have been in force: any report sent before the delete.
        let highest = c
            .reports
            .iter()
            .filter(|(sent, _)| *sent < at + MARGIN_US)
            .map(|(_, p)| *p)
            .max();
        let ok = highest.is_some_and(|p| id < p);
        report.check("7 consumer pins hold", ok, || Violation {
            row: Some((Table::Events, id)),
            at_us: Some(at),
            ..violation(format!(
                "events {id} swept while consumer feed (registered at {}) pinned from {highest:?}",
                c.registered_us
            ))
        });
    }
}
