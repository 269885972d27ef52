//! The tables real libraries create, governed as their users would: row-level security refused
//! rather than silently narrowing a policy, tables without a primary key, options without
//! effect refused, a library's own DELETE trigger and the search_path its policy names, several
//! policies on one table, clocks from an expression or a related table. Foreign keys:
//! tests/tests/foreign_keys.rs; the libraries themselves: scripts/libraries.
//!
//! Production roles: tables by the superuser, rows by `app`, every `retention.*` call by
//! `admin` (a member of `retention_admin` with SELECT and DELETE on the tables).

use pg_retention_integration::jobs::{fill_jobs, JOBS};
use pg_retention_integration::{expect_error, scalar, text, Cluster};
use postgres::Client;

/// Clocks and terminal tests read from an expression or from a related table.
mod clocks;
/// Several policies on one table: how they compose and what preview totals.
mod composition;
/// Tables without a primary key (pgbench's history), swept exactly.
mod keyless_tables;
/// Policies refused rather than narrowed or ignored: row-level security, options without effect.
mod refusals;
/// A library's own DELETE trigger, run under the search_path its policy names.
mod search_path;

fn set_up(c: &Cluster, ddl: &str) -> (Client, Client) {
    c.execute("postgres", ddl);
    c.grant_app_and_admin("postgres");
    c.app_and_admin("postgres")
}
