//! Appending to the ledger. The ledger is append-only; this is its one writer.

use crate::catalog::{prepared, Policy};
use crate::error::Result;
use pgrx::pg_sys::BuiltinOid;
use pgrx::PgOid;

/// Every record goes in through this one statement (planned once per backend).
const INSERT: &str = "INSERT INTO retention.ledger_entries
     (method, policy, policy_id, policy_version, relation, rows, hold_ids, actor, run_id, detail, archive_id)
 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9::uuid, $10, $11)";
const INSERT_ARGS: [BuiltinOid; 11] = [
    BuiltinOid::TEXTOID,
    BuiltinOid::TEXTOID,
    BuiltinOid::INT8OID,
    BuiltinOid::INT4OID,
    BuiltinOid::TEXTOID,
    BuiltinOid::INT8OID,
    BuiltinOid::INT8ARRAYOID,
    BuiltinOid::TEXTOID,
    BuiltinOid::TEXTOID,
    BuiltinOid::JSONBOID,
    BuiltinOid::INT8OID,
];

/// One ledger record to append.
#[derive(Debug)]
pub struct LedgerEntry<'a> {
    /// What happened: prune, hold_skip, cap_reached, error, skip_locked, run, hold_place, ...
    pub method: &'a str,
    /// The policy concerned, if any.
    pub policy: Option<&'a Policy>,
    /// Relation name when there is no policy (holds).
    pub relation: Option<&'a str>,
    /// Rows affected (deleted, skipped, ...).
    pub rows: i64,
    /// Holds involved.
    pub hold_ids: Vec<i64>,
    /// Who acted.
    pub actor: &'a str,
    /// The run this belongs to.
    pub run_id: Option<&'a str>,
    /// Anything else worth keeping.
    pub detail: serde_json::Value,
}

impl LedgerEntry<'_> {
    /// Appends the record in the current transaction.
    pub fn append(&self) -> Result<()> {
        self.insert(None)
    }

    /// Appends the record with a reference to the archive that made it possible.
    pub fn append_with_archive(&self, archive_id: Option<i64>) -> Result<()> {
        self.insert(archive_id)
    }

    fn insert(&self, archive_id: Option<i64>) -> Result<()> {
        let relation = self
            .policy
            .map(|p| p.relation_name.clone())
            .or_else(|| self.relation.map(str::to_owned));
        let args = [
            self.method.into(),
            self.policy.map(|p| p.name.clone()).into(),
            self.policy.map(|p| p.id).into(),
            self.policy.map(|p| p.version).into(),
            relation.into(),
            self.rows.into(),
            self.hold_ids.clone().into(),
            self.actor.into(),
            self.run_id.into(),
            pgrx::JsonB(self.detail.clone()).into(),
            archive_id.into(),
        ];
        let plan = prepared::cached(INSERT, &INSERT_ARGS.map(PgOid::BuiltIn), true)?;
        prepared::run(&plan, &args)?;
        Ok(())
    }
}
