//! Every store operation bounded. object_store's HTTP clients time each request out
//! (`request_timeout`) and stop retrying after `retry_timeout`, but its local file system has no
//! timeout at all: a hung mount would hang the archiver with it. So each operation as a whole
//! (a get with its body, a head, a put, one page of a listing, one answer of a bulk delete) is
//! bounded here too ([`bound`]); a timed-out operation is [`Error::StoreTimeout`] (exit 4).

use super::Store;
use crate::config::Settings;
use crate::error::{Error, Result};
use futures::{Stream, StreamExt};
use object_store::path::Path;
use object_store::ObjectMeta;
use std::future::Future;
use std::time::Duration;

/// The bound of one operation on a store of `scheme`: the request timeout where requests are
/// local (`file://`, `memory://`: no retries), the request timeout plus the retry budget where
/// they are HTTP requests the client retries (a retried request may legitimately take that).
pub(super) fn bound(scheme: &str, settings: &Settings) -> Duration {
    match scheme {
        "file" | "memory" => settings.request_timeout,
        _ => settings
            .request_timeout
            .saturating_add(settings.retry_timeout),
    }
}

impl Store {
    /// Runs `operation` within the bound; its own error is left to the caller to match.
    pub(super) async fn timed<T>(
        &self,
        operation: &'static str,
        fut: impl Future<Output = object_store::Result<T>>,
    ) -> Result<object_store::Result<T>> {
        tokio::time::timeout(self.bound, fut)
            .await
            .map_err(|_| Error::StoreTimeout {
                operation,
                after: self.bound,
            })
    }

    /// The next item of a store's stream, waited for within the bound.
    pub(super) async fn next_of<S: Stream + Unpin>(
        &self,
        operation: &'static str,
        stream: &mut S,
    ) -> Result<Option<S::Item>> {
        tokio::time::timeout(self.bound, stream.next())
            .await
            .map_err(|_| Error::StoreTimeout {
                operation,
                after: self.bound,
            })
    }

    /// Every object under `root` (everything for None), each page waited for within the bound.
    pub(super) async fn listed(&self, root: Option<&Path>) -> Result<Vec<ObjectMeta>> {
        let mut stream = self.inner.list(root);
        let mut found = Vec::new();
        while let Some(meta) = self.next_of("list", &mut stream).await? {
            found.push(meta?);
        }
        Ok(found)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::Options;

    #[test]
    fn local_stores_are_bounded_by_the_request_timeout_http_stores_by_it_and_the_retry_budget() {
        let settings = Settings::resolve(Options {
            request_timeout: Some("7s".into()),
            retry_timeout: Some("20s".into()),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(bound("file", &settings), Duration::from_secs(7));
        assert_eq!(bound("memory", &settings), Duration::from_secs(7));
        assert_eq!(bound("s3", &settings), Duration::from_secs(27));
    }
}
