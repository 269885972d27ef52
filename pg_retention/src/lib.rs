//! pg_retention: governed, provable data retention for PostgreSQL.
//!
//! The tree is the architecture: `api/` is the SQL surface, `catalog/` reads and appends the
//! catalog, `engine/` decides eligibility, sweeps and previews, `archive/` claims, verifies and
//! prunes archive batches, `render/` turns rows into slice frames, `gucs.rs` holds the settings.
//! See docs/architecture.md for the paths a row takes through them.
//! The catalog DDL and the plain-SQL parts of the surface live in `sql/`.
use pgrx::prelude::*;

mod api;
mod archive;
mod arrays;
mod author;
mod catalog;
mod engine;
mod error;
mod guard;
mod gucs;
mod hold_guard;
mod identity;
mod legacy;
mod limits;
mod render;
mod sql_text;
mod subxact;
mod tid;
mod timeout;
mod trigger_call;
mod worker;

::pgrx::pg_module_magic!(name, version);

// The catalog DDL lives in sql/ so a reader sees the schema in plain SQL.
extension_sql_file!("../../sql/bootstrap.sql", name = "bootstrap", bootstrap);
extension_sql_file!(
    "../../sql/catalog.sql",
    name = "catalog",
    requires = ["bootstrap"]
);
extension_sql_file!(
    "../../sql/views.sql",
    name = "views",
    requires = ["catalog", "archive"]
);
extension_sql_file!(
    "../../sql/archive.sql",
    name = "archive",
    requires = ["catalog"]
);
extension_sql_file!(
    "../../sql/ledger.sql",
    name = "ledger",
    requires = ["views"]
);
extension_sql_file!("../../sql/api.sql", name = "api", finalize);

/// Called when the library is loaded (at postmaster start when preloaded).
#[pg_guard]
pub extern "C-unwind" fn _PG_init() {
    gucs::init();
    worker::init();
}

/// Test-framework hooks: `cargo pgrx test` starts its cluster with these settings.
#[cfg(test)]
pub mod pg_test {
    /// Per-test setup; nothing yet.
    pub fn setup(_options: Vec<&str>) {}

    /// The extension is always tested preloaded, as in production.
    #[must_use]
    pub fn postgresql_conf_options() -> Vec<&'static str> {
        vec!["shared_preload_libraries = 'pg_retention'"]
    }
}
