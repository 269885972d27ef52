//! Every exit code of the archiver, in one table. A command that fails exits with
//! [`Exit::of`] its error. The expire steps report outcomes of their own (refused, not ready,
//! partial) and map their errors with [`Exit::of_expire`]: there 3, 4 and 5 mean other things
//! than for the other commands, as `docs/archiver.md` states for operators' scripts.

use crate::error::Error;

/// How the process ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// 0: done (an expire step: accepted or completed).
    Done,
    /// 1: anything else (the runtime did not start, local I/O, a decoding error).
    Other,
    /// 2: invalid input: flags, environment, configuration file; an expire plan or its digest.
    Invalid,
    /// 3: the database refused or failed.
    Database,
    /// 4: the object store failed (after its retries).
    Store,
    /// 5: data safety: a refused prune, a failed verification, a foreign occupant, a
    /// superseded slice, a manifest `restore` will not act on.
    Unsafe,
    /// 6: this database's archive namespace is another database's in the store (every command,
    /// expire's steps too).
    NamespaceClaimed,
    /// 7: the object store ignores create-only writes (the start-up probe of `run` / `once`),
    /// and `--allow-overwriting-store` was not given.
    StoreNotCreateOnly,
    /// 3, an expire step: refused, or not ready yet.
    ExpireRefused,
    /// 4, an expire step: some of the keys were deleted, not all.
    ExpirePartial,
    /// 5, an expire step: the database or the store failed within its bounds.
    ExpireFailure,
}

impl Exit {
    /// The process exit code.
    pub fn code(self) -> u8 {
        match self {
            Exit::Done => 0,
            Exit::Other => 1,
            Exit::Invalid => 2,
            Exit::Database | Exit::ExpireRefused => 3,
            Exit::Store | Exit::ExpirePartial => 4,
            Exit::Unsafe | Exit::ExpireFailure => 5,
            Exit::NamespaceClaimed => 6,
            Exit::StoreNotCreateOnly => 7,
        }
    }

    /// How a command other than `expire` ends with `e`.
    pub fn of(e: &Error) -> Exit {
        match e {
            Error::Config(_) | Error::Sse(_) => Exit::Invalid,
            Error::Db(_) | Error::Protocol { .. } => Exit::Database,
            Error::Store(_) | Error::StoreTimeout { .. } => Exit::Store,
            Error::StoreNotCreateOnly { .. } => Exit::StoreNotCreateOnly,
            Error::ForeignOccupant { .. }
            | Error::Verify { .. }
            | Error::Refused { .. }
            | Error::Superseded { .. }
            | Error::Manifest(_)
            | Error::UntrustedType { .. } => Exit::Unsafe,
            Error::NamespaceClaimed { .. } => Exit::NamespaceClaimed,
            Error::Refusal(_) | Error::Io(_) | Error::Format(_) | Error::Json(_) => Exit::Other,
        }
    }

    /// How an expire step ends with `e`: bad input, a refusal, a service failure, or the
    /// namespace another database's.
    pub fn of_expire(e: &Error) -> Exit {
        match e {
            Error::Config(_) | Error::Sse(_) => Exit::Invalid,
            Error::NamespaceClaimed { .. } => Exit::NamespaceClaimed,
            Error::Refusal(_) | Error::Refused { .. } => Exit::ExpireRefused,
            _ => Exit::ExpireFailure,
        }
    }
}

impl From<Exit> for std::process::ExitCode {
    fn from(exit: Exit) -> Self {
        std::process::ExitCode::from(exit.code())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_codes_are_the_documented_ones() {
        let config = Error::Config("x".into());
        let refusal = Error::Refusal("x".into());
        let verify = Error::Verify {
            key: "k".into(),
            reason: "r".into(),
        };
        let claimed = Error::NamespaceClaimed {
            namespace: "n".into(),
            by: "b".into(),
            me: "m".into(),
        };
        let io = Error::Io(std::io::Error::other("disk"));
        assert_eq!(Exit::of(&config).code(), 2);
        let sse = Error::Sse(crate::sse::SseError::KeyIdWithoutKms);
        assert_eq!(Exit::of(&sse).code(), 2);
        assert_eq!(Exit::of_expire(&sse).code(), 2);
        assert_eq!(Exit::of(&verify).code(), 5);
        assert_eq!(Exit::of(&claimed).code(), 6);
        assert_eq!(Exit::of(&refusal).code(), 1);
        assert_eq!(Exit::of(&io).code(), 1);
        assert_eq!(Exit::of_expire(&config).code(), 2);
        assert_eq!(Exit::of_expire(&refusal).code(), 3);
        assert_eq!(Exit::of_expire(&verify).code(), 5);
        assert_eq!(Exit::of_expire(&claimed).code(), 6);
        assert_eq!(Exit::ExpirePartial.code(), 4);
        let timeout = Error::StoreTimeout {
            operation: "get",
            after: std::time::Duration::from_secs(30),
        };
        assert_eq!(Exit::of(&timeout).code(), 4);
        assert_eq!(Exit::of_expire(&timeout).code(), 5);
        let overwriting = Error::StoreNotCreateOnly { key: "k".into() };
        assert_eq!(Exit::of(&overwriting).code(), 7);
        assert_eq!(Exit::Done.code(), 0);
    }
}
