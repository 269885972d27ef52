//! The object store: built from a URL with explicit timeouts and a bounded retry budget
//! ([`open`]), every operation bounded (`timed`), the create-only write
//! that tells a retried write of ours from a foreign occupant, and the probes of what the store
//! does (`probe`: create-only honoured, readable).

use crate::error::{Error, Result};
use crate::keys::{key_of, path_of};
use bytes::Bytes;
use futures::StreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, PutMode, PutOptions, PutPayload};
use std::sync::Arc;
use std::time::Duration;

mod open;
mod probe;
mod timed;

pub use probe::CreateOnly;

/// An object store plus the key prefix every object of ours lives under.
#[derive(Clone)]
pub struct Store {
    inner: Arc<dyn ObjectStore>,
    prefix: String,
    /// How long one operation may take, retries included (`timed::bound`).
    bound: Duration,
}

/// What a create-only write found.
#[derive(Debug, PartialEq, Eq)]
pub enum Written {
    /// The object is new.
    Created,
    /// An object with exactly these bytes was there already (a retried write that had succeeded).
    AlreadyIdentical,
}

impl Store {
    /// The full path of a key relative to the prefix (the one conversion: [`path_of`]).
    pub fn path(&self, key: &str) -> Path {
        path_of(&self.prefix, key)
    }

    /// The key of a listed path, relative to the prefix (the one conversion back: [`key_of`]).
    /// None, with a warning, for an object the archiver did not name: it is left alone.
    fn key(&self, path: &Path) -> Option<String> {
        let key = key_of(&self.prefix, path);
        if key.is_none() {
            tracing::warn!(path = %path, "an object not named as the archiver names objects; left alone");
        }
        key
    }

    /// What listings start from: the prefix, or everything.
    fn list_root(&self) -> Option<Path> {
        (!self.prefix.is_empty()).then(|| self.path(""))
    }

    /// Writes `bytes` at `key` only if nothing is there. An existing object with the same bytes
    /// is accepted with a warning; one with other bytes is a foreign occupant.
    ///
    /// The key is looked at first: an occupant is compared before a single byte is written, so
    /// a store that does not honour create-only writes (some S3-compatible servers ignore
    /// `If-None-Match: *`) still never has a foreign object overwritten by us. The conditional
    /// create stays, for the race with a writer that arrives between the look and the write,
    /// on the stores that honour it; the read-back digest check after every write is the
    /// guarantee on all of them.
    pub async fn put_create(&self, key: &str, bytes: Bytes) -> Result<Written> {
        if self.exists(key).await? {
            return self.compare_occupant(key, &bytes).await;
        }
        let path = self.path(key);
        let opts = PutOptions {
            mode: PutMode::Create,
            ..Default::default()
        };
        let put = self
            .inner
            .put_opts(&path, PutPayload::from(bytes.clone()), opts);
        match self.timed("put", put).await? {
            Ok(_) => Ok(Written::Created),
            Err(object_store::Error::AlreadyExists { .. }) => {
                self.compare_occupant(key, &bytes).await
            }
            Err(e) => Err(e.into()),
        }
    }

    /// An object is already at `key`: ours if it holds exactly `bytes`, else foreign.
    async fn compare_occupant(&self, key: &str, bytes: &Bytes) -> Result<Written> {
        let occupant = self.get(key).await?;
        if occupant == *bytes {
            tracing::warn!(
                key,
                "object already present with identical bytes; accepting it"
            );
            Ok(Written::AlreadyIdentical)
        } else {
            Err(Error::ForeignOccupant {
                key: key.to_owned(),
                reason: format!(
                    "{} bytes there, {} bytes ours, and they differ",
                    occupant.len(),
                    bytes.len()
                ),
            })
        }
    }

    /// Overwrites `key` (fault injection only: production writes are create-only).
    pub async fn overwrite(&self, key: &str, bytes: Bytes) -> Result<()> {
        let path = self.path(key);
        let put = self.inner.put(&path, PutPayload::from(bytes));
        self.timed("put", put).await??;
        Ok(())
    }

    /// Reads a whole object.
    pub async fn get(&self, key: &str) -> Result<Bytes> {
        let path = self.path(key);
        let get = async { self.inner.get(&path).await?.bytes().await };
        Ok(self.timed("get", get).await??)
    }

    /// Whether an object exists.
    pub async fn exists(&self, key: &str) -> Result<bool> {
        let path = self.path(key);
        match self.timed("head", self.inner.head(&path)).await? {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// The objects (key, size) in the directory of `key` whose names start with `name_prefix`,
    /// sorted by key: an archive's inventory is every object named after its batch.
    pub async fn objects_beside(&self, key: &str, name_prefix: &str) -> Result<Vec<(String, u64)>> {
        let dir = self.path(key.rsplit_once('/').map_or("", |(dir, _)| dir));
        let listing = self
            .timed("list", self.inner.list_with_delimiter(Some(&dir)))
            .await??;
        let mut found: Vec<(String, u64)> = listing
            .objects
            .iter()
            .filter_map(|m| Some((self.key(&m.location)?, m.size)))
            .filter(|(k, _)| {
                k.rsplit('/')
                    .next()
                    .is_some_and(|f| f.starts_with(name_prefix))
            })
            .collect();
        found.sort();
        Ok(found)
    }

    /// Deletes exactly `keys` (one request per call on stores that delete in bulk; callers keep
    /// a call to at most 1,000 keys). A key already gone counts as deleted.
    pub async fn delete(&self, keys: &[String]) -> Result<()> {
        let paths: Vec<Result<Path, object_store::Error>> =
            keys.iter().map(|k| Ok(self.path(k))).collect();
        let mut results = self
            .inner
            .delete_stream(futures::stream::iter(paths).boxed());
        while let Some(result) = self.next_of("delete", &mut results).await? {
            match result {
                Ok(_) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Every object whose key starts with the segments of `dir` (everything for ""): (key,
    /// size, last modified), sorted by key.
    pub async fn objects(
        &self,
        dir: &str,
    ) -> Result<Vec<(String, u64, chrono::DateTime<chrono::Utc>)>> {
        let root = match dir {
            "" => self.list_root(),
            dir => Some(self.path(dir)),
        };
        let mut found: Vec<(String, u64, chrono::DateTime<chrono::Utc>)> = self
            .listed(root.as_ref())
            .await?
            .into_iter()
            .filter_map(|m| Some((self.key(&m.location)?, m.size, m.last_modified)))
            .collect();
        found.sort();
        Ok(found)
    }

    /// Every manifest key under the prefix, sorted.
    pub async fn manifests(&self) -> Result<Vec<String>> {
        let mut keys: Vec<String> = self
            .listed(self.list_root().as_ref())
            .await?
            .into_iter()
            .filter_map(|m| {
                self.key(&m.location)
                    .filter(|k| k.ends_with(".manifest.json"))
            })
            .collect();
        keys.sort();
        Ok(keys)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::cli::Options;
    use crate::config::Settings;
    use futures::stream::BoxStream;
    use object_store::{
        GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, PutMultipartOptions,
        PutResult,
    };

    /// How [`Misbehaving`] departs from a well-behaved store.
    #[derive(Debug, Clone, Copy)]
    enum Misbehaviour {
        /// Create-only writes overwrite whatever is there, as some S3-compatible servers do.
        IgnoresCreateOnly,
        /// `head` misses every object: what the archiver sees when another writer puts an
        /// object between its look and its write.
        HeadMisses,
        /// Reads and listings never answer (a hung mount).
        Hangs,
    }

    /// An in-memory store with one misbehaviour.
    #[derive(Debug)]
    struct Misbehaving(object_store::memory::InMemory, Misbehaviour);

    impl std::fmt::Display for Misbehaving {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "Misbehaving({:?})", self.1)
        }
    }

    #[async_trait::async_trait]
    impl ObjectStore for Misbehaving {
        async fn put_opts(
            &self,
            location: &Path,
            payload: PutPayload,
            mut opts: PutOptions,
        ) -> object_store::Result<PutResult> {
            if let Misbehaviour::IgnoresCreateOnly = self.1 {
                opts.mode = PutMode::Overwrite;
            }
            self.0.put_opts(location, payload, opts).await
        }
        async fn put_multipart_opts(
            &self,
            location: &Path,
            opts: PutMultipartOptions,
        ) -> object_store::Result<Box<dyn MultipartUpload>> {
            self.0.put_multipart_opts(location, opts).await
        }
        async fn get_opts(
            &self,
            location: &Path,
            options: GetOptions,
        ) -> object_store::Result<GetResult> {
            if let Misbehaviour::Hangs = self.1 {
                return std::future::pending().await;
            }
            if let (Misbehaviour::HeadMisses, true) = (self.1, options.head) {
                return Err(object_store::Error::NotFound {
                    path: location.to_string(),
                    source: "not there yet".into(),
                });
            }
            self.0.get_opts(location, options).await
        }
        async fn delete(&self, location: &Path) -> object_store::Result<()> {
            self.0.delete(location).await
        }
        fn list(
            &self,
            prefix: Option<&Path>,
        ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
            match self.1 {
                Misbehaviour::Hangs => futures::stream::pending().boxed(),
                _ => self.0.list(prefix),
            }
        }
        async fn list_with_delimiter(
            &self,
            prefix: Option<&Path>,
        ) -> object_store::Result<ListResult> {
            self.0.list_with_delimiter(prefix).await
        }
        async fn copy(&self, from: &Path, to: &Path) -> object_store::Result<()> {
            self.0.copy(from, to).await
        }
        async fn copy_if_not_exists(&self, from: &Path, to: &Path) -> object_store::Result<()> {
            match self.1 {
                Misbehaviour::IgnoresCreateOnly => self.0.copy(from, to).await,
                _ => self.0.copy_if_not_exists(from, to).await,
            }
        }
    }

    fn misbehaving(how: Misbehaviour, prefix: &str) -> Store {
        Store {
            inner: Arc::new(Misbehaving(object_store::memory::InMemory::new(), how)),
            prefix: prefix.into(),
            bound: Duration::from_millis(200),
        }
    }

    #[tokio::test]
    async fn the_conditional_create_still_refuses_a_writer_that_came_after_the_look() {
        let s = misbehaving(Misbehaviour::HeadMisses, "");
        s.overwrite("a/b.slice", Bytes::from_static(b"foreign"))
            .await
            .unwrap();
        assert!(!s.exists("a/b.slice").await.unwrap(), "the look misses it");
        assert!(matches!(
            s.put_create("a/b.slice", Bytes::from_static(b"ours")).await,
            Err(Error::ForeignOccupant { .. })
        ));
        assert_eq!(&s.get("a/b.slice").await.unwrap()[..], b"foreign");
    }

    #[tokio::test]
    async fn a_store_that_ignores_create_only_never_loses_a_foreign_object() {
        let s = misbehaving(Misbehaviour::IgnoresCreateOnly, "pfx");
        s.overwrite("a/b.slice", Bytes::from_static(b"foreign"))
            .await
            .unwrap();
        assert!(matches!(
            s.put_create("a/b.slice", Bytes::from_static(b"ours")).await,
            Err(Error::ForeignOccupant { .. })
        ));
        assert_eq!(
            &s.get("a/b.slice").await.unwrap()[..],
            b"foreign",
            "the occupant survives"
        );
        assert_eq!(
            s.put_create("a/b.slice", Bytes::from_static(b"foreign"))
                .await
                .unwrap(),
            Written::AlreadyIdentical
        );
        assert_eq!(
            s.put_create("a/c.slice", Bytes::from_static(b"new"))
                .await
                .unwrap(),
            Written::Created
        );
    }

    #[tokio::test]
    async fn the_create_only_probe_tells_a_store_that_overwrites_and_leaves_nothing_behind() {
        assert_eq!(
            memory().probe_create_only().await.unwrap(),
            CreateOnly::Honoured
        );
        let s = misbehaving(Misbehaviour::IgnoresCreateOnly, "pfx");
        let found = s.probe_create_only().await.unwrap();
        assert!(
            matches!(&found, CreateOnly::Ignored { key } if key.starts_with("_retention/probes/")),
            "{found:?}"
        );
        let left = s.listed(None).await.unwrap();
        assert!(left.is_empty(), "the probe object is deleted: {left:?}");
    }

    #[tokio::test]
    async fn an_operation_that_never_answers_is_a_timeout_within_the_bound() {
        let s = misbehaving(Misbehaviour::Hangs, "pfx");
        let started = std::time::Instant::now();
        for e in [
            s.exists("a/b.slice").await.unwrap_err(),
            s.get("a/b.slice").await.unwrap_err(),
            s.objects("").await.unwrap_err(),
            s.manifests().await.unwrap_err(),
            s.readable("a/b.slice", Duration::from_millis(50))
                .await
                .unwrap_err(),
        ] {
            assert!(matches!(e, Error::StoreTimeout { .. }), "{e}");
            assert_eq!(crate::exit::Exit::of(&e).code(), 4);
        }
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    /// A key of a table named `we"ird<TAB>tab<LF>name%2F/x` is written, listed, compared with
    /// the key the database records, read back and deleted, in memory and on disk: encoded
    /// once on the way in, decoded once on the way out.
    #[tokio::test]
    async fn a_key_with_quotes_tabs_newlines_and_percent_round_trips() {
        use crate::keys::{manifest_for, slice_for, WEIRD_RELATION};
        let recorded = format!("app/{WEIRD_RELATION}/2026/11/30/b1.slice");
        let manifest = manifest_for(&recorded);
        let dir = std::env::temp_dir().join(format!("pg-retention-keys-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let on_disk = Options {
            store: Some(format!("file://{}", dir.display())),
            ..Default::default()
        };
        for s in [
            memory(),
            Store::open(&Settings::resolve(on_disk).unwrap()).unwrap(),
        ] {
            assert_eq!(
                s.put_create(&recorded, Bytes::from_static(b"slice"))
                    .await
                    .unwrap(),
                Written::Created
            );
            s.put_create(&manifest, Bytes::from_static(b"{}"))
                .await
                .unwrap();
            assert_eq!(s.manifests().await.unwrap(), vec![manifest.clone()]);
            let listed: Vec<String> = s
                .objects("")
                .await
                .unwrap()
                .into_iter()
                .map(|(k, ..)| k)
                .collect();
            assert_eq!(listed, vec![manifest.clone(), recorded.clone()]);
            let beside: Vec<String> = s
                .objects_beside(&recorded, "b1.")
                .await
                .unwrap()
                .into_iter()
                .map(|(k, _)| k)
                .collect();
            assert_eq!(beside, listed);
            // What a listing gives back reads the object, and is the recorded key.
            let back = slice_for(&s.manifests().await.unwrap()[0]);
            assert_eq!(back, recorded);
            assert_eq!(&s.get(&back).await.unwrap()[..], b"slice");
            assert_eq!(
                s.put_create(&back, Bytes::from_static(b"slice"))
                    .await
                    .unwrap(),
                Written::AlreadyIdentical
            );
            s.delete(&listed).await.unwrap();
            assert!(s.objects("").await.unwrap().is_empty());
            assert!(!s.exists(&recorded).await.unwrap());
        }
        let _ = std::fs::remove_dir_all(dir);
    }

    #[tokio::test]
    async fn an_object_named_by_another_writer_is_left_alone() {
        let s = memory();
        s.put_create("a/b1.slice", Bytes::from_static(b"x"))
            .await
            .unwrap();
        s.inner
            .put(
                &Path::parse("pfx/a/b%2F1.slice").unwrap(),
                PutPayload::from_static(b"y"),
            )
            .await
            .unwrap();
        let listed = keys_of(&s).await;
        assert_eq!(listed, vec!["a/b1.slice".to_string()]);
    }

    /// The keys a listing of `s` gives back.
    async fn keys_of(s: &Store) -> Vec<String> {
        s.objects("")
            .await
            .unwrap()
            .into_iter()
            .map(|(k, ..)| k)
            .collect()
    }

    /// An in-memory store that ignores create-only writes (for the probe's callers' tests).
    pub(crate) fn overwriting() -> Store {
        misbehaving(Misbehaviour::IgnoresCreateOnly, "pfx")
    }

    /// An in-memory store under prefix `pfx`.
    pub(crate) fn memory() -> Store {
        let o = Options {
            store: Some("memory://pfx".into()),
            ..Default::default()
        };
        Store::open(&Settings::resolve(o).unwrap()).unwrap()
    }

    #[tokio::test]
    async fn create_only_accepts_an_identical_occupant_and_refuses_a_foreign_one() {
        let s = memory();
        assert_eq!(
            s.put_create("a/b.slice", Bytes::from_static(b"one"))
                .await
                .unwrap(),
            Written::Created
        );
        assert_eq!(
            s.put_create("a/b.slice", Bytes::from_static(b"one"))
                .await
                .unwrap(),
            Written::AlreadyIdentical
        );
        assert!(matches!(
            s.put_create("a/b.slice", Bytes::from_static(b"two")).await,
            Err(Error::ForeignOccupant { .. })
        ));
        assert_eq!(&s.get("a/b.slice").await.unwrap()[..], b"one");
        s.put_create("a/b.manifest.json", Bytes::from_static(b"{}"))
            .await
            .unwrap();
        assert_eq!(
            s.manifests().await.unwrap(),
            vec!["a/b.manifest.json".to_string()]
        );
    }
}
