//! What `run` and `once` establish before their first write: the store honours create-only
//! writes (the probe, [`Store::probe_create_only`]; a store that ignores them is refused with
//! exit 7 unless `--allow-overwriting-store`), and this database's namespace is claimed there
//! (`crate::namespace`). Done at start; when the store cannot be reached then, again before the
//! first write (`pipeline::write`).

use crate::config::Settings;
use crate::error::{Error, Result};
use crate::metrics::Metrics;
use crate::pipeline::Context;
use crate::store::{CreateOnly, Store};

/// This database's namespace, once the store is trusted and the namespace claimed in it.
pub async fn prepare(ctx: &Context) -> Result<&String> {
    ctx.claimed
        .get_or_try_init(|| async {
            require_create_only(&ctx.store, &ctx.settings, &ctx.metrics).await?;
            crate::namespace::claim(&ctx.store, &ctx.namespace).await
        })
        .await
}

/// Probes the store's create-only writes, sets the `store_create_only` gauge and refuses a
/// store that ignores them unless the operator allowed it. Allowed, the archiver still never
/// writes over an object it did not write (it looks at each key first) and never prunes a batch
/// whose slice did not read back as written; what is lost is the guard against a writer that
/// arrives between the look and the write.
async fn require_create_only(store: &Store, settings: &Settings, metrics: &Metrics) -> Result<()> {
    match store.probe_create_only().await? {
        CreateOnly::Honoured => {
            metrics.store_create_only.set(1);
            tracing::info!("the store refused a second create of the probe key: create-only writes are honoured");
            Ok(())
        }
        CreateOnly::Ignored { key } => {
            metrics.store_create_only.set(0);
            tracing::warn!(
                store = %settings.store_for_logs(),
                "the object store accepted a second create of the probe key: it ignores create-only writes"
            );
            if settings.allow_overwriting_store {
                tracing::warn!("--allow-overwriting-store: archiving anyway, relying on the look before each write and the read-back verification");
                Ok(())
            } else {
                Err(Error::StoreNotCreateOnly { key })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::Options;

    fn settings(allow: bool) -> Settings {
        Settings::resolve(Options {
            allow_overwriting_store: Some(allow),
            ..Default::default()
        })
        .unwrap()
    }

    #[tokio::test]
    async fn a_store_that_overwrites_is_refused_unless_allowed_and_the_gauge_says_so() {
        let metrics = Metrics::default();
        assert_eq!(metrics.store_create_only.get(), -1, "not probed yet");
        let store = crate::store::tests::memory();
        require_create_only(&store, &settings(false), &metrics)
            .await
            .unwrap();
        assert_eq!(metrics.store_create_only.get(), 1);
        let overwriting = crate::store::tests::overwriting();
        let e = require_create_only(&overwriting, &settings(false), &metrics)
            .await
            .unwrap_err();
        assert!(matches!(e, Error::StoreNotCreateOnly { .. }), "{e}");
        assert_eq!(crate::exit::Exit::of(&e).code(), 7);
        assert!(e.to_string().contains("--allow-overwriting-store"), "{e}");
        assert_eq!(metrics.store_create_only.get(), 0);
        require_create_only(&overwriting, &settings(true), &metrics)
            .await
            .unwrap();
        assert_eq!(
            metrics.store_create_only.get(),
            0,
            "allowed, still reported"
        );
    }
}
