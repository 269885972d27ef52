//! A policy's clock: the time a row's age is counted from. One of
//!
//! * `age_column` — a column of the row;
//! * `age_expression` — an expression over the row (`coalesce(finished_at, updated_at)`),
//!   validated like a predicate (one expression, no subqueries, aggregates or volatile
//!   functions) that yields a timestamptz, timestamp or date;
//! * `age_table`, `age_table_column`, `age_pick` — the newest (or oldest) value of a column in
//!   the rows of another table that reference this row through its one foreign key to this
//!   table (a job's events: a job is as old as its newest event). A row no such row
//!   references has no age, and is never old enough.
//!
//! Whichever it is, it is evaluated where the age column was: in every statement of the policy,
//! as its owner. Only a column lets steps walk an index in age order or retire a partition whole
//! by its bound; the others are for delete policies on tables that are not partitioned.

use crate::catalog::{Action, PolicySpec, RelationInfo};
use crate::engine::predicate::{problem_of, Yields};
use crate::engine::related_rows::referencing_key;
use crate::error::{Result, RetentionError};
use crate::sql_text::ident;

/// How a row's time is read, as SQL over a row alias.
#[derive(Debug, Clone)]
pub enum Clock {
    /// A column (quoted).
    Column(String),
    /// An expression over the row's unqualified columns.
    Expression(String),
    /// The newest (`max`) or oldest (`min`) value of `column` (quoted) among the rows of
    /// `table` (quoted, with its partitions) whose `join` columns (theirs, this table's; quoted)
    /// reference the row.
    Related {
        table: String,
        join: Vec<(String, String)>,
        column: String,
        newest: bool,
    },
}

impl Clock {
    /// The clock `spec` declares on `rel`; None when it declares none.
    pub fn of(spec: &PolicySpec, rel: &RelationInfo) -> Result<Option<Clock>> {
        if let Some(column) = &spec.age_column {
            return Ok(Some(Clock::Column(ident(column))));
        }
        if let Some(expression) = &spec.age_expression {
            return Ok(Some(Clock::Expression(expression.clone())));
        }
        let Some(table) = spec.age_table else {
            return Ok(None);
        };
        let column = spec.age_table_column.as_deref().ok_or_else(|| {
            RetentionError::invalid(
                "age_table needs age_table_column",
                "The age is taken from a column of the referencing rows.",
                "Name it: age_table_column => '<their time column>'.",
            )
        })?;
        let key = referencing_key(rel, table, "age_table")?;
        let other = RelationInfo::load(table, &format!("age_table of {}", rel.qualified))?;
        Ok(Some(Clock::Related {
            table: other.all_rows(),
            join: key
                .child_cols
                .iter()
                .zip(&key.parent_cols)
                .map(|(c, p)| (ident(c), ident(p)))
                .collect(),
            column: ident(column),
            newest: spec.age_pick.as_deref() != Some("oldest"),
        }))
    }

    /// The row's time, for the row addressed as `alias` (or its unqualified columns, for an
    /// expression).
    pub fn sql(&self, alias: &str) -> String {
        match self {
            Clock::Column(column) => format!("{alias}.{column}"),
            Clock::Expression(expression) => format!("(\n{expression}\n)"),
            Clock::Related {
                table,
                join,
                column,
                newest,
            } => {
                let on = join
                    .iter()
                    .map(|(theirs, ours)| format!("__a.{theirs} = {alias}.{ours}"))
                    .collect::<Vec<_>>()
                    .join(" AND ");
                let pick = if *newest { "max" } else { "min" };
                format!("(SELECT {pick}(__a.{column}) FROM {table} __a WHERE {on})")
            }
        }
    }
}

/// How many clocks `spec` declares (at most one may be).
pub fn declared(spec: &PolicySpec) -> usize {
    [
        spec.age_column.is_some(),
        spec.age_expression.is_some(),
        spec.age_table.is_some() || spec.age_table_column.is_some() || spec.age_pick.is_some(),
    ]
    .iter()
    .filter(|d| **d)
    .count()
}

/// Refuses (22023, RT101, 42501) a clock other than a column that is not as the module says;
/// `author` registers the policy.
pub fn validate(spec: &PolicySpec, rel: &RelationInfo, author: u32) -> Result<()> {
    if declared(spec) > 1 {
        return Err(RetentionError::invalid(
            "give one of age_column, age_expression or age_table",
            "A policy counts a row's age from one clock.",
            "Keep the one that says when a row's time is.",
        ));
    }
    if spec.age_column.is_some() || declared(spec) == 0 {
        return Ok(());
    }
    if spec.action != Action::Delete || rel.partitioned() {
        return Err(RetentionError::invalid(
            "age_expression and age_table apply to delete policies on tables that are not partitioned",
            "Archive policies and partitions are aged by a column: its value is what the archive guard freezes and a partition's bound ranges over.",
            "Use age_column.",
        ));
    }
    if let Some(expression) = &spec.age_expression {
        let problem = crate::subxact::or_error(|| {
            crate::author::run_as(author, || {
                Ok(problem_of(&rel.qualified, expression, false, Yields::Time))
            })
        })?;
        let reason = match problem {
            Ok(None) => return Ok(()),
            Ok(Some(reason)) => reason,
            Err(failure) => failure.message,
        };
        return Err(RetentionError::InvalidPredicate {
            what: "age_expression".into(),
            relation: rel.qualified.clone(),
            reason,
            predicate: expression.clone(),
        });
    }
    let table = spec.age_table.ok_or_else(|| {
        RetentionError::invalid(
            "age_table_column and age_pick need age_table",
            "They say which column of which referencing table a row's age is read from.",
            "Name the table: age_table => '<referencing table>'.",
        )
    })?;
    if let Some(pick) = spec.age_pick.as_deref() {
        if pick != "newest" && pick != "oldest" {
            return Err(RetentionError::invalid(
                format!("age_pick must be 'newest' or 'oldest', got {pick}"),
                "A row's age is its newest or its oldest referencing row's time.",
                "Use age_pick => 'newest' (the default) or 'oldest'.",
            ));
        }
    }
    referencing_key(rel, table, "age_table")?;
    let other = RelationInfo::load(table, &format!("age_table of {}", rel.qualified))?;
    crate::author::ensure_sees_every_row(author, table, &other.qualified)?;
    crate::engine::validate::check_time_column(
        &other,
        spec.age_table_column.as_deref().unwrap_or_default(),
    )?;
    crate::engine::validate::ensure_may_read(author, &other, "the clock", "age_table")?;
    Ok(())
}
