//! Retiring a whole leaf of a partitioned table. When every row of a leaf is provably eligible
//! under an `age` policy and none is held, the leaf is dropped in one statement instead of its
//! rows being deleted one by one: O(1) in its rows, but for the count the ledger records.
//!
//! A leaf qualifies when it is not a default partition, no foreign key references the table,
//! no user trigger fires on its deletes (a drop would not fire it), the policy's owner could
//! drop it (owns it), and either a range bound on the age column puts every row before the
//! cutoff, or it has rows and every one is eligible. The proof is run once without locks (to
//! plan, and for preview) and once more under a SHARE lock on the leaf, which keeps its rows
//! as they are until the drop commits.

use crate::catalog::{partition, Leaf, RelationInfo};
use crate::engine::eligible::{Eligibility, Guards};
use crate::error::{present, Result, RetentionError};
use crate::sql_text::literal;
use crate::subxact::{self, Attempt};
use pgrx::prelude::*;

/// Why a leaf is entirely eligible.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proof {
    /// A range bound on the age column is at or before the cutoff (and, where the policy has a
    /// scope, a terminal predicate or holds, every row was checked against them).
    RangeBound,
    /// Every row was checked and is eligible.
    EveryRow,
}

impl Proof {
    /// The proof's name (ledger detail, `retention.preview_partitions`).
    pub fn as_str(self) -> &'static str {
        match self {
            Proof::RangeBound => "range_bound",
            Proof::EveryRow => "every_row",
        }
    }
}

/// What proving a leaf came to.
pub enum Proving {
    /// Locked in SHARE mode, proven again under the lock and counted: ready to drop, and its
    /// rows cannot change until the transaction ends.
    Proven { rows: i64, proof: Proof },
    /// Not entirely eligible (or larger than the run has left): its rows are swept instead.
    NotWhole,
    /// Its lock was not granted within `pg_retention.drop_lock_timeout`: left for next run.
    Busy,
    /// A hold was placed after the holds were read: plan again with it.
    NewHold,
}

/// Whether `leaf` (the leaf `elig` is on) can be dropped whole now, and why; read-only.
pub fn whole_leaf(
    elig: &Eligibility<'_>,
    rel: &RelationInfo,
    leaf: &Leaf,
) -> Result<Option<Proof>> {
    let policy = elig.policy();
    if !elig.kind().by_age()
        || !elig.partitioned()
        || leaf.default
        || leaf.delete_triggers
        || !rel.referenced_by.is_empty()
    {
        return Ok(None);
    }
    if !crate::author::member_of(policy.owner, leaf.owner)? {
        return Ok(None);
    }
    let (Some(age), Some(cutoff)) = (policy.age_column.as_deref(), elig.cutoff()) else {
        return Ok(None);
    };
    let bounded = any_bound(
        &leaf.age_bounds.upper,
        &rel.column(age)?.type_name,
        "<=",
        &cutoff,
    );
    let every_row = format!(
        "NOT EXISTS (SELECT 1 FROM ONLY {table} t WHERE NOT ({eligible}))",
        table = leaf.qualified,
        eligible = elig.age_predicate(Guards {
            holds: true,
            references: false,
            pins: true,
        }),
    );
    // Within a bound, only a scope, a terminal predicate, a hold or a consumer can make a row
    // ineligible.
    let within_bound = if policy.scope.is_none()
        && policy.terminal.is_none()
        && elig.holds_on(leaf).next().is_none()
        && !elig.pinnable()
    {
        "true".to_owned()
    } else {
        every_row.clone()
    };
    let sql = format!(
        "SELECT CASE WHEN {bounded} THEN CASE WHEN {within_bound} THEN 'range_bound' END
                     WHEN EXISTS (SELECT 1 FROM ONLY {table}) AND {every_row} THEN 'every_row' END",
        table = leaf.qualified,
    );
    let proof = elig.as_owner(|| Ok(Spi::get_one::<String>(&sql)?))?;
    Ok(match proof.as_deref() {
        Some("range_bound") => Some(Proof::RangeBound),
        Some("every_row") => Some(Proof::EveryRow),
        _ => None,
    })
}

/// SQL that is true when one of the printed range `bounds` (of the age column, of type
/// `age_type`) compares with `op` to `cutoff` (SQL); false without a bound that reads back.
pub fn any_bound(bounds: &[String], age_type: &str, op: &str, cutoff: &str) -> String {
    let tests: Vec<String> = bounds
        .iter()
        .filter_map(|b| partition::bound_value(b))
        .map(|v| format!("coalesce({}::{age_type} {op} {cutoff}, false)", literal(&v)))
        .collect();
    if tests.is_empty() {
        "false".to_owned()
    } else {
        tests.join(" OR ")
    }
}

/// Proves that `leaf` can go whole and has at most `remaining` rows, and counts it, under a
/// SHARE lock on the leaf taken within `pg_retention.drop_lock_timeout`; `fence_tripped` says
/// whether a hold was placed since the holds were read. Takes no lock on the partitioned
/// table: a writer of its other leaves waits for nothing here. [`drop_now`] drops it.
pub fn prove(
    elig: &Eligibility<'_>,
    rel: &RelationInfo,
    leaf: &Leaf,
    remaining: i64,
    fence_tripped: impl FnOnce() -> Result<bool>,
) -> Result<Proving> {
    if whole_leaf(elig, rel, leaf)?.is_none() {
        return Ok(Proving::NotWhole);
    }
    let mut new_hold = false;
    let attempt = lock_timeout(|| {
        subxact::unless_busy(|| {
            prove_locked(elig, rel, leaf, |rows| {
                if fence_tripped()? {
                    new_hold = true;
                    return Ok(false);
                }
                Ok(rows <= remaining)
            })
        })
    })?;
    Ok(match attempt {
        Attempt::Done((rows, proof)) => Proving::Proven { rows, proof },
        Attempt::Busy => Proving::Busy,
        Attempt::Declined if new_hold => Proving::NewHold,
        Attempt::Declined => Proving::NotWhole,
    })
}

/// Drops `leaf`, proven by [`prove`] in this transaction, as `owner`, within
/// `pg_retention.drop_lock_timeout` and in a subtransaction: busy when the partitioned table's
/// ACCESS EXCLUSIVE lock (which every drop of a partition takes) is not granted in time.
pub fn drop_now(owner: u32, leaf: &Leaf) -> Result<Attempt<()>> {
    in_time(owner, &drop_table(&leaf.qualified))
}

/// Drops `leaf` (the leaf `elig` is on) under its proof, within `pg_retention.drop_lock_timeout`
/// and in a subtransaction: a SHARE lock on the leaf (none of its rows can change until the
/// drop commits), the proof of [`whole_leaf`] again under it, the leaf's rows counted, then
/// `admit(rows)`, the caller's last word, and the `DROP TABLE`. Declined (no proof, or `admit`
/// said no) or busy (a lock not granted in time), nothing of it stays, locks included.
pub fn drop_proven(
    elig: &Eligibility<'_>,
    rel: &RelationInfo,
    leaf: &Leaf,
    admit: impl FnOnce(i64) -> Result<bool>,
) -> Result<Attempt<(i64, Proof)>> {
    lock_timeout(|| {
        subxact::unless_busy(|| {
            let proven = prove_locked(elig, rel, leaf, admit)?;
            if proven.is_some() {
                run_as(elig.policy().owner, &drop_table(&leaf.qualified))?;
            }
            Ok(proven)
        })
    })
}

/// A SHARE lock on `leaf` (none of its rows can change until the transaction ends), the proof
/// of [`whole_leaf`] again under it, the leaf's rows counted, then `admit(rows)`. None when
/// there is no proof or `admit` says no; the caller's subtransaction then undoes the lock.
fn prove_locked(
    elig: &Eligibility<'_>,
    rel: &RelationInfo,
    leaf: &Leaf,
    admit: impl FnOnce(i64) -> Result<bool>,
) -> Result<Option<(i64, Proof)>> {
    let owner = elig.policy().owner;
    lock_rows(owner, leaf)?;
    if !partition::unchanged(leaf)? {
        return Ok(None);
    }
    let Some(proof) = whole_leaf(elig, rel, leaf)? else {
        return Ok(None);
    };
    let rows = rows_in(owner, leaf)?;
    Ok(admit(rows)?.then_some((rows, proof)))
}

/// Takes a SHARE lock on `leaf` as `owner` (the policy's): none of its rows can change, and no
/// row can be added to it, until the transaction ends.
fn lock_rows(owner: u32, leaf: &Leaf) -> Result<()> {
    run_as(
        owner,
        &format!("LOCK TABLE ONLY {} IN SHARE MODE", leaf.qualified),
    )
}

/// The rows of `leaf`, counted as `owner`.
pub fn rows_in(owner: u32, leaf: &Leaf) -> Result<i64> {
    crate::author::run_as(owner, || {
        present(
            Spi::get_one::<i64>(&format!("SELECT count(*) FROM ONLY {}", leaf.qualified))?,
            "count(*)",
        )
    })
}

/// The statement that drops the leaf `qualified` (run as a policy owner who may: see
/// [`whole_leaf`]).
fn drop_table(qualified: &str) -> String {
    format!("DROP TABLE {qualified}")
}

/// Runs the utility statement `sql` as `owner` (PostgreSQL checks the owner's rights).
fn run_as(owner: u32, sql: &str) -> Result<()> {
    crate::author::run_as(owner, || {
        Spi::run(sql)?;
        Ok(())
    })
}

/// [`run_as`] within `pg_retention.drop_lock_timeout` and in a subtransaction: busy, with
/// nothing of it left, when a lock it needs is not granted in time.
fn in_time(owner: u32, sql: &str) -> Result<Attempt<()>> {
    lock_timeout(|| {
        subxact::unless_busy(|| {
            run_as(owner, sql)?;
            Ok(Some(()))
        })
    })
}

/// Relation `oid`'s quoted, schema-qualified name as it is now; None when it is gone.
fn qualified_now(oid: u32) -> Result<Option<String>> {
    Ok(Spi::get_one_with_args::<String>(
        "SELECT format('%I.%I', n.nspname, c.relname) FROM pg_catalog.pg_class c
           JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
          WHERE c.oid = $1::bigint::oid",
        &[i64::from(oid).into()],
    )?)
}

/// Whether `owner` may detach `leaf` from its partitioned table (owns that table too), so
/// that [`detach_now`] can retire it in two transactions instead of [`drop_now`]'s one.
pub fn may_detach(owner: u32, leaf: &Leaf) -> Result<bool> {
    let (Some(_), Some(parent_owner)) = (&leaf.parent, leaf.parent_owner) else {
        return Ok(false);
    };
    crate::author::member_of(owner, parent_owner)
}

/// Detaches `leaf`, proven by [`prove`] in this transaction, from its partitioned table as
/// `owner`, within `pg_retention.drop_lock_timeout` and in a subtransaction (busy when the
/// table's lock is not granted in time). The caller takes a session lock on it with
/// [`keep_detached`] once nothing of the transaction can fail any more, so that nothing reads
/// or changes the detached leaf until [`drop_detached`] drops it in the next transaction. The
/// partitioned table's ACCESS EXCLUSIVE lock is held from the detach to this transaction's
/// commit, which has no files to remove: a writer of the table waits for the detach, not for
/// the truncation of the leaf's files, as it would behind a `DROP TABLE` of the partition.
pub fn detach_now(owner: u32, leaf: &Leaf) -> Result<Attempt<()>> {
    let Some(parent) = &leaf.parent else {
        return Ok(Attempt::Declined);
    };
    in_time(
        owner,
        &format!("ALTER TABLE {parent} DETACH PARTITION {}", leaf.qualified),
    )
}

/// Takes the session lock on a leaf [`detach_now`] detached in this transaction (which holds
/// its ACCESS EXCLUSIVE lock, so it is granted at once). Taken last: a session lock outlives
/// a subtransaction's rollback, which would leave the leaf attached and locked.
pub fn keep_detached(oid: u32) {
    session_lock(oid, true);
}

/// Lets go of the session lock taken by [`keep_detached`] on `oid`, which this session holds,
/// leaving the leaf detached.
pub fn let_go(oid: u32) {
    session_lock(oid, false);
}

/// Whether this session still holds the lock [`detach_now`] took on `oid` (an aborted
/// transaction releases session locks as well). Asked before the leaf is locked otherwise.
pub fn still_detached_by_us(oid: u32) -> Result<bool> {
    Ok(Spi::get_one_with_args::<bool>(
        "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_locks l
                         WHERE l.locktype = 'relation' AND l.relation = $1::bigint::oid
                           AND l.database = (SELECT oid FROM pg_catalog.pg_database
                                              WHERE datname = current_database())
                           AND l.pid = pg_catalog.pg_backend_pid()
                           AND l.mode = 'AccessExclusiveLock' AND l.granted)",
        &[i64::from(oid).into()],
    )? == Some(true))
}

/// Drops a leaf [`detach_now`] detached, as `owner`, and lets go of its session lock: the
/// drop's own lock keeps it until the commit.
pub fn drop_detached(owner: u32, oid: u32, qualified: &str) -> Result<()> {
    run_as(owner, &drop_table(qualified))?;
    session_lock(oid, false);
    Ok(())
}

/// Attaches leaf `oid`, detached by [`detach_now`], to the partitioned table `parent` again
/// with its `bound` (`FOR VALUES ...`), as `owner`, within `pg_retention.drop_lock_timeout` and
/// in a subtransaction (busy when a lock is not granted in time), and lets go of the session
/// lock when this session holds it. Both tables are named as they are now (either may have
/// been renamed since); an error when either is gone.
pub fn attach_again(owner: u32, oid: u32, parent: u32, bound: &str) -> Result<Attempt<()>> {
    if !bound.starts_with("FOR VALUES ") {
        return Err(RetentionError::Internal(format!(
            "not a partition bound to attach with: {bound}"
        )));
    }
    let (Some(leaf), Some(parent)) = (qualified_now(oid)?, qualified_now(parent)?) else {
        return Err(RetentionError::Internal(format!(
            "the leaf (oid {oid}) or its partitioned table (oid {parent}) no longer exists"
        )));
    };
    let held = still_detached_by_us(oid)?;
    let attempt = in_time(
        owner,
        &format!("ALTER TABLE {parent} ATTACH PARTITION {leaf} {bound}"),
    )?;
    if held {
        // Kept by the attach's own lock until the commit, or, when it did not happen, given
        // up: whoever acts on the leaf next locks it again.
        session_lock(oid, false);
    }
    Ok(attempt)
}

/// Takes (`take`) or releases a session-level ACCESS EXCLUSIVE lock on relation `oid` of this
/// database: one that a commit does not release (an abort does), as CREATE INDEX
/// CONCURRENTLY holds its table across its transactions.
fn session_lock(oid: u32, take: bool) {
    // Safety: plain lock-manager calls on a relation id of this database, in a transaction.
    // Taking it right after the detach, whose own ACCESS EXCLUSIVE lock this transaction holds,
    // is granted at once; it is released only where this session took it.
    unsafe {
        let mut id = pg_sys::LockRelId {
            relId: pg_sys::Oid::from(oid),
            dbId: pg_sys::MyDatabaseId,
        };
        let mode = pg_sys::AccessExclusiveLock as pg_sys::LOCKMODE;
        if take {
            pg_sys::LockRelationIdForSession(&mut id, mode);
        } else {
            pg_sys::UnlockRelationIdForSession(&mut id, mode);
        }
    }
}

/// Runs `f` with `lock_timeout = pg_retention.drop_lock_timeout`, and the session's own value
/// again afterwards (the setting is local to the transaction either way).
fn lock_timeout<T>(f: impl FnOnce() -> Result<T>) -> Result<T> {
    let timeout = format!("{}ms", crate::gucs::drop_lock_timeout_ms());
    with_setting("lock_timeout", &timeout, f)
}

/// `oid`'s partition bound (`FOR VALUES ...`) as printed with ISO dates, which read back the
/// same whatever the DateStyle of the session that attaches the leaf again with it.
pub fn portable_bound(oid: u32) -> Result<String> {
    with_setting("DateStyle", "ISO, MDY", || {
        present(
            Spi::get_one_with_args::<String>(
                "SELECT pg_catalog.pg_get_expr(c.relpartbound, c.oid)
                   FROM pg_catalog.pg_class c WHERE c.oid = $1::bigint::oid",
                &[i64::from(oid).into()],
            )?,
            "the partition bound",
        )
    })
}

/// Runs `f` with the setting `name` at `value`, and its value before again afterwards (local
/// to the transaction either way).
fn with_setting<T>(name: &str, value: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    let previous = present(
        Spi::get_one_with_args::<String>("SELECT current_setting($1)", &[name.into()])?,
        name,
    )?;
    set_local(name, value)?;
    let result = f();
    set_local(name, &previous)?;
    result
}

fn set_local(name: &str, value: &str) -> Result<()> {
    Spi::get_one_with_args::<String>(
        "SELECT set_config($1, $2, true)",
        &[name.into(), value.into()],
    )?
    .map(|_| ())
    .ok_or_else(|| RetentionError::Internal("set_config returned NULL".into()))
}
