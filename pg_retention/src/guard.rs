//! Fixpoint guards of archive policies. A row of an `archive_then_delete` policy must not
//! change once it is eligible, or the archive and the delete would see different rows.
//! Registration installs, on the governed table:
//! * a CHECK constraint `NOT (terminal) OR age_column IS NOT NULL` (a finished row always has
//!   an age, so it always reaches the window), refused when existing rows violate it; and
//! * a BEFORE UPDATE trigger that refuses to update a row that is already archive-eligible.
//!
//! The digest check of `complete_batch` still protects every column where these cannot.

use crate::catalog::{PolicySpec, RelationInfo};
use crate::error::{Result, RetentionError};
use crate::sql_text::{ident, literal, predicate};
use pgrx::prelude::*;

/// Name of the CHECK constraint of policy `id`.
pub fn constraint_name(id: i64) -> String {
    format!("pg_retention_fixpoint_{id}")
}

/// Name of the guard trigger of policy `id`.
pub fn trigger_name(id: i64) -> String {
    format!("pg_retention_guard_{id}")
}

/// Installs (or reinstalls) the guards of an archive policy.
pub fn install(id: i64, spec: &PolicySpec, rel: &RelationInfo) -> Result<()> {
    remove(id, rel.oid)?;
    let (Some(terminal), Some(age), Some(window)) =
        (&spec.terminal, &spec.age_column, &spec.older_than)
    else {
        return Err(RetentionError::Internal(
            "archive policy without terminal, age_column or older_than".into(),
        ));
    };
    let check = format!("NOT (\n{terminal}\n) OR {} IS NOT NULL", ident(age));
    let violating = Spi::get_one::<i64>(&format!(
        "SELECT count(*) FROM ONLY {} t WHERE NOT ({check})",
        rel.qualified
    ))?
    .unwrap_or(0);
    if violating > 0 {
        return Err(RetentionError::FixpointViolation {
            relation: rel.qualified.clone(),
            rows: violating,
            age_column: age.clone(),
        });
    }
    let scope = spec
        .scope
        .as_deref()
        .map(predicate)
        .unwrap_or_else(|| "true".into());
    let eligible = format!(
        "{scope} AND {} AND t.{} < now() - {}::interval",
        predicate(terminal),
        ident(age),
        literal(window)
    );
    Spi::run(&format!(
        "ALTER TABLE {table} ADD CONSTRAINT {c} CHECK ({check});
         CREATE TRIGGER {g} BEFORE UPDATE ON {table} FOR EACH ROW
             EXECUTE FUNCTION retention._fixpoint_guard({name}, {eligible})",
        table = rel.qualified,
        c = ident(&constraint_name(id)),
        g = ident(&trigger_name(id)),
        name = literal(&spec.name),
        eligible = literal(&eligible),
    ))?;
    Ok(())
}

/// Removes the guards of policy `id` from table `relation`, if both still exist.
pub fn remove(id: i64, relation: u32) -> Result<()> {
    let table = crate::catalog::optional_one::<String>(
        "SELECT c.oid::regclass::text FROM pg_class c WHERE c.oid = $1::bigint::oid",
        &[i64::from(relation).into()],
    )?;
    if let Some(table) = table {
        Spi::run(&format!(
            "ALTER TABLE {table} DROP CONSTRAINT IF EXISTS {c};
             DROP TRIGGER IF EXISTS {g} ON {table}",
            c = ident(&constraint_name(id)),
            g = ident(&trigger_name(id)),
        ))?;
    }
    Ok(())
}
