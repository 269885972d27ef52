//! What the checker reports: the broken invariants found and the checks and figures counted.

use super::*;

/// One broken invariant.
pub struct Violation {
    /// Which invariant.
    pub invariant: &'static str,
    /// What was seen.
    pub text: String,
    /// The row concerned, if one.
    pub row: Option<(Table, i64)>,
    /// The subject concerned, if one.
    pub subject: Option<i32>,
    /// When (wall clock µs) the offending action happened, if known.
    pub at_us: Option<i64>,
}

/// What the checker found and counted.
#[derive(Default)]
pub struct Report {
    /// Broken invariants.
    pub violations: Vec<Violation>,
    /// Checks made, by invariant.
    pub checks: BTreeMap<&'static str, u64>,
    /// Figures: rows deleted by sweep, archived, erased, ...
    pub figures: BTreeMap<&'static str, i64>,
}

impl Report {
    pub(super) fn check(
        &mut self,
        invariant: &'static str,
        ok: bool,
        v: impl FnOnce() -> Violation,
    ) {
        *self.checks.entry(invariant).or_default() += 1;
        if !ok {
            let mut v = v();
            v.invariant = invariant;
            self.violations.push(v);
        }
    }
}

pub(super) fn violation(text: String) -> Violation {
    Violation {
        invariant: "",
        text,
        row: None,
        subject: None,
        at_us: None,
    }
}
