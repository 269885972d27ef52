//! `restore`'s statements (`crate::restore` decides what is loaded): manifest type names
//! resolved through the catalog, then one transaction that creates the table (or checks it is
//! empty) and copies the rows in. Identifiers go into the text quoted by PostgreSQL's rules
//! ([`quote_ident`]); every value goes as a parameter.

use super::Db;
use crate::error::{Error, Result};
use bytes::Bytes;
use pg_retention_format::quote_ident;
use tokio_postgres::CopyInSink;

/// Resolves a manifest type name, passed as a parameter (never spliced): its oid and
/// `format_type` spelling. Before PostgreSQL 17 there is no `to_regtypemod`: the type without
/// its modifier.
const RESOLVE_TYPE: &str = "SELECT t.oid, pg_catalog.format_type(t.oid, -1), PLAIN
      FROM (SELECT pg_catalog.to_regtype($1)::oid AS oid) t TYPES";
/// As [`RESOLVE_TYPE`], keeping the type modifier (PostgreSQL 17 and later).
const RESOLVE_TYPE_WITH_MODIFIER: &str =
    "SELECT t.oid, pg_catalog.format_type(t.oid, coalesce(t.typmod, -1)), PLAIN
       FROM (SELECT pg_catalog.to_regtype($1)::oid AS oid, pg_catalog.to_regtypemod($1) AS typmod) t TYPES";

/// Whether a resolved type is [`ResolvedType::plain`], and the joins it reads (spliced into
/// the two statements above: fixed text, no input).
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

/// A manifest type name the catalog resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedType {
    /// `to_regtype`'s oid.
    pub oid: u32,
    /// `format_type` of it (with the name's type modifier on PostgreSQL 17 and later).
    pub formatted: String,
    /// A base type or an enum, or an array of those.
    pub plain: bool,
}

/// The catalog, read with the search path the extension rendered type names under
/// (`pg_catalog, pg_temp`).
pub struct TypeCatalog<'a> {
    db: &'a Db,
    resolve: String,
}

impl TypeCatalog<'_> {
    /// `name` resolved; None when `to_regtype` refuses it, or errs.
    pub async fn resolve(&self, name: &str) -> Option<ResolvedType> {
        let row = self
            .db
            .client
            .query_one(self.resolve.as_str(), &[&name])
            .await
            .ok()?;
        Some(ResolvedType {
            oid: row.try_get::<_, Option<u32>>(0).ok()??,
            formatted: row.try_get::<_, Option<String>>(1).ok()??,
            plain: row.try_get::<_, bool>(2).ok()?,
        })
    }

    /// The type the database records for `column` of the table the archive at `key` was taken
    /// from; None when there is no record (another database, a dropped table, a role that may
    /// not read the archive index).
    pub async fn recorded(&self, key: &str, column: &str) -> Option<u32> {
        self.db
            .client
            .query_opt(RECORDED_TYPE, &[&key, &column])
            .await
            .ok()
            .flatten()
            .and_then(|row| row.try_get(0).ok())
    }
}

/// A table name of `schema.table`, quoted: the only form the restore statements take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Table(String);

impl Table {
    /// `schema.table` → `"schema"."table"`.
    pub fn parse(target: &str) -> Result<Table> {
        let (schema, table) = target
            .split_once('.')
            .ok_or_else(|| Error::Config(format!("--into {target:?}: use schema.table")))?;
        Ok(Table(format!(
            "{}.{}",
            quote_ident(schema),
            quote_ident(table)
        )))
    }
}

/// The `CREATE TABLE` of a restore: each column name quoted, with the type decided for it
/// (never a manifest's type text).
fn create_table_sql(table: &Table, columns: &[(&str, &str)]) -> String {
    let cols: Vec<String> = columns
        .iter()
        .map(|(name, sql_type)| format!("{} {sql_type}", quote_ident(name)))
        .collect();
    format!("CREATE TABLE {} ({})", table.0, cols.join(", "))
}

/// A restore's transaction, open until [`Restoring::commit`] or [`Restoring::rollback`].
pub struct Restoring<'a> {
    db: &'a Db,
}

impl Db {
    /// The catalog with the extension's search path set on this connection.
    pub async fn type_catalog(&self) -> Result<TypeCatalog<'_>> {
        self.client
            .batch_execute("SET search_path = pg_catalog, pg_temp")
            .await?;
        let version: i32 = self
            .client
            .query_one(
                "SELECT pg_catalog.current_setting('server_version_num')::int",
                &[],
            )
            .await?
            .try_get(0)?;
        let resolve = if version >= 170_000 {
            RESOLVE_TYPE_WITH_MODIFIER
        } else {
            RESOLVE_TYPE
        }
        .replace("PLAIN", PLAIN)
        .replace("TYPES", TYPES);
        Ok(TypeCatalog { db: self, resolve })
    }

    /// Begins a restore's transaction, with the date and interval styles slices are rendered
    /// in.
    pub async fn begin_restore(&self) -> Result<Restoring<'_>> {
        self.client
            .batch_execute("BEGIN; SET LOCAL TimeZone = 'UTC'; SET LOCAL DateStyle = 'ISO, YMD'; SET LOCAL IntervalStyle = 'postgres'")
            .await?;
        Ok(Restoring { db: self })
    }
}

impl Restoring<'_> {
    /// The rows in `table`; None when there is no such table.
    pub async fn rows_in(&self, table: &Table) -> Result<Option<i64>> {
        let client = &self.db.client;
        let exists: Option<String> = client
            .query_one("SELECT to_regclass($1)::text", &[&table.0])
            .await?
            .get(0);
        if exists.is_none() {
            return Ok(None);
        }
        let n: i64 = client
            .query_one(&format!("SELECT count(*) FROM {}", table.0), &[])
            .await?
            .get(0);
        Ok(Some(n))
    }

    /// Creates `table` with `columns` (name, type as DDL spells it).
    pub async fn create_table(&self, table: &Table, columns: &[(&str, &str)]) -> Result<()> {
        self.db
            .client
            .batch_execute(&create_table_sql(table, columns))
            .await?;
        Ok(())
    }

    /// A `COPY … FROM STDIN` (text format) into `columns` of `table`.
    pub async fn copy_in(&self, table: &Table, columns: &[&str]) -> Result<CopyInSink<Bytes>> {
        let cols: Vec<String> = columns.iter().map(|c| quote_ident(c)).collect();
        Ok(self
            .db
            .client
            .copy_in(&format!(
                "COPY {} ({}) FROM STDIN",
                table.0,
                cols.join(", ")
            ))
            .await?)
    }

    /// Commits the restore.
    pub async fn commit(self) -> Result<()> {
        self.db.client.batch_execute("COMMIT").await?;
        Ok(())
    }

    /// Rolls the restore back.
    pub async fn rollback(self) -> Result<()> {
        self.db.client.batch_execute("ROLLBACK").await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ddl_quotes_every_name_and_takes_the_types_given() {
        let table = Table::parse("public.restored").unwrap();
        assert_eq!(table, Table("\"public\".\"restored\"".into()));
        assert_eq!(
            create_table_sql(
                &table,
                &[
                    ("id", "bigint"),
                    ("we\"ird", "text"),
                    ("at", "timestamp with time zone")
                ]
            ),
            "CREATE TABLE \"public\".\"restored\" (\"id\" bigint, \"we\"\"ird\" text, \"at\" timestamp with time zone)"
        );
        assert!(matches!(Table::parse("restored"), Err(Error::Config(_))));
    }
}
