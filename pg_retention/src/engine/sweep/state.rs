//! The state of a run, kept in the backend that runs it between steps ([`SweepState`],
//! `runs.rs`), and how a run went ([`Outcome`]). Kept apart from the steps that change it so
//! that the shape every step reads and writes is in one place, with the few helpers every step
//! uses on it (ending the run, ledgering under its run id).

use crate::catalog::{LedgerEntry, LedgerMethod, Policy};
use crate::engine::pacing::Adaptive;
use crate::engine::references::Dependents;
use crate::error::{present, Result};
use pgrx::prelude::*;
use serde::Serialize;

/// How a run went (`detail.outcome` of its `run` ledger record).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// Not over yet.
    Running,
    /// No eligible rows left (or none left at the cap).
    Ok,
    /// Stopped at the run's cap with eligible rows left.
    Cap,
    /// A step failed; ledgered.
    Error,
    /// The policy changed, was disabled or dropped during the run.
    Stopped,
    /// Nothing to run (disabled, gone, or an archive policy).
    Skipped,
}

/// The state of one run of one policy, carried between steps.
#[derive(Debug, Clone)]
pub struct SweepState {
    /// Policy id.
    pub policy_id: i64,
    /// Policy name (for messages).
    pub policy: String,
    /// Policy version the run started with; a change of version stops the run.
    pub version: i32,
    /// Run id, shared by every ledger record of the run.
    pub run_id: String,
    /// Who runs it (a role, or "worker").
    pub actor: String,
    /// Watermark: steps look at rows after this tid (block, item).
    pub lo: (u64, u64),
    /// For `age`: blocks per step range (adapts to the density of eligible rows).
    pub span: u64,
    /// For `age` on a table with a btree index on the age column: steps walk that index and
    /// take the eligible rows aged from this value on (the type's text form). None: steps walk
    /// block ranges from `lo`.
    pub age_from: Option<String>,
    /// Rows deleted so far.
    pub deleted: i64,
    /// Steps that deleted rows (`batches` in the ledger and `retention._run_end`, as
    /// documented).
    pub steps: i64,
    /// Most rows this run may delete (policy cap, or less when a worker cycle cap is lower).
    pub cap: i64,
    /// Whether the run is over.
    pub done: bool,
    /// How the run went.
    pub outcome: Outcome,
    /// Why the run stopped, when it did not simply finish.
    pub reason: Option<String>,
    /// For a partitioned table: the leaves not yet swept, the one being swept first (empty for
    /// a table that is not partitioned).
    pub leaves: Vec<u32>,
    /// Whether the current leaf is still to be tried for a whole drop.
    pub retire: bool,
    /// Leaves dropped whole.
    pub dropped: i64,
    /// Leaves the last step detached to retire whole, which the next transaction drops (the
    /// next step, or `finish`); each has a `retention.retiring_leaves` row and this session's
    /// lock.
    pub detached: Vec<u32>,
    /// Adaptive pacing: the next step's size and the pauses so far.
    pub paced: Adaptive,
    /// Within a step: the tables its deletes change through foreign keys, and their rows
    /// changed in this transaction before it (engine/references.rs), for its ledger entry.
    pub dependents: Option<(Dependents, Vec<i64>)>,
}

impl Outcome {
    /// Its name, as the ledger and `retention._run_end` write it.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Running => "running",
            Outcome::Ok => "ok",
            Outcome::Cap => "cap",
            Outcome::Error => "error",
            Outcome::Stopped => "stopped",
            Outcome::Skipped => "skipped",
        }
    }
}

pub(super) fn new_run_id() -> Result<String> {
    present(
        Spi::get_one::<String>("SELECT gen_random_uuid()::text")?,
        "gen_random_uuid()",
    )
}

impl SweepState {
    pub(super) fn stop_at_cap(self) -> Self {
        let reason = format!(
            "run cap of {} rows reached with eligible rows left",
            self.cap
        );
        self.stop(Outcome::Cap, reason)
    }

    /// Appends a ledger entry of this run (its actor and run id) about `policy`.
    pub(super) fn ledger(
        &self,
        method: LedgerMethod,
        policy: Option<&Policy>,
        rows: i64,
        hold_ids: Vec<i64>,
        detail: serde_json::Value,
    ) -> Result<()> {
        LedgerEntry {
            method,
            policy,
            relation: None,
            rows,
            hold_ids,
            actor: &self.actor,
            run_id: Some(&self.run_id),
            detail,
        }
        .append()
    }

    /// Ends the run with `outcome` and why.
    pub(crate) fn stop(mut self, outcome: Outcome, reason: impl Into<String>) -> Self {
        self.done = true;
        self.outcome = outcome;
        self.reason = Some(reason.into());
        self
    }
}
