//! Eligibility: the SQL that enumerates the rows a policy may delete.
//!
//! Every query built here yields a relation aliased by the caller with the table's columns plus
//! `__ctid`, the row's physical address. Batches walk forward over `__ctid`: for an `age` policy
//! the condition on `__ctid` is pushed down to a TID range scan, so each batch reads only its
//! block range; ranked kinds (`keep_latest`, `versions`) rank the whole table and then walk the
//! ranked rows forward. `entity` policies are selected and deleted a whole group at a time.
//!
//! This module holds the builder ([`Eligibility`]): what it reads from the policy and the table
//! once, and the small accessors the sweep and archive statements ask it for. The SQL it builds
//! lives beside it: per-kind row sets in `kinds.rs`, the guards (holds, references, consumer
//! pins) in `guards.rs`, and the free-standing conditions (a user predicate, an age cutoff, a
//! dead lease, a hold's call) in `conditions.rs`.

mod conditions;
mod guards;
mod kinds;

pub use conditions::{age_condition, condition, hold_call, on_held_leaves};
pub use guards::Guards;

use crate::catalog::{prepared, Action, Hold, Kind, Leaf, Policy, RelationInfo};
use crate::engine::clock::Clock;
use crate::engine::references::References;
use crate::error::{Result, RetentionError};
use crate::sql_text::ident;
use conditions::{cutoff_sql, lease_dead};
use pgrx::PgOid;

/// Builds eligibility SQL for one policy on one table with the holds in force.
pub struct Eligibility<'a> {
    policy: &'a Policy,
    rel: &'a RelationInfo,
    holds: &'a [Hold],
    kind: Kind,
    cutoff: Option<String>,
    /// The clock a row's age is read from (None for kinds that never read one).
    age: Option<Clock>,
    /// The newest-first order column, quoted (ranked kinds only).
    order: Option<String>,
    /// The leaf a step works on, for a partitioned table (None: the whole table).
    leaf: Option<&'a Leaf>,
    /// The quoted order column and its type, for a policy pull consumers can pin (a delete
    /// policy with an `order_by`; see `api/consumer.rs`).
    stream: Option<(String, String)>,
    /// For `orphan`: true when the row `t`'s owning lease is dead (no lease row with its key
    /// lives now).
    lease_dead: Option<String>,
    /// The foreign keys that reference the table, as deleting its rows must treat them.
    references: References,
    /// Whether the row `t` is terminal: the policy's `terminal` and its test of referencing
    /// rows (engine/related_rows.rs).
    terminal: String,
}

/// Whether every row a foreign key references is kept whatever the key's ON DELETE action:
/// for archive policies (a cascade would delete rows no archive holds) and `unreferenced`
/// policies (references are what they decide by).
pub fn keeps_every_referenced_row(policy: &Policy) -> bool {
    policy.action.archives() || policy.kind == Kind::Unreferenced
}

/// The clock and the quoted order column of `policy`, refusing a policy whose kind needs one it
/// lacks (registration refuses those; a policy read back without them is corrupt).
fn kind_columns(policy: &Policy, rel: &RelationInfo) -> Result<(Option<Clock>, Option<String>)> {
    let needs_age = policy.kind.by_age()
        || policy.kind == Kind::Entity
        || (policy.kind == Kind::Versions && policy.older_than.is_some());
    let needs_order = matches!(policy.kind, Kind::KeepLatest | Kind::Versions);
    let missing = |what: &str| {
        RetentionError::Internal(format!(
            "policy {} ({}) has no {what}",
            policy.name, policy.kind
        ))
    };
    let clock = Clock::of(policy, rel)?;
    if let Some(table) = policy.age_table {
        // The clock's rows must all be seen, or a row looks older than it is.
        crate::author::ensure_sees_every_row(
            policy.owner,
            table,
            &format!("age_table of policy {}", policy.name),
        )?;
    }
    if needs_age && clock.is_none() {
        return Err(missing("age_column"));
    }
    if needs_order && policy.order_by.is_none() {
        return Err(missing("order_by"));
    }
    Ok((clock, policy.order_by.as_deref().map(ident)))
}

impl<'a> Eligibility<'a> {
    /// Prepares the builder.
    pub fn new(policy: &'a Policy, rel: &'a RelationInfo, holds: &'a [Hold]) -> Result<Self> {
        let cutoff = policy.older_than.as_deref().map(cutoff_sql).transpose()?;
        Self::build(policy, rel, holds, cutoff)
    }

    /// The builder with the cutoff (`now() - older_than`) given as SQL, e.g. a statement
    /// parameter, instead of read as a constant now: for statements planned once and run again.
    pub fn with_cutoff(
        policy: &'a Policy,
        rel: &'a RelationInfo,
        holds: &'a [Hold],
        cutoff: &str,
    ) -> Result<Self> {
        let cutoff = policy.older_than.as_ref().map(|_| cutoff.to_owned());
        Self::build(policy, rel, holds, cutoff)
    }

    fn build(
        policy: &'a Policy,
        rel: &'a RelationInfo,
        holds: &'a [Hold],
        cutoff: Option<String>,
    ) -> Result<Self> {
        let (age, order) = kind_columns(policy, rel)?;
        let stream = match (&policy.order_by, policy.action) {
            (Some(order_by), Action::Delete) => {
                Some((ident(order_by), rel.column(order_by)?.type_name.clone()))
            }
            _ => None,
        };
        let lease_dead = match policy.kind {
            Kind::Orphan => Some(lease_dead(policy)?),
            _ => None,
        };
        let references = References::load(rel, keeps_every_referenced_row(policy), policy.owner)?;
        let mut terminal = condition(policy.terminal.as_deref());
        if let Some(test) = crate::engine::related_rows::terminal_test(policy, rel, "t")? {
            if let Some(table) = policy.terminal_table {
                // The test's rows must all be seen, or a row looks terminal when it is not.
                crate::author::ensure_sees_every_row(
                    policy.owner,
                    table,
                    &format!("terminal_table of policy {}", policy.name),
                )?;
            }
            terminal = format!("{terminal} AND {test}");
        }
        Ok(Eligibility {
            policy,
            rel,
            holds,
            kind: policy.kind,
            cutoff,
            age,
            order,
            leaf: None,
            stream,
            lease_dead,
            references,
            terminal,
        })
    }

    /// The same builder for the steps on one leaf of a partitioned table: statements delete
    /// from that leaf alone, while ranks and groups are still taken over the whole table.
    pub fn on_leaf(mut self, leaf: &'a Leaf) -> Self {
        if self.partitioned() {
            self.leaf = Some(leaf);
        }
        self
    }

    /// Whether the governed table is partitioned (its rows live in its leaves).
    pub fn partitioned(&self) -> bool {
        self.rel.partitioned()
    }

    /// What reads of the whole governed table scan: the table alone, or a partitioned table
    /// with its partitions.
    fn source(&self) -> String {
        self.rel.all_rows()
    }

    /// What an `entity` step deletes from: a group's rows may lie in several leaves, and a
    /// group goes whole.
    pub fn group_target(&self) -> String {
        self.source()
    }

    /// The `__rel` output column of [`Eligibility::rows`] (the row's leaf), for partitioned
    /// tables only.
    fn rel_column(&self) -> &'static str {
        if self.partitioned() {
            "t.tableoid AS __rel, "
        } else {
            ""
        }
    }

    /// `now() - older_than` for the current transaction as a value, for the statement parameter
    /// [`Eligibility::with_cutoff`] names; None for policies without a window.
    pub fn policy_cutoff(&self) -> Result<Option<pgrx::datum::TimestampWithTimeZone>> {
        let Some(window) = self.policy.older_than.as_deref() else {
            return Ok(None);
        };
        let plan = prepared::cached(
            "SELECT now() - $1::interval",
            &[PgOid::BuiltIn(pgrx::pg_sys::BuiltinOid::TEXTOID)],
            false,
        )?;
        prepared::one(&plan, &[window.into()])
    }

    /// Runs `f` with the privileges of the policy's owner (see `author.rs`): every statement
    /// built here evaluates the owner's predicates and runs inside this.
    pub fn as_owner<T>(&self, f: impl FnOnce() -> Result<T>) -> Result<T> {
        let path = crate::engine::search_path::setting(self.policy.search_path.as_deref());
        crate::author::run_as_searching(self.policy.owner, path.as_deref(), f)
    }

    /// The policy.
    pub fn policy(&self) -> &Policy {
        self.policy
    }

    /// The policy kind.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// What a deleting statement returns for each row it deletes: the row's key (aliased
    /// `alias`) as `__k` when the policy records keys, else `1`.
    pub fn returning(&self, alias: &str) -> String {
        if self.records_keys() {
            format!("{} AS __k", self.rel.key_json(alias))
        } else {
            "1".into()
        }
    }

    /// The keys a deleting CTE named `cte` returned (with [`Eligibility::returning`]) as one
    /// jsonb array, or NULL when the policy does not record keys.
    pub fn deleted_keys(&self, cte: &str) -> String {
        if self.records_keys() {
            format!("(SELECT jsonb_agg(__k) FROM {cte})")
        } else {
            "NULL::jsonb".into()
        }
    }

    /// Whether the policy's ledger entries list the keys of the rows deleted.
    pub fn records_keys(&self) -> bool {
        self.policy.record_keys == Some(true)
    }

    /// The table statements delete from (with ONLY): the governed table, or the step's leaf.
    pub fn table(&self) -> &str {
        self.leaf.map_or(&self.rel.qualified, |l| &l.qualified)
    }

    /// `now() - older_than` as SQL, or None for policies without a window.
    pub fn cutoff(&self) -> Option<String> {
        self.cutoff.clone()
    }

    /// The time of the row addressed as `alias` (its clock: engine/clock.rs); present for
    /// every kind whose SQL reads it ([`kind_columns`]).
    pub fn age_of(&self, alias: &str) -> String {
        self.age
            .as_ref()
            .map(|clock| clock.sql(alias))
            .unwrap_or_else(|| "NULL::timestamptz".into())
    }

    fn scope(&self) -> String {
        condition(self.policy.scope.as_deref())
    }

    fn terminal(&self) -> String {
        self.terminal.clone()
    }
}
