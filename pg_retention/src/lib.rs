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
mod error_watch;
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
// The SQL surface, one file per concern in sql/api/. pgrx orders a file only after what it
// `requires`: each requires ledger.sql (the last of the catalog DDL), the `api_*` files it calls
// and every Rust internal its functions call (an SQL function's body is checked when it is
// created). The grants run last (finalize), once everything they name exists.
extension_sql_file!(
    "../../sql/api/policies.sql",
    name = "api_policies",
    requires = [
        "ledger",
        api::hold::_predicate_problem,
        api::policy::_define_policy,
        api::policy::_lower_floor,
        api::policy::_set_policy_state,
        api::policy::_link_windows,
        api::candidates::_prune,
        api::class::_classify
    ]
);
extension_sql_file!(
    "../../sql/api/holds.sql",
    name = "api_holds",
    requires = [
        "ledger",
        api::hold::_place_hold,
        api::hold::_lift_hold,
        catalog::tree::_tree_of
    ]
);
extension_sql_file!(
    "../../sql/api/guards.sql",
    name = "api_guards",
    requires = ["ledger"]
);
extension_sql_file!(
    "../../sql/api/consumers.sql",
    name = "api_consumers",
    requires = [
        "ledger",
        api::consumer::_register_consumer,
        api::consumer::_report_position,
        api::consumer::_unregister_consumer,
        api::consumer::_consumer_status
    ]
);
extension_sql_file!(
    "../../sql/api/runs.sql",
    name = "api_runs",
    requires = [
        "ledger",
        api::sweep::_run_begin,
        api::sweep::_run_advance,
        api::sweep::_run_end,
        api::worker::_wake_launcher
    ]
);
extension_sql_file!(
    "../../sql/api/observability.sql",
    name = "api_observability",
    requires = [
        "ledger",
        "api_runs",
        api::worker::_preloaded,
        api::worker::_served,
        api::worker::_overdue,
        api::preview::_doctor,
        api::checks::_require_positive
    ]
);
extension_sql_file!(
    "../../sql/api/archive.sql",
    name = "api_archive",
    requires = [
        "ledger",
        api::archive::_claim_batch,
        api::archive::_claim_slice,
        api::archive::_claim_next,
        api::archive::_prune_archived,
        api::archive::_batch_manifest,
        api::archive::_batch_frames,
        api::archive::_batch_slice,
        api::archive::_extend_lease,
        api::archive::_release_batch,
        api::archive::_complete_batch
    ]
);
extension_sql_file!(
    "../../sql/api/erasure.sql",
    name = "api_erasure",
    requires = [
        "ledger",
        api::erasure::_erase,
        api::erasure::_supersession_matches,
        api::erasure::_supersession_unaffected,
        api::erasure::_supersession_rewritten,
        api::erasure::_supersession_done
    ]
);
extension_sql_file!(
    "../../sql/api/lifecycle.sql",
    name = "api_lifecycle",
    requires = ["ledger", "api_erasure", archive::expiry::_archive_holds]
);
extension_sql_file!("../../sql/api/grants.sql", name = "api_grants", finalize);

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
