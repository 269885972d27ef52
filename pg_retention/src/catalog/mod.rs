//! Reading and appending the catalog: policies, holds, relations, the ledger.

pub mod ledger;
pub mod policy;
pub mod prepared;
pub mod relation;

pub use ledger::LedgerEntry;
pub use policy::{Kind, Policy, PolicySpec};
pub use relation::RelationInfo;

use crate::error::Result;
use pgrx::prelude::*;
use serde::de::DeserializeOwned;

/// Runs a statement that returns one jsonb value (or no row) and decodes it.
pub fn query_json<T: DeserializeOwned>(
    sql: &str,
    args: &[pgrx::datum::DatumWithOid<'_>],
) -> Result<Option<T>> {
    // Read-write SPI: some callers lock (FOR UPDATE) or modify (UPDATE ... RETURNING).
    let value: Option<pgrx::JsonB> = Spi::connect_mut(|client| {
        let table = client.update(sql, Some(1), args)?;
        if table.is_empty() {
            Ok::<_, pgrx::spi::SpiError>(None)
        } else {
            table.first().get_one::<pgrx::JsonB>()
        }
    })?;
    match value {
        None => Ok(None),
        Some(j) if j.0.is_null() => Ok(None),
        Some(j) => Ok(Some(serde_json::from_value(j.0)?)),
    }
}

/// The first column of the first row of a statement, or None when it returns no row.
pub fn optional_one<T: pgrx::datum::FromDatum + pgrx::datum::IntoDatum>(
    sql: &str,
    args: &[pgrx::datum::DatumWithOid<'_>],
) -> Result<Option<T>> {
    Ok(Spi::connect_mut(|client| {
        let table = client.update(sql, Some(1), args)?;
        if table.is_empty() {
            Ok::<_, pgrx::spi::SpiError>(None)
        } else {
            table.first().get_one::<T>()
        }
    })?)
}

/// An active legal hold on a relation.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct Hold {
    /// Hold id.
    pub id: i64,
    /// The validated predicate text.
    pub predicate: String,
    /// The role that placed it: the predicate runs with its privileges.
    pub placer: u32,
}

/// The holds in force on `relation` right now.
pub fn active_holds(relation: u32) -> Result<Vec<Hold>> {
    let holds: Option<Vec<Hold>> = query_json(
        "SELECT coalesce(jsonb_agg(jsonb_build_object('id', h.id, 'predicate', h.predicate, 'placer', h.placed_by::bigint) ORDER BY h.id), '[]')
           FROM retention.hold_records h
          WHERE h.relation = $1::bigint::oid
            AND NOT EXISTS (SELECT 1 FROM retention.hold_lifts l WHERE l.hold_id = h.id)",
        &[i64::from(relation).into()],
    )?;
    Ok(holds.unwrap_or_default())
}

/// How many hold records a table had when its holds were read. A delete statement that adds
/// `AND NOT <tripped()>` deletes nothing when its own snapshot sees a hold placed after the
/// read, so a hold committed while a batch is being prepared still wins.
#[derive(Debug, Clone)]
pub struct HoldFence {
    relation: u32,
    seen: i64,
}

impl HoldFence {
    /// Counts the table's hold records, then reads its active holds (in that order).
    pub fn read(relation: u32) -> Result<(HoldFence, Vec<Hold>)> {
        let seen = Spi::get_one_with_args::<i64>(
            "SELECT count(*) FROM retention.hold_records WHERE relation = $1::bigint::oid",
            &[i64::from(relation).into()],
        )?
        .unwrap_or(0);
        Ok((HoldFence { relation, seen }, active_holds(relation)?))
    }

    /// SQL that is true, in the statement's snapshot, when a hold was placed after the read.
    /// Statements that evaluate predicates run as a policy's owner, who cannot read the
    /// catalog: `retention._hold_count` counts for them, once per statement (an init plan).
    pub fn tripped(&self) -> String {
        format!(
            "((SELECT retention._hold_count({}::oid)) > {})",
            self.relation, self.seen
        )
    }

    /// Whether a hold was placed after the read, as of now: a batch that deleted nothing asks
    /// this to tell a new hold from an empty range.
    pub fn tripped_now(&self) -> Result<bool> {
        Ok(Spi::get_one::<bool>(&format!("SELECT {}", self.tripped()))?.unwrap_or(false))
    }
}

/// The role the caller acts as: the outer user, unaffected by SECURITY DEFINER.
pub fn caller() -> String {
    // Safety: GetOuterUserId reads backend-local state; GetUserNameFromId with noerr=true returns
    // NULL rather than raising for a vanished role.
    unsafe {
        let oid = pgrx::pg_sys::GetOuterUserId();
        let name = pgrx::pg_sys::GetUserNameFromId(oid, true);
        if name.is_null() {
            format!("role {}", oid.to_u32())
        } else {
            std::ffi::CStr::from_ptr(name)
                .to_string_lossy()
                .into_owned()
        }
    }
}

/// The caller's role oid (see [`caller`]).
pub fn caller_oid() -> u32 {
    // Safety: reads backend-local state only.
    unsafe { pgrx::pg_sys::GetOuterUserId().to_u32() }
}
