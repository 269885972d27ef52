//! Fault-injection points for the fault suite. Setting `PG_RETENTION_ARCHIVER_FAULT` to a point's
//! name makes the process abort there, as abruptly as `kill -9`. Unset in production.

/// The variable that arms a fault point.
pub const VAR: &str = "PG_RETENTION_ARCHIVER_FAULT";

/// Whether `name` is armed.
pub fn armed(name: &str) -> bool {
    std::env::var(VAR).is_ok_and(|v| v == name)
}

/// Aborts the process if `name` is armed.
pub fn point(name: &str) {
    if armed(name) {
        eprintln!("fault injected at {name}: aborting");
        std::process::abort();
    }
}
