//! Operator commands: ls, inspect, verify, restore.

use crate::config::Settings;
use crate::db::Db;
use crate::error::{Error, Result};
use crate::keys::{manifest_for, slice_for};
use crate::store::Store;
use futures::SinkExt;
use pg_retention_format::{quote_ident, verify_slice, ColumnSpec, Manifest, Row};
use std::io::{IsTerminal, Write};

/// Progress on a terminal, nothing in logs.
struct Progress {
    total: usize,
    tty: bool,
}

impl Progress {
    fn new(total: usize) -> Self {
        Progress {
            total,
            tty: std::io::stderr().is_terminal(),
        }
    }

    fn show(&self, done: usize, what: &str) {
        if self.tty {
            eprint!("\r{what} {done}/{}   ", self.total);
            if done == self.total {
                eprintln!();
            }
        }
    }
}

async fn read_manifest(store: &Store, key: &str) -> Result<Manifest> {
    Ok(serde_json::from_slice(
        &store.get(&manifest_for(key)).await?,
    )?)
}

/// Resolves a slice key, manifest key or batch id to a slice key.
async fn resolve_key(settings: &Settings, store: &Store, target: &str) -> Result<String> {
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
        "{target} is neither an object key nor a batch id"
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
            slice_for(&mkey),
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
async fn refuse_superseded(db: &Db, key: &str) -> Result<()> {
    match db.object_state(key).await? {
        Some((state, by)) if state == "superseded" => Err(Error::Superseded {
            key: key.to_owned(),
            by,
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

/// `verify`: re-reads slices, checks each against its manifest and against retention.archives.
/// Returns the number of failures (also printed).
pub async fn verify(settings: &Settings, all: bool, key: Option<&str>) -> Result<usize> {
    let store = Store::open(settings)?;
    let keys = match (all, key) {
        (true, _) => store
            .manifests()
            .await?
            .iter()
            .map(|k| slice_for(k))
            .collect(),
        (false, Some(k)) => vec![resolve_key(settings, &store, k).await?],
        (false, None) => return Err(Error::Config("verify needs --all or a key".into())),
    };
    let db = match settings.database_url {
        Some(_) => Some(Db::connect(settings).await?),
        None => None,
    };
    let progress = Progress::new(keys.len());
    let mut failures = 0;
    for (i, key) in keys.iter().enumerate() {
        let verdict = verify_one(&store, db.as_ref(), key).await;
        match verdict {
            Ok(Verdict::Verified(note)) => println!("ok\t{key}{note}"),
            Ok(Verdict::Superseded(by)) => println!("superseded\t{key}\tby {by}"),
            Err(e) => {
                failures += 1;
                println!("FAILED\t{key}\t{e}");
            }
        }
        progress.show(i + 1, "verified");
    }
    println!("{} verified, {failures} failed", keys.len() - failures);
    Ok(failures)
}

/// What `verify` found of a slice that is intact.
enum Verdict {
    /// It is what the index records (or the index does not know it); a note for the listing.
    Verified(String),
    /// An erasure's rewrite replaced it (named); its deletion is pending.
    Superseded(String),
}

async fn verify_one(store: &Store, db: Option<&Db>, key: &str) -> Result<Verdict> {
    let m = read_manifest(store, key).await?;
    let slice = store.get(key).await?;
    verify_slice(&slice, &m.blake3, m.rows, m.bytes).map_err(|e| Error::Verify {
        key: key.to_owned(),
        reason: e.to_string(),
    })?;
    let rewrite = match &m.supersedes {
        Some(digest) => format!("\t(rewritten by an erasure; supersedes manifest {digest})"),
        None => String::new(),
    };
    let Some(db) = db else {
        return Ok(Verdict::Verified(rewrite));
    };
    if let Some((state, by)) = db.object_state(key).await? {
        if state == "superseded" {
            return Ok(Verdict::Superseded(by));
        }
    }
    match db.archive_record(&m.batch).await? {
        None => Ok(Verdict::Verified(
            "\t(not in retention.archives: written but never pruned)".into(),
        )),
        Some(r)
            if r.blake3 == m.blake3
                && r.rows as u64 == m.rows
                && r.bytes as u64 == m.bytes
                && r.object_key == key =>
        {
            Ok(Verdict::Verified(rewrite))
        }
        Some(r) => Err(Error::Verify {
            key: key.to_owned(),
            reason: format!(
                "retention.archives says {} rows, {} bytes, blake3 {} at {}",
                r.rows, r.bytes, r.blake3, r.object_key
            ),
        }),
    }
}

/// A column name from a manifest, checked before it is quoted into DDL: not empty, no NUL, no
/// longer than PostgreSQL keeps (a longer one would be cut and could collide), not repeated.
fn check_names(columns: &[ColumnSpec]) -> Result<()> {
    let mut seen = std::collections::HashSet::new();
    for c in columns {
        if c.name.is_empty() || c.name.contains('\0') || c.name.len() > 63 {
            return Err(Error::Refusal(format!(
                "manifest column name {:?} is not a usable column name",
                c.name
            )));
        }
        if !seen.insert(c.name.as_str()) {
            return Err(Error::Refusal(format!(
                "manifest names column {:?} twice",
                c.name
            )));
        }
    }
    if columns.is_empty() {
        return Err(Error::Refusal("manifest has no columns".into()));
    }
    Ok(())
}

/// Resolves every column type of a manifest through the database's catalog: a manifest is
/// untrusted bytes, and its type names go into DDL. `to_regtype` accepts a type name and
/// nothing else (PostgreSQL parses it as a type and refuses any other syntax; type modifiers
/// must be constants), so a name it resolves is safe to write as a column type. Anything else
/// is refused before any DDL runs.
async fn check_types(client: &tokio_postgres::Client, columns: &[ColumnSpec]) -> Result<()> {
    for c in columns {
        let plain = !c.type_name.is_empty()
            && !c.type_name.contains("--")
            && !c.type_name.contains("/*")
            && !c.type_name.contains(';');
        let resolved = if plain {
            client
                .query_one(
                    "SELECT pg_catalog.to_regtype($1) IS NOT NULL",
                    &[&c.type_name],
                )
                .await
                .ok()
                .map(|r| r.get::<_, bool>(0))
        } else {
            None
        };
        if resolved != Some(true) {
            return Err(Error::Refusal(format!(
                "manifest column {:?} has type {:?}, which is not a type this database knows",
                c.name, c.type_name
            )));
        }
    }
    Ok(())
}

/// `schema.table` → quoted `"schema"."table"`.
fn quote_target(target: &str) -> Result<String> {
    let (schema, table) = target
        .split_once('.')
        .ok_or_else(|| Error::Config(format!("--into {target:?}: use schema.table")))?;
    Ok(format!("{}.{}", quote_ident(schema), quote_ident(table)))
}

/// COPY text format for one value.
fn copy_value(v: &Option<String>) -> String {
    match v {
        None => "\\N".into(),
        Some(s) => s
            .replace('\\', "\\\\")
            .replace('\t', "\\t")
            .replace('\n', "\\n")
            .replace('\r', "\\r"),
    }
}

/// `restore`: loads one verified slice into `into` (created with the source's column types when
/// missing; refused when it has rows) through the types' input functions. Returns rows loaded.
pub async fn restore(settings: &Settings, target: &str, into: &str) -> Result<u64> {
    let store = Store::open(settings)?;
    let key = resolve_key(settings, &store, target).await?;
    let db = Db::connect(settings).await?;
    refuse_superseded(&db, &key).await?;
    let m = read_manifest(&store, &key).await?;
    let slice = store.get(&key).await?;
    let rows: Vec<Row> =
        verify_slice(&slice, &m.blake3, m.rows, m.bytes).map_err(|e| Error::Verify {
            key: key.clone(),
            reason: e.to_string(),
        })?;
    let table = quote_target(into)?;
    check_names(&m.columns)?;
    let client = db.client();
    check_types(client, &m.columns).await?;
    client
        .batch_execute("BEGIN; SET LOCAL TimeZone = 'UTC'; SET LOCAL DateStyle = 'ISO, YMD'; SET LOCAL IntervalStyle = 'postgres'")
        .await?;
    let exists: Option<String> = client
        .query_one("SELECT to_regclass($1)::text", &[&table])
        .await?
        .get(0);
    if exists.is_some() {
        let n: i64 = client
            .query_one(&format!("SELECT count(*) FROM {table}"), &[])
            .await?
            .get(0);
        if n > 0 {
            client.batch_execute("ROLLBACK").await?;
            return Err(Error::Refusal(format!(
                "{into} already has {n} rows; restore only into an empty or new table"
            )));
        }
    } else {
        let cols: Vec<String> = m
            .columns
            .iter()
            .map(|c| Ok(format!("{} {}", quote_ident(&c.name), c.type_name)))
            .collect::<Result<_>>()?;
        client
            .batch_execute(&format!("CREATE TABLE {table} ({})", cols.join(", ")))
            .await?;
    }
    let cols: Vec<String> = m.columns.iter().map(|c| quote_ident(&c.name)).collect();
    let sink = client
        .copy_in(&format!("COPY {table} ({}) FROM STDIN", cols.join(", ")))
        .await?;
    futures::pin_mut!(sink);
    let progress = Progress::new(rows.len());
    for (i, row) in rows.iter().enumerate() {
        let line = row
            .columns
            .iter()
            .map(copy_value)
            .collect::<Vec<_>>()
            .join("\t")
            + "\n";
        sink.send(bytes::Bytes::from(line)).await?;
        if (i + 1) % 1000 == 0 || i + 1 == rows.len() {
            progress.show(i + 1, "restored");
        }
    }
    let loaded = sink.finish().await?;
    client.batch_execute("COMMIT").await?;
    Ok(loaded)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_values_are_escaped() {
        assert_eq!(copy_value(&None), "\\N");
        assert_eq!(copy_value(&Some("a\tb\\c\nd".into())), "a\\tb\\\\c\\nd");
    }

    #[test]
    fn hostile_column_names_are_refused() {
        let col = |name: &str| ColumnSpec {
            name: name.into(),
            type_name: "int".into(),
        };
        assert!(check_names(&[col("id"), col("a \"b\"")]).is_ok());
        assert!(check_names(&[col("")]).is_err());
        assert!(check_names(&[col("a\0b")]).is_err());
        assert!(check_names(&[col(&"x".repeat(64))]).is_err());
        assert!(check_names(&[col("id"), col("id")]).is_err());
        assert!(check_names(&[]).is_err());
    }
}
