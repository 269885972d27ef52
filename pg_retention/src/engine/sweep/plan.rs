//! What a sweep step needs to know about its table before it runs: whether an index leads
//! with the age column, how many blocks hold about one step of rows, how long the table is,
//! which leaves may hold eligible rows.

use super::MAX_SPAN;
use crate::catalog::{prepared, Leaf, Policy, RelationInfo};
use crate::engine::eligible::Eligibility;
use crate::engine::retire;
use crate::error::{present, Result, RetentionError};
use pgrx::prelude::*;
use pgrx::PgOid;

/// Whether the table has a btree index that leads with the policy's age column (whole-table,
/// default operator class), so that steps can take rows in age order and stop at the cutoff
/// instead of reading every block.
pub(crate) fn has_age_index(table: u32, policy: &Policy) -> Result<bool> {
    let plan = prepared::cached(
        "SELECT EXISTS (
             SELECT 1 FROM pg_catalog.pg_index i
               JOIN pg_catalog.pg_class ic ON ic.oid = i.indexrelid
               JOIN pg_catalog.pg_am am ON am.oid = ic.relam
               JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
               JOIN pg_catalog.pg_opclass oc ON oc.oid = i.indclass[0]
              WHERE i.indrelid = $1::bigint::oid AND a.attname = $2 AND am.amname = 'btree'
                AND i.indisvalid AND i.indpred IS NULL AND oc.opcdefault)",
        &[
            PgOid::BuiltIn(pgrx::pg_sys::BuiltinOid::INT8OID),
            PgOid::BuiltIn(pgrx::pg_sys::BuiltinOid::TEXTOID),
        ],
        false,
    )?;
    let Some(age) = policy.age_column.as_deref() else {
        return Ok(false);
    };
    present(
        prepared::one::<bool>(&plan, &[i64::from(table).into(), age.into()])?,
        "EXISTS",
    )
}

/// Blocks per step so that a dense range holds about one step of rows.
pub(super) fn initial_span(table: u32, batch_size: i32) -> Result<u64> {
    let per_block = Spi::get_one_with_args::<f64>(
        "SELECT CASE WHEN relpages > 0 AND reltuples > 0 THEN reltuples / relpages ELSE 50 END::float8
           FROM pg_class WHERE oid = $1::bigint::oid",
        &[i64::from(table).into()],
    )?
    .ok_or_else(|| RetentionError::WrongState {
        message: format!("table oid {table} no longer exists"),
        hint: "It was dropped during the run.".into(),
    })?
    .max(1.0);
    Ok(((f64::from(batch_size) / per_block).ceil() as u64).clamp(1, MAX_SPAN))
}

/// The leaves a run of `policy` sweeps, in order: for a kind by age, not those whose range
/// bound on the age column puts every row at or after the cutoff (today's leaf and those
/// premade for the days ahead), which hold nothing eligible now; a step each would only find
/// that out.
pub(super) fn leaves_to_sweep(
    policy: &Policy,
    rel: &RelationInfo,
    leaves: Vec<Leaf>,
) -> Result<Vec<u32>> {
    let elig = Eligibility::new(policy, rel, &[])?;
    let (true, Some(age), Some(cutoff)) = (
        elig.kind().by_age(),
        policy.age_column.as_deref(),
        elig.cutoff(),
    ) else {
        return Ok(leaves.iter().map(|l| l.oid).collect());
    };
    let age_type = &rel.column(age)?.type_name;
    let young: Vec<String> = leaves
        .iter()
        .map(|l| retire::any_bound(&l.age_bounds.lower, age_type, ">=", &cutoff))
        .collect();
    if young.is_empty() {
        return Ok(vec![]);
    }
    let young = present(
        Spi::get_one::<Vec<bool>>(&format!("SELECT ARRAY[{}]", young.join(", ")))?,
        "ARRAY",
    )?;
    Ok(leaves
        .iter()
        .zip(young)
        .filter(|(_, young)| !young)
        .map(|(l, _)| l.oid)
        .collect())
}
