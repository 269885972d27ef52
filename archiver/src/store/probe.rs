//! What the store does, found by asking it rather than assumed: whether it honours create-only
//! writes — a second create of one key must be refused, which some S3-compatible servers that
//! ignore `If-None-Match: *` do not do (`run` and `once` ask at start, [`Store::probe_create_only`])
//! — and whether it answers a read within a short bound (`/readyz`, [`Store::readable`]).

use super::Store;
use crate::error::{Error, Result};
use object_store::{PutMode, PutOptions, PutPayload};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Where probe objects live (under `_retention/`, never swept); each is deleted after its probe.
const PROBES: &str = "_retention/probes";

/// What the create-only probe found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CreateOnly {
    /// A second create of the probe key was refused (`AlreadyExists`).
    Honoured,
    /// A second create of the probe key was accepted: the store overwrites.
    Ignored {
        /// The probe key.
        key: String,
    },
}

/// A key no other probe uses: the time in nanoseconds and the process id.
fn probe_key() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    format!("{PROBES}/create-only-{nanos}-{}.probe", std::process::id())
}

fn create() -> PutOptions {
    PutOptions {
        mode: PutMode::Create,
        ..Default::default()
    }
}

impl Store {
    /// Creates a fresh probe key create-only, then creates it again: the store honours
    /// create-only writes when the second is refused. The probe object is deleted afterwards (a
    /// failure to delete it is only warned about: it lies under `_retention/`).
    pub async fn probe_create_only(&self) -> Result<CreateOnly> {
        let key = probe_key();
        let path = self.path(&key);
        let first = self
            .inner
            .put_opts(&path, PutPayload::from_static(b"1"), create());
        self.timed("put", first).await??;
        let second = self
            .inner
            .put_opts(&path, PutPayload::from_static(b"2"), create());
        let found = match self.timed("put", second).await {
            Ok(Err(object_store::Error::AlreadyExists { .. })) => Ok(CreateOnly::Honoured),
            Ok(Ok(_)) => Ok(CreateOnly::Ignored { key: key.clone() }),
            Ok(Err(e)) => Err(e.into()),
            Err(e) => Err(e),
        };
        if let Err(e) = self.delete(std::slice::from_ref(&key)).await {
            tracing::warn!(error = %e, key = %key, "cannot delete the create-only probe object");
        }
        found
    }

    /// Whether `key` exists, asked within `within` (shorter than the operation bound: a
    /// readiness probe answers quickly or not at all).
    pub async fn readable(&self, key: &str, within: Duration) -> Result<bool> {
        tokio::time::timeout(within, self.exists(key))
            .await
            .map_err(|_| Error::StoreTimeout {
                operation: "head",
                after: within,
            })?
    }
}
