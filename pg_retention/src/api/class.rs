//! `retention.classify(table, class, reason)`: declares what a table's rows are for retention
//! (catalog/class.rs), also written into the table's comment so that whoever reads the schema
//! sees it. A `source_of_truth` table takes no policy.

use crate::api::hold::non_empty;
use crate::catalog::class::{NewClass, RetentionClass};
use crate::catalog::{caller_oid, RelationInfo};
use crate::error::{OrReport, Result, RetentionError};
use crate::sql_text::literal;
use pgrx::prelude::*;

/// The comment line that carries a table's class; any earlier one is replaced.
const MARK: &str = "pg_retention class: ";

fn classify(relation: u32, class: &str, reason: &str) -> Result<()> {
    non_empty(reason, "reason")?;
    let class = RetentionClass::parse(class)?;
    let rel = RelationInfo::load(relation, &format!("oid {relation}"))?;
    rel.ensure_not_catalog()?;
    if !matches!(rel.relkind.as_str(), "r" | "p") {
        return Err(RetentionError::invalid(
            format!("{} is not a table", rel.qualified),
            format!("Its relkind is {}.", rel.relkind),
            "Classify the table (or partitioned table) that holds the rows.",
        ));
    }
    let may_read = crate::catalog::optional_one::<bool, _>(
        "SELECT pg_catalog.has_table_privilege($1::bigint::oid, $2::bigint::oid, 'SELECT')",
        &[i64::from(caller_oid()).into(), i64::from(relation).into()],
    )?;
    if may_read != Some(true) {
        return Err(RetentionError::Privilege {
            message: format!(
                "permission denied to classify {}: SELECT is missing",
                rel.qualified
            ),
            hint: "Classify tables you may read.".into(),
        });
    }
    if class == RetentionClass::SourceOfTruth {
        let governing = crate::catalog::optional_one::<String, _>(
            "SELECT p.name FROM retention.policies p
              WHERE p.relation::oid IN (SELECT retention._tree_of($1::bigint::oid))
              ORDER BY p.name LIMIT 1",
            &[i64::from(rel.oid).into()],
        )?;
        if let Some(policy) = governing {
            return Err(RetentionError::SourceOfTruth {
                relation: rel.qualified.clone(),
                reason: reason.to_owned(),
                policy: Some(policy),
            });
        }
    }
    NewClass {
        relation,
        relation_name: &rel.qualified,
        class,
        reason,
        by: caller_oid(),
    }
    .append()?;
    comment(&rel, class, reason)
}

/// Writes the class into the table's comment, keeping the rest of the comment as it was.
fn comment(rel: &RelationInfo, class: RetentionClass, reason: &str) -> Result<()> {
    let before = crate::catalog::optional_one::<String, _>(
        "SELECT pg_catalog.obj_description($1::bigint::oid, 'pg_class')",
        &[i64::from(rel.oid).into()],
    )?
    .unwrap_or_default();
    let mut lines: Vec<String> = before
        .lines()
        .filter(|l| !l.starts_with(MARK))
        .map(str::to_owned)
        .collect();
    lines.push(format!(
        "{MARK}{} ({})",
        class.as_str(),
        reason.replace('\n', " ")
    ));
    Spi::run(&format!(
        "COMMENT ON TABLE {} IS {}",
        rel.qualified,
        literal(&lines.join("\n"))
    ))?;
    Ok(())
}

/// Declares the retention class of `relation`.
#[pg_extern]
#[search_path(pg_catalog, pg_temp)]
fn _classify(relation: pg_sys::Oid, class: &str, reason: &str) {
    crate::identity::entry(|| classify(relation.to_u32(), class, reason)).or_report();
}
