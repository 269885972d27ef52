//! Which index would let a policy's statements find its rows without reading whole tables:
//! its clock's column (steps walk it in age order), the expression of an expression clock, and
//! for clocks and terminal tests read from referencing rows, their foreign-key columns (each
//! row's test is then an index probe, not a scan of the other table). Preview shows the
//! `CREATE INDEX` statements of those missing; nothing is created for the user.

use crate::catalog::{Kind, Policy, RelationInfo};
use crate::engine::clock::Clock;
use crate::engine::related_rows::referencing_key;
use crate::error::Result;
use crate::sql_text::ident;

/// `CREATE INDEX` statements, `; `-joined, for the indexes `policy`'s statements would use
/// and that do not exist; None when none is missing.
pub fn missing(policy: &Policy, rel: &RelationInfo) -> Result<Option<String>> {
    if rel.partitioned() {
        // Leaves are retired whole or swept by their bound; their indexes are the parent's.
        return Ok(None);
    }
    let mut wanted: Vec<String> = Vec::new();
    let reads_age = policy.kind.by_age() || policy.kind == Kind::Entity;
    if reads_age {
        match Clock::of(policy, rel)? {
            Some(Clock::Column(_)) => {
                if let Some(column) = &policy.age_column {
                    if !leading(rel.oid, std::slice::from_ref(column))? {
                        wanted.push(format!(
                            "CREATE INDEX ON {} ({})",
                            rel.qualified,
                            ident(column)
                        ));
                    }
                }
            }
            Some(Clock::Expression(expression)) => {
                if !expression_leading(rel.oid)? {
                    wanted.push(format!(
                        "CREATE INDEX ON {} (({expression}))",
                        rel.qualified
                    ));
                }
            }
            Some(Clock::Related { .. }) | None => {}
        }
    }
    for (table, option) in [
        (policy.age_table, "age_table"),
        (policy.terminal_table, "terminal_table"),
    ] {
        let Some(table) = table else { continue };
        let key = referencing_key(rel, table, option)?;
        if !leading(table, &key.child_cols)? {
            let cols: Vec<String> = key.child_cols.iter().map(|c| ident(c)).collect();
            wanted.push(format!(
                "CREATE INDEX ON {} ({})",
                key.child,
                cols.join(", ")
            ));
        }
    }
    wanted.dedup();
    Ok((!wanted.is_empty()).then(|| wanted.join("; ")))
}

/// Whether a valid, unconditional index of table `oid` leads with exactly the columns `cols`
/// (in any order).
fn leading(oid: u32, cols: &[String]) -> Result<bool> {
    Ok(crate::catalog::optional_one::<bool, _>(
        "SELECT EXISTS (
           SELECT 1 FROM pg_catalog.pg_index i
            WHERE i.indrelid = $1::bigint::oid AND i.indisvalid AND i.indpred IS NULL
              AND i.indnkeyatts >= cardinality($2::text[])
              AND (SELECT coalesce(array_agg(a.attname::text), '{}')
                     FROM unnest((i.indkey::int2[])[0:cardinality($2::text[]) - 1]) k(attnum)
                     JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum)
                  OPERATOR(pg_catalog.@>) $2::text[]
              AND NOT 0 = ANY ((i.indkey::int2[])[0:cardinality($2::text[]) - 1]))",
        &[i64::from(oid).into(), cols.to_vec().into()],
    )? == Some(true))
}

/// Whether a valid, unconditional index of table `oid` leads with an expression (the
/// expression clock's own is not compared: PostgreSQL stores it rewritten).
fn expression_leading(oid: u32) -> Result<bool> {
    Ok(crate::catalog::optional_one::<bool, _>(
        "SELECT EXISTS (
           SELECT 1 FROM pg_catalog.pg_index i
            WHERE i.indrelid = $1::bigint::oid AND i.indisvalid AND i.indpred IS NULL
              AND (i.indkey::int2[])[0] = 0)",
        &[i64::from(oid).into()],
    )? == Some(true))
}
