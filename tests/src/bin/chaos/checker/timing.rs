//! Times judged with the margin: whether a hold or consumer surely stood at a moment, and
//! whether a prune may rightly have kept a row its slice holds.

/// Slack between the driver's clock reads and a deleting statement's snapshot.
pub const MARGIN_US: i64 = 2_000_000;

/// Whether something that began at `since` (committed by then) and ended no earlier than
/// `until` (sent then; None: never) surely stood at `at`, the margin on the safe side.
pub(super) fn surely_in_force(since: i64, until: Option<i64>, at: i64) -> bool {
    since + MARGIN_US < at && until.is_none_or(|u| u > at + MARGIN_US)
}

/// Whether a prune may rightly have kept a row its slice holds (`complete_batch` deletes only
/// the claimed rows still eligible and unheld): the row's subject was held at some time, or it
/// was not surely eligible at the prune (`prune`: when, and the window of the version that
/// pruned) — a window widened between claim and prune. Unknown prune or window: cannot be judged.
pub(super) fn prune_may_have_kept(
    created_us: i64,
    ever_held: bool,
    prune: Option<(i64, Option<i64>)>,
) -> bool {
    match prune {
        _ if ever_held => true,
        Some((at, Some(window))) => created_us + MARGIN_US >= at - window,
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::{prune_may_have_kept, MARGIN_US};

    const S: i64 = 1_000_000;

    #[test]
    fn a_prune_may_keep_a_row_only_when_held_or_not_surely_eligible() {
        // Pruned at 100 s under a 30 s window: rows written before 70 s were eligible.
        let prune = Some((100 * S, Some(30 * S)));
        assert!(
            !prune_may_have_kept(60 * S, false, prune),
            "eligible and never held: must go"
        );
        assert!(
            prune_may_have_kept(60 * S, true, prune),
            "its subject was held"
        );
        // Claimed under a shorter window, pruned after it was widened to 50 s: kept rightly.
        assert!(prune_may_have_kept(
            60 * S,
            false,
            Some((100 * S, Some(50 * S)))
        ));
        // Within the margin of the cutoff: not surely eligible.
        assert!(prune_may_have_kept(70 * S - MARGIN_US / 2, false, prune));
        // No prune entry or no known window: not judged.
        assert!(prune_may_have_kept(60 * S, false, None));
        assert!(prune_may_have_kept(60 * S, false, Some((100 * S, None))));
    }
}
