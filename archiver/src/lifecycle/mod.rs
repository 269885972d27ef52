//! The archive-lifecycle figures of the one-shot commands `expire` and `sweep-orphans`: objects
//! and bytes planned and deleted, refusals by reason, partial runs, the last success. A
//! one-shot process has ended before any scrape, so each run adds its [`Tally`] to a small state
//! file (`state`: `lifecycle.json` in `--state-dir`), and `run` / `serve-metrics` render that
//! file on `/metrics` (`exposition`). Every label value is a closed enum ([`Command`],
//! [`Reason`]): never a key, an operation id, an actor or an error's text.

use crate::error::Error;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

mod exposition;
mod state;

pub use exposition::render;
pub use state::{read, record, State};

/// The command a figure is about.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Command {
    /// `expire plan | prepare | apply | status`.
    Expire,
    /// `sweep-orphans`.
    SweepOrphans,
}

impl Command {
    /// Every command, in exposition order.
    pub const ALL: [Command; 2] = [Command::Expire, Command::SweepOrphans];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Command::Expire => "expire",
            Command::SweepOrphans => "sweep_orphans",
        }
    }

    /// The refusal reasons this command can count (each always exported, 0 until counted).
    pub fn reasons(self) -> &'static [Reason] {
        match self {
            Command::Expire => &[
                Reason::NotReady,
                Reason::NoLongerDue,
                Reason::InventoryChanged,
                Reason::Held,
                Reason::Unreadable,
                Reason::Superseded,
                Reason::Tombstone,
                Reason::NamespaceClaimed,
                Reason::Other,
            ],
            Command::SweepOrphans => &[Reason::Referenced, Reason::NamespaceClaimed, Reason::Other],
        }
    }
}

/// Why an expire step or a sweep refused (did not delete what it would have).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// `apply` before the quiescence interval passed.
    NotReady,
    /// `apply`: a planned archive is no longer past its policy's `archive_keep`.
    NoLongerDue,
    /// `apply`: the inventory beside a planned archive changed since the plan.
    InventoryChanged,
    /// A hold matches an archive's rows: per archive in `plan`, per run in `apply`.
    Held,
    /// `plan`: an archive's objects cannot be read, or are not the archived ones (per archive).
    Unreadable,
    /// `apply`: an erasure's rewrite replaced a planned archive's object since the plan.
    Superseded,
    /// `apply`: the operation's tombstone is missing, unreadable or not the plan's.
    Tombstone,
    /// This database's namespace is another database's in the store (exit 6).
    NamespaceClaimed,
    /// `sweep-orphans --apply`: a listed object became referenced before its delete (per
    /// object kept).
    Referenced,
    /// Any other refusal (a plan for another database, an operation never prepared, …).
    Other,
}

impl Reason {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::NotReady => "not_ready",
            Reason::NoLongerDue => "no_longer_due",
            Reason::InventoryChanged => "inventory_changed",
            Reason::Held => "held",
            Reason::Unreadable => "unreadable",
            Reason::Superseded => "superseded",
            Reason::Tombstone => "tombstone",
            Reason::NamespaceClaimed => "namespace_claimed",
            Reason::Referenced => "referenced",
            Reason::Other => "other",
        }
    }

    /// The reason of an error that is a refusal (as `crate::exit` counts refusals); None for
    /// a failure.
    pub fn of(e: &Error) -> Option<Reason> {
        match e {
            Error::NamespaceClaimed { .. } => Some(Reason::NamespaceClaimed),
            Error::Refusal(_) | Error::Refused { .. } => Some(Reason::Other),
            _ => None,
        }
    }
}

/// What one run of a command did.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Tally {
    /// Objects planned: `expire plan`'s plan, `sweep-orphans`' listing.
    pub planned_objects: u64,
    /// Their bytes.
    pub planned_bytes: u64,
    /// Objects deleted.
    pub deleted_objects: u64,
    /// Their bytes.
    pub deleted_bytes: u64,
    /// Refusals, by reason.
    pub refusals: BTreeMap<Reason, u64>,
    /// The run stopped before finishing its deletes (expire's `partial`; a sweep whose delete
    /// failed).
    pub partial: bool,
    /// The run finished its work: an `apply` that completed, a `sweep-orphans --apply` that
    /// deleted every object still unreferenced.
    pub succeeded: bool,
    /// The run itself was refused (counted once: [`Tally::ended`] does not count it again).
    run_refused: bool,
}

impl Tally {
    /// Counts a refusal of one item (an archive a plan leaves, an object a sweep keeps).
    pub fn refuse(&mut self, reason: Reason) {
        *self.refusals.entry(reason).or_default() += 1;
    }

    /// Counts the refusal of the run.
    pub fn refuse_run(&mut self, reason: Reason) {
        self.refuse(reason);
        self.run_refused = true;
    }

    /// The run ended with `e`: a refusal not counted yet is counted (as [`Reason::of`] names
    /// it).
    pub fn ended(&mut self, e: &Error) {
        if let (false, Some(reason)) = (self.run_refused, Reason::of(e)) {
            self.refuse_run(reason);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_the_serialized_names() {
        for c in Command::ALL {
            assert_eq!(serde_json::to_value(c).unwrap(), c.as_str());
            for r in c.reasons() {
                assert_eq!(serde_json::to_value(r).unwrap(), r.as_str());
            }
        }
        assert_eq!(
            serde_json::to_value(Reason::Referenced).unwrap(),
            "referenced"
        );
    }

    #[test]
    fn a_refused_run_is_counted_once() {
        let mut t = Tally::default();
        t.refuse(Reason::Held);
        t.refuse_run(Reason::Tombstone);
        t.ended(&Error::Refusal("tombstone missing".into()));
        assert_eq!(t.refusals[&Reason::Tombstone], 1);
        assert!(!t.refusals.contains_key(&Reason::Other));
        let mut t = Tally::default();
        t.ended(&Error::NamespaceClaimed {
            namespace: "n".into(),
            by: "b".into(),
            me: "m".into(),
        });
        t.ended(&Error::Config("not a refusal".into()));
        assert_eq!(t.refusals.get(&Reason::NamespaceClaimed), Some(&1));
        assert_eq!(t.refusals.len(), 1);
        let mut t = Tally::default();
        t.ended(&Error::Io(std::io::Error::other("disk")));
        assert!(t.refusals.is_empty(), "a failure is not a refusal");
    }
}
