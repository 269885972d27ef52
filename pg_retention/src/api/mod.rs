//! The SQL surface of the extension implemented in Rust. The public names (`add_policy`,
//! `run`, ...) are thin SQL wrappers in `sql/api/`; the `_`-prefixed functions here do the
//! work, run as the extension owner (SECURITY DEFINER, pinned search_path) and are executable
//! only by the roles that need them.

pub mod archive;
pub mod candidates;
pub mod checks;
pub mod class;
pub mod consumer;
pub mod erasure;
pub mod hold;
pub mod metric_labels;
pub mod metrics;
pub mod policy;
pub mod preview;
pub mod replay;
pub mod sweep;
pub mod table_gauges;
pub mod version;
pub mod worker;
