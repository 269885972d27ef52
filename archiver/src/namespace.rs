//! This database's archive namespace in the store: the first segment of every key it writes
//! (`<prefix>/<namespace>/<schema>.<table>/…`). The extension records it
//! (`retention.archive_namespace()`: derived `<system identifier>.<database>` on first use, or
//! set by the operator); here it is claimed in the store, create-only, as
//! `_retention/namespaces/<namespace>.json` naming the cluster and database. A namespace whose
//! claim names another cluster or database is refused ([`Error::NamespaceClaimed`], exit 6)
//! before anything is written, swept, expired or checked under it.

use crate::db::Db;
use crate::error::{Error, Result};
use crate::store::{Store, Written};
use bytes::Bytes;
use serde::{Deserialize, Serialize};

/// Where namespace claims live (under `_retention/`, never swept).
const CLAIMS: &str = "_retention/namespaces";

/// The claim object's contents.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claim {
    format: String,
    /// The namespace.
    pub namespace: String,
    system_identifier: String,
    database_oid: i64,
    database: String,
}

impl Claim {
    fn who(&self) -> String {
        format!(
            "database {:?} (oid {}) of cluster {}",
            self.database, self.database_oid, self.system_identifier
        )
    }

    /// The same cluster and database (a renamed database keeps its claim).
    fn same_owner(&self, other: &Claim) -> bool {
        self.system_identifier == other.system_identifier && self.database_oid == other.database_oid
    }
}

/// The key of namespace `ns`'s claim object.
pub fn claim_key(ns: &str) -> String {
    format!("{CLAIMS}/{ns}.json")
}

/// This database's namespace, claimed in `store` (or found claimed by this database).
pub async fn own(db: &Db, store: &Store) -> Result<String> {
    claim(store, &read(db).await?).await
}

/// This database's namespace and identity, as the catalog records them.
pub async fn read(db: &Db) -> Result<Claim> {
    let me = db.identity().await?;
    Ok(Claim {
        format: "pg_retention.namespace_claim.v1".into(),
        namespace: me.namespace,
        system_identifier: me.system_identifier,
        database_oid: me.database_oid,
        database: me.database_name,
    })
}

/// Claims `mine` in `store`: its namespace, or the refusal when another database has it.
pub async fn claim(store: &Store, mine: &Claim) -> Result<String> {
    let key = claim_key(&mine.namespace);
    let bytes = Bytes::from(serde_json::to_vec_pretty(&mine)?);
    match store.put_create(&key, bytes).await {
        Ok(Written::Created) => {
            tracing::info!(namespace = %mine.namespace, "archive namespace claimed");
            Ok(mine.namespace.clone())
        }
        Ok(_) => Ok(mine.namespace.clone()),
        Err(Error::ForeignOccupant { .. }) => {
            let theirs: Option<Claim> = serde_json::from_slice(&store.get(&key).await?).ok();
            match theirs {
                Some(theirs) if theirs.same_owner(mine) => Ok(mine.namespace.clone()),
                theirs => Err(Error::NamespaceClaimed {
                    namespace: mine.namespace.clone(),
                    by: theirs.map_or_else(
                        || "an object this archiver did not write".into(),
                        |t| t.who(),
                    ),
                    me: mine.who(),
                }),
            }
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claim_is_the_cluster_and_the_database_oid() {
        let a = Claim {
            format: "v1".into(),
            namespace: "7.app".into(),
            system_identifier: "7".into(),
            database_oid: 16384,
            database: "app".into(),
        };
        let renamed = Claim {
            database: "app2".into(),
            ..a.clone()
        };
        assert!(a.same_owner(&renamed));
        let other = Claim {
            system_identifier: "8".into(),
            ..a.clone()
        };
        assert!(!a.same_owner(&other));
        assert!(other.who().contains("cluster 8"));
        assert_eq!(claim_key("7.app"), "_retention/namespaces/7.app.json");
    }
}
