//! The guards of eligibility: active holds, rows kept by foreign-key references, and rows a live
//! pull consumer still pins. Which apply is a [`Guards`] value; the filters here turn them into
//! SQL over one row (or, for `entity`, a whole group in `kinds.rs`), and the counts of what each
//! guard keeps are what preview reports and a run's close ledgers.

use super::conditions::{hold_call, on_held_leaves};
use super::Eligibility;
use crate::catalog::{Hold, Leaf};
use crate::error::{present, Result};
use crate::sql_text::predicate;
use pgrx::prelude::*;

/// Which guards apply to an eligibility query.
#[derive(Debug, Clone, Copy)]
pub struct Guards {
    /// Skip rows that match an active hold (a whole group, for `entity`).
    pub holds: bool,
    /// Skip rows still referenced through a foreign key (a whole group, for `entity`).
    pub references: bool,
    /// Skip rows a live pull consumer pins (a whole group, for `entity`).
    pub pins: bool,
}

impl Guards {
    /// Every guard: what a sweep deletes.
    pub const ALL: Guards = Guards {
        holds: true,
        references: true,
        pins: true,
    };
    /// No guards: what the policy alone makes eligible.
    pub const NONE: Guards = Guards {
        holds: false,
        references: false,
        pins: false,
    };
    /// References only: eligible and deletable but for holds and consumers.
    pub const REFERENCES: Guards = Guards {
        holds: false,
        references: true,
        pins: false,
    };
    /// References and consumers: eligible and deletable but for holds.
    pub const UNHELD: Guards = Guards {
        holds: false,
        references: true,
        pins: true,
    };
}

impl Eligibility<'_> {
    /// How many rows are eligible under `guards`, counted as the policy's owner.
    pub fn count(&self, guards: Guards) -> Result<i64> {
        self.as_owner(|| {
            present(
                Spi::get_one::<i64>(&format!("SELECT count(*) FROM ({}) e", self.rows(guards)))?,
                "count(*)",
            )
        })
    }

    /// Eligible rows (before any guard) that rows referencing them keep; None when no foreign
    /// key can keep one (engine/references.rs). What preview reports as `referenced` and a
    /// run's close ledgers as `reference_skip`.
    pub fn referenced_count(&self) -> Result<Option<i64>> {
        if self.references.is_empty() {
            return Ok(None);
        }
        Ok(Some(
            self.count(Guards::NONE)? - self.count(Guards::REFERENCES)?,
        ))
    }

    /// Eligible rows (references and consumers guarded, holds not) matching each active hold,
    /// by hold id: what preview reports as held and a run's close ledgers as `hold_skip`.
    pub fn held_per_hold(&self) -> Result<Vec<(i64, i64)>> {
        self.hold_counts(&self.rows(Guards::UNHELD), "e.__rel", &[])
    }

    /// The rows of `source` (a query with the table's columns; `leaf_oid` is SQL for a row's
    /// leaf, `args` its parameters) matching each active hold, by hold id, counted as the
    /// policy's owner with each hold evaluated as [`Eligibility::hold_match`] does.
    pub fn hold_counts(
        &self,
        source: &str,
        leaf_oid: &str,
        args: &[pgrx::datum::DatumWithOid<'_>],
    ) -> Result<Vec<(i64, i64)>> {
        if self.holds.is_empty() {
            return Ok(vec![]);
        }
        let filters: Vec<String> = self
            .holds
            .iter()
            .map(|h| format!("count(*) FILTER (WHERE {})", self.hold_match(h, leaf_oid)))
            .collect();
        let sql = format!(
            "SELECT ARRAY[{}]::bigint[] FROM ({source}) e",
            filters.join(", "),
        );
        let counts = self.as_owner(|| {
            present(
                Spi::get_one_with_args::<Vec<i64>>(&sql, args)?,
                "hold counts",
            )
        })?;
        Ok(self.holds.iter().map(|h| h.id).zip(counts).collect())
    }

    /// True when the row (columns unqualified, its leaf's oid in `leaf_oid`) matches an
    /// active hold.
    pub(super) fn held(&self, leaf_oid: &str) -> Option<String> {
        if self.holds.is_empty() {
            return None;
        }
        Some(format!(
            "({})",
            self.holds
                .iter()
                .map(|h| self.hold_match(h, leaf_oid))
                .collect::<Vec<_>>()
                .join(" OR ")
        ))
    }

    /// True when the row matches hold `h`, evaluated with the privileges of its placer. The
    /// statement runs as the policy's owner: a hold the owner placed is inlined; any other goes
    /// through `retention._hold_matches`, which evaluates it row by row as its placer (slower,
    /// and only ever for the rows the policy already made eligible). A hold placed on a
    /// partition below the governed table matches only rows whose leaf (`leaf_oid`, SQL) it
    /// covers.
    fn hold_match(&self, h: &Hold, leaf_oid: &str) -> String {
        let matches = if h.placer == self.policy.owner {
            predicate(&h.predicate)
        } else {
            hold_call(h, None)
        };
        on_held_leaves(h, leaf_oid, matches)
    }

    /// The holds in force on the rows of `leaf`.
    pub fn holds_on(&self, leaf: &Leaf) -> impl Iterator<Item = &Hold> {
        let oid = leaf.oid;
        self.holds
            .iter()
            .filter(move |h| h.leaves.as_ref().is_none_or(|l| l.contains(&oid)))
    }

    /// True when the row, addressed as `alias`, is kept by a row that references it through
    /// a foreign key (engine/references.rs).
    pub(super) fn referenced(&self, alias: &str) -> Option<String> {
        self.references.kept(alias)
    }

    /// Whether pull consumers can pin rows of this policy.
    pub fn pinnable(&self) -> bool {
        self.stream.is_some()
    }

    /// True when no live pull consumer pins the row addressed as `alias`: none is registered,
    /// or every one has reported and the row's order value is below the lowest report (a row
    /// without one stays). The two reads are uncorrelated subqueries, run once per statement,
    /// in the deleting statement's own snapshot.
    pub(super) fn unpinned(&self, alias: &str) -> Option<String> {
        let (order, order_type) = self.stream.as_ref()?;
        let id = self.policy.id;
        Some(format!(
            "CASE (SELECT retention._consumer_pins({id})) WHEN 'none' THEN true
                  WHEN 'floor' THEN coalesce({alias}.{order} < (SELECT min(p::{order_type}) FROM retention._consumer_positions({id}) p), false)
                  ELSE false END"
        ))
    }

    pub(super) fn guard_filter(&self, guards: Guards, alias: &str, leaf_oid: &str) -> String {
        let mut f = Vec::new();
        if guards.pins {
            if let Some(u) = self.unpinned(alias) {
                f.push(u);
            }
        }
        if guards.holds {
            if let Some(h) = self.held(leaf_oid) {
                f.push(format!("NOT {h}"));
            }
        }
        if guards.references {
            if let Some(r) = self.referenced(alias) {
                f.push(format!("NOT {r}"));
            }
        }
        if f.is_empty() {
            "true".into()
        } else {
            f.join(" AND ")
        }
    }
}
