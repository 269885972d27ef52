//! `retention.table_classes`: the retention class declared for each table (reference 003), by
//! appending, never changed; the newest record of a table is its class. A partition without
//! one of its own has its nearest ancestor's.

use crate::catalog::query_json;
use crate::error::{Result, RetentionError};
use pgrx::prelude::*;

/// What a table's rows are, for retention.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetentionClass {
    /// The record itself: never deleted by a policy.
    SourceOfTruth,
    /// Rebuildable from other tables (caches, projections, search indexes).
    DerivedRebuildable,
    /// State that lives while something runs (leases, sessions, locks).
    OperationalState,
    /// Rows in transit (outboxes, queues, logs) that go once delivered or old.
    Transport,
    /// Evidence kept for a time, then archived.
    Audit,
}

impl RetentionClass {
    /// Every class, in the order the docs list them.
    pub const ALL: [RetentionClass; 5] = [
        RetentionClass::SourceOfTruth,
        RetentionClass::DerivedRebuildable,
        RetentionClass::OperationalState,
        RetentionClass::Transport,
        RetentionClass::Audit,
    ];

    /// The name SQL uses.
    pub fn as_str(self) -> &'static str {
        match self {
            RetentionClass::SourceOfTruth => "source_of_truth",
            RetentionClass::DerivedRebuildable => "derived_rebuildable",
            RetentionClass::OperationalState => "operational_state",
            RetentionClass::Transport => "transport",
            RetentionClass::Audit => "audit",
        }
    }

    /// Parses a class name; 22023 naming the classes otherwise.
    pub fn parse(name: &str) -> Result<RetentionClass> {
        Self::ALL
            .into_iter()
            .find(|c| c.as_str() == name)
            .ok_or_else(|| {
                RetentionError::invalid(
                    format!("unknown retention class {name}"),
                    "A table is one of: source_of_truth, derived_rebuildable, operational_state, transport, audit.",
                    "Pass one of those names.",
                )
            })
    }
}

/// A class declaration to record.
pub struct NewClass<'a> {
    /// The table.
    pub relation: u32,
    /// Its qualified name.
    pub relation_name: &'a str,
    /// Its class.
    pub class: RetentionClass,
    /// Why (not empty).
    pub reason: &'a str,
    /// The role that declared it.
    pub by: u32,
}

impl NewClass<'_> {
    /// Appends the record.
    pub fn append(&self) -> Result<()> {
        Spi::run_with_args(
            "INSERT INTO retention.table_classes (relation, relation_name, class, reason, classified_by)
             VALUES ($1::bigint::oid, $2, $3, $4, $5::bigint::oid)",
            &[
                i64::from(self.relation).into(),
                self.relation_name.into(),
                self.class.as_str().into(),
                self.reason.into(),
                i64::from(self.by).into(),
            ],
        )?;
        Ok(())
    }
}

/// The class of table `relation` and why: its own newest declaration, or its nearest
/// ancestor's; None when neither declared one.
pub fn class_of(relation: u32) -> Result<Option<(RetentionClass, String)>> {
    let found = query_json::<(String, String)>(
        "SELECT jsonb_build_array(k.class, k.reason)
           FROM (SELECT $1::bigint::oid AS relid, 0 AS level
                 UNION ALL
                 SELECT a.relid, a.n::int FROM pg_catalog.pg_partition_ancestors($1::bigint::oid)
                        WITH ORDINALITY a(relid, n)) t
           JOIN LATERAL (SELECT c.class, c.reason FROM retention.table_classes c
                          WHERE c.relation = t.relid ORDER BY c.id DESC LIMIT 1) k ON true
          ORDER BY t.level LIMIT 1",
        &[i64::from(relation).into()],
    )?;
    found
        .map(|(class, reason)| Ok((RetentionClass::parse(&class)?, reason)))
        .transpose()
}
