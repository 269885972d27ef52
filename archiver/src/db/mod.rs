//! Every statement the archiver sends to the database, over one connection per [`Db`]. The
//! rest of the archiver asks this module and gets Rust values back: the states the extension
//! answers with are parsed here once into enums, and the extension's refusals (its own
//! SQLSTATEs) into [`Sqlstate`]; no other module names a table, a function or a state string.
//!
//! One file per concern: [`connect`] opens the connection, [`batches`] is the archive protocol
//! (claim, lease, release, prune), [`supersessions`] an erasure's rewrite of archived slices,
//! [`archives`] the archive index as the operator commands read it, [`expiry`] the expire
//! operations, [`restore`] loading a slice into a table, [`monitoring`] what `/metrics` and
//! `/readyz` read.

use crate::error::{Error, Result};
use tokio_postgres::types::{FromSqlOwned, ToSql};
use tokio_postgres::Client;

/// The texts of a closed set the database spells (a state, an outcome, a SQLSTATE) as the
/// variants of an enum: `as_str` spells a variant as the database does, `parse` reads one
/// back (None for a text the set does not hold). Each text is written once: in the
/// invocation.
macro_rules! sql_text {
    ($ty:ident { $($variant:ident => $text:literal),+ $(,)? }) => {
        impl $ty {
            /// Every variant.
            pub const ALL: &'static [$ty] = &[$($ty::$variant),+];

            /// The variant as the database spells it.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($ty::$variant => $text),+
                }
            }

            /// The variant the database spells `text`; None for any other text.
            pub fn parse(text: &str) -> Option<$ty> {
                Self::ALL.iter().copied().find(|v| v.as_str() == text)
            }
        }
    };
}

mod archives;
mod batches;
mod connect;
mod expiry;
mod monitoring;
mod restore;
mod supersessions;

// What the rest of the archiver names; the other types only come back from the methods.
pub use archives::{ObjectState, ObjectStatus, Verification};
pub use batches::{Claim, Release};
pub use expiry::{ExpireOutcome, Prepare};
pub use restore::Table;
pub use supersessions::{Open, OpenState, Rewrite, RewriteRecorded};

/// A connection speaking the protocol.
pub struct Db {
    client: Client,
}

/// The SQLSTATEs the archiver acts on: the extension's own (`pg_retention/src/error.rs`) and
/// PostgreSQL's `55000`, which the extension raises when an expire plan no longer holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sqlstate {
    /// `RT502`: the archived slice does not match the rows (or the archive) as they are now.
    ArchiveMismatch,
    /// `RT503`: a batch cannot take this step in its state, or belongs to another owner.
    BatchState,
    /// `RT504`: an archive's expiry and a rewrite of its object met.
    ExpiryConflict,
    /// `55000`: object not in prerequisite state (archives no longer past their keep).
    NotInPrerequisiteState,
}

sql_text!(Sqlstate {
    ArchiveMismatch => "RT502",
    BatchState => "RT503",
    ExpiryConflict => "RT504",
    NotInPrerequisiteState => "55000",
});

impl Sqlstate {
    /// The state of a database error, when it is one the archiver acts on.
    pub fn of(e: &tokio_postgres::Error) -> Option<Sqlstate> {
        e.code().and_then(|c| Sqlstate::parse(c.code()))
    }

    /// The state of an archiver error, when it is a database error the archiver acts on.
    pub fn of_error(e: &Error) -> Option<Sqlstate> {
        match e {
            Error::Db(e) => Sqlstate::of(e),
            _ => None,
        }
    }
}

/// The server's own message of a database error (its text alone, without the SQLSTATE).
fn server_message(e: &tokio_postgres::Error) -> String {
    e.as_db_error()
        .map_or_else(|| e.to_string(), |d| d.message().to_owned())
}

/// A text the database answered with that is not one of the states the protocol knows.
fn unknown_state(what: &'static str, value: &str) -> Error {
    Error::Protocol {
        what,
        value: value.to_owned(),
    }
}

impl Db {
    /// The one value of a statement that returns one row.
    async fn value<T: FromSqlOwned>(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<T> {
        Ok(self.client.query_one(sql, params).await?.try_get(0)?)
    }

    /// The database's name (`current_database()`).
    pub async fn current_database(&self) -> Result<String> {
        self.value("SELECT current_database()::text", &[]).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_text_reads_back_as_its_variant_and_no_other_text_does() {
        for s in Sqlstate::ALL {
            assert_eq!(Sqlstate::parse(s.as_str()), Some(*s));
        }
        for s in OpenState::ALL {
            assert_eq!(OpenState::parse(s.as_str()), Some(*s));
        }
        for s in ObjectState::ALL {
            assert_eq!(ObjectState::parse(s.as_str()), Some(*s));
        }
        for o in ExpireOutcome::ALL {
            assert_eq!(ExpireOutcome::parse(o.as_str()), Some(*o));
        }
        assert_eq!(
            Sqlstate::parse("23505"),
            None,
            "not a state the archiver acts on"
        );
        assert_eq!(OpenState::parse("done"), None, "a closed supersession");
        assert_eq!(ObjectState::parse("expired"), None);
        assert_eq!(ExpireOutcome::parse("prepared"), None);
    }
}
