//! Eligibility: the SQL that enumerates the rows a policy may delete.
//!
//! Every query built here yields a relation aliased by the caller with the table's columns plus
//! `__ctid`, the row's physical address. Batches walk forward over `__ctid`: for an `age` policy
//! the condition on `__ctid` is pushed down to a TID range scan, so each batch reads only its
//! block range; ranked kinds (`keep_latest`, `versions`) rank the whole table and then walk the
//! ranked rows forward. `entity` policies are selected and deleted a whole group at a time.

use crate::catalog::{prepared, Action, Hold, Kind, Leaf, Policy, PolicySpec, RelationInfo};
use crate::engine::clock::Clock;
use crate::engine::references::References;
use crate::error::{present, Result, RetentionError};
use crate::sql_text::{ident, literal, predicate};
use pgrx::prelude::*;
use pgrx::PgOid;

/// Whether the row (its columns qualified by `alias`, or unqualified) matches hold `h`, through
/// `retention._hold_matches`, which evaluates the hold's predicate as its placer.
pub fn hold_call(h: &Hold, alias: Option<&str>) -> String {
    let columns: Vec<String> = h
        .columns
        .iter()
        .map(|c| match alias {
            Some(a) => format!("{a}.{}", ident(c)),
            None => ident(c),
        })
        .collect();
    format!(
        "retention._hold_matches({}, ROW({})::{})",
        h.id,
        columns.join(", "),
        h.relation
    )
}

/// `matches` (SQL: the row matches hold `h`'s predicate), limited to the leaves the hold covers
/// when it was placed on a partition below the table (the row's leaf's oid in `leaf_oid`, SQL).
pub fn on_held_leaves(h: &Hold, leaf_oid: &str, matches: String) -> String {
    match &h.leaves {
        None => matches,
        Some(leaves) => {
            let oids: Vec<String> = leaves.iter().map(u32::to_string).collect();
            format!(
                "({leaf_oid} = ANY ('{{{}}}'::oid[]) AND {matches})",
                oids.join(",")
            )
        }
    }
}

/// `now() - window` for the current transaction, as a timestamptz constant. As an expression it
/// would be computed again for every row a batch reads (interval arithmetic through a broken-down
/// time: a sixth of a sweep's per-row cost); `now()` is fixed for the transaction, so the constant
/// is the same value. Written in JSON's ISO 8601 form, which no DateStyle reads differently; the
/// expression stays when the text would not read back as the same instant.
fn cutoff_sql(window: &str) -> Result<String> {
    let expression = format!("(now() - {}::interval)", literal(window));
    let rendered = Spi::get_one::<String>(&format!(
        "SELECT CASE WHEN s ~ '^\\d{{4}}-\\d\\d-\\d\\dT[0-9:.]+[+-][0-9:]+$' AND s::timestamptz = c THEN s END
           FROM (SELECT c, to_json(c) #>> '{{}}' AS s FROM (SELECT {expression} AS c) a) b"
    ))?;
    Ok(match rendered {
        Some(s) => format!("{}::timestamptz", literal(&s)),
        None => expression,
    })
}

/// A user predicate as a condition (one wrapped expression whose NULL counts as false), or
/// `true` when the policy has none.
pub fn condition(user_predicate: Option<&str>) -> String {
    user_predicate
        .map(predicate)
        .unwrap_or_else(|| "true".into())
}

/// The policy's own condition on a row `t` of an age policy, without guards: in scope,
/// terminal, and its time `age` (SQL over `t`) before `cutoff` (SQL). The sweep, archive
/// claims and prunes, and the fixpoint guard all decide age eligibility with this.
pub fn age_condition(spec: &PolicySpec, age: &str, cutoff: &str) -> String {
    age_condition_with(spec, &condition(spec.terminal.as_deref()), age, cutoff)
}

/// [`age_condition`] with the row's terminal condition given as SQL.
fn age_condition_with(spec: &PolicySpec, terminal: &str, age: &str, cutoff: &str) -> String {
    format!(
        "{scope} AND {terminal} AND {age} < {cutoff}",
        scope = condition(spec.scope.as_deref()),
    )
}

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

/// For an `orphan` policy: the condition that the owning lease of row `t` is dead — no row of
/// the lease table whose primary key equals the row's `lease_key` and whose `lease_expiry` is
/// still ahead (read in the deleting statement, as the policy's owner).
fn lease_dead(policy: &Policy) -> Result<String> {
    let missing = |what: &str| {
        RetentionError::Internal(format!("orphan policy {} has no {what}", policy.name))
    };
    let table = policy.lease_table.ok_or_else(|| missing("lease_table"))?;
    let keys = policy
        .lease_key
        .as_ref()
        .ok_or_else(|| missing("lease_key"))?;
    let expiry = policy
        .lease_expiry
        .as_deref()
        .ok_or_else(|| missing("lease_expiry"))?;
    let lease = RelationInfo::load(table, &format!("lease table of policy {}", policy.name))?;
    let lease_cols: Vec<String> = lease
        .pk
        .iter()
        .map(|c| format!("__l.{}", ident(c)))
        .collect();
    let row_cols: Vec<String> = keys.iter().map(|c| format!("t.{}", ident(c))).collect();
    Ok(format!(
        "NOT EXISTS (SELECT 1 FROM {} __l WHERE ({}) = ({}) AND __l.{} > now())",
        lease.all_rows(),
        lease_cols.join(", "),
        row_cols.join(", "),
        ident(expiry),
    ))
}

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
    policy.action == Action::ArchiveThenDelete || policy.kind == Kind::Unreferenced
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
        if self.policy.record_keys == Some(true) {
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

    /// True when the row (columns unqualified, its leaf's oid in `leaf_oid`) matches an
    /// active hold.
    fn held(&self, leaf_oid: &str) -> Option<String> {
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
    fn referenced(&self, alias: &str) -> Option<String> {
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
    fn unpinned(&self, alias: &str) -> Option<String> {
        let (order, order_type) = self.stream.as_ref()?;
        let id = self.policy.id;
        Some(format!(
            "CASE (SELECT retention._consumer_pins({id})) WHEN 'none' THEN true
                  WHEN 'floor' THEN coalesce({alias}.{order} < (SELECT min(p::{order_type}) FROM retention._consumer_positions({id}) p), false)
                  ELSE false END"
        ))
    }

    fn guard_filter(&self, guards: Guards, alias: &str, leaf_oid: &str) -> String {
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
