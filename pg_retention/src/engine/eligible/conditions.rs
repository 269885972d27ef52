//! The conditions eligibility is made of that stand on their own, outside any one builder: a
//! user predicate as a condition, an age policy's own condition and its cutoff, an orphan
//! policy's dead lease, and a hold's match through `retention._hold_matches`. Archive claims,
//! the fixpoint guard and holds placed on archived rows use them too, which is why they are
//! free functions and not methods of [`super::Eligibility`].

use crate::catalog::{Hold, Policy, PolicySpec, RelationInfo};
use crate::error::{Result, RetentionError};
use crate::sql_text::{ident, literal, predicate};
use pgrx::prelude::*;

/// Whether the row (its columns qualified by `alias`, or unqualified) matches hold `h`, through
/// `retention._hold_matches`, which evaluates the hold's predicate as its placer.
pub fn hold_call(h: &Hold, alias: Option<&str>) -> String {
    let columns: Vec<String> = h
        .columns
        .iter()
        .map(|c| match alias {
            Some(a) => format!("{a}.{}", ident(c)),
            None => ident(c),
        })
        .collect();
    format!(
        "retention._hold_matches({}, ROW({})::{})",
        h.id,
        columns.join(", "),
        h.relation
    )
}

/// `matches` (SQL: the row matches hold `h`'s predicate), limited to the leaves the hold covers
/// when it was placed on a partition below the table (the row's leaf's oid in `leaf_oid`, SQL).
pub fn on_held_leaves(h: &Hold, leaf_oid: &str, matches: String) -> String {
    match &h.leaves {
        None => matches,
        Some(leaves) => {
            let oids: Vec<String> = leaves.iter().map(u32::to_string).collect();
            format!(
                "({leaf_oid} = ANY ('{{{}}}'::oid[]) AND {matches})",
                oids.join(",")
            )
        }
    }
}

/// `now() - window` for the current transaction, as a timestamptz constant. As an expression it
/// would be computed again for every row a batch reads (interval arithmetic through a broken-down
/// time: a sixth of a sweep's per-row cost); `now()` is fixed for the transaction, so the constant
/// is the same value. Written in JSON's ISO 8601 form, which no DateStyle reads differently; the
/// expression stays when the text would not read back as the same instant.
pub(super) fn cutoff_sql(window: &str) -> Result<String> {
    let expression = format!("(now() - {}::interval)", literal(window));
    let rendered = Spi::get_one::<String>(&format!(
        "SELECT CASE WHEN s ~ '^\\d{{4}}-\\d\\d-\\d\\dT[0-9:.]+[+-][0-9:]+$' AND s::timestamptz = c THEN s END
           FROM (SELECT c, to_json(c) #>> '{{}}' AS s FROM (SELECT {expression} AS c) a) b"
    ))?;
    Ok(match rendered {
        Some(s) => format!("{}::timestamptz", literal(&s)),
        None => expression,
    })
}

/// A user predicate as a condition (one wrapped expression whose NULL counts as false), or
/// `true` when the policy has none.
pub fn condition(user_predicate: Option<&str>) -> String {
    user_predicate
        .map(predicate)
        .unwrap_or_else(|| "true".into())
}

/// The policy's own condition on a row `t` of an age policy, without guards: in scope,
/// terminal, and its time `age` (SQL over `t`) before `cutoff` (SQL). The sweep, archive
/// claims and prunes, and the fixpoint guard all decide age eligibility with this.
pub fn age_condition(spec: &PolicySpec, age: &str, cutoff: &str) -> String {
    age_condition_with(spec, &condition(spec.terminal.as_deref()), age, cutoff)
}

/// [`age_condition`] with the row's terminal condition given as SQL.
pub(super) fn age_condition_with(
    spec: &PolicySpec,
    terminal: &str,
    age: &str,
    cutoff: &str,
) -> String {
    format!(
        "{scope} AND {terminal} AND {age} < {cutoff}",
        scope = condition(spec.scope.as_deref()),
    )
}

/// For an `orphan` policy: the condition that the owning lease of row `t` is dead — no row of
/// the lease table whose primary key equals the row's `lease_key` and whose `lease_expiry` is
/// still ahead (read in the deleting statement, as the policy's owner).
pub(super) fn lease_dead(policy: &Policy) -> Result<String> {
    let missing = |what: &str| {
        RetentionError::Internal(format!("orphan policy {} has no {what}", policy.name))
    };
    let table = policy.lease_table.ok_or_else(|| missing("lease_table"))?;
    let keys = policy
        .lease_key
        .as_ref()
        .ok_or_else(|| missing("lease_key"))?;
    let expiry = policy
        .lease_expiry
        .as_deref()
        .ok_or_else(|| missing("lease_expiry"))?;
    let lease = RelationInfo::load(table, &format!("lease table of policy {}", policy.name))?;
    let lease_cols: Vec<String> = lease
        .pk
        .iter()
        .map(|c| format!("__l.{}", ident(c)))
        .collect();
    let row_cols: Vec<String> = keys.iter().map(|c| format!("t.{}", ident(c))).collect();
    Ok(format!(
        "NOT EXISTS (SELECT 1 FROM {} __l WHERE ({}) = ({}) AND __l.{} > now())",
        lease.all_rows(),
        lease_cols.join(", "),
        row_cols.join(", "),
        ident(expiry),
    ))
}
