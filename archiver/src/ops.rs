//! Operator commands: ls and inspect, and what they share with `verify` and `restore`.

use crate::config::Settings;
use crate::db::{Db, ObjectState, ObjectStatus};
use crate::error::{Error, Result};
use crate::keys::{display, manifest_for, parse_display, slice_for};
use crate::store::Store;
use pg_retention_format::Manifest;
use std::io::{IsTerminal, Write};

/// Progress on a terminal, nothing in logs.
pub(crate) struct Progress {
    total: usize,
    tty: bool,
}

impl Progress {
    pub(crate) fn new(total: usize) -> Self {
        Progress {
            total,
            tty: std::io::stderr().is_terminal(),
        }
    }

    pub(crate) fn show(&self, done: usize, what: &str) {
        if self.tty {
            eprint!("\r{what} {done}/{}   ", self.total);
            if done == self.total {
                eprintln!();
            }
        }
    }
}

pub(crate) async fn read_manifest(store: &Store, key: &str) -> Result<Manifest> {
    Ok(serde_json::from_slice(
        &store.get(&manifest_for(key)).await?,
    )?)
}

/// Resolves a slice key, manifest key (as `ls` prints keys: [`parse_display`]) or batch id to a
/// slice key.
pub(crate) async fn resolve_key(settings: &Settings, store: &Store, typed: &str) -> Result<String> {
    let target = parse_display(typed)?;
    let target = target.as_str();
    if target.ends_with(".slice") || target.ends_with(".manifest.json") {
        return Ok(slice_for(target));
    }
    if target.len() == 36 && target.chars().filter(|c| *c == '-').count() == 4 {
        let db = Db::connect(settings).await?;
        return db.key_of_batch(target).await?.ok_or_else(|| {
            Error::Refusal(format!(
                "batch {target} has no archive in retention.archives"
            ))
        });
    }
    if store.exists(&format!("{target}.slice")).await? {
        return Ok(format!("{target}.slice"));
    }
    Err(Error::Refusal(format!(
        "{typed} is neither an object key nor a batch id"
    )))
}

/// `ls`: one line per slice: key, rows, bytes, policy, batch.
pub async fn ls(settings: &Settings) -> Result<()> {
    let store = Store::open(settings)?;
    let mut out = std::io::stdout().lock();
    for mkey in store.manifests().await? {
        let m = read_manifest(&store, &mkey).await?;
        let line = format!(
            "{}\t{}\t{}\t{}\t{}",
            display(&slice_for(&mkey)),
            m.rows,
            m.bytes,
            m.policy,
            m.batch
        );
        // A closed pipe (`ls | head`) ends the listing quietly.
        if writeln!(out, "{line}").is_err() {
            break;
        }
    }
    Ok(())
}

/// Refuses a slice an erasure superseded (the index says so; without a database there is no
/// index to ask, and a rewritten slice's own manifest names what it supersedes).
pub(crate) async fn refuse_superseded(db: &Db, key: &str) -> Result<()> {
    match db.object_state(key).await? {
        Some(ObjectStatus {
            state: ObjectState::Superseded,
            current_key,
        }) => Err(Error::Superseded {
            key: key.to_owned(),
            by: current_key,
        }),
        _ => Ok(()),
    }
}

/// `inspect`: the manifest, pretty-printed.
pub async fn inspect(settings: &Settings, target: &str) -> Result<()> {
    let store = Store::open(settings)?;
    let key = resolve_key(settings, &store, target).await?;
    if settings.database_url.is_some() {
        refuse_superseded(&Db::connect(settings).await?, &key).await?;
    }
    let m = read_manifest(&store, &key).await?;
    println!("{}", serde_json::to_string_pretty(&m)?);
    Ok(())
}
