//! `restore`: one verified slice loaded into a table. The manifest is untrusted bytes: its
//! column names are checked before they are quoted, and each column's type is decided from
//! what the database's catalog says of the manifest's type name, never its text.

use crate::config::Settings;
use crate::db::{Db, Table};
use crate::error::{Error, Result};
use crate::ops::{read_manifest, refuse_superseded, resolve_key, Progress};
use crate::store::Store;
use futures::SinkExt;
use pg_retention_format::{verify_slice, ColumnSpec, Row};

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

/// Resolves every column type of a manifest through the database's catalog, with the search
/// path the extension rendered the names under (`pg_catalog, pg_temp`), and decides each
/// ([`decide_type`]) before any DDL runs. A name `to_regtype` refuses, or that errs, is not
/// a type.
async fn column_types(
    db: &Db,
    key: &str,
    columns: &[ColumnSpec],
    untyped_as_text: bool,
) -> Result<Vec<ColumnType>> {
    let catalog = db.type_catalog().await?;
    let mut types = Vec::with_capacity(columns.len());
    for c in columns {
        // Not a type name whatever it resolves to: a comment or a second statement in it.
        let plain = !c.type_name.is_empty()
            && !c.type_name.contains("--")
            && !c.type_name.contains("/*")
            && !c.type_name.contains(';');
        let resolved = match plain {
            false => None,
            true => catalog.resolve(&c.type_name).await,
        };
        let resolved = match resolved {
            Some(r) => {
                // No record (another database, a dropped table, a role that may not read the
                // archive index) trusts nothing.
                let recorded = catalog.recorded(key, &c.name).await == Some(r.oid);
                Some(Resolved {
                    oid: r.oid,
                    formatted: r.formatted,
                    plain: r.plain,
                    recorded,
                })
            }
            None => None,
        };
        types.push(decide_type(c, resolved, untyped_as_text)?);
    }
    Ok(types)
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
    let table = Table::parse(into)?;
    check_names(&m.columns)?;
    let types = column_types(&db, &key, &m.columns, untyped_as_text).await?;
    let tx = db.begin_restore().await?;
    match tx.rows_in(&table).await? {
        Some(n) if n > 0 => {
            tx.rollback().await?;
            return Err(Error::Refusal(format!(
                "{into} already has {n} rows; restore only into an empty or new table"
            )));
        }
        Some(_) => {}
        None => {
            let columns: Vec<(&str, &str)> = m
                .columns
                .iter()
                .zip(&types)
                .map(|(c, t)| (c.name.as_str(), t.sql()))
                .collect();
            tx.create_table(&table, &columns).await?;
        }
    }
    let names: Vec<&str> = m.columns.iter().map(|c| c.name.as_str()).collect();
    let sink = tx.copy_in(&table, &names).await?;
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
    tx.commit().await?;
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
        assert_eq!(crate::exit::Exit::of(&e).code(), 5);
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
        assert_eq!(crate::exit::Exit::of(&refused.unwrap_err()).code(), 5);
        assert_eq!(decide_type(&unknown, None, true).unwrap(), ColumnType::Text);
    }
}
