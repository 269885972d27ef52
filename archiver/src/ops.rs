//! Operator commands: ls, inspect, restore (verify: `verify.rs`).

use crate::config::Settings;
use crate::db::Db;
use crate::error::{Error, Result};
use crate::keys::{display, manifest_for, parse_display, slice_for};
use crate::store::Store;
use futures::SinkExt;
use pg_retention_format::{quote_ident, verify_slice, ColumnSpec, Manifest, Row};
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

/// A column name from a manifest, checked before it is quoted into DDL: not empty, no NUL, no
/// longer than PostgreSQL keeps (a longer one would be cut and could collide), not repeated.
fn check_names(columns: &[ColumnSpec]) -> Result<()> {
    let mut seen = std::collections::HashSet::new();
    for c in columns {
        if c.name.is_empty() || c.name.contains('\0') || c.name.len() > 63 {
            return Err(Error::Manifest(format!(
                "manifest column name {:?} is not a usable column name",
                c.name
            )));
        }
        if !seen.insert(c.name.as_str()) {
            return Err(Error::Manifest(format!(
                "manifest names column {:?} twice",
                c.name
            )));
        }
    }
    if columns.is_empty() {
        return Err(Error::Manifest("manifest has no columns".into()));
    }
    Ok(())
}

/// PostgreSQL's `FirstNormalObjectId`: every object with a lower oid was made by `initdb`.
const FIRST_NORMAL_OBJECT_ID: u32 = 16_384;

/// A manifest type name resolved by the database: `to_regtype`'s oid and `format_type` of it
/// (with the name's type modifier on PostgreSQL 17 and later, `to_regtypemod`).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Resolved {
    oid: u32,
    formatted: String,
    /// A base type or an enum (or an array of those): its input runs no SQL-level code. Base
    /// types outside `initdb`'s need C functions, which only a superuser installs (an
    /// extension's `citext`, `hstore`); enums read through the built-in `enum_in`. Domains
    /// (a CHECK), composites and ranges (which may carry a domain) are not.
    plain: bool,
    /// The database records this type for this column of the archive's table (the table the
    /// archive index names, as it is now): the table's owner chose it, not the manifest.
    recorded: bool,
}

/// How `restore` creates a manifest column.
#[derive(Debug, Clone, PartialEq, Eq)]
enum ColumnType {
    /// A type built into PostgreSQL, spelled as `format_type` spells its oid.
    Builtin(String),
    /// `text`, holding the archived text form (`--untyped-as-text`).
    Text,
}

impl ColumnType {
    /// The column type as it goes into DDL: never the manifest's text.
    fn sql(&self) -> &str {
        match self {
            ColumnType::Builtin(formatted) => formatted,
            ColumnType::Text => "text",
        }
    }
}

/// The type a manifest column is restored with. The manifest is untrusted: rows load through
/// their column types' input functions (and a domain's CHECK), so only a type built into
/// PostgreSQL (oid below [`FIRST_NORMAL_OBJECT_ID`]) is used. Any other (a domain, a type of an
/// extension or a user, one this database does not know) is refused, or with
/// `untyped_as_text` restored as `text`.
fn decide_type(
    column: &ColumnSpec,
    resolved: Option<Resolved>,
    untyped_as_text: bool,
) -> Result<ColumnType> {
    match resolved {
        Some(r) if r.oid < FIRST_NORMAL_OBJECT_ID || r.plain || r.recorded => {
            Ok(ColumnType::Builtin(r.formatted))
        }
        _ if untyped_as_text => Ok(ColumnType::Text),
        Some(_) => Err(Error::UntrustedType {
            column: column.name.clone(),
            type_name: column.type_name.clone(),
        }),
        None => Err(Error::Manifest(format!(
            "manifest column {:?} has type {:?}, which is not a type this database knows \
             (--untyped-as-text restores such columns as text)",
            column.name, column.type_name
        ))),
    }
}

/// Resolves a manifest type name, passed as a parameter (never spliced): its oid and
/// `format_type` spelling. Before PostgreSQL 17 there is no `to_regtypemod`: the type without
/// its modifier.
const RESOLVE_TYPE: &str = "SELECT t.oid, pg_catalog.format_type(t.oid, -1), PLAIN
      FROM (SELECT pg_catalog.to_regtype($1)::oid AS oid) t TYPES";
/// As [`RESOLVE_TYPE`], keeping the type modifier (PostgreSQL 17 and later).
const RESOLVE_TYPE_WITH_MODIFIER: &str =
    "SELECT t.oid, pg_catalog.format_type(t.oid, coalesce(t.typmod, -1)), PLAIN
       FROM (SELECT pg_catalog.to_regtype($1)::oid AS oid, pg_catalog.to_regtypemod($1) AS typmod) t TYPES";

/// Whether a resolved type is [`Resolved::plain`], and the joins it reads (spliced into the two
/// statements above: fixed text, no input).
const PLAIN: &str =
    "coalesce(ty.typtype IN ('b', 'e') AND (ty.typelem = 0 OR el.typtype IN ('b', 'e')), false)";
const TYPES: &str = "LEFT JOIN pg_catalog.pg_type ty ON ty.oid = t.oid
       LEFT JOIN pg_catalog.pg_type el ON el.oid = ty.typelem";

/// The type the database records for column `$2` of the table archive `$1` (its slice's key)
/// was taken from.
const RECORDED_TYPE: &str = "SELECT at.atttypid
      FROM retention.archives a
      JOIN pg_catalog.pg_attribute at ON at.attrelid = pg_catalog.to_regclass(a.relation)::oid
     WHERE (a.object_key = $1 OR a.original_key = $1) AND at.attname = $2
       AND at.attnum > 0 AND NOT at.attisdropped
     LIMIT 1";

/// Resolves every column type of a manifest through the database's catalog, with the search
/// path the extension rendered the names under (`pg_catalog, pg_temp`), and decides each
/// ([`decide_type`]) before any DDL runs. A name `to_regtype` refuses, or that errs, is not
/// a type.
async fn column_types(
    client: &tokio_postgres::Client,
    key: &str,
    columns: &[ColumnSpec],
    untyped_as_text: bool,
) -> Result<Vec<ColumnType>> {
    client
        .batch_execute("SET search_path = pg_catalog, pg_temp")
        .await?;
    let version: i32 = client
        .query_one(
            "SELECT pg_catalog.current_setting('server_version_num')::int",
            &[],
        )
        .await?
        .try_get(0)?;
    let sql = if version >= 170_000 {
        RESOLVE_TYPE_WITH_MODIFIER
    } else {
        RESOLVE_TYPE
    }
    .replace("PLAIN", PLAIN)
    .replace("TYPES", TYPES);
    let mut types = Vec::with_capacity(columns.len());
    for c in columns {
        // Not a type name whatever it resolves to: a comment or a second statement in it.
        let plain = !c.type_name.is_empty()
            && !c.type_name.contains("--")
            && !c.type_name.contains("/*")
            && !c.type_name.contains(';');
        let resolved = match plain {
            false => None,
            true => client
                .query_one(sql.as_str(), &[&c.type_name])
                .await
                .ok()
                .and_then(|row| {
                    Some(Resolved {
                        oid: row.try_get::<_, Option<u32>>(0).ok()??,
                        formatted: row.try_get::<_, Option<String>>(1).ok()??,
                        plain: row.try_get::<_, bool>(2).ok()?,
                        recorded: false,
                    })
                }),
        };
        let resolved = match resolved {
            Some(mut r) => {
                // No record (another database, a dropped table, a role that may not read the
                // archive index) trusts nothing.
                let recorded: Option<u32> = client
                    .query_opt(RECORDED_TYPE, &[&key, &c.name])
                    .await
                    .ok()
                    .flatten()
                    .and_then(|row| row.try_get(0).ok());
                r.recorded = recorded == Some(r.oid);
                Some(r)
            }
            None => None,
        };
        types.push(decide_type(c, resolved, untyped_as_text)?);
    }
    Ok(types)
}

/// The `CREATE TABLE` of a restore: the manifest's column names quoted, each with the type
/// decided for it (never the manifest's type text).
fn create_table_sql(table: &str, columns: &[ColumnSpec], types: &[ColumnType]) -> String {
    let cols: Vec<String> = columns
        .iter()
        .zip(types)
        .map(|(c, t)| format!("{} {}", quote_ident(&c.name), t.sql()))
        .collect();
    format!("CREATE TABLE {table} ({})", cols.join(", "))
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

/// `restore`: loads one verified slice into `into` (created when missing, with the source's
/// column types that are built into PostgreSQL and, with `untyped_as_text`, `text` for the
/// others; refused when it has rows) through the types' input functions. Returns rows loaded.
pub async fn restore(
    settings: &Settings,
    target: &str,
    into: &str,
    untyped_as_text: bool,
) -> Result<u64> {
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
    let types = column_types(client, &key, &m.columns, untyped_as_text).await?;
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
        client
            .batch_execute(&create_table_sql(&table, &m.columns, &types))
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

    fn spec(name: &str, type_name: &str) -> ColumnSpec {
        ColumnSpec {
            name: name.into(),
            type_name: type_name.into(),
        }
    }

    fn resolved(oid: u32, formatted: &str) -> Option<Resolved> {
        Some(Resolved {
            oid,
            formatted: formatted.into(),
            plain: false,
            recorded: false,
        })
    }

    #[test]
    fn only_types_built_into_postgres_are_restored_through() {
        let c = spec("amount", "numeric(10,2)");
        assert_eq!(
            decide_type(&c, resolved(1700, "numeric(10,2)"), false).unwrap(),
            ColumnType::Builtin("numeric(10,2)".into())
        );
        assert_eq!(
            decide_type(&c, resolved(16_383, "x"), false).unwrap(),
            ColumnType::Builtin("x".into()),
            "the last oid initdb may use"
        );
        // A domain (or any type made after initdb): its CHECK would run as the restorer.
        let evil = spec("amount", "public.positive");
        let refused = decide_type(&evil, resolved(16_384, "public.positive"), false);
        assert!(
            matches!(&refused, Err(Error::UntrustedType { column, type_name })
                if column == "amount" && type_name == "public.positive"),
            "{refused:?}"
        );
        let e = refused.unwrap_err();
        assert_eq!(e.exit_code(), 5);
        assert!(e.to_string().contains("--untyped-as-text"), "{e}");
        assert_eq!(
            decide_type(&evil, resolved(98_765, "public.positive"), true).unwrap(),
            ColumnType::Text
        );
        // An enum (or an extension's base type): no SQL-level code in its input.
        let mood = spec("mood", "public.mood");
        let enum_type = Some(Resolved {
            oid: 16_500,
            formatted: "mood".into(),
            plain: true,
            recorded: false,
        });
        assert_eq!(
            decide_type(&mood, enum_type, false).unwrap(),
            ColumnType::Builtin("mood".into())
        );
        // A domain the database records for this column of the archived table.
        let level = spec("level", "public.positive");
        let recorded = Some(Resolved {
            oid: 16_600,
            formatted: "positive".into(),
            plain: false,
            recorded: true,
        });
        assert_eq!(
            decide_type(&level, recorded, false).unwrap(),
            ColumnType::Builtin("positive".into())
        );
        // Not a type at all: refused, or text when asked.
        let unknown = spec("a", "int); DROP TABLE audit; --");
        let refused = decide_type(&unknown, None, false);
        assert!(
            matches!(&refused, Err(Error::Manifest(m)) if m.contains("not a type")),
            "{refused:?}"
        );
        assert_eq!(refused.unwrap_err().exit_code(), 5);
        assert_eq!(decide_type(&unknown, None, true).unwrap(), ColumnType::Text);
    }

    #[test]
    fn the_ddl_names_the_resolved_types_never_the_manifests_text() {
        let columns = [
            spec("id", "bigint"),
            spec("we\"ird", "public.positive CHECK (pg_sleep(5) IS NOT NULL)"),
            spec("at", "timestamp with time zone"),
        ];
        let types = [
            ColumnType::Builtin("bigint".into()),
            ColumnType::Text,
            ColumnType::Builtin("timestamp with time zone".into()),
        ];
        assert_eq!(
            create_table_sql("\"public\".\"restored\"", &columns, &types),
            "CREATE TABLE \"public\".\"restored\" (\"id\" bigint, \"we\"\"ird\" text, \"at\" timestamp with time zone)"
        );
    }
}
