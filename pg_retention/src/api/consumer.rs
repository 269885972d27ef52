//! Pull consumers: registering, reporting positions, unregistering, and a consumer's status.
//!
//! A consumer reads a stream table in the order of its policy's `order_by` column. While its
//! lease is live, the policy deletes no row at or past the position it reported last (every row
//! before its first report); the window and every other condition still apply on top. Each
//! registration is an epoch: a process of an earlier registration cannot move the position.

use crate::api::hold::non_empty;
use crate::catalog::consumer::Registration;
use crate::catalog::{caller, caller_oid, Action, LedgerEntry, LedgerMethod, Policy, RelationInfo};
use crate::engine::eligible::condition;
use crate::engine::validate::interval_sign;
use crate::error::{present, required, OrReport, ReportRefusal, Result, RetentionError};
use crate::sql_text::ident;
use pgrx::prelude::*;
use serde_json::json;
use std::cmp::Ordering;

/// The policy a consumer pins, with its stream: the table and the order column and its type.
struct Stream {
    policy: Policy,
    rel: RelationInfo,
    /// The order column, quoted.
    order: String,
    /// Its type, as SQL.
    order_type: String,
}

impl Stream {
    /// The policy `name` as a stream consumers can pin: a delete policy with an `order_by`.
    fn of(name: &str) -> Result<Stream> {
        let policy = Policy::by_name(name)?;
        let Some(order_by) = policy.order_by.clone() else {
            return Err(RetentionError::invalid(
                format!("policy {name} has no order_by"),
                "A consumer's position is a value of the policy's order_by column (the stream's order).",
                "Give the policy an order_by: retention.alter_policy(name => ..., order_by => '<sequence column>').",
            ));
        };
        if policy.action != Action::Delete {
            return Err(RetentionError::invalid(
                format!("policy {name} archives its rows; consumers pin delete policies"),
                "Rows of an archive policy leave only through verified archives, which consumers do not pin.",
                "Register consumers on a delete policy of the stream table.",
            ));
        }
        let rel = RelationInfo::load(policy.relation, &policy.relation_name)?;
        let order_type = rel.column(&order_by)?.type_name.clone();
        Ok(Stream {
            order: ident(&order_by),
            order_type,
            policy,
            rel,
        })
    }

    /// Refuses a caller who may not read the order column: a report or a status reveals how a
    /// position compares with the stream's rows.
    fn check_caller_reads(&self) -> Result<()> {
        let order_by = self.policy.order_by.as_deref().unwrap_or_default();
        let may = Spi::get_one_with_args::<bool>(
            "SELECT pg_catalog.has_column_privilege($1::bigint::oid, $2::bigint::oid, $3, 'SELECT')",
            &[
                i64::from(caller_oid()).into(),
                i64::from(self.rel.oid).into(),
                order_by.into(),
            ],
        )?;
        if may != Some(true) {
            return Err(RetentionError::Privilege {
                message: format!(
                    "permission denied to report positions of {}: SELECT on column {order_by} is missing",
                    self.rel.qualified
                ),
                hint: "A consumer reads the stream; grant it SELECT on the order column.".into(),
            });
        }
        Ok(())
    }

    /// `position` in the order column's canonical text form (22P02 and kin when it is not a
    /// value of that type).
    fn canonical(&self, position: &str) -> Result<String> {
        // Casts run as the policy's owner: the column's type may be a domain, whose CHECK is code.
        crate::author::run_as(self.policy.owner, || {
            present(
                Spi::get_one_with_args::<String>(
                    &format!("SELECT $1::{}::text", self.order_type),
                    &[position.into()],
                )?,
                "a position cast",
            )
        })
    }

    /// How `a` compares with `b`, both positions in canonical text.
    fn compare(&self, a: &str, b: &str) -> Result<Ordering> {
        let t = &self.order_type;
        let sign = crate::author::run_as(self.policy.owner, || {
            present(
                Spi::get_one_with_args::<i32>(
                    &format!("SELECT CASE WHEN $1::{t} > $2::{t} THEN 1 WHEN $1::{t} < $2::{t} THEN -1 ELSE 0 END"),
                    &[a.into(), b.into()],
                )?,
                "a position comparison",
            )
        })?;
        Ok(sign.cmp(&0))
    }

    /// Ledgers a change of the policy's consumers, by the caller.
    fn ledger(&self, method: LedgerMethod, detail: serde_json::Value) -> Result<()> {
        LedgerEntry {
            method,
            policy: Some(&self.policy),
            relation: None,
            rows: 0,
            hold_ids: vec![],
            actor: &caller(),
            run_id: None,
            detail,
        }
        .append()
    }

    /// The newest (`max`) or oldest (`min`) position among the rows the policy governs, read as
    /// the policy's owner (its scope is the owner's SQL); None when there are none.
    fn end(&self, aggregate: &str) -> Result<Option<String>> {
        let scope = condition(self.policy.scope.as_deref());
        // Only the aggregate in the subquery: the planner reads it from an index on the column.
        let sql = format!(
            "SELECT e::text FROM (SELECT {aggregate}(t.{order}) AS e FROM {rows} t WHERE {scope}) m",
            order = self.order,
            rows = self.rel.all_rows(),
        );
        crate::author::run_as(self.policy.owner, || Ok(Spi::get_one::<String>(&sql)?))
    }
}

fn register(policy: &str, consumer: &str, lease: &str, reporter: Option<u32>) -> Result<i64> {
    non_empty(consumer, "consumer")?;
    if interval_sign(lease)? != Ordering::Greater {
        return Err(RetentionError::invalid(
            format!("lease must be a positive interval, got {lease}"),
            "A consumer pins rows only while its lease runs; each report renews it.",
            "Use a lease longer than the consumer's reporting interval, such as '15 minutes'.",
        ));
    }
    let stream = Stream::of(policy)?;
    let reporter = reporter.unwrap_or_else(caller_oid);
    let epoch = Registration::register(stream.policy.id, consumer, lease, caller_oid(), reporter)?;
    stream.ledger(
        LedgerMethod::ConsumerRegister,
        json!({ "consumer": consumer, "epoch": epoch, "lease": lease }),
    )?;
    Ok(epoch)
}

/// Registers `consumer` on `policy` with a lease, in a new epoch; returns the epoch.
#[pg_extern]
#[search_path(pg_catalog, pg_temp)]
fn _register_consumer(
    policy: Option<&str>,
    consumer: Option<&str>,
    lease: Option<&str>,
    reporter: Option<pg_sys::Oid>,
) -> i64 {
    crate::identity::entry(|| {
        register(
            required(policy, "policy")?,
            required(consumer, "consumer")?,
            required(lease, "lease")?,
            reporter.map(|r| r.to_u32()),
        )
    })
    .or_report()
}

/// Refuses (42501) a caller who is not a member of the consumer's reporter role: a consumer's
/// position is its own, or another could report it past rows it never read.
fn check_reporter(policy: &str, consumer: &str, reg: &Registration) -> Result<()> {
    if crate::author::member_of(caller_oid(), reg.reporter)? {
        return Ok(());
    }
    Err(RetentionError::Privilege {
        message: format!(
            "consumer {consumer} of policy {policy} reports as role {}, not as {}",
            crate::author::role_name(reg.reporter),
            crate::identity::caller()
        ),
        hint: "Report as the consumer's role (register_consumer's reporter, by default the role that registered it), or register the consumer again naming yours.".into(),
    })
}

fn report(policy: &str, consumer: &str, epoch: i64, position: &str) -> Result<Option<String>> {
    let stream = Stream::of(policy)?;
    stream.check_caller_reads()?;
    let refused = |refusal| RetentionError::ReportRefused {
        policy: policy.to_owned(),
        consumer: consumer.to_owned(),
        refusal,
    };
    let reg = Registration::lock(stream.policy.id, consumer)?.ok_or_else(|| {
        RetentionError::UnknownConsumer {
            policy: policy.to_owned(),
            consumer: consumer.to_owned(),
        }
    })?;
    check_reporter(policy, consumer, &reg)?;
    if epoch != reg.epoch {
        return Err(refused(ReportRefusal::Epoch {
            reported: epoch,
            current: reg.epoch,
        }));
    }
    if !reg.live {
        return Err(refused(ReportRefusal::LeaseLapsed {
            expired_at: reg.expires_at,
        }));
    }
    let position = stream.canonical(position)?;
    let head = stream.end("max")?;
    let beyond = match &head {
        None => true,
        Some(head) => stream.compare(&position, head)? == Ordering::Greater,
    };
    if beyond {
        return Err(refused(ReportRefusal::BeyondHead { position, head }));
    }
    // Progress never moves back: a duplicate or lower report keeps the position (and renews
    // the lease, as any report does).
    let kept = match reg.position {
        Some(current) if stream.compare(&position, &current)? != Ordering::Greater => current,
        _ => position,
    };
    Registration::record_report(stream.policy.id, consumer, Some(&kept))?;
    Ok(Some(kept))
}

/// Records that `consumer` (in `epoch`) has processed the stream up to `position`; returns the
/// position it now pins from.
#[pg_extern]
#[search_path(pg_catalog, pg_temp)]
fn _report_position(policy: &str, consumer: &str, epoch: i64, position: &str) -> Option<String> {
    crate::identity::entry(|| report(policy, consumer, epoch, position)).or_report()
}

fn unregister(policy: &str, consumer: &str) -> Result<()> {
    let stream = Stream::of(policy)?;
    if !Registration::remove(stream.policy.id, consumer)? {
        return Err(RetentionError::UnknownConsumer {
            policy: policy.to_owned(),
            consumer: consumer.to_owned(),
        });
    }
    stream.ledger(
        LedgerMethod::ConsumerUnregister,
        json!({ "consumer": consumer }),
    )
}

/// Removes `consumer`'s registration on `policy`: it pins nothing from now on.
#[pg_extern]
#[search_path(pg_catalog, pg_temp)]
fn _unregister_consumer(policy: &str, consumer: &str) {
    crate::identity::entry(|| unregister(policy, consumer)).or_report();
}

/// What `retention.consumer_status` returns.
struct Status {
    epoch: i64,
    floor: Option<String>,
    requires_bootstrap: bool,
    lease_expires_at: String,
    pinning: bool,
}

fn status(policy: &str, consumer: &str) -> Result<Status> {
    let stream = Stream::of(policy)?;
    stream.check_caller_reads()?;
    let reg = Registration::read(stream.policy.id, consumer)?.ok_or_else(|| {
        RetentionError::UnknownConsumer {
            policy: policy.to_owned(),
            consumer: consumer.to_owned(),
        }
    })?;
    // The status carries the epoch a report needs: for the consumer's role and the admins.
    let admin = Spi::get_one_with_args::<bool>(
        "SELECT pg_catalog.pg_has_role($1::bigint::oid, 'retention_admin', 'USAGE')",
        &[i64::from(caller_oid()).into()],
    )?;
    if admin != Some(true) {
        check_reporter(policy, consumer, &reg)?;
    }
    // Below the oldest row that survives, rows the consumer had not read may be gone.
    let requires_bootstrap = match (&reg.position, stream.end("min")?) {
        (Some(position), Some(oldest)) => stream.compare(position, &oldest)? == Ordering::Less,
        _ => false,
    };
    Ok(Status {
        epoch: reg.epoch,
        floor: reg.position,
        requires_bootstrap,
        lease_expires_at: reg.expires_at,
        pinning: reg.live,
    })
}

/// A consumer's epoch, the position it pins from, whether it must bootstrap, and its lease.
#[pg_extern]
#[search_path(pg_catalog, pg_temp)]
fn _consumer_status(
    policy: &str,
    consumer: &str,
) -> TableIterator<
    'static,
    (
        name!(epoch, i64),
        name!(floor, Option<String>),
        name!(requires_bootstrap, bool),
        name!(lease_expires_at, String),
        name!(pinning, bool),
    ),
> {
    let s = crate::identity::entry(|| status(policy, consumer)).or_report();
    TableIterator::once((
        s.epoch,
        s.floor,
        s.requires_bootstrap,
        s.lease_expires_at,
        s.pinning,
    ))
}
