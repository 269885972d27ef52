//! The replay boundary of a policy's window (`retention.replay_floor`, `check_replay`): a
//! consumer that replays a stream from before it may find rows gone.

use crate::catalog::{optional_one, Policy};
use crate::error::{present, OrReport, Result, RetentionError};
use pgrx::datum::TimestampWithTimeZone;
use pgrx::prelude::*;

/// The oldest instant still inside policy `name`'s window (now minus `older_than`).
fn floor(name: &str) -> Result<TimestampWithTimeZone> {
    let policy = Policy::by_name(name)?;
    let Some(window) = policy.older_than.as_deref() else {
        return Err(RetentionError::invalid(
            format!("policy {name} has no time window"),
            "Only policies with older_than have a replay boundary.",
            "Give the policy an older_than, or replay without a boundary check.",
        ));
    };
    present(
        optional_one::<TimestampWithTimeZone, _>(
            "SELECT pg_catalog.now() - $1::interval",
            &[window.into()],
        )?,
        "now() - older_than",
    )
}

/// `retention.replay_floor(policy)`: the oldest instant still inside the policy's window.
#[pg_extern(stable, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn replay_floor(policy: &str) -> TimestampWithTimeZone {
    crate::identity::refuse_restricted().or_report();
    floor(policy).or_report()
}

fn check(name: &str, from: TimestampWithTimeZone) -> Result<TimestampWithTimeZone> {
    let floor = floor(name)?;
    if from >= floor {
        return Ok(floor);
    }
    // Both instants as the session writes them, as the message always has.
    let text = |t: TimestampWithTimeZone| -> Result<String> {
        present(
            optional_one::<String, _>("SELECT $1::text", &[t.into()])?,
            "a timestamp's text",
        )
    };
    Err(RetentionError::ReplayTooOld {
        policy: name.to_owned(),
        from: text(from)?,
        floor: text(floor)?,
    })
}

/// `retention.check_replay(policy, from_ts)`: the replay boundary, or RT301 naming it when
/// `from_ts` is before it.
#[pg_extern(stable, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn check_replay(policy: &str, from_ts: TimestampWithTimeZone) -> TimestampWithTimeZone {
    crate::identity::refuse_restricted().or_report();
    check(policy, from_ts).or_report()
}
