//! Opening the protocol connection: the connection string parsed without ever quoting it back
//! (it may hold a password), TLS as `crate::tls` decides, and the connect timeout.

use super::Db;
use crate::config::Settings;
use crate::error::{Error, Result};
use std::str::FromStr;

/// libpq's connection keywords: an unknown option is named only when it is one of these (a
/// misplaced `=` can make part of a password look like an option's name).
const LIBPQ_KEYWORDS: [&str; 45] = [
    "host",
    "hostaddr",
    "port",
    "dbname",
    "user",
    "password",
    "passfile",
    "require_auth",
    "channel_binding",
    "connect_timeout",
    "client_encoding",
    "options",
    "application_name",
    "fallback_application_name",
    "keepalives",
    "keepalives_idle",
    "keepalives_interval",
    "keepalives_count",
    "tcp_user_timeout",
    "replication",
    "gssencmode",
    "sslmode",
    "sslnegotiation",
    "sslcompression",
    "sslcert",
    "sslkey",
    "sslkeylogfile",
    "sslpassword",
    "sslcertmode",
    "sslrootcert",
    "sslcrl",
    "sslcrldir",
    "sslsni",
    "requirepeer",
    "requiressl",
    "ssl_min_protocol_version",
    "ssl_max_protocol_version",
    "min_protocol_version",
    "max_protocol_version",
    "krbsrvname",
    "gsslib",
    "gssdelegation",
    "service",
    "target_session_attrs",
    "load_balance_hosts",
];

/// Why tokio-postgres could not parse a connection string, without quoting it: an unknown
/// option is named only when it is a libpq keyword, and a stray character is not shown.
fn parse_error(e: &tokio_postgres::Error) -> String {
    let cause = std::error::Error::source(e)
        .map(ToString::to_string)
        .unwrap_or_else(|| e.to_string());
    if let Some(rest) = cause.strip_prefix("unknown option `") {
        let name = rest.strip_suffix('`').unwrap_or(rest);
        return match LIBPQ_KEYWORDS.contains(&name) {
            true => format!("unsupported option `{name}`"),
            false => "an unknown option (its name is not shown: it may be part of a secret)".into(),
        };
    }
    match cause.split_once(" but got") {
        Some((head, _)) => head.to_owned(),
        None => cause,
    }
}

impl Db {
    /// Connects (with the configured connect timeout) and spawns the connection task.
    pub async fn connect(settings: &Settings) -> Result<Db> {
        let (conninfo, tls) = crate::tls::split(settings.database()?)?;
        let mut config = tokio_postgres::Config::from_str(&conninfo).map_err(|e| {
            Error::Config(format!("database connection string: {}", parse_error(&e)))
        })?;
        config.ssl_mode(tls.postgres_mode());
        config.connect_timeout(settings.connect_timeout);
        if config.get_application_name().is_none() {
            config.application_name("pg-retention-archiver");
        }
        let (client, connection) = config.connect(tls.connector()?).await?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::error!(error = %e, "database connection ended");
            }
        });
        Ok(Db { client })
    }

    /// Whether the connection is gone.
    pub fn is_closed(&self) -> bool {
        self.client.is_closed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_string_that_does_not_parse_is_not_quoted() {
        let why = |conninfo: &str| match tokio_postgres::Config::from_str(conninfo) {
            Ok(_) => panic!("{conninfo} parsed"),
            Err(e) => parse_error(&e),
        };
        // `password=ab zq9x=x`: libpq reads an option named `zq9x`.
        let e = why("host='h' password='ab' zq9x='x'");
        assert!(!e.contains("zq9x"), "{e}");
        assert!(e.contains("unknown option"), "{e}");
        assert_eq!(why("host='h' sslcrl='/c'"), "unsupported option `sslcrl`");
        assert!(why("host='h' port='x'").contains("`port`"));
        let e = why("postgres://u:pw@h/d?password");
        assert!(!e.contains("pw"), "{e}");
    }
}
