//! The statements of one sweep step, one per shape: a block range of an `age` policy, an index
//! walk of an `age` policy, planned rows of the ranked kinds, whole groups of `entity`. Each
//! plans and deletes in one statement, run as the policy's owner.

use super::{record_prune, SweepState};
use crate::catalog::{prepared, HoldFence};
use crate::engine::eligible::{Eligibility, Guards};
use crate::engine::quota;
use crate::engine::run_context::RunContext;
use crate::error::{present, Result, RetentionError};
use crate::sql_text::ident;
use crate::tid;
use pgrx::prelude::*;
use pgrx::PgOid;
use serde_json::json;

/// What one step statement reports.
pub(super) struct StepResult {
    /// Rows deleted.
    pub deleted: i64,
    /// Rows planned (deleted, or kept by a hold placed meanwhile).
    pub planned: i64,
    /// The last planned row's place.
    pub last: Option<(u64, u64)>,
    /// The statement saw a hold placed after the step read the holds, and deleted nothing.
    pub new_hold: bool,
    /// The keys of the rows deleted, for a policy that records them.
    pub keys: Option<serde_json::Value>,
}

pub(super) fn run_step_sql(sql: &str) -> Result<StepResult> {
    let (deleted, planned, last, new_hold, keys) = Spi::connect_mut(|client| {
        let row = client.update(sql, Some(1), &[])?;
        let row = row.first();
        Ok::<_, pgrx::spi::SpiError>((
            row.get::<i64>(1)?,
            row.get::<i64>(2)?,
            row.get::<String>(3)?,
            row.get::<bool>(4)?,
            row.get::<pgrx::JsonB>(5)?,
        ))
    })?;
    Ok(StepResult {
        deleted: present(deleted, "a step's deleted count")?,
        planned: present(planned, "a step's planned count")?,
        last: last.as_deref().and_then(tid::parse),
        new_hold: present(new_hold, "a step's hold fence")?,
        keys: keys.map(|k| k.0),
    })
}

/// The keys a step's DELETE (`delete`, over alias `alias`, without RETURNING) deleted, when the
/// policy records them: the statement wrapped so that it returns its count and their keys.
fn counting_keys(elig: &Eligibility<'_>, delete: &str, alias: &str) -> String {
    format!(
        "WITH __d AS ({delete} RETURNING {}) SELECT count(*)::bigint, jsonb_agg(__k) FROM __d",
        elig.returning(alias)
    )
}

/// Runs a step's plan: the rows it deleted, and their keys when it is [`counting_keys`]'.
fn run_deleting(
    plan: &pgrx::spi::OwnedPreparedStatement,
    args: &[pgrx::datum::DatumWithOid<'_>],
    keys: bool,
) -> Result<(i64, Option<serde_json::Value>)> {
    if !keys {
        return Ok((prepared::run(plan, args)? as i64, None));
    }
    let (n, k) = Spi::connect_mut(|client| {
        let row = client.update(plan, Some(1), args)?;
        let row = row.first();
        Ok::<_, pgrx::spi::SpiError>((row.get::<i64>(1)?, row.get::<pgrx::JsonB>(2)?))
    })?;
    Ok((present(n, "a step's deleted count")?, k.map(|k| k.0)))
}

/// One step of an `age` policy through an index on the age column: one DELETE of the eligible
/// rows aged from `from` up to (not including) the age of the first eligible row past the
/// step's `n`, looked up once by the same statement (an index scan of `n + 1` entries, under
/// the same snapshot), so it deletes at most `n` rows and never reads a row past the cutoff.
/// Rows that share the boundary age go to the next step whole; when more than `n` rows share
/// the age the step starts at, the run goes on by block ranges instead. A hold placed after
/// the holds were read makes the bound NULL, and the step deletes nothing.
pub(super) fn age_index_step(
    mut state: SweepState,
    ctx: &RunContext,
    elig: &Eligibility<'_>,
    from: String,
    n: i64,
) -> Result<SweepState> {
    let RunContext {
        policy, rel, fence, ..
    } = ctx;
    let age_column = policy
        .age_column
        .as_deref()
        .ok_or_else(|| RetentionError::Internal("an index step without an age column".into()))?;
    let age = ident(age_column);
    let age_type = &rel.column(age_column)?.type_name;
    let eligible = elig.age_predicate(Guards::ALL);
    // `OFFSET 0` keeps `b` a subquery of its own: pulled up, the lookup of `next` would be
    // copied into each of its two uses and run twice.
    let mut sql = format!(
        "DELETE FROM ONLY {table} t
          WHERE t.{age} >= $2::{age_type}
            AND t.{age} < (SELECT CASE WHEN {fence} THEN NULL ELSE coalesce(b.next, 'infinity') END
                             FROM (SELECT (SELECT t.{age} FROM ONLY {table} t
                                            WHERE t.{age} >= $2::{age_type} AND {eligible}
                                            ORDER BY t.{age} OFFSET $3 LIMIT 1) AS next OFFSET 0) b
                            WHERE retention._batch_bound($4, b.next::text))
            AND {eligible}",
        table = elig.table(),
        fence = fence.tripped(),
    );
    if elig.records_keys() {
        sql = counting_keys(elig, &sql, "t");
    }
    use pgrx::pg_sys::BuiltinOid::{INT8OID, TEXTOID, TIMESTAMPTZOID};
    let token = quota::next_token();
    let (deleted, keys) = elig.as_owner(|| {
        let cutoff = elig.policy_cutoff()?;
        let plan = prepared::cached(
            &sql,
            &[TIMESTAMPTZOID, TEXTOID, INT8OID, INT8OID].map(PgOid::BuiltIn),
            true,
        )?;
        run_deleting(
            &plan,
            &[cutoff.into(), from.as_str().into(), n.into(), token.into()],
            elig.records_keys(),
        )
    })?;
    let bound = quota::bound(token);
    if deleted == 0 && fence.tripped_now()? {
        // A hold arrived after the step read the holds: read the same rows again with it.
        return Ok(state);
    }
    if deleted > 0 {
        let mut detail = json!({
            "planned": deleted,
            "from_age": from,
            "to_age": bound.clone().flatten(),
        });
        if let Some(keys) = keys {
            detail["keys"] = keys;
        }
        record_prune(&mut state, ctx, deleted, detail)?;
    }
    Ok(match bound {
        // The bound is computed before a row can pass the age condition: without one, no row did.
        None if deleted == 0 => super::leaf_swept(state, policy)?,
        None => {
            return Err(RetentionError::Internal(
                "an index step deleted rows without computing its bound".into(),
            ))
        }
        Some(None) => super::leaf_swept(state, policy)?,
        Some(Some(next)) if next == from => {
            // More than a step of rows share this age: go on by block ranges from the start.
            state.age_from = None;
            state.lo = (0, 0);
            state
        }
        Some(next) => {
            state.age_from = next;
            state
        }
    })
}

/// One step of an `age` policy: one DELETE over one block range (a TID range scan, a page at a
/// time, as fast as a bulk DELETE per row), deleting the first `n` eligible rows in physical
/// order. `retention._batch_quota` counts the rows that passed every other condition (the CASE
/// makes it run last), refuses past `n`, and remembers the last row it let through, so the
/// statement needs no RETURNING (which would read every deleted row once more). The statement
/// is planned once for as long as its text (the policy, table, holds and fence) stays the same;
/// the range, quota and cutoff are its parameters.
pub(super) fn age_range_step(
    elig: &Eligibility<'_>,
    fence: &HoldFence,
    lo: (u64, u64),
    hi_block: u64,
    n: i64,
) -> Result<StepResult> {
    let mut sql = format!(
        "DELETE FROM ONLY {table} t
          WHERE t.ctid > $2 AND t.ctid < $3
            AND CASE WHEN {eligible} AND NOT {fence} THEN retention._batch_quota($4, $5, t.ctid) ELSE false END",
        table = elig.table(),
        eligible = elig.age_predicate(Guards::ALL),
        fence = fence.tripped(),
    );
    if elig.records_keys() {
        sql = counting_keys(elig, &sql, "t");
    }
    use pgrx::pg_sys::BuiltinOid::{INT8OID, TIDOID, TIMESTAMPTZOID};
    let types = [TIMESTAMPTZOID, TIDOID, TIDOID, INT8OID, INT8OID].map(PgOid::BuiltIn);
    let plan = prepared::cached(&sql, &types, true)?;
    let token = quota::next_token();
    let cutoff = elig.policy_cutoff()?;
    let (deleted, keys) = run_deleting(
        &plan,
        &[
            cutoff.into(),
            crate::tid::pointer(lo).into(),
            crate::tid::pointer((hi_block, 0)).into(),
            n.into(),
            token.into(),
        ],
        elig.records_keys(),
    )?;
    // Nothing deleted can mean a hold arrived: then the range is read again with it.
    let new_hold = deleted == 0 && fence.tripped_now()?;
    Ok(StepResult {
        deleted,
        planned: deleted,
        last: quota::last(token),
        new_hold,
        keys,
    })
}

/// One step of row-wise kinds: plan up to `n` eligible rows after the watermark in physical
/// order and delete exactly those, in one statement.
pub(super) fn row_step(
    elig: &Eligibility<'_>,
    fence: &HoldFence,
    lo: (u64, u64),
    hi_block: u64,
    n: i64,
) -> String {
    format!(
        "WITH planned AS MATERIALIZED (
             SELECT e.__ctid FROM ({rows}) e
              WHERE e.__ctid > {lo} AND e.__ctid < {hi}
              ORDER BY e.__ctid LIMIT {n}),
         deleted AS (
             DELETE FROM ONLY {table} d
              WHERE d.ctid = ANY (ARRAY(SELECT __ctid FROM planned)) AND NOT {fence}
          RETURNING {returning})
         SELECT (SELECT count(*) FROM deleted), (SELECT count(*) FROM planned),
                (SELECT max(__ctid)::text FROM planned), {fence}, {keys}",
        fence = fence.tripped(),
        returning = elig.returning("d"),
        keys = elig.deleted_keys("deleted"),
        rows = elig.rows(Guards::ALL),
        lo = tid::literal(lo),
        hi = tid::literal((hi_block, 0)),
        table = elig.table(),
    )
}

/// One step of an `entity` policy: whole expired groups in order of their first row, as many
/// as fit in the step (at least one) and never more than the run has left. On a partitioned
/// table, the groups with rows in the step's leaf, each deleted from every leaf it spans.
pub(super) fn entity_step(
    elig: &Eligibility<'_>,
    fence: &HoldFence,
    lo: (u64, u64),
    n: i64,
    remaining: i64,
) -> String {
    format!(
        "WITH groups AS MATERIALIZED ({groups}),
         picked AS MATERIALIZED (
             SELECT * FROM (SELECT g.*, sum(g.__n) OVER (ORDER BY g.__first) AS __cum
                              FROM groups g WHERE g.__first > {lo}) x
              WHERE x.__cum - x.__n < {n} AND x.__cum <= {remaining}),
         deleted AS (
             DELETE FROM {target} t USING picked g WHERE {join} AND {scope} AND NOT {fence}
              RETURNING {returning})
         SELECT (SELECT count(*) FROM deleted), (SELECT coalesce(sum(__n), 0)::bigint FROM picked),
                (SELECT max(__first)::text FROM picked), {fence}, {keys}",
        fence = fence.tripped(),
        returning = elig.returning("t"),
        keys = elig.deleted_keys("deleted"),
        groups = elig.entity_groups(Guards::ALL),
        lo = tid::literal(lo),
        target = elig.group_target(),
        join = elig.entity_join(),
        scope = elig.scope_sql(),
    )
}
