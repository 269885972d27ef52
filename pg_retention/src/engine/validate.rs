//! Validation of a policy definition before it is stored. Every refusal is a typed error and
//! nothing is written until all checks pass.

use crate::catalog::{caller_oid, Action, Kind, PolicySpec, RelationInfo};
use crate::engine::clock;
use crate::error::{Result, RetentionError};
use pgrx::prelude::*;
use std::cmp::Ordering;

/// Age columns must be one of these types.
const AGE_TYPES: [&str; 3] = [
    "timestamp with time zone",
    "timestamp without time zone",
    "date",
];

/// Checks a predicate against a table as its `author` would run it (their privileges, the safe
/// search path); refuses (RT101) what is not a plain boolean row predicate, and what the author
/// may not run. With `built_in_only`, also any call of a function not built into PostgreSQL.
pub fn check_predicate(
    rel: &RelationInfo,
    predicate: &str,
    what: &str,
    author: u32,
    built_in_only: bool,
) -> Result<()> {
    // Through plpgsql so that a parse or analysis error is caught in a subtransaction and
    // comes back as text.
    let problem = Spi::get_one_with_args::<String>(
        "SELECT retention._predicate_check($1::bigint::oid, $2, $3::bigint::oid, $4)",
        &[
            i64::from(rel.oid).into(),
            predicate.into(),
            i64::from(author).into(),
            built_in_only.into(),
        ],
    )?;
    match problem {
        None => Ok(()),
        Some(reason) => Err(RetentionError::InvalidPredicate {
            what: what.into(),
            relation: rel.qualified.clone(),
            reason,
            predicate: predicate.into(),
        }),
    }
}

/// Whether `role` owns the table (is a member of its owner role, or a superuser).
fn owns_table(role: u32, relation: u32) -> Result<bool> {
    Ok(Spi::get_one_with_args::<bool>(
        "SELECT pg_catalog.pg_has_role($1::bigint::oid, c.relowner, 'USAGE')
           FROM pg_catalog.pg_class c WHERE c.oid = $2::bigint::oid",
        &[i64::from(role).into(), i64::from(relation).into()],
    )?
    .unwrap_or(false))
}

/// How an interval (text) compares with zero, by Postgres's own interval comparison.
pub fn interval_sign(value: &str) -> Result<Ordering> {
    interval_compare(value, "0")
}

/// How interval `a` compares with interval `b` (text), by Postgres's own interval comparison.
pub fn interval_compare(a: &str, b: &str) -> Result<Ordering> {
    let sign = Spi::get_one_with_args::<i32>(
        "SELECT CASE WHEN $1::interval > $2::interval THEN 1 WHEN $1::interval < $2::interval THEN -1 ELSE 0 END",
        &[a.into(), b.into()],
    )?;
    Ok(crate::error::present(sign, "an interval comparison")?.cmp(&0))
}

fn require<T>(field: &Option<T>, name: &str, kind: &str) -> Result<()> {
    if field.is_none() {
        return Err(RetentionError::invalid(
            format!("{kind} policies require {name}"),
            format!("{name} was not given."),
            format!("Pass {name} => ... (see docs/sql-reference.md for what each kind needs)."),
        ));
    }
    Ok(())
}

/// Validates a full policy definition against its table.
pub fn validate(spec: &PolicySpec) -> Result<RelationInfo> {
    let kind = spec.kind;
    if spec.name.trim().is_empty() {
        return Err(RetentionError::invalid(
            "policy name must not be empty",
            "name was empty.",
            "Give the policy a name.",
        ));
    }
    if spec.batch_size < 1 || spec.max_rows_per_run < 1 {
        return Err(RetentionError::invalid(
            "batch_size and max_rows_per_run must be at least 1",
            format!(
                "batch_size = {}, max_rows_per_run = {}.",
                spec.batch_size, spec.max_rows_per_run
            ),
            "Every run is bounded; pick positive bounds.",
        ));
    }
    crate::limits::batch_rows("batch_size", i64::from(spec.batch_size))?;
    if let Some(budget) = spec.max_table_rows.filter(|b| *b < 1) {
        return Err(RetentionError::invalid(
            format!("max_table_rows must be at least 1, got {budget}"),
            "It is the most rows the table should hold; health() is unhealthy past it.",
            "Pass a positive count, or leave it NULL for no budget.",
        ));
    }
    let rel = RelationInfo::load(spec.relation, &format!("oid {}", spec.relation))?;
    rel.ensure_not_catalog()?;
    if rel.relkind != "r" && rel.relkind != "p" {
        return Err(RetentionError::invalid(
            format!("{} is not a table", rel.qualified),
            format!(
                "relkind is '{}'; pg_retention governs ordinary and partitioned tables.",
                rel.relkind
            ),
            "Register the policy on the table that holds the rows.",
        ));
    }
    let archive = spec.action.archives();
    if let Some((crate::catalog::class::RetentionClass::SourceOfTruth, reason)) =
        crate::catalog::class::class_of(rel.oid)?
    {
        return Err(RetentionError::SourceOfTruth {
            relation: rel.qualified.clone(),
            reason,
            policy: None,
        });
    }
    if let Some(privilege) = crate::author::missing_privilege(caller_oid(), rel.oid)? {
        return Err(RetentionError::Privilege {
            message: format!(
                "permission denied to govern {}: {privilege} is missing",
                rel.qualified
            ),
            hint: "A policy runs with the privileges of the role that registers it, which needs SELECT and DELETE on the table (archive policies too)."
                .into(),
        });
    }
    if !spec.visible_rows_only() {
        crate::author::ensure_sees_every_row(caller_oid(), rel.oid, &rel.qualified)?;
    }
    crate::engine::search_path::validate(spec, &rel)?;
    clock::validate(spec, &rel, caller_oid())?;
    crate::engine::related_rows::validate(spec, &rel, caller_oid())?;
    crate::guard::validate_mutable(spec, &rel)?;
    check_record_keys(spec, &rel)?;
    crate::engine::search_path::notice_unpinned_triggers(spec, &rel)?;
    let kind_name = kind.as_str();
    match kind {
        Kind::Age | Kind::Entity | Kind::Unreferenced | Kind::Orphan => {
            if clock::declared(spec) == 0 {
                require(&spec.age_column, "age_column", kind_name)?;
            }
            require(&spec.older_than, "older_than", kind_name)?;
            if kind == Kind::Entity {
                require(&spec.group_by, "group_by", kind_name)?;
            }
        }
        Kind::KeepLatest | Kind::Versions => {
            require(&spec.group_by, "group_by", kind_name)?;
            require(&spec.order_by, "order_by", kind_name)?;
            require(&spec.keep, "keep", kind_name)?;
            if spec.older_than.is_some() && clock::declared(spec) == 0 {
                require(&spec.age_column, "age_column (with older_than)", kind_name)?;
            }
        }
    }
    if let Some(keep) = spec.keep {
        if keep < 1 {
            return Err(RetentionError::invalid(
                format!("keep must be at least 1, got {keep}"),
                "A policy that keeps nothing would delete whole groups by rank.",
                "Use keep => 1 or more.",
            ));
        }
    }
    if kind == Kind::KeepLatest && spec.min_keep.is_some() {
        return Err(RetentionError::invalid(
            "min_keep applies to versions policies, not keep_latest",
            "keep_latest keeps exactly keep rows per group; min_keep would mean nothing there.",
            "Drop min_keep, or use kind => 'versions' (keep versions, at least min_keep past the window).",
        ));
    }
    check_no_effect(spec)?;
    check_floors(spec)?;
    if let Some(min_keep) = spec.min_keep {
        if min_keep < 0 || spec.keep.is_some_and(|k| min_keep > k) {
            return Err(RetentionError::invalid(
                format!("min_keep must be between 0 and keep, got {min_keep}"),
                format!("keep = {:?}.", spec.keep),
                "min_keep is a floor under keep.",
            ));
        }
    }
    if let Some(window) = &spec.older_than {
        if interval_sign(window)? != Ordering::Greater {
            return Err(RetentionError::invalid(
                format!("older_than must be a positive interval, got {window}"),
                "A zero or negative window would make every row eligible.",
                "Use an interval such as '30 days'.",
            ));
        }
    }
    if let Some(age) = &spec.age_column {
        check_time_column(&rel, age)?;
    }
    if let Some(groups) = &spec.group_by {
        if groups.is_empty() {
            return Err(RetentionError::invalid(
                "group_by must name at least one column",
                "group_by was an empty array.",
                "Name the columns that identify a group, e.g. ARRAY['tenant_id','source_id'].",
            ));
        }
        for g in groups {
            rel.column(g)?;
        }
    }
    if let Some(order) = &spec.order_by {
        rel.column(order)?;
    }
    if let Some(scope) = &spec.scope {
        check_predicate(&rel, scope, "scope", caller_oid(), false)?;
    }
    if let Some(terminal) = &spec.terminal {
        // An archive policy's terminal predicate goes into the table's fixpoint CHECK, which
        // every writer evaluates as themselves: unless the author could put code in the
        // writers' path anyway (they own the table), it may call built-in functions only.
        let in_writers_path = archive && !owns_table(caller_oid(), rel.oid)?;
        check_predicate(&rel, terminal, "terminal", caller_oid(), in_writers_path)?;
    }
    if kind == Kind::Unreferenced {
        check_references(&rel)?;
    }
    check_lease(spec, &rel)?;
    if spec.action.archives() && kind != Kind::Age {
        return Err(RetentionError::invalid(
            format!(
                "archive_then_delete is supported for age policies, not {}",
                spec.kind
            ),
            "An archived row must reach a fixed point: terminal and past a time window.",
            "Use kind => 'age' with age_column, older_than and terminal.",
        ));
    }
    if let Some(keep) = &spec.archive_keep {
        if !spec.action.archives() {
            return Err(RetentionError::invalid(
                "archive_keep applies to archive_then_delete policies",
                "Only archive policies make archives.",
                "Drop archive_keep, or use action => 'archive_then_delete'.",
            ));
        }
        if interval_sign(keep)? != Ordering::Greater {
            return Err(RetentionError::invalid(
                format!("archive_keep must be a positive interval, got {keep}"),
                "Archives older than archive_keep expire; a zero or negative one would expire every archive.",
                "Use an interval such as '7 years', or leave archive_keep NULL to keep archives forever.",
            ));
        }
    }
    if spec.action.archives() && spec.terminal.is_none() {
        return Err(RetentionError::invalid(
            "archive policies require a terminal predicate",
            "Rows are archived only once they can no longer change; terminal says when that is.",
            "Pass terminal => '<predicate of finished rows>'.",
        ));
    }
    check_second_window(spec, &rel)?;
    Ok(rel)
}

/// Refuses (22023) a `delete_after` but on an `archive_then_delete` policy, or shorter than
/// its `older_than` (a row is deleted only after it was archived), and a policy that keeps
/// archived rows on a table without a primary key (a kept row is known by its key: a place
/// changes with every rewrite of the table).
fn check_second_window(spec: &PolicySpec, rel: &RelationInfo) -> Result<()> {
    if let Some(after) = &spec.delete_after {
        if spec.action != crate::catalog::Action::ArchiveThenDelete {
            return Err(RetentionError::invalid(
                "delete_after applies to archive_then_delete policies",
                "It is the second window of a policy that archives rows and deletes them later.",
                "Drop delete_after, or use action => 'archive_then_delete'.",
            ));
        }
        let window = spec.older_than.as_deref().unwrap_or("0");
        if interval_compare(after, window)? == Ordering::Less {
            return Err(RetentionError::invalid(
                format!("delete_after ({after}) must be at least older_than ({window})"),
                "Rows are archived after older_than and deleted after delete_after, once archived.",
                "Pass a delete_after of at least older_than, or drop it to delete rows as soon as they are archived.",
            ));
        }
    }
    if spec.keeps_archived_rows() && rel.pk.is_empty() {
        return Err(RetentionError::invalid(
            format!("{} has no primary key, and the policy keeps archived rows", rel.qualified),
            "A row archived and kept is remembered by its key, so that it is not archived again; a table without one names rows only by their place, which a rewrite changes.",
            "Give the table a primary key, or archive and delete at once (action => 'archive_then_delete' without delete_after).",
        ));
    }
    Ok(())
}

/// Refuses (22023) `record_keys` where the keys of the rows deleted cannot be listed: archive
/// policies (their archives hold the rows), tables without a primary key, and partitioned
/// tables (their leaves may be dropped whole).
fn check_record_keys(spec: &PolicySpec, rel: &RelationInfo) -> Result<()> {
    if spec.record_keys != Some(true) {
        return Ok(());
    }
    let why = if spec.action != Action::Delete {
        "an archive policy's rows are in its archives, key and all"
    } else if rel.pk.is_empty() {
        "the table has no primary key to record"
    } else if rel.partitioned() {
        "a partitioned table's leaves may be dropped whole, without reading their rows"
    } else {
        return Ok(());
    };
    Err(RetentionError::invalid(
        format!("record_keys does not apply to policy {}", spec.name),
        format!("Recorded keys list the rows a delete policy deleted; here {why}."),
        "Drop record_keys.",
    ))
}

/// "a" or "an", before a kind's name.
pub fn article(kind: Kind) -> &'static str {
    match kind {
        Kind::Age | Kind::Entity | Kind::Unreferenced | Kind::Orphan => "an",
        Kind::KeepLatest | Kind::Versions => "a",
    }
}

/// Refuses (22023) an option given where it has no effect: a policy must do what it says, and
/// an option the kind ignores would let a reader believe a rule holds that none enforces.
fn check_no_effect(spec: &PolicySpec) -> Result<()> {
    let kind = spec.kind;
    let ranked = matches!(kind, Kind::KeepLatest | Kind::Versions);
    let refuse = |option: &str, why: String, hint: &str| {
        Err(RetentionError::invalid(
            format!("{option} has no effect on {} {kind} policy", article(kind)),
            why,
            hint.to_owned(),
        ))
    };
    if kind == Kind::KeepLatest && spec.older_than.is_some() {
        return refuse(
            "older_than",
            "keep_latest deletes by rank alone.".into(),
            "To delete only rows both past the window and ranked past N, use kind => 'versions' with keep => 2147483647, min_keep => N and older_than.",
        );
    }
    // The clock's option, by name, when one is given.
    let clock = [
        ("age_column", spec.age_column.is_some()),
        ("age_expression", spec.age_expression.is_some()),
        ("age_table", clock::declared(spec) > 0),
    ]
    .into_iter()
    .find(|(_, given)| *given)
    .map(|(name, _)| name);
    if kind == Kind::Versions && spec.older_than.is_none() {
        if spec.min_keep.is_some() {
            return refuse(
                "min_keep",
                "min_keep is the floor of versions deleted for their age; without older_than none is.".into(),
                "Give older_than (and age_column) too, or drop min_keep.",
            );
        }
        if let Some(clock) = clock {
            return refuse(
                clock,
                "A versions policy reads a row's age only with older_than.".into(),
                "Give older_than too, or drop it.",
            );
        }
    }
    if kind == Kind::KeepLatest {
        if let Some(clock) = clock {
            return refuse(
                clock,
                "keep_latest deletes by rank alone.".into(),
                "Drop it, or use kind => 'versions' with older_than.",
            );
        }
    }
    if !ranked && (spec.keep.is_some() || spec.min_keep.is_some()) {
        return refuse(
            if spec.keep.is_some() {
                "keep"
            } else {
                "min_keep"
            },
            "Only keep_latest and versions policies keep rows by rank.".into(),
            "Drop it, or use kind => 'keep_latest' or 'versions'.",
        );
    }
    if !ranked && kind != Kind::Entity && spec.group_by.is_some() {
        return refuse(
            "group_by",
            format!("A {kind} policy decides row by row."),
            "Drop group_by, or use kind => 'keep_latest', 'versions' or 'entity'.",
        );
    }
    if spec.keep_floor.is_some() && !ranked {
        return refuse(
            "keep_floor",
            "A keep floor bounds keep and min_keep, which only ranked kinds have.".into(),
            "Drop keep_floor.",
        );
    }
    if spec.window_floor.is_some() && spec.older_than.is_none() {
        return refuse(
            "window_floor",
            "A window floor bounds older_than, which this policy does not have.".into(),
            "Drop window_floor, or give older_than.",
        );
    }
    Ok(())
}

/// Refuses a column of `rel` that is not a point in time (an age or an expiry).
pub fn check_time_column(rel: &RelationInfo, column: &str) -> Result<()> {
    let col = rel.column(column)?;
    if !AGE_TYPES.contains(&col.type_name.as_str()) {
        return Err(RetentionError::WrongType {
            relation: rel.qualified.clone(),
            column: column.to_owned(),
            found: col.type_name.clone(),
            expected: "timestamptz, timestamp or date".into(),
        });
    }
    Ok(())
}

/// An `orphan` policy names its provisional rows (`scope`) and their owning lease: a table the
/// registering role may read, this table's columns holding a lease's primary key, and the lease
/// table's expiry column. Other kinds name no lease.
fn check_lease(spec: &PolicySpec, rel: &RelationInfo) -> Result<()> {
    let given =
        spec.lease_table.is_some() || spec.lease_key.is_some() || spec.lease_expiry.is_some();
    if spec.kind != Kind::Orphan {
        if given {
            return Err(RetentionError::invalid(
                "lease_table, lease_key and lease_expiry apply to orphan policies",
                format!("kind is {}.", spec.kind),
                "Drop them, or use kind => 'orphan'.",
            ));
        }
        return Ok(());
    }
    require(&spec.scope, "scope (which rows are provisional)", "orphan")?;
    require(&spec.lease_table, "lease_table", "orphan")?;
    require(&spec.lease_key, "lease_key", "orphan")?;
    require(&spec.lease_expiry, "lease_expiry", "orphan")?;
    let (Some(table), Some(keys), Some(expiry)) =
        (spec.lease_table, &spec.lease_key, &spec.lease_expiry)
    else {
        return Ok(());
    };
    let lease = RelationInfo::load(table, &format!("oid {table}"))?;
    if lease.pk.is_empty() || lease.pk.len() != keys.len() {
        return Err(RetentionError::invalid(
            format!(
                "lease_key names {} columns; the primary key of {} has {}",
                keys.len(),
                lease.qualified,
                lease.pk.len()
            ),
            "A row's lease is the lease row whose primary key equals the row's lease_key columns, in order.",
            "Name this table's columns that hold the lease's primary key, in its order.",
        ));
    }
    for k in keys {
        rel.column(k)?;
    }
    check_time_column(&lease, expiry)?;
    ensure_may_read(caller_oid(), &lease, "the leases", "the lease table")
}

/// Refuses (42501) a table `author` may not read that a policy reads to decide (`what`, in it;
/// `table_is`, the table as the hint names it): the policy reads it with its author's
/// privileges.
pub fn ensure_may_read(
    author: u32,
    table: &RelationInfo,
    what: &str,
    table_is: &str,
) -> Result<()> {
    let may_read = Spi::get_one_with_args::<bool>(
        "SELECT pg_catalog.has_table_privilege($1::bigint::oid, $2::bigint::oid, 'SELECT')",
        &[i64::from(author).into(), i64::from(table.oid).into()],
    )?;
    if may_read != Some(true) {
        return Err(RetentionError::Privilege {
            message: format!("permission denied to read {what} in {}", table.qualified),
            hint: format!("The policy reads {table_is} with the privileges of the role that registers it; grant it SELECT."),
        });
    }
    Ok(())
}

/// An `unreferenced` policy needs foreign keys to reference its table (else nothing could ever
/// reference its rows), each one that makes PostgreSQL refuse to delete a referenced row (NO
/// ACTION or RESTRICT): a key that cascades or sets NULL would let a row referenced after the
/// policy's check took its referencing rows with it.
fn check_references(rel: &RelationInfo) -> Result<()> {
    if rel.referenced_by.is_empty() {
        return Err(RetentionError::invalid(
            format!("no foreign key references {}", rel.qualified),
            "An unreferenced policy deletes rows no other row references; without a foreign key to it, no reference can be checked.",
            "Declare the foreign keys of the tables that reference it, or use kind => 'age'.",
        ));
    }
    if let Some(r) = rel.referenced_by.iter().find(|r| !r.refuses_delete()) {
        return Err(RetentionError::invalid(
            format!(
                "the foreign key from {} to {} does not refuse deletes",
                r.child, rel.qualified
            ),
            "Its ON DELETE action changes or deletes referencing rows; a row referenced after the check would take them with it.",
            "Declare it ON DELETE NO ACTION (the default) or RESTRICT.",
        ));
    }
    Ok(())
}

/// Refuses a keep or min_keep below `keep_floor` and an older_than below `window_floor`.
fn check_floors(spec: &PolicySpec) -> Result<()> {
    if let Some(floor) = spec.keep_floor {
        if floor < 0 {
            return Err(RetentionError::invalid(
                format!("keep_floor must not be negative, got {floor}"),
                "A floor is a number of rows or versions kept.",
                "Use keep_floor => 0 or more.",
            ));
        }
        for (field, value) in [("keep", spec.keep), ("min_keep", spec.min_keep)] {
            if let Some(v) = value.filter(|v| *v < floor) {
                return Err(RetentionError::invalid(
                    format!("{field} {v} is below the policy's keep_floor {floor}"),
                    format!("keep_floor = {floor}: readers display at least that much history."),
                    "Keep at least the floor, or lower it first with retention.lower_floor (ledgered).",
                ));
            }
        }
    }
    if let Some(floor) = &spec.window_floor {
        if interval_sign(floor)? == Ordering::Less {
            return Err(RetentionError::invalid(
                format!("window_floor must not be negative, got {floor}"),
                "A floor is the shortest window readers rely on.",
                "Use an interval such as '30 days'.",
            ));
        }
        if let Some(window) = &spec.older_than {
            if interval_compare(window, floor)? == Ordering::Less {
                return Err(RetentionError::invalid(
                    format!("older_than {window} is below the policy's window_floor {floor}"),
                    format!("window_floor = {floor}: readers rely on at least that window."),
                    "Use a window at or above the floor, or lower it first with retention.lower_floor (ledgered).",
                ));
            }
        }
    }
    Ok(())
}
