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

/// What a ledger record says happened (`retention.ledger.method`): every method there is. The
/// CHECK constraint `ledger_entries_method` (sql/catalog.sql) lists the same names, and a test
/// below compares the two. The SQL side writes the worker's own methods (`skip_locked`,
/// `cycle_cap`, `worker_crash`, a failed start's `error`, `pause`) and the archiver's
/// `orphan_object_sweep` through `retention._ledger_append`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
// The methods SQL writes are never made in Rust: they are listed so that the enum and the CHECK
// constraint are one list.
#[allow(dead_code)]
pub enum LedgerMethod {
    /// A batch of rows deleted (a sweep batch, or an archive batch's prune).
    Prune,
    /// Eligible rows kept by holds or references.
    HoldSkip,
    /// A run stopped at its row cap with eligible rows left.
    CapReached,
    /// A run or batch failed.
    Error,
    /// A run's summary.
    Run,
    /// A hold placed.
    HoldPlace,
    /// A hold lifted.
    HoldLift,
    /// An archive batch claimed.
    Claim,
    /// An archive batch archived and verified, its rows kept (an `archive` policy, or a
    /// two-window one until `delete_after`).
    Archive,
    /// An archive batch resumed by its archiver.
    Resume,
    /// An archive batch released.
    Release,
    /// An archive batch whose lease ran out.
    LeaseExpired,
    /// A policy's keep or window floor lowered.
    LowerFloor,
    /// A whole partition dropped, every row of it eligible.
    DropPartition,
    /// A whole-partition drop put off: its locks were not granted in time.
    DropSkipped,
    /// A batch of orphaned provisional rows deleted (an `orphan` policy's prune).
    OrphanSweep,
    /// A pull consumer registered (or registered again: a new epoch).
    ConsumerRegister,
    /// A pull consumer unregistered: it pins nothing any more.
    ConsumerUnregister,
    /// Rows deleted by an erasure request (`retention.erase`), whatever policies and holds say.
    Erasure,
    /// Erased rows an active hold matched: the hold lost to the erasure, and is named.
    HoldCollision,
    /// An archive's slice rewritten without erased rows, verified, and the objects it replaced
    /// deleted.
    Supersede,
    /// A sweep waited between steps (pacing); adaptive pauses are summed once per run.
    Pause,
    /// Eligible rows a run left because rows referencing them keep them (engine/references.rs).
    ReferenceSkip,
    /// The row versions an erasure deleted from one table are gone from its pages
    /// (engine/scrub.rs).
    ErasureScrub,
    /// A policy skipped because another session holds its lock (written by SQL).
    SkipLocked,
    /// A database worker that ended without closing its visit (written by SQL).
    WorkerCrash,
    /// A worker's cycle stopped at its cap before a policy ran (written by SQL).
    CycleCap,
    /// An archive expire operation prepared (archive/expire_operation.rs).
    ExpirePrepare,
    /// One apply of an archive expire operation (archive/expire_operation.rs).
    ExpireApply,
    /// Store objects no archive references deleted (written by SQL for the archiver).
    OrphanObjectSweep,
}

impl LedgerMethod {
    /// Every method (compared with the CHECK constraint by the test below).
    #[allow(dead_code)]
    pub const ALL: [LedgerMethod; 30] = [
        LedgerMethod::Prune,
        LedgerMethod::HoldSkip,
        LedgerMethod::CapReached,
        LedgerMethod::Error,
        LedgerMethod::Run,
        LedgerMethod::HoldPlace,
        LedgerMethod::HoldLift,
        LedgerMethod::Claim,
        LedgerMethod::Archive,
        LedgerMethod::Resume,
        LedgerMethod::Release,
        LedgerMethod::LeaseExpired,
        LedgerMethod::LowerFloor,
        LedgerMethod::DropPartition,
        LedgerMethod::DropSkipped,
        LedgerMethod::OrphanSweep,
        LedgerMethod::ConsumerRegister,
        LedgerMethod::ConsumerUnregister,
        LedgerMethod::Erasure,
        LedgerMethod::HoldCollision,
        LedgerMethod::Supersede,
        LedgerMethod::Pause,
        LedgerMethod::ReferenceSkip,
        LedgerMethod::ErasureScrub,
        LedgerMethod::SkipLocked,
        LedgerMethod::WorkerCrash,
        LedgerMethod::CycleCap,
        LedgerMethod::ExpirePrepare,
        LedgerMethod::ExpireApply,
        LedgerMethod::OrphanObjectSweep,
    ];

    /// The method's name in the ledger.
    pub fn as_str(self) -> &'static str {
        match self {
            LedgerMethod::Prune => "prune",
            LedgerMethod::HoldSkip => "hold_skip",
            LedgerMethod::CapReached => "cap_reached",
            LedgerMethod::Error => "error",
            LedgerMethod::Run => "run",
            LedgerMethod::HoldPlace => "hold_place",
            LedgerMethod::HoldLift => "hold_lift",
            LedgerMethod::Claim => "claim",
            LedgerMethod::Archive => "archive",
            LedgerMethod::Resume => "resume",
            LedgerMethod::Release => "release",
            LedgerMethod::LeaseExpired => "lease_expired",
            LedgerMethod::LowerFloor => "lower_floor",
            LedgerMethod::DropPartition => "drop_partition",
            LedgerMethod::DropSkipped => "drop_skipped",
            LedgerMethod::OrphanSweep => "orphan_sweep",
            LedgerMethod::ConsumerRegister => "consumer_register",
            LedgerMethod::ConsumerUnregister => "consumer_unregister",
            LedgerMethod::Erasure => "erasure",
            LedgerMethod::HoldCollision => "hold_collision",
            LedgerMethod::Supersede => "supersede",
            LedgerMethod::Pause => "pause",
            LedgerMethod::ReferenceSkip => "reference_skip",
            LedgerMethod::ErasureScrub => "erasure_scrub",
            LedgerMethod::SkipLocked => "skip_locked",
            LedgerMethod::WorkerCrash => "worker_crash",
            LedgerMethod::CycleCap => "cycle_cap",
            LedgerMethod::ExpirePrepare => "expire_prepare",
            LedgerMethod::ExpireApply => "expire_apply",
            LedgerMethod::OrphanObjectSweep => "orphan_object_sweep",
        }
    }
}

/// One ledger record to append.
#[derive(Debug)]
pub struct LedgerEntry<'a> {
    /// What happened.
    pub method: LedgerMethod,
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
    pub fn append_with_archive(&self, archive_id: i64) -> Result<()> {
        self.insert(Some(archive_id))
    }

    fn insert(&self, archive_id: Option<i64>) -> Result<()> {
        let relation = self
            .policy
            .map(|p| p.relation_name.clone())
            .or_else(|| self.relation.map(str::to_owned));
        let args = [
            self.method.as_str().into(),
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

#[cfg(any(test, feature = "pg_test"))]
#[pgrx::pg_schema]
mod tests {
    use super::*;
    use pgrx::prelude::*;

    /// The methods the CHECK constraint allows are exactly the enum's, and another is refused.
    #[pg_test]
    fn ledger_methods_are_one_list() {
        let allowed = Spi::get_one::<Vec<String>>(
            r#"SELECT array_agg(m[1] ORDER BY m[1]) FROM regexp_matches(
                 (SELECT pg_get_constraintdef(c.oid) FROM pg_constraint c
                   WHERE c.conname = 'ledger_entries_method'
                     AND c.conrelid = 'retention.ledger_entries'::regclass),
                 '''([a-z_]+)''', 'g') m"#,
        )
        .unwrap_or_default()
        .unwrap_or_default();
        let mut ours: Vec<String> = LedgerMethod::ALL
            .iter()
            .map(|m| m.as_str().to_owned())
            .collect();
        ours.sort();
        assert_eq!(allowed, ours);
        let refused = crate::subxact::or_error(|| {
            Spi::run(
                "INSERT INTO retention.ledger_entries (method, actor) VALUES ('made_up', 'test')",
            )?;
            Ok(())
        });
        assert!(
            matches!(refused, Ok(Err(_))),
            "an unknown method is refused"
        );
    }
}
