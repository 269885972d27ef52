//! The eligible rows of each policy kind as SQL: a row predicate for the age kinds (`age`,
//! `unreferenced`, `orphan`), rows ranked newest first within their groups for `keep_latest`
//! and `versions`, and whole expired groups for `entity`. Each applies the guards of
//! `guards.rs`; the statements that walk and delete these rows are in `engine/sweep/`.

use super::conditions::age_condition_with;
use super::{Eligibility, Guards};
use crate::catalog::Kind;
use crate::sql_text::ident;

impl Eligibility<'_> {
    fn group_cols(&self) -> Vec<String> {
        self.policy
            .group_by
            .clone()
            .unwrap_or_default()
            .iter()
            .map(|c| ident(c))
            .collect()
    }

    /// Rows whose group key has a NULL belong to no group and are never eligible.
    fn group_not_null(&self) -> String {
        let cols = self.group_cols();
        if cols.is_empty() {
            "true".into()
        } else {
            cols.iter()
                .map(|c| format!("{c} IS NOT NULL"))
                .collect::<Vec<_>>()
                .join(" AND ")
        }
    }

    /// Deterministic newest-first order within a group: the order column, then the primary key
    /// (on a table without one, the row's place: its leaf and tid).
    fn newest_first(&self) -> String {
        let mut parts = vec![format!(
            "{} DESC NULLS LAST",
            self.order.as_deref().unwrap_or_default()
        )];
        if self.rel.pk.is_empty() {
            parts.push("tableoid DESC, ctid DESC".into());
        } else {
            parts.extend(self.rel.pk.iter().map(|c| format!("{} DESC", ident(c))));
        }
        parts.join(", ")
    }

    /// The eligible rows (`__ctid` plus the table's columns) under `guards`.
    pub fn rows(&self, guards: Guards) -> String {
        let rel = self.rel_column();
        match self.kind {
            Kind::Age | Kind::Unreferenced | Kind::Orphan => format!(
                "SELECT t.ctid AS __ctid, {rel}t.* FROM {from} t WHERE {}",
                self.age_predicate(guards),
                from = match self.leaf {
                    Some(leaf) => format!("ONLY {}", leaf.qualified),
                    None => self.source(),
                },
            ),
            Kind::KeepLatest | Kind::Versions => {
                let keep = self.policy.keep.unwrap_or(i32::MAX);
                let rank_rule = match (self.kind, self.cutoff()) {
                    (Kind::Versions, Some(cutoff)) => format!(
                        "(r.__rn > {keep} OR (r.__rn > {min_keep} AND {age} < {cutoff}))",
                        min_keep = self.policy.min_keep.unwrap_or(1),
                        age = self.age_of("r"),
                    ),
                    _ => format!("r.__rn > {keep}"),
                };
                // Ranks over the whole table; a step keeps its leaf's rows.
                let in_leaf = self
                    .leaf
                    .map(|l| format!(" AND r.__rel = {}", l.oid))
                    .unwrap_or_default();
                format!(
                    "SELECT r.* FROM (
                        SELECT t.ctid AS __ctid, {rel}t.*, {terminal} AS __terminal,
                               row_number() OVER (PARTITION BY {groups} ORDER BY {order}) AS __rn
                          FROM {source} t WHERE {scope} AND {not_null}) r
                      WHERE r.__terminal AND {rank_rule} AND {guard}{in_leaf}",
                    terminal = self.terminal(),
                    groups = self.group_cols().join(", "),
                    order = self.newest_first(),
                    source = self.source(),
                    scope = self.scope(),
                    not_null = self.group_not_null(),
                    guard = self.guard_filter(guards, "r", "r.__rel"),
                )
            }
            Kind::Entity => {
                let on = self.entity_join();
                format!(
                    "SELECT t.ctid AS __ctid, {rel}t.* FROM {source} t
                       JOIN ({groups_sql}) g ON {on}
                      WHERE {scope}",
                    source = self.source(),
                    groups_sql = self.entity_groups(guards),
                    scope = self.scope(),
                )
            }
        }
    }

    /// For `age`: the condition on a row of the table aliased `t` (the only kind whose
    /// eligibility is a plain row predicate, which is what archive claims need).
    pub fn age_predicate(&self, guards: Guards) -> String {
        let cutoff = self.cutoff().unwrap_or_else(|| "'-infinity'".into());
        format!(
            "{} AND {} AND {}",
            age_condition_with(self.policy, &self.terminal, &self.age_of("t"), &cutoff),
            self.lease_dead.as_deref().unwrap_or("true"),
            self.guard_filter(guards, "t", "t.tableoid"),
        )
    }

    /// For `entity`: the expired groups (group columns, `__first` = lowest ctid, `__n` = rows).
    pub fn entity_groups(&self, guards: Guards) -> String {
        let mut having = vec![
            format!(
                "max({}) < {}",
                self.age_of("t"),
                self.cutoff().unwrap_or_else(|| "'-infinity'".into())
            ),
            format!("bool_and({})", self.terminal()),
        ];
        if guards.holds {
            if let Some(h) = self.held("t.tableoid") {
                having.push(format!("NOT bool_or({h})"));
            }
        }
        // On a leaf: the groups with rows in it, in the order of their first row there.
        let first = match self.leaf {
            Some(leaf) => {
                having.push(format!("bool_or(t.tableoid = {})", leaf.oid));
                format!("min(t.ctid) FILTER (WHERE t.tableoid = {})", leaf.oid)
            }
            None => "min(t.ctid)".into(),
        };
        if guards.references {
            if let Some(r) = self.referenced("t") {
                having.push(format!("NOT bool_or({r})"));
            }
        }
        if guards.pins {
            if let Some(u) = self.unpinned("t") {
                having.push(format!("bool_and({u})"));
            }
        }
        let groups = self
            .group_cols()
            .iter()
            .map(|c| format!("t.{c}"))
            .collect::<Vec<_>>()
            .join(", ");
        format!(
            "SELECT {groups}, {first} AS __first, count(*) AS __n
               FROM {source} t WHERE {scope} AND {not_null}
              GROUP BY {groups} HAVING {having}",
            source = self.source(),
            scope = self.scope(),
            not_null = self.group_not_null(),
            having = having.join(" AND "),
        )
    }

    /// For `entity`: the join condition between the table (`t`) and a group row (`g`).
    pub fn entity_join(&self) -> String {
        self.group_cols()
            .iter()
            .map(|c| format!("t.{c} = g.{c}"))
            .collect::<Vec<_>>()
            .join(" AND ")
    }

    /// The scope predicate over unqualified columns.
    pub fn scope_sql(&self) -> String {
        self.scope()
    }
}
