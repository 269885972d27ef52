//! The rows of another table that reference a row through a foreign key, as a policy declares
//! them (a structured declaration, not free SQL): a row's clock may be read from them
//! (engine/clock.rs), and whether a row is terminal may depend on them —
//! `terminal_table`, `terminal_table_where`, `terminal_table_test`: the row is terminal only if
//! rows of `terminal_table` that reference it and match `terminal_table_where` (a predicate
//! over their columns) exist (`exists`, the default) or do not (`not_exists`). A job is
//! finished once an event says so. Both are evaluated in the policy's statements, as its owner,
//! and both apply to delete policies on tables that are not partitioned.

use crate::catalog::{Action, PolicySpec, Reference, RelationInfo};
use crate::engine::eligible::condition;
use crate::error::{Result, RetentionError};
use crate::sql_text::ident;

/// The one foreign key from `table` to `rel`; `option` names the policy option that named
/// `table`, for the error.
pub fn referencing_key(rel: &RelationInfo, table: u32, option: &str) -> Result<Reference> {
    let keys: Vec<_> = rel
        .referenced_by
        .iter()
        .filter(|r| r.child_oid == table)
        .collect();
    match keys.as_slice() {
        [one] => Ok((*one).clone()),
        _ => Err(RetentionError::invalid(
            format!(
                "{option} must reference {} through exactly one foreign key, found {}",
                rel.qualified,
                keys.len()
            ),
            "The rows that bear on a row are those that reference it: the key says which.",
            "Declare the foreign key (or name a table with one key to it).",
        )),
    }
}

/// `theirs = ours` for each column pair of `key`, their side aliased `them`, ours `us`.
pub fn join_on(key: &Reference, them: &str, us: &str) -> String {
    key.child_cols
        .iter()
        .zip(&key.parent_cols)
        .map(|(c, p)| format!("{them}.{} = {us}.{}", ident(c), ident(p)))
        .collect::<Vec<_>>()
        .join(" AND ")
}

/// The terminal test a policy declares, as SQL over the row aliased `us`; None when it
/// declares none.
pub fn terminal_test(spec: &PolicySpec, rel: &RelationInfo, us: &str) -> Result<Option<String>> {
    let Some(table) = spec.terminal_table else {
        return Ok(None);
    };
    let key = referencing_key(rel, table, "terminal_table")?;
    let other = RelationInfo::load(table, &format!("terminal_table of {}", rel.qualified))?;
    let test = if spec.terminal_table_test.as_deref() == Some("not_exists") {
        "NOT EXISTS"
    } else {
        "EXISTS"
    };
    Ok(Some(format!(
        "{test} (SELECT 1 FROM {table} __tt WHERE {on} AND {matching})",
        table = other.all_rows(),
        on = join_on(&key, "__tt", us),
        // Unqualified names in the predicate are the referencing row's columns: its FROM is
        // the innermost, and registration checked them against that table.
        matching = condition(spec.terminal_table_where.as_deref()),
    )))
}

/// Refuses (22023, RT101, 42501) a terminal test that is not as the module says; `author`
/// registers the policy.
pub fn validate(spec: &PolicySpec, rel: &RelationInfo, author: u32) -> Result<()> {
    let Some(table) = spec.terminal_table else {
        if spec.terminal_table_where.is_some() || spec.terminal_table_test.is_some() {
            return Err(RetentionError::invalid(
                "terminal_table_where and terminal_table_test need terminal_table",
                "They test the rows of another table that reference a row.",
                "Name the table: terminal_table => '<referencing table>'.",
            ));
        }
        return Ok(());
    };
    if spec.action != Action::Delete || rel.partitioned() {
        return Err(RetentionError::invalid(
            "terminal_table applies to delete policies on tables that are not partitioned",
            "An archive policy's terminal rows are frozen by a check on the table itself, which cannot see other tables; a partition is dropped whole by its bound.",
            "Use terminal over the table's own columns.",
        ));
    }
    if let Some(test) = spec.terminal_table_test.as_deref() {
        if test != "exists" && test != "not_exists" {
            return Err(RetentionError::invalid(
                format!("terminal_table_test must be 'exists' or 'not_exists', got {test}"),
                "A row is terminal when matching referencing rows exist, or when none do.",
                "Use terminal_table_test => 'exists' (the default) or 'not_exists'.",
            ));
        }
    }
    referencing_key(rel, table, "terminal_table")?;
    let other = RelationInfo::load(table, &format!("terminal_table of {}", rel.qualified))?;
    // Rows hidden from the author would make a row look terminal (or not) when it is not.
    crate::author::ensure_sees_every_row(author, table, &other.qualified)?;
    crate::engine::validate::ensure_may_read(
        author,
        &other,
        "the terminal test",
        "terminal_table",
    )?;
    if let Some(matching) = &spec.terminal_table_where {
        crate::engine::validate::check_predicate(
            &other,
            matching,
            "terminal_table_where",
            author,
            false,
        )?;
    }
    Ok(())
}
