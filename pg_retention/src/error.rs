//! The extension's one error type, mapped to SQLSTATEs at the SQL boundary.
//! Every code used here is listed in docs/sql-reference.md.

use pgrx::pg_sys;
use std::ffi::{c_char, c_int};

/// Result with [`RetentionError`] as the default error.
pub type Result<T, E = RetentionError> = std::result::Result<T, E>;

/// Why an operation was refused or failed. Each variant has a SQLSTATE, a message, a detail and
/// a hint.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RetentionError {
    /// A parameter has a value outside what it accepts (22023).
    #[error("{message}")]
    InvalidParameter {
        message: String,
        detail: String,
        hint: String,
    },
    /// A named column does not exist (42703).
    #[error("column {column} does not exist in {relation}")]
    UndefinedColumn { relation: String, column: String },
    /// A column has a type the policy cannot use (42804).
    #[error("column {column} of {relation} has type {found}, which cannot be used here")]
    WrongType {
        relation: String,
        column: String,
        found: String,
        expected: String,
    },
    /// A predicate is not a plain boolean row predicate (RT101).
    #[error("invalid {what} predicate for {relation}: {reason}")]
    InvalidPredicate {
        what: String,
        relation: String,
        reason: String,
        predicate: String,
    },
    /// Existing rows already break the fixpoint CHECK of an archive policy (23514).
    #[error("{rows} rows of {relation} are terminal with a NULL {age_column}")]
    FixpointViolation {
        relation: String,
        rows: i64,
        age_column: String,
    },
    /// No such archive batch (42704).
    #[error("batch {0} does not exist")]
    UnknownBatch(String),
    /// A batch cannot take this step in its state, or belongs to another owner (RT503).
    #[error("batch {batch} is {state}: {message}")]
    BatchState {
        batch: String,
        state: String,
        message: String,
    },
    /// The archived slice does not match the rows as they are now (RT502).
    #[error("archive of batch {batch} refused: {reason}")]
    ArchiveMismatch { batch: String, reason: String },
    /// An archive's expiry and a rewrite of its object (an erasure's supersession) met (RT504):
    /// an expiry cannot complete for an archive whose object now is one it did not delete, and
    /// a rewrite is not recorded for an archive whose objects expired.
    #[error("{message}")]
    ExpiryConflict {
        message: String,
        detail: String,
        hint: String,
    },
    /// A change would break a window link (RT201).
    #[error("window link violated: {consumer} must keep rows at least {required} (producer {producer} keeps {producer_window} plus a margin of {margin})")]
    WindowLink {
        producer: String,
        consumer: String,
        required: String,
        producer_window: String,
        margin: String,
    },
    /// No such policy (42704).
    #[error("policy {0} does not exist")]
    UnknownPolicy(String),
    /// No such hold (42704).
    #[error("hold {0} does not exist")]
    UnknownHold(i64),
    /// No consumer of that name is registered on the policy (42704).
    #[error("consumer {consumer} is not registered on policy {policy}")]
    UnknownConsumer { policy: String, consumer: String },
    /// A consumer's position report was refused (RT311, RT312, RT313).
    #[error("position report of consumer {consumer} on policy {policy} refused: {refusal}")]
    ReportRefused {
        policy: String,
        consumer: String,
        refusal: ReportRefusal,
    },
    /// A policy of that name exists already (42710).
    #[error("policy {0} already exists")]
    DuplicatePolicy(String),
    /// The object is not in a state that allows the operation (55000).
    #[error("{message}")]
    WrongState { message: String, hint: String },
    /// The caller lacks a privilege the operation needs (42501).
    #[error("{message}")]
    Privilege { message: String, hint: String },
    /// A policy's owner lost a privilege the policy runs with (42501).
    #[error("policy {policy} cannot run: its owner {owner} lacks {privilege} on {relation}")]
    OwnerPrivilege {
        policy: String,
        owner: String,
        privilege: String,
        relation: String,
    },
    /// A table would be governed by policies of both classes, archive and delete (RT102).
    #[error("{relation} is {class}-class through policy {other}; a policy with action {action} cannot govern it too")]
    ClassConflict {
        relation: String,
        class: String,
        other: String,
        action: String,
    },
    /// A policy on a table declared `source_of_truth`, or that declaration on a governed table
    /// (RT103).
    #[error("{relation} is a source of truth: no retention policy deletes its rows")]
    SourceOfTruth {
        relation: String,
        reason: String,
        /// The policy that governs it, when the declaration is what was refused.
        policy: Option<String>,
    },
    /// A required argument was NULL (22004).
    #[error("{0} must not be NULL")]
    NullArgument(&'static str),
    /// A replay from before a policy's retention boundary (RT301).
    #[error("replay from {from} is older than the retention boundary {floor} of policy {policy}")]
    ReplayTooOld {
        policy: String,
        from: String,
        floor: String,
    },
    /// An update of a row an archive policy holds fixed: terminal and past its window (RT501).
    #[error("row of {relation} is archive-eligible under policy {policy} and cannot be updated")]
    ArchivedRowChange { relation: String, policy: String },
    /// A change of rows an enforced hold covers (RT402): `subject` is the row ("row of t") or
    /// the table, `change` what was refused ("deleted", "updated", "truncated").
    #[error("{subject} is under enforced hold {hold} and cannot be {change}")]
    EnforcedHold {
        subject: String,
        change: &'static str,
        hold: i64,
        actor: String,
        reason: String,
    },
    /// An error PostgreSQL raised inside a step that caught it to clean up (a run's start
    /// or close lets go of its pruner lock first), raised again with its own SQLSTATE.
    #[error("{message}")]
    Raised {
        sqlstate: String,
        message: String,
        detail: Option<String>,
        hint: Option<String>,
    },
    /// An internal SPI failure (XX000).
    #[error("internal error: {0}")]
    Internal(String),
}

/// Why a consumer's position report was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReportRefusal {
    /// The report carries an epoch other than the registration's current one (RT311).
    Epoch { reported: i64, current: i64 },
    /// The position is past the newest row the policy governs (RT312).
    BeyondHead {
        position: String,
        head: Option<String>,
    },
    /// The consumer's lease ran out; it pinned nothing since (RT313).
    LeaseLapsed { expired_at: String },
}

impl std::fmt::Display for ReportRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReportRefusal::Epoch { reported, current } if reported < current => {
                write!(f, "epoch {reported} is stale (current epoch {current})")
            }
            ReportRefusal::Epoch { reported, current } => {
                write!(
                    f,
                    "epoch {reported} was never issued (current epoch {current})"
                )
            }
            ReportRefusal::BeyondHead { position, head } => match head {
                Some(head) => write!(f, "position {position} is past the head {head}"),
                None => write!(
                    f,
                    "position {position} is past the head: the stream has no rows"
                ),
            },
            ReportRefusal::LeaseLapsed { expired_at } => {
                write!(f, "its lease lapsed at {expired_at}")
            }
        }
    }
}

impl From<pgrx::spi::SpiError> for RetentionError {
    fn from(e: pgrx::spi::SpiError) -> Self {
        RetentionError::Internal(e.to_string())
    }
}

impl From<serde_json::Error> for RetentionError {
    fn from(e: serde_json::Error) -> Self {
        RetentionError::Internal(format!("catalog decode: {e}"))
    }
}

impl RetentionError {
    /// [`RetentionError::Raised`] with `sqlstate` and `message` alone.
    pub fn raised(sqlstate: &str, message: impl Into<String>) -> Self {
        RetentionError::Raised {
            sqlstate: sqlstate.into(),
            message: message.into(),
            detail: None,
            hint: None,
        }
    }

    /// Shorthand for [`RetentionError::InvalidParameter`].
    pub fn invalid(
        message: impl Into<String>,
        detail: impl Into<String>,
        hint: impl Into<String>,
    ) -> Self {
        RetentionError::InvalidParameter {
            message: message.into(),
            detail: detail.into(),
            hint: hint.into(),
        }
    }

    /// The SQLSTATE this error is raised with.
    pub fn sqlstate(&self) -> std::borrow::Cow<'static, str> {
        if let RetentionError::Raised { sqlstate, .. } = self {
            return sqlstate.clone().into();
        }
        match self {
            RetentionError::InvalidParameter { .. } => "22023",
            RetentionError::UndefinedColumn { .. } => "42703",
            RetentionError::WrongType { .. } => "42804",
            RetentionError::InvalidPredicate { .. } => "RT101",
            RetentionError::WindowLink { .. } => "RT201",
            RetentionError::FixpointViolation { .. } => "23514",
            RetentionError::UnknownBatch(_) => "42704",
            RetentionError::BatchState { .. } => "RT503",
            RetentionError::ArchiveMismatch { .. } => "RT502",
            RetentionError::ExpiryConflict { .. } => "RT504",
            RetentionError::UnknownPolicy(_)
            | RetentionError::UnknownHold(_)
            | RetentionError::UnknownConsumer { .. } => "42704",
            RetentionError::ReportRefused { refusal, .. } => match refusal {
                ReportRefusal::Epoch { .. } => "RT311",
                ReportRefusal::BeyondHead { .. } => "RT312",
                ReportRefusal::LeaseLapsed { .. } => "RT313",
            },
            RetentionError::DuplicatePolicy(_) => "42710",
            RetentionError::WrongState { .. } => "55000",
            RetentionError::Privilege { .. } | RetentionError::OwnerPrivilege { .. } => "42501",
            RetentionError::ClassConflict { .. } => "RT102",
            RetentionError::SourceOfTruth { .. } => "RT103",
            RetentionError::NullArgument(_) => "22004",
            RetentionError::ArchivedRowChange { .. } => "RT501",
            RetentionError::ReplayTooOld { .. } => "RT301",
            RetentionError::EnforcedHold { .. } => "RT402",
            RetentionError::Internal(_) | RetentionError::Raised { .. } => "XX000",
        }
        .into()
    }

    fn detail(&self) -> Option<String> {
        match self {
            RetentionError::ReplayTooOld { floor, .. } => {
                Some(format!("Rows older than {floor} may already have been pruned."))
            }
            RetentionError::ArchivedRowChange { .. } => Some(
                "The row is terminal and past the policy's window: it is being or will be archived as it is.".into(),
            ),
            RetentionError::EnforcedHold { hold, actor, reason, .. } => {
                Some(format!("Hold {hold} ({actor}): {reason}"))
            }
            RetentionError::InvalidParameter { detail, .. }
            | RetentionError::ExpiryConflict { detail, .. } => Some(detail.clone()),
            RetentionError::UndefinedColumn { relation, column } => {
                Some(format!("No column named {column} exists in {relation}."))
            }
            RetentionError::WrongType { expected, .. } => Some(format!("Expected {expected}.")),
            RetentionError::InvalidPredicate { predicate, .. } => Some(format!("Predicate: {predicate}")),
            RetentionError::FixpointViolation { .. } => Some(
                "An archive policy needs every terminal row to have an age, so it reaches its window and can be archived.".into(),
            ),
            RetentionError::ArchiveMismatch { .. } => Some(
                "Nothing was deleted. The rows changed or vanished since they were read for the archive, or the archive does not match them.".into(),
            ),
            RetentionError::WindowLink { producer, consumer, required, .. } => Some(format!(
                "Linked windows require {consumer}.older_than >= {producer}.older_than + margin = {required}."
            )),
            RetentionError::OwnerPrivilege { owner, .. } => Some(format!(
                "A policy's predicates and deletes run with the privileges of its owner ({owner}), the role that registered or last altered it. Nothing was deleted."
            )),
            RetentionError::SourceOfTruth { reason, policy, .. } => Some(match policy {
                Some(policy) => format!("Policy {policy} governs it; declared a source of truth because: {reason}."),
                None => format!("It was declared a source of truth because: {reason}."),
            }),
            RetentionError::ClassConflict { .. } => Some(
                "A table is either archive-class (rows leave only through verified archives) or delete-class, never both: a delete policy could remove audit rows before they are archived.".into(),
            ),
            RetentionError::Raised { detail, .. } => detail.clone(),
            RetentionError::ReportRefused { refusal, .. } => Some(match refusal {
                ReportRefusal::Epoch { .. } => "Only the current registration of a consumer moves its position; a report of an earlier one (a process from before it registered again) is fenced off.".into(),
                ReportRefusal::BeyondHead { .. } => "A consumer reports the position of the last row it processed, which exists.".into(),
                ReportRefusal::LeaseLapsed { .. } => "A consumer whose lease lapsed pinned nothing since; rows it had not read may be gone.".into(),
            }),
            _ => None,
        }
    }

    fn hint(&self) -> Option<String> {
        match self {
            RetentionError::ReplayTooOld { floor, .. } => {
                Some(format!("Replay from {floor} or later."))
            }
            RetentionError::ArchivedRowChange { .. } => Some(
                "Deleting it is allowed; changing it is not (but for the policy's mutable_columns). Lift this by altering or dropping the policy.".into(),
            ),
            RetentionError::EnforcedHold { change, .. } => Some(if *change == "truncated" {
                "Enforced holds refuse every change to their rows. Lift the hold (retention.lift_hold) when the matter is closed.".into()
            } else {
                "Enforced holds refuse every change to their rows. Lift the hold (retention.lift_hold) when the matter is closed; retention.erase outranks it.".into()
            }),
            RetentionError::InvalidParameter { hint, .. }
            | RetentionError::WrongState { hint, .. }
            | RetentionError::Privilege { hint, .. }
            | RetentionError::ExpiryConflict { hint, .. } => Some(hint.clone()),
            RetentionError::UndefinedColumn { .. } => {
                Some("Check the column name; names are case-sensitive and used as given.".into())
            }
            RetentionError::WrongType { .. } => Some("Use a column of a suitable type.".into()),
            RetentionError::InvalidPredicate { .. } => Some(
                "A predicate must be one boolean expression over the table's own (unqualified) columns, without subqueries, aggregates or volatile functions."
                    .into(),
            ),
            RetentionError::WindowLink { .. } => {
                Some("Raise the consumer's window or lower the producer's first.".into())
            }
            RetentionError::UnknownPolicy(_) => Some("See retention.policies.".into()),
            RetentionError::UnknownHold(_) => Some("See retention.holds.".into()),
            RetentionError::UnknownConsumer { .. } => Some(
                "Register it with retention.register_consumer; see retention.consumers.".into(),
            ),
            RetentionError::ReportRefused { refusal, .. } => Some(match refusal {
                ReportRefusal::Epoch { current, .. } => format!("Report with epoch {current}, the one retention.register_consumer returned last."),
                ReportRefusal::BeyondHead { .. } => "Report a position the consumer has read.".into(),
                ReportRefusal::LeaseLapsed { .. } => "Register again (a new epoch), check retention.consumer_status for requires_bootstrap, then report.".into(),
            }),
            RetentionError::FixpointViolation { age_column, .. } => {
                Some(format!("Give those rows a {age_column}, or narrow the terminal predicate, then register again."))
            }
            RetentionError::UnknownBatch(_) => Some("Claim a batch with retention.claim_batch.".into()),
            RetentionError::BatchState { .. } => Some("Claim a new batch; its rows are claimable again.".into()),
            RetentionError::ArchiveMismatch { .. } => {
                Some("Release the batch (retention.release_batch) and claim again; the archive object is not trusted.".into())
            }
            RetentionError::DuplicatePolicy(_) => {
                Some("Use retention.alter_policy to change it, or choose another name.".into())
            }
            RetentionError::OwnerPrivilege { .. } => Some(
                "Grant the owner the privilege again (a policy needs SELECT and DELETE on its table, an archive policy UPDATE too), or alter the policy as a role that has them (the policy then belongs to that role).".into(),
            ),
            RetentionError::ClassConflict { other, .. } => Some(format!(
                "Drop or alter policy {other} first, or give this policy the same action."
            )),
            RetentionError::SourceOfTruth { policy: Some(policy), .. } => Some(format!(
                "Drop policy {policy} first, or declare another class."
            )),
            RetentionError::SourceOfTruth { policy: None, .. } => Some(
                "If the table is not the record itself, declare its class again with retention.classify.".into(),
            ),
            RetentionError::NullArgument(_) => Some("Pass a value; NULL means nothing here.".into()),
            RetentionError::Raised { hint, .. } => hint.clone(),
            RetentionError::Internal(_) => None,
        }
    }
}

/// The packed form of a five-character SQLSTATE (PostgreSQL's `MAKE_SQLSTATE`).
fn packed(sqlstate: &str) -> c_int {
    let six = |c: u8| (c_int::from(c.wrapping_sub(b'0'))) & 0x3F;
    sqlstate
        .bytes()
        .take(5)
        .enumerate()
        .fold(0, |acc, (i, c)| acc | (six(c) << (6 * i)))
}

// The error reporting calls themselves, not pgrx's guarded bindings of them: a guarded call
// turns the ERROR into a Rust panic and reports it again with a code pgrx knows, and it knows
// none of class RT (they came out as XX000). pgrx reports its own errors through these same
// calls.
unsafe extern "C-unwind" {
    fn errstart(elevel: c_int, domain: *const c_char) -> bool;
    fn errcode(sqlerrcode: c_int) -> c_int;
    fn errmsg_internal(fmt: *const c_char, ...) -> c_int;
    fn errdetail_internal(fmt: *const c_char, ...) -> c_int;
    fn errhint(fmt: *const c_char, ...) -> c_int;
    fn errfinish(filename: *const c_char, lineno: c_int, funcname: *const c_char);
}

/// A copy of `text` in the current memory context (freed with it: an ERROR's transaction ends).
fn palloc_text(text: &str) -> *mut c_char {
    // A NUL inside would end the C string early; no message of ours has one, but user text may.
    let text = text.replace('\0', " ");
    // Safety: pnstrdup copies `len` bytes and terminates the copy.
    unsafe { pg_sys::pnstrdup(text.as_ptr().cast(), text.len()) }
}

/// Raises `error` as an ERROR with its SQLSTATE, message, detail and hint, straight through
/// PostgreSQL's `ereport`, which longjmps to the caller's error handler. Every Rust value is
/// dropped (its text copied into the current memory context) before the jump, so no frame the
/// jump skips has anything left to drop; callers raise only from the outermost frame of a SQL
/// function (through [`OrReport::or_report`]) once their own values are gone.
pub fn raise(error: RetentionError) -> ! {
    let code = packed(&error.sqlstate());
    let message = palloc_text(&error.to_string());
    let detail = error.detail().map(|d| palloc_text(&d));
    let hint = error.hint().map(|h| palloc_text(&h));
    drop(error);
    const PERCENT_S: &std::ffi::CStr = c"%s";
    // Safety: errstart at ERROR always returns true and errfinish does not return; every
    // argument is a NUL-terminated string in the current memory context or a static one.
    unsafe {
        if errstart(pgrx::PgLogLevel::ERROR as c_int, std::ptr::null()) {
            errcode(code);
            errmsg_internal(PERCENT_S.as_ptr(), message);
            if let Some(detail) = detail {
                errdetail_internal(PERCENT_S.as_ptr(), detail);
            }
            if let Some(hint) = hint {
                errhint(PERCENT_S.as_ptr(), hint);
            }
            errfinish(c"error.rs".as_ptr(), 0, c"pg_retention".as_ptr());
        }
    }
    unreachable!("an ERROR does not return")
}

/// The value of a required argument of a function that also takes optional ones (and so cannot
/// be STRICT), or 22004 naming it.
pub fn required<T>(value: Option<T>, name: &'static str) -> Result<T> {
    value.ok_or(RetentionError::NullArgument(name))
}

/// Turns a `Result` into its value or a Postgres ERROR.
pub trait OrReport<T> {
    /// The value, or the error raised with its SQLSTATE.
    fn or_report(self) -> T;
}

impl<T> OrReport<T> for Result<T> {
    fn or_report(self) -> T {
        match self {
            Ok(v) => v,
            Err(e) => raise(e),
        }
    }
}

/// The typed internal error of a statement that returned no row or NULL where it cannot (a
/// count, an EXISTS, a RETURNING of a row just written, a coalesced aggregate).
pub fn returned_nothing(what: &str) -> RetentionError {
    RetentionError::Internal(format!("{what} returned nothing"))
}

/// The value of a statement that cannot return NULL, or [`returned_nothing`].
pub fn present<T>(value: Option<T>, what: &str) -> Result<T> {
    value.ok_or_else(|| returned_nothing(what))
}
