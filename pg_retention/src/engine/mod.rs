//! The retention engine: which rows a policy makes eligible, how they are swept in batches,
//! what a preview reports, and how definitions are validated.

pub mod candidates;
pub mod clock;
pub mod eligible;
pub mod erase;
pub mod index_hint;
pub mod pacing;
pub mod predicate;
pub mod preview;
pub mod quota;
pub mod references;
pub mod related_rows;
pub mod retire;
pub mod run_context;
pub mod scrub;
pub mod search_path;
pub mod sweep;
pub mod validate;
