//! The runs under way in this backend, each known by a token.
//!
//! A run lives here, in the backend that began it, from its begin to its end (`driver.rs`):
//! its [`SweepState`] and what the driver notes between two of its parts. What
//! `CALL retention.run()` and the worker hold between their commits is only the token, a plain
//! integer; a token this backend did not give names no run and is refused, so nothing but the
//! engine decides what a run deletes, counts or ledgers.

use super::{Outcome, SweepState};
use crate::error::{Result, RetentionError};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::time::Instant;

/// What a run under way does next, when it is not over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// A step (the first one, or the one after a pacing check that let it go).
    Step,
    /// A pacing check: the last step's WAL is charged, and the next step may have to wait.
    Pace,
}

/// A run this backend keeps.
#[derive(Debug, Clone)]
pub struct Run {
    /// The engine's state of the run.
    pub state: SweepState,
    /// Its next part.
    pub next: Next,
    /// WAL the last step wrote, in bytes: what its pacing check charges to the database's
    /// budget.
    pub step_wal_bytes: i64,
    /// When the pause under way between two steps began, and why; ledgered when it is over.
    pub pause: Option<(Instant, String)>,
}

thread_local! {
    static RUNS: RefCell<HashMap<i64, Run>> = RefCell::new(HashMap::new());
    static NEXT: Cell<i64> = const { Cell::new(1) };
}

/// Keeps a new run (its first part is a step) and gives it its token.
pub fn keep(state: SweepState) -> i64 {
    let token = NEXT.with(|n| {
        let t = n.get();
        n.set(t + 1);
        t
    });
    let run = Run {
        state,
        next: Next::Step,
        step_wal_bytes: 0,
        pause: None,
    };
    RUNS.with(|r| r.borrow_mut().insert(token, run));
    token
}

/// Run `token`, or 22023 when this backend runs no such run.
pub fn get(token: i64) -> Result<Run> {
    RUNS.with(|r| r.borrow().get(&token).cloned())
        .ok_or_else(|| unknown(token))
}

/// Records what became of run `token`.
pub fn put(token: i64, run: Run) {
    RUNS.with(|r| r.borrow_mut().insert(token, run));
}

/// Ends the keeping of run `token` and returns it.
pub fn take(token: i64) -> Result<Run> {
    RUNS.with(|r| r.borrow_mut().remove(&token))
        .ok_or_else(|| unknown(token))
}

/// Forgets the runs of policy `policy_id` this backend still keeps: runs interrupted before
/// their end (a cancelled `CALL retention.run()`), whose pruner lock this session still
/// holds. Their states are returned, for the caller to let go of what they held.
pub fn abandoned(policy_id: i64) -> Vec<SweepState> {
    RUNS.with(|r| {
        let mut runs = r.borrow_mut();
        let tokens: Vec<i64> = runs
            .iter()
            .filter(|(_, run)| run.state.policy_id == policy_id)
            .map(|(t, _)| *t)
            .collect();
        tokens
            .iter()
            .filter_map(|t| runs.remove(t))
            .map(|run| run.state)
            .collect()
    })
}

/// Ends run `token` between steps (the worker's SIGTERM or visit bound, a step whose own
/// transaction failed), unless it is over already; its end closes it next. Whether it stopped
/// it.
pub fn stop(token: i64, outcome: Outcome, reason: &str) -> Result<bool> {
    let mut run = get(token)?;
    if run.state.done {
        return Ok(false);
    }
    run.state = run.state.stop(outcome, reason);
    put(token, run);
    Ok(true)
}

fn unknown(token: i64) -> RetentionError {
    RetentionError::invalid(
        "not a run this session started",
        format!("No run with token {token} is under way in this session."),
        "Pass the token retention._run_begin returned, in the same session.",
    )
}
