//! Carrying a database over. In-place upgrade from the last release: 0.1.0 (commit 2b63bd8, built and installed beside the
//! current library by `scripts/past-release`) filled with policies, holds, sweeps, batches,
//! archives and ledger, then `ALTER EXTENSION pg_retention UPDATE`: every row is kept, every
//! function works, and the schema equals a fresh install's, compared in the catalog. Logical
//! dump and restore into a new database: policies find their tables again, holds protect,
//! ledger and archive index are intact and new ids do not collide.
//!
//! Production roles on the data path, in both releases (0.1.0 has `retention_admin` and
//! `retention_archiver` already): tables are made by the superuser in set-up, application rows
//! are written by `app` (table privileges only), policies, holds, previews, runs and the views
//! are `admin`'s (a member of `retention_admin`, not a superuser), and both archivers, the
//! past release's and this one's, run as `archiver` (only in `retention_archiver`). The
//! superuser stays where it is needed, commented: `CREATE EXTENSION`, `ALTER EXTENSION ...
//! UPDATE`, `pg_dump`/`pg_restore` and `CREATE DATABASE`, and reading the extension's catalog
//! tables (the row-by-row comparison across the upgrade, the running totals, the schema
//! compared with a fresh install's, `retention.batches`, the carried ids), which no role is
//! granted.

use pg_retention_integration::archiver::{text, Archiver};
use pg_retention_integration::cluster::SCRATCH;
use pg_retention_integration::{as_postgres, scalar, stop_server, succeed, Cluster};
use postgres::Client;
use std::path::PathBuf;

/// A database carried over: dump and restore into a new database, and pg_upgrade.
mod carrying;
/// In-place `ALTER EXTENSION pg_retention UPDATE` from the past release (0.1.0).
mod extension_update;
