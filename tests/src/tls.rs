//! Certificates for the TLS tests (`tests/fixtures/make-certs`) and a cluster that accepts
//! nothing but TLS with a client certificate.

use crate::cluster::{Cluster, SCRATCH};
use crate::succeed;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

static SEQ: AtomicU32 = AtomicU32::new(0);

/// A CA, a server certificate for "localhost", a client certificate for user `postgres` and an
/// unrelated CA, in a directory the `postgres` OS user owns; removed on drop.
pub struct Certs {
    dir: PathBuf,
}

impl Certs {
    /// Makes the certificates.
    pub fn make() -> Certs {
        let dir = Path::new(SCRATCH).join(format!(
            "certs-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::SeqCst)
        ));
        std::fs::create_dir_all(&dir).expect("certificate directory");
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/make-certs");
        succeed(Command::new("bash").arg(script).arg(&dir));
        // The server reads its key as postgres and refuses one others can read (0600 already).
        succeed(
            Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(&dir),
        );
        Certs { dir }
    }

    /// Path of one of the files (`ca.crt`, `server.key`, `client.crt`, `wrong-ca.crt`, ...).
    pub fn path(&self, name: &str) -> String {
        self.dir.join(name).to_string_lossy().into_owned()
    }
}

impl Drop for Certs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A cluster with `ssl = on` whose `pg_hba.conf` accepts TCP only over TLS with a client
/// certificate the CA signed (`cert clientcert=verify-full`); the client certificate (CN
/// `postgres`) maps (`pg_ident.conf`) to the users `postgres` and `archiver` (the role
/// [`Cluster::archiver_url`] makes). Its own Unix socket stays open for the test's setup and
/// checks. The extension is created.
pub fn tls_only_cluster(certs: &Certs) -> Cluster {
    let ssl = [
        "ssl = on".to_owned(),
        format!("ssl_cert_file = '{}'", certs.path("server.crt")),
        format!("ssl_key_file = '{}'", certs.path("server.key")),
        format!("ssl_ca_file = '{}'", certs.path("ca.crt")),
    ];
    let ssl: Vec<&str> = ssl.iter().map(String::as_str).collect();
    let c = Cluster::start(&ssl);
    c.replace_ident("client postgres postgres\nclient postgres archiver\n");
    c.replace_hba(
        "local all all trust\n\
         hostssl all all 127.0.0.1/32 cert clientcert=verify-full map=client\n\
         hostssl all all ::1/128 cert clientcert=verify-full map=client\n",
    );
    c
}
