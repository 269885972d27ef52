//! TLS to PostgreSQL with libpq's meaning of `sslmode`, `sslrootcert`, `sslcert` and `sslkey`.
//!
//! tokio-postgres knows only `disable`, `prefer` and `require` and none of the file options, so
//! the connection string is split first: the TLS options are taken out and turned into a rustls
//! configuration, the rest goes to tokio-postgres unchanged.
//!
//! As in libpq: `prefer` and `require` encrypt without checking the server's certificate unless a
//! root certificate is available (`sslrootcert`, or `~/.postgresql/root.crt`), in which case the
//! chain is checked as with `verify-ca`; `verify-ca` checks the chain, `verify-full` the chain and
//! the host name; `sslrootcert=system` trusts the system's roots and needs `verify-full`.

use crate::error::{Error, Result};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio_postgres_rustls::MakeRustlsConnect;

/// libpq's `sslmode` values (`allow` is refused: it would try plaintext first).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    /// Plaintext only.
    Disable,
    /// TLS when the server offers it, plaintext otherwise (libpq's default).
    Prefer,
    /// TLS or nothing.
    Require,
    /// TLS with the server's certificate chained to a trusted root.
    VerifyCa,
    /// As `VerifyCa`, and the certificate names the host connected to.
    VerifyFull,
}

impl SslMode {
    fn parse(value: &str) -> Result<SslMode> {
        Ok(match value {
            "disable" => SslMode::Disable,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            other => {
                return Err(Error::Config(format!(
                    "sslmode {other:?} is not supported: use disable, prefer, require, verify-ca or verify-full"
                )))
            }
        })
    }

    fn verifies(self) -> bool {
        matches!(self, SslMode::VerifyCa | SslMode::VerifyFull)
    }
}

/// Where trusted roots come from.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Roots {
    /// A PEM file of CA certificates.
    File(PathBuf),
    /// The operating system's trust store (`sslrootcert=system`).
    System,
}

/// The TLS options of a connection string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsOptions {
    /// The mode (libpq's default is `prefer`).
    pub mode: SslMode,
    roots: Option<Roots>,
    client_cert: Option<PathBuf>,
    client_key: Option<PathBuf>,
}

/// The keys taken out of the connection string.
const TLS_KEYS: [&str; 4] = ["sslmode", "sslrootcert", "sslcert", "sslkey"];

/// Splits `conninfo` (URL or `key=value` form) into what tokio-postgres parses and the TLS
/// options.
pub fn split(conninfo: &str) -> Result<(String, TlsOptions)> {
    let (rest, pairs) =
        if conninfo.starts_with("postgres://") || conninfo.starts_with("postgresql://") {
            split_url(conninfo)
        } else {
            split_key_value(conninfo)?
        };
    let get = |key: &str| {
        pairs
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
    };
    let mode = match get("sslmode") {
        Some(v) => SslMode::parse(&v)?,
        None => SslMode::Prefer,
    };
    let home = std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".postgresql"));
    let default_file = |name: &str| home.as_ref().map(|d| d.join(name)).filter(|p| p.exists());
    let roots = match get("sslrootcert") {
        Some(v) if v == "system" => Some(Roots::System),
        Some(v) => Some(Roots::File(v.into())),
        None => default_file("root.crt").map(Roots::File),
    };
    if roots == Some(Roots::System) && mode != SslMode::VerifyFull {
        return Err(Error::Config(
            "sslrootcert=system needs sslmode=verify-full (any host with a public certificate would pass otherwise)".into(),
        ));
    }
    let (client_cert, client_key) = match (get("sslcert"), get("sslkey")) {
        (Some(c), Some(k)) => (Some(c.into()), Some(k.into())),
        (Some(_), None) | (None, Some(_)) => {
            return Err(Error::Config(
                "sslcert and sslkey go together: give both".into(),
            ))
        }
        (None, None) => (
            default_file("postgresql.crt"),
            default_file("postgresql.key"),
        ),
    };
    let options = TlsOptions {
        mode,
        roots,
        client_cert,
        client_key,
    };
    Ok((rest, options))
}

fn split_url(url: &str) -> (String, Vec<(String, String)>) {
    let Some((base, query)) = url.split_once('?') else {
        return (url.to_owned(), vec![]);
    };
    let mut kept = url::form_urlencoded::Serializer::new(String::new());
    let mut taken = vec![];
    for (k, v) in url::form_urlencoded::parse(query.as_bytes()) {
        if TLS_KEYS.contains(&k.as_ref()) {
            taken.push((k.into_owned(), v.into_owned()));
        } else {
            kept.append_pair(&k, &v);
        }
    }
    let kept = kept.finish();
    let rest = if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{kept}")
    };
    (rest, taken)
}

/// libpq's `key = value` syntax: values bare or single-quoted, `\` escapes inside quotes.
fn split_key_value(conninfo: &str) -> Result<(String, Vec<(String, String)>)> {
    let mut chars = conninfo.chars().peekable();
    let mut kept = vec![];
    let mut taken = vec![];
    let bad = |what: &str| Error::Config(format!("database connection string: {what}"));
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.peek().is_none() {
            break;
        }
        let mut key = String::new();
        while let Some(c) = chars.next_if(|c| *c != '=' && !c.is_whitespace()) {
            key.push(c);
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.next() != Some('=') {
            // Not the key itself: in a mistyped string it may be part of a password.
            return Err(bad(&format!(
                "setting {} has no '=' (not shown: it may hold a secret)",
                kept.len() + taken.len() + 1
            )));
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let mut value = String::new();
        if chars.next_if_eq(&'\'').is_some() {
            loop {
                match chars.next() {
                    Some('\'') => break,
                    Some('\\') => {
                        value.push(chars.next().ok_or_else(|| bad("unterminated quote"))?)
                    }
                    Some(c) => value.push(c),
                    None => return Err(bad("unterminated quote")),
                }
            }
        } else {
            // As libpq reads it: a backslash takes the next character as it is (`a\ b` is
            // `a b`).
            while let Some(c) = chars.next_if(|c| !c.is_whitespace()) {
                if c == '\\' {
                    if let Some(next) = chars.next() {
                        value.push(next);
                    }
                } else {
                    value.push(c);
                }
            }
        }
        if TLS_KEYS.contains(&key.as_str()) {
            taken.push((key, value));
        } else {
            let quoted = value.replace('\\', "\\\\").replace('\'', "\\'");
            kept.push(format!("{key}='{quoted}'"));
        }
    }
    Ok((kept.join(" "), taken))
}

impl TlsOptions {
    /// tokio-postgres's mode for these options (the checks are the connector's).
    pub fn postgres_mode(&self) -> tokio_postgres::config::SslMode {
        match self.mode {
            SslMode::Disable => tokio_postgres::config::SslMode::Disable,
            SslMode::Prefer => tokio_postgres::config::SslMode::Prefer,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => {
                tokio_postgres::config::SslMode::Require
            }
        }
    }

    /// The rustls connector for these options.
    pub fn connector(&self) -> Result<MakeRustlsConnect> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let roots = self.root_store()?;
        if roots.is_none() && self.mode.verifies() {
            return Err(Error::Config(format!(
                "sslmode={} needs trusted roots: set sslrootcert to a CA file (or to 'system' with verify-full), or put the CA in ~/.postgresql/root.crt",
                if self.mode == SslMode::VerifyCa { "verify-ca" } else { "verify-full" }
            )));
        }
        let chain = match roots {
            None => None,
            Some(store) => Some(
                WebPkiServerVerifier::builder_with_provider(Arc::new(store), provider.clone())
                    .build()
                    .map_err(|e| Error::Config(format!("TLS roots: {e}")))?,
            ),
        };
        let verifier = Arc::new(ServerCheck {
            provider: provider.clone(),
            chain,
            check_name: self.mode == SslMode::VerifyFull,
        });
        let builder = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::Config(format!("TLS: {e}")))?
            .dangerous()
            .with_custom_certificate_verifier(verifier);
        let config = match (&self.client_cert, &self.client_key) {
            (Some(cert), Some(key)) => {
                let chain = read_certs(cert)?;
                let key = PrivateKeyDer::from_pem_file(key)
                    .map_err(|e| Error::Config(format!("sslkey {}: {e}", key.display())))?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| Error::Config(format!("sslcert/sslkey: {e}")))?
            }
            _ => builder.with_no_client_auth(),
        };
        Ok(MakeRustlsConnect::new(config))
    }

    fn root_store(&self) -> Result<Option<RootCertStore>> {
        let mut store = RootCertStore::empty();
        match &self.roots {
            None => return Ok(None),
            Some(Roots::File(path)) => {
                for cert in read_certs(path)? {
                    store.add(cert).map_err(|e| {
                        Error::Config(format!("sslrootcert {}: {e}", path.display()))
                    })?;
                }
            }
            Some(Roots::System) => {
                let found = rustls_native_certs::load_native_certs();
                store.add_parsable_certificates(found.certs);
                if store.is_empty() {
                    return Err(Error::Config(
                        "sslrootcert=system: the system trust store has no certificates".into(),
                    ));
                }
            }
        }
        Ok(Some(store))
    }
}

fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>> {
    let what = |e: &dyn std::fmt::Display| {
        Error::Config(format!("certificate file {}: {e}", path.display()))
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| what(&e))?
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| what(&e))?;
    if certs.is_empty() {
        return Err(what(&"no PEM certificate in it"));
    }
    Ok(certs)
}

/// What is checked of the server's certificate. Without roots (`prefer`/`require`, as libpq):
/// nothing, the session is only encrypted. With roots: the chain, and the host name for
/// `verify-full` (webpki checks the chain before the name, so a name error means the chain was
/// good). Handshake signatures are always verified, so the session key belongs to the
/// certificate sent.
#[derive(Debug)]
struct ServerCheck {
    provider: Arc<CryptoProvider>,
    chain: Option<Arc<WebPkiServerVerifier>>,
    check_name: bool,
}

impl ServerCertVerifier for ServerCheck {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        let Some(chain) = &self.chain else {
            return Ok(ServerCertVerified::assertion());
        };
        match chain.verify_server_cert(end_entity, intermediates, server_name, ocsp, now) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) if !self.check_name => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_keys_leave_a_key_value_string_and_the_rest_stays() {
        let (rest, tls) = split(
            "host=db.example port = 5433 sslmode=verify-full sslrootcert='/etc/ca dir/ca.pem' password='it\\'s'",
        )
        .unwrap();
        assert_eq!(rest, "host='db.example' port='5433' password='it\\'s'");
        assert_eq!(tls.mode, SslMode::VerifyFull);
        assert_eq!(tls.roots, Some(Roots::File("/etc/ca dir/ca.pem".into())));
        let parsed: tokio_postgres::Config = rest.parse().unwrap();
        assert_eq!(parsed.get_password(), Some(&b"it's"[..]));
    }

    #[test]
    fn an_unquoted_value_reads_backslash_escapes_as_libpq_does() {
        let (rest, _) = split(r"host=h password=a\ b\\c user=u").unwrap();
        let parsed: tokio_postgres::Config = rest.parse().unwrap();
        assert_eq!(parsed.get_password(), Some(&br"a b\c"[..]));
        assert_eq!(parsed.get_user(), Some("u"));
    }

    #[test]
    fn tls_keys_leave_a_url_and_the_rest_stays() {
        let (rest, tls) = split(
            "postgresql://u@h:5/db?sslmode=require&application_name=a%20b&sslcert=/c&sslkey=/k",
        )
        .unwrap();
        assert_eq!(rest, "postgresql://u@h:5/db?application_name=a+b");
        assert_eq!(tls.mode, SslMode::Require);
        assert_eq!(tls.client_cert, Some("/c".into()));
        let (rest, _) = split("postgres://h/db?sslmode=disable").unwrap();
        assert_eq!(rest, "postgres://h/db");
    }

    #[test]
    fn what_libpq_refuses_is_refused() {
        for bad in [
            "host=h sslmode=allow",
            "host=h sslmode=verify",
            "host=h sslcert=/c",
            "host=h sslmode=require sslrootcert=system",
            "host=h sslmode='unterminated",
            "host h",
        ] {
            assert!(matches!(split(bad), Err(Error::Config(_))), "{bad}");
        }
        // A mistyped password is not echoed.
        let e = split("host=h password = ab zq9x dbname=d").unwrap_err();
        assert!(e.to_string().contains("setting 3"), "{e}");
        assert!(!e.to_string().contains("zq9x"), "{e}");
        let (_, tls) = split("host=h sslmode=verify-ca sslrootcert=/nonexistent/ca.pem").unwrap();
        assert!(
            matches!(tls.connector(), Err(Error::Config(m)) if m.contains("/nonexistent/ca.pem"))
        );
    }

    #[test]
    fn the_default_mode_is_prefer_and_maps_onto_tokio_postgres() {
        let (_, tls) = split("host=h").unwrap();
        assert_eq!(tls.mode, SslMode::Prefer);
        assert_eq!(tls.postgres_mode(), tokio_postgres::config::SslMode::Prefer);
        let (_, tls) = split("host=h sslmode=verify-ca").unwrap();
        assert_eq!(
            tls.postgres_mode(),
            tokio_postgres::config::SslMode::Require
        );
        let (_, tls) = split("host=h sslmode=disable").unwrap();
        assert_eq!(
            tls.postgres_mode(),
            tokio_postgres::config::SslMode::Disable
        );
    }
}
