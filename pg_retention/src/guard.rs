//! Fixpoint guards of archive policies. A row of an `archive_then_delete` policy must not
//! change once it is eligible, or the archive and the delete would see different rows.
//! Registration installs, on the governed table:
//! * a CHECK constraint `NOT (terminal) OR age_column IS NOT NULL` (a finished row always has
//!   an age, so it always reaches the window), refused when existing rows violate it; and
//! * a BEFORE UPDATE trigger that refuses to update a row that is already archive-eligible.
//!
//! On a partitioned table both are declared on it and PostgreSQL carries them to every
//! partition, also those created or attached later.
//!
//! The digest check of `complete_batch` still protects every column where these cannot.

use crate::catalog::{Policy, PolicySpec, RelationInfo};
use crate::engine::eligible::age_condition;
use crate::error::OrReport;
use crate::error::{Result, RetentionError};
use crate::sql_text::{ident, literal};
use crate::trigger_call::Fired;
use pgrx::datum::DatumWithOid;
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
    let (Some(terminal), Some(age), Some(_)) = (&spec.terminal, &spec.age_column, &spec.older_than)
    else {
        return Err(RetentionError::Internal(
            "archive policy without terminal, age_column or older_than".into(),
        ));
    };
    let check = format!("NOT (\n{terminal}\n) OR {} IS NOT NULL", ident(age));
    // The terminal predicate is the author's: it runs with their privileges.
    let violating = crate::author::run_as(crate::catalog::caller_oid(), || {
        crate::error::present(
            Spi::get_one::<i64>(&format!(
                "SELECT count(*) FROM {} t WHERE NOT ({check})",
                rel.all_rows(),
            ))?,
            "count(*)",
        )
    })?;
    if violating > 0 {
        return Err(RetentionError::FixpointViolation {
            relation: rel.qualified.clone(),
            rows: violating,
            age_column: age.clone(),
        });
    }
    // PostgreSQL checks existing rows against a new CHECK with the privileges of whoever runs
    // the ALTER TABLE: the table's owner does, inside a security-restricted operation. An author
    // who does not own the table may only use built-in code here (validate.rs), and one who
    // does owns what runs. One statement each: the terminal is never spliced into a script.
    let owner = table_owner(rel.oid)?;
    crate::author::run_as(owner, || {
        Spi::run(&format!(
            "ALTER TABLE {table} ADD CONSTRAINT {c} CHECK ({check})",
            table = rel.qualified,
            c = ident(&constraint_name(id)),
        ))?;
        Ok(())
    })?;
    Spi::run(&format!(
        "CREATE TRIGGER {g} BEFORE UPDATE ON {table} FOR EACH ROW
             EXECUTE FUNCTION retention._fixpoint_guard({id}, {name})",
        table = rel.qualified,
        g = ident(&trigger_name(id)),
        name = literal(&spec.name),
    ))?;
    Ok(())
}

/// The owner of table `relation`.
fn table_owner(relation: u32) -> Result<u32> {
    let owner = crate::catalog::optional_one::<i64, _>(
        "SELECT c.relowner::bigint FROM pg_catalog.pg_class c WHERE c.oid = $1::bigint::oid",
        &[i64::from(relation).into()],
    )?;
    let owner = crate::error::present(owner, "the table's owner")?;
    u32::try_from(owner).map_err(|_| RetentionError::Internal(format!("role oid {owner}")))
}

/// Removes the guards of policy `id` from table `relation`, if both still exist.
pub fn remove(id: i64, relation: u32) -> Result<()> {
    if let Some(table) = RelationInfo::name_if_present(relation)? {
        Spi::run(&format!(
            "ALTER TABLE {table} DROP CONSTRAINT IF EXISTS {c}",
            c = ident(&constraint_name(id)),
        ))?;
        Spi::run(&format!(
            "DROP TRIGGER IF EXISTS {g} ON {table}",
            g = ident(&trigger_name(id)),
        ))?;
    }
    Ok(())
}

/// A row of an archive policy's table is eligible: in scope, terminal and past the window.
fn eligible_sql(spec: &PolicySpec) -> Option<String> {
    let (Some(_), Some(age), Some(window)) = (&spec.terminal, &spec.age_column, &spec.older_than)
    else {
        return None;
    };
    // The cutoff is now, at each update: not one fixed when a statement was planned.
    Some(age_condition(
        spec,
        &format!("t.{}", ident(age)),
        &format!("now() - {}::interval", literal(window)),
    ))
}

/// Whether `row` of `fired`'s table (the guard's: the policy's table or a partition of it) is
/// archive-eligible under `policy`, evaluated as the policy's owner.
fn fixpoint_eligible(policy: &Policy, fired: &Fired, row: pgrx::AnyElement) -> Result<bool> {
    let relation = fired.relation;
    // A partition's copy of the guard fires with the partition's oid.
    let governed = policy.relation == relation
        || crate::catalog::optional_one::<bool, _>(
            "SELECT $1::bigint::oid IN (SELECT a.relid FROM pg_catalog.pg_partition_ancestors($2::bigint::oid) a)",
            &[i64::from(policy.relation).into(), i64::from(relation).into()],
        )? == Some(true);
    if !governed || !policy.action.archives() {
        return Err(RetentionError::invalid(
            format!("policy {} does not guard this table", policy.name),
            format!("The guard was called for table oid {relation}."),
            "Fixpoint guards are installed by retention.add_policy; do not create them by hand.",
        ));
    }
    let Some(eligible) = eligible_sql(policy) else {
        return Err(RetentionError::Internal(
            "archive policy without terminal, age_column or older_than".into(),
        ));
    };
    crate::author::row_matches(policy.owner, &eligible, fired.rowtype, row)
}

/// Whether an update changes no column of the row but the policy's `mutable_columns`: the
/// guard lets such an update of an eligible row through. Compared as the rows' JSON, without
/// those columns.
fn only_mutable_changed(
    policy: &Policy,
    rowtype: u32,
    old: pgrx::AnyElement,
    new: pgrx::AnyElement,
) -> Result<bool> {
    let Some(mutable) = policy.mutable_columns.as_ref().filter(|m| !m.is_empty()) else {
        // Without mutable columns every update of an eligible row is refused.
        return Ok(false);
    };
    let row = PgOid::from(pg_sys::Oid::from(rowtype));
    let plan = crate::catalog::prepared::cached(
        "SELECT (pg_catalog.to_jsonb($1) OPERATOR(pg_catalog.-) $3)
                OPERATOR(pg_catalog.=) (pg_catalog.to_jsonb($2) OPERATOR(pg_catalog.-) $3)",
        &[row, row, PgBuiltInOids::TEXTARRAYOID.oid()],
        false,
    )?;
    // Safety: both rows are the trigger's, of the table's row type.
    let args = unsafe {
        [
            DatumWithOid::new(old, row.value()),
            DatumWithOid::new(new, row.value()),
            DatumWithOid::from(mutable.clone()),
        ]
    };
    Ok(crate::catalog::prepared::one::<bool>(&plan, &args)? == Some(true))
}

/// Why the update that fired the fixpoint guard is refused (RT501), if it is: the row it
/// changes is archive-eligible under the guard's policy (evaluated with the privileges of the
/// policy's owner: the trigger fires as whoever updates the table) and it changes more than the
/// policy's `mutable_columns`.
fn fixpoint_refusal(fired: &Fired) -> Result<Option<RetentionError>> {
    let (Some(old), Some(new)) = (fired.old_row(), fired.new_row()) else {
        return Ok(None);
    };
    let (Some(policy_id), Some(name)) = (
        fired.args.first().and_then(|a| a.parse::<i64>().ok()),
        fired.args.get(1),
    ) else {
        return Err(RetentionError::invalid(
            "a fixpoint guard without its policy",
            "The guard trigger's arguments are the policy's id and name.",
            "Fixpoint guards are installed by retention.add_policy; do not create them by hand.",
        ));
    };
    let Some(policy) = Policy::by_id(policy_id)? else {
        // The policy was dropped and its guard with it; a trigger left behind guards nothing.
        return Ok(None);
    };
    if !fixpoint_eligible(&policy, fired, old)?
        || only_mutable_changed(&policy, fired.rowtype, old, new)?
    {
        return Ok(None);
    }
    Ok(Some(RetentionError::ArchivedRowChange {
        relation: fired.table_name()?,
        policy: name.clone(),
    }))
}

/// `retention._fixpoint_guard()` (declared in sql/api/guards.sql, SECURITY DEFINER): the BEFORE UPDATE
/// row trigger of an archive policy's table, its arguments the policy's id and name. Refuses
/// (RT501) an update of a row that is archive-eligible, but for its `mutable_columns`.
#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn pg_retention_fixpoint_guard(
    fcinfo: pg_sys::FunctionCallInfo,
) -> pg_sys::Datum {
    // Safety: called by the executor as a trigger function.
    let fired = unsafe { Fired::read(fcinfo) }.or_report();
    let refusal = fixpoint_refusal(&fired);
    crate::trigger_call::answer(fired, refusal)
}

/// Calling convention of `retention._fixpoint_guard()`.
#[unsafe(no_mangle)]
pub extern "C" fn pg_finfo_pg_retention_fixpoint_guard() -> &'static pg_sys::Pg_finfo_record {
    &crate::trigger_call::FINFO_V1
}

/// Refuses (22023, 42703, 42704) `mutable_columns` and `mutable_guard` that are not as
/// docs/sql-reference.md says: an archive policy's, together, naming columns of the table other
/// than its key and age column, and a constraint or trigger on the table that exists.
pub fn validate_mutable(spec: &PolicySpec, rel: &RelationInfo) -> Result<()> {
    let (columns, guard) = (&spec.mutable_columns, &spec.mutable_guard);
    if columns.is_none() && guard.is_none() {
        return Ok(());
    }
    let (Some(columns), Some(guard)) = (columns, guard) else {
        return Err(RetentionError::invalid(
            "mutable_columns and mutable_guard go together",
            "A column may change on an archived row only when the writers are held to it by a refusal of the table's own.",
            "Give both: mutable_columns => ARRAY['invalidated_at'], mutable_guard => '<constraint or trigger>'.",
        ));
    };
    if !spec.action.archives() {
        return Err(RetentionError::invalid(
            "mutable_columns applies to archive_then_delete policies",
            "Only an archive policy freezes its eligible rows.",
            "Drop mutable_columns and mutable_guard.",
        ));
    }
    for column in columns {
        rel.column(column)?;
        if rel.pk.contains(column) || spec.age_column.as_ref() == Some(column) {
            return Err(RetentionError::invalid(
                format!("{column} cannot be a mutable column"),
                "A row's key names it in its batch, and its age column decides its window: both must stay as archived.",
                "Name only columns that may legitimately change on a finished row.",
            ));
        }
    }
    let exists = crate::catalog::optional_one::<bool, _>(
        "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_constraint c
                         WHERE c.conrelid = $1::bigint::oid AND c.conname = $2)
             OR EXISTS (SELECT 1 FROM pg_catalog.pg_trigger t
                         WHERE t.tgrelid = $1::bigint::oid AND t.tgname = $2 AND NOT t.tgisinternal)",
        &[i64::from(rel.oid).into(), guard.as_str().into()],
    )?;
    if exists != Some(true) {
        return Err(RetentionError::invalid(
            format!("{} has no constraint or trigger named {guard}", rel.qualified),
            "mutable_guard names the table's own refusal of the writes its mutable columns must not take (e.g. a trigger that lets invalidated_at be set once).",
            "Create it first, then name it.",
        ));
    }
    Ok(())
}
