//! The archive namespace of this database: the first segment of every object key it writes,
//! so that databases sharing an object store never read, sweep or expire each other's objects
//! (docs/archiver.md). One row in `retention.archive_namespace`, written on first use (derived:
//! `<system identifier>.<database>`) or by the operator (`set_archive_namespace`); the archiver
//! claims it in the store (`_retention/namespaces/<namespace>.json`). The row also keeps the
//! result of the archiver's last `verify --all`, which `_missing_archives` reads for metrics.

use crate::error::{present, OrReport, Result, RetentionError};
use pgrx::prelude::*;

/// A namespace is one readable key segment: letters, digits, `_`, `.`, `-`, starting with a
/// letter or digit (so never `_retention`, where control objects live), at most 200 bytes.
fn check_namespace(ns: &str) -> Result<()> {
    let first_ok = ns.chars().next().is_some_and(|c| c.is_ascii_alphanumeric());
    let rest_ok = ns
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
    if first_ok && rest_ok && ns.len() <= 200 {
        return Ok(());
    }
    Err(RetentionError::invalid(
        format!("archive namespace {ns:?} is not usable"),
        "A namespace is the first segment of every object key this database writes.",
        "Use letters, digits, '_', '.' and '-', starting with a letter or digit, at most 200 bytes.",
    ))
}

/// The namespace derived from the cluster and the database: `<system identifier>.<database>`,
/// the database name with characters outside `[A-Za-z0-9_.-]` as `_`.
const DERIVED: &str =
    "(SELECT c.system_identifier FROM pg_catalog.pg_control_system() c)::text || '.'
     || pg_catalog.regexp_replace(pg_catalog.current_database(), '[^A-Za-z0-9_.-]', '_', 'g')";

/// Records the derived namespace unless one is recorded.
fn ensure_recorded() -> Result<()> {
    Spi::run(&format!(
        "INSERT INTO retention.archive_namespace (namespace, source)
         SELECT left({DERIVED}, 200), 'derived'
         ON CONFLICT DO NOTHING"
    ))?;
    Ok(())
}

type Identity = (String, String, i64, String);

fn namespace_identity() -> Result<Identity> {
    ensure_recorded()?;
    Spi::connect(|client| {
        let row = client
            .select(
                "SELECT n.namespace,
                        (SELECT c.system_identifier FROM pg_catalog.pg_control_system() c)::text,
                        d.oid::bigint, d.datname::text
                   FROM retention.archive_namespace n, pg_catalog.pg_database d
                  WHERE d.datname = pg_catalog.current_database()",
                Some(1),
                &[],
            )?
            .first();
        Ok((
            present(row.get::<String>(1)?, "archive namespace")?,
            present(row.get::<String>(2)?, "system identifier")?,
            present(row.get::<i64>(3)?, "database oid")?,
            present(row.get::<String>(4)?, "database name")?,
        ))
    })
}

/// This database's archive namespace (recorded on first use), with what the archiver writes
/// into its claim object: this cluster's system identifier and this database's oid and name.
#[pg_extern(security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn archive_namespace() -> TableIterator<
    'static,
    (
        name!(namespace, String),
        name!(system_identifier, String),
        name!(database_oid, i64),
        name!(database_name, String),
    ),
> {
    crate::identity::refuse_restricted().or_report();
    TableIterator::once(namespace_identity().or_report())
}

/// Sets this database's archive namespace (the operator's override of the derived one); new
/// keys go under it. Archives written before keep their recorded keys.
#[pg_extern(security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn set_archive_namespace(namespace: &str) -> String {
    crate::identity::refuse_restricted().or_report();
    check_namespace(namespace).or_report();
    Spi::run_with_args(
        "INSERT INTO retention.archive_namespace (namespace, source) VALUES ($1, 'operator')
         ON CONFLICT (singleton) DO UPDATE
            SET namespace = EXCLUDED.namespace, source = 'operator', recorded_at = now(),
                verified_at = NULL, verified_checked = NULL, verified_missing = NULL,
                verified_failed = NULL, verified_unreferenced = NULL",
        &[namespace.into()],
    )
    .map_err(RetentionError::from)
    .or_report();
    namespace.to_owned()
}

/// Records the result of the archiver's `verify --all` with a database: recorded archives
/// checked, missing (slice or manifest absent), failed (present but not verifying), and
/// objects of the namespace nothing references.
#[pg_extern(security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn record_archive_verification(checked: i64, missing: i64, failed: i64, unreferenced: i64) {
    crate::identity::refuse_restricted().or_report();
    if [checked, missing, failed, unreferenced]
        .iter()
        .any(|n| *n < 0)
        || missing.checked_add(failed).is_none_or(|sum| sum > checked)
    {
        crate::error::raise(RetentionError::invalid(
            "a verification result must count archives: none negative, missing + failed <= checked",
            format!("checked {checked}, missing {missing}, failed {failed}, unreferenced {unreferenced}"),
            "Pass the counts of one verify --all.",
        ))
    }
    let recorded = ensure_recorded().and_then(|()| {
        Spi::run_with_args(
            "UPDATE retention.archive_namespace
                SET verified_at = now(), verified_checked = $1, verified_missing = $2,
                    verified_failed = $3, verified_unreferenced = $4",
            &[
                checked.into(),
                missing.into(),
                failed.into(),
                unreferenced.into(),
            ],
        )
        .map_err(RetentionError::from)
    });
    recorded.or_report();
}

/// Recorded archives the archiver's last `verify --all` found missing from the store; NULL
/// when it never ran with this database (the gauge `pg_retention_archives_missing`).
#[pg_extern(security_definer, stable)]
#[search_path(pg_catalog, pg_temp)]
fn _missing_archives() -> Option<i64> {
    // A scalar subquery: one row (NULL) before the namespace row exists.
    Spi::get_one::<i64>("SELECT (SELECT verified_missing FROM retention.archive_namespace)")
        .map_err(RetentionError::from)
        .or_report()
}
