//! The extension's one error type, mapped to SQLSTATEs at the SQL boundary.
//! Every code used here is listed in docs/sql-reference.md.

use pgrx::prelude::*;

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
    /// The table has no primary key (42P10).
    #[error("{relation} has no primary key")]
    NoPrimaryKey { relation: String },
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
    /// A policy of that name exists already (42710).
    #[error("policy {0} already exists")]
    DuplicatePolicy(String),
    /// The object is not in a state that allows the operation (55000).
    #[error("{message}")]
    WrongState { message: String, hint: String },
    /// The caller lacks a privilege the operation needs (42501).
    #[error("{message}")]
    Privilege { message: String, hint: String },
    /// An internal SPI failure (XX000).
    #[error("internal error: {0}")]
    Internal(String),
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
    pub fn sqlstate(&self) -> &'static str {
        match self {
            RetentionError::InvalidParameter { .. } => "22023",
            RetentionError::UndefinedColumn { .. } => "42703",
            RetentionError::WrongType { .. } => "42804",
            RetentionError::NoPrimaryKey { .. } => "42P10",
            RetentionError::WindowLink { .. } => "RT201",
            RetentionError::UnknownPolicy(_) | RetentionError::UnknownHold(_) => "42704",
            RetentionError::DuplicatePolicy(_) => "42710",
            RetentionError::WrongState { .. } => "55000",
            RetentionError::Privilege { .. } => "42501",
            RetentionError::Internal(_) => "XX000",
        }
    }

    fn detail(&self) -> Option<String> {
        match self {
            RetentionError::InvalidParameter { detail, .. } => Some(detail.clone()),
            RetentionError::UndefinedColumn { relation, column } => {
                Some(format!("No column named {column} exists in {relation}."))
            }
            RetentionError::WrongType { expected, .. } => Some(format!("Expected {expected}.")),
            RetentionError::NoPrimaryKey { .. } => {
                Some("Retention deletes enumerated keys, so every governed table needs a primary key.".into())
            }
            RetentionError::WindowLink { producer, consumer, required, .. } => Some(format!(
                "Linked windows require {consumer}.older_than >= {producer}.older_than + margin = {required}."
            )),
            _ => None,
        }
    }

    fn hint(&self) -> Option<String> {
        match self {
            RetentionError::InvalidParameter { hint, .. }
            | RetentionError::WrongState { hint, .. }
            | RetentionError::Privilege { hint, .. } => Some(hint.clone()),
            RetentionError::UndefinedColumn { .. } => {
                Some("Check the column name; names are case-sensitive and used as given.".into())
            }
            RetentionError::WrongType { .. } => Some("Use a column of a suitable type.".into()),
            RetentionError::NoPrimaryKey { .. } => Some("Add a primary key to the table.".into()),
            RetentionError::WindowLink { .. } => {
                Some("Raise the consumer's window or lower the producer's first.".into())
            }
            RetentionError::UnknownPolicy(_) => Some("See retention.policies.".into()),
            RetentionError::UnknownHold(_) => Some("See retention.holds.".into()),
            RetentionError::DuplicatePolicy(_) => {
                Some("Use retention.alter_policy to change it, or choose another name.".into())
            }
            RetentionError::Internal(_) => None,
        }
    }

    /// Raises this error as a Postgres ERROR with its SQLSTATE, detail and hint. Does not return.
    ///
    /// Raised through `retention._raise` (plpgsql `RAISE ... USING ERRCODE`) because our own
    /// SQLSTATE class `RT` is not among the codes pgrx's error reporter accepts.
    pub fn report(self) -> ! {
        let args = [
            self.sqlstate().into(),
            self.to_string().into(),
            self.detail().into(),
            self.hint().into(),
        ];
        let raised = Spi::run_with_args("SELECT retention._raise($1, $2, $3, $4)", &args);
        // _raise always raises; reaching here means SPI itself failed.
        error!("pg_retention: {self} (and raising it failed: {raised:?})")
    }
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
            Err(e) => e.report(),
        }
    }
}
