//! What a sweep step needs to know about its policy, table and holds, kept between the steps
//! of one run in this backend.
//!
//! Reading the policy, describing the table and reading the holds again for every step cost
//! about as much as deleting a thousand rows. Each step instead reads one fingerprint of all
//! three — the policy's version and state, the table's catalog row and the foreign keys that
//! reference it, the hold records and lifts that reach its rows and the leaves of the
//! partitions they are placed on — and reloads everything only when the
//! fingerprint differs from the one the cached context was read with.
//!
//! Every one of those changes also sends an invalidation (DDL by itself, policy and hold writes
//! through `catalog/announce.rs`), so a step whose backend has received none since the context
//! was read skips even the fingerprint (its executor start alone cost a twentieth of a step).
//! A change committed between steps therefore takes effect at the next step; one whose commit
//! is still completing as a step starts (visible, its invalidation not yet sent), at the step
//! after. A hold placed then is kept all the same: the step's hold fence counts hold records in
//! the deleting statement itself.

use crate::catalog::announce::invalidations_received;
use crate::catalog::policy::fingerprint;
use crate::catalog::{Hold, HoldFence, Policy, RelationInfo};
use crate::error::Result;
use std::cell::RefCell;

/// Everything a step plans with.
#[derive(Clone)]
pub struct RunContext {
    /// The policy as of the fingerprint.
    pub policy: Policy,
    /// Its table.
    pub rel: RelationInfo,
    /// The holds in force.
    pub holds: Vec<Hold>,
    /// The fence that makes a hold placed after `holds` were read win.
    pub fence: HoldFence,
}

thread_local! {
    /// The context of the run this backend swept last.
    static CACHED: RefCell<Option<Cached>> = const { RefCell::new(None) };
}

/// A context with what it was read under.
struct Cached {
    run_id: String,
    /// The invalidations this backend had received before the fingerprint was read.
    invalidations: u64,
    fingerprint: String,
    ctx: RunContext,
}

/// The context for the next step of run `run_id` of policy `policy_id`: the cached one when
/// nothing changed, else read afresh. None when the policy was dropped.
pub fn for_step(run_id: &str, policy_id: i64) -> Result<Option<RunContext>> {
    // Read first: an invalidation received while the rest is read makes the next step look again.
    let invalidations = invalidations_received();
    let unchanged = CACHED.with(|c| match &*c.borrow() {
        Some(cached) if cached.run_id == run_id && cached.invalidations == invalidations => {
            Some(cached.ctx.clone())
        }
        _ => None,
    });
    if let Some(ctx) = unchanged {
        return Ok(Some(ctx));
    }
    let Some(fingerprint) = fingerprint(policy_id)? else {
        return Ok(None);
    };
    let hit = CACHED.with(|c| match &mut *c.borrow_mut() {
        Some(cached) if cached.run_id == run_id && cached.fingerprint == fingerprint => {
            cached.invalidations = invalidations;
            Some(cached.ctx.clone())
        }
        _ => None,
    });
    if let Some(ctx) = hit {
        return Ok(Some(ctx));
    }
    CACHED.with(|c| c.borrow_mut().take());
    let Some(policy) = Policy::by_id(policy_id)? else {
        return Ok(None);
    };
    let rel = RelationInfo::load(policy.relation, &policy.relation_name)?;
    let (fence, holds) = HoldFence::read(policy.relation)?;
    let ctx = RunContext {
        policy,
        rel,
        holds,
        fence,
    };
    // The fingerprint was read before the context: a change committed in between makes the
    // next step's fingerprint differ, and that step reads everything again.
    CACHED.with(|c| {
        *c.borrow_mut() = Some(Cached {
            run_id: run_id.to_owned(),
            invalidations,
            fingerprint,
            ctx: ctx.clone(),
        })
    });
    Ok(Some(ctx))
}
