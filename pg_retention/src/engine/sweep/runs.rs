//! The runs under way in this backend, each known by a token.
//!
//! A run's state is the engine's own: it lives here, in the backend that started the run, from
//! `_run_begin` to `_run_end`. What `CALL retention.run()` and the worker hold between their
//! commits is only the token (with a read-only copy of the state, to read `done` and the counts
//! from); a state made up by a client names no run here and is refused, so nothing but the
//! engine decides what a run deletes, counts or ledgers.

use super::SweepState;
use crate::error::{Result, RetentionError};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;

thread_local! {
    static RUNS: RefCell<HashMap<u64, SweepState>> = RefCell::new(HashMap::new());
    static NEXT: Cell<u64> = const { Cell::new(1) };
}

/// Keeps a new run's state and gives it its token.
pub fn keep(mut state: SweepState) -> SweepState {
    let token = NEXT.with(|n| {
        let t = n.get();
        n.set(t + 1);
        t
    });
    state.token = token;
    RUNS.with(|r| r.borrow_mut().insert(token, state.clone()));
    state
}

/// The state of run `token`, or 22023 when this backend runs no such run.
pub fn get(token: u64) -> Result<SweepState> {
    RUNS.with(|r| r.borrow().get(&token).cloned())
        .ok_or_else(|| unknown(token))
}

/// Records the new state of a run this backend keeps.
pub fn put(state: SweepState) -> SweepState {
    RUNS.with(|r| r.borrow_mut().insert(state.token, state.clone()));
    state
}

/// Ends the keeping of run `token` and returns its last state.
pub fn take(token: u64) -> Result<SweepState> {
    RUNS.with(|r| r.borrow_mut().remove(&token))
        .ok_or_else(|| unknown(token))
}

/// Forgets the runs of policy `policy_id` this backend still keeps: runs interrupted before
/// their `_run_end` (a cancelled `CALL retention.run()`), whose pruner lock this session still
/// holds. Their states are returned, for the caller to let go of what they held.
pub fn abandoned(policy_id: i64) -> Vec<SweepState> {
    RUNS.with(|r| {
        let mut runs = r.borrow_mut();
        let tokens: Vec<u64> = runs
            .iter()
            .filter(|(_, s)| s.policy_id == policy_id)
            .map(|(t, _)| *t)
            .collect();
        tokens.iter().filter_map(|t| runs.remove(t)).collect()
    })
}

/// Ends run `token` between steps (the worker's SIGTERM, a step whose own transaction failed);
/// `_run_end` closes it next.
pub fn stop(token: u64, outcome: super::Outcome, reason: &str) -> Result<()> {
    let state = get(token)?;
    put(state.stop(outcome, reason));
    Ok(())
}

/// The token of a state handed back by SQL: only the token is read from it.
pub fn token_of(state: &serde_json::Value) -> Result<u64> {
    state
        .get("token")
        .and_then(serde_json::Value::as_u64)
        .ok_or_else(|| unknown(0))
}

fn unknown(token: u64) -> RetentionError {
    RetentionError::invalid(
        "not a run this session started",
        format!("No run with token {token} is under way in this session."),
        "Pass the value retention._run_begin or the previous step returned, in the same session.",
    )
}
