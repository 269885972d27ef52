//! When the next cycle starts: naptime plus a per-database jitter that is derived from the
//! database name, so every worker of a fleet keeps the same offset and they do not stampede.

use std::time::Duration;

/// FNV-1a: small, stable across builds and platforms.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The jitter offset of `database`: a fixed fraction in [0, 1) of `jitter * naptime`.
pub fn jitter_offset(database: &str, naptime: Duration, jitter: f64) -> Duration {
    let unit = (fnv1a(database.as_bytes()) % 10_000) as f64 / 10_000.0;
    naptime.mul_f64(jitter.clamp(0.0, 1.0) * unit)
}

/// Delay from the end of a cycle to the start of the next one.
pub fn next_delay(database: &str, naptime: Duration, jitter: f64) -> Duration {
    naptime + jitter_offset(database, naptime, jitter)
}

#[cfg(any(test, feature = "pg_test"))]
#[pgrx::pg_schema]
mod tests {
    use super::*;
    use pgrx::prelude::*;

    #[pg_test]
    fn jitter_is_deterministic_bounded_and_differs_between_databases() {
        let nap = Duration::from_secs(3600);
        let a = jitter_offset("orders", nap, 0.1);
        assert_eq!(a, jitter_offset("orders", nap, 0.1));
        assert!(a < Duration::from_secs(360));
        assert_ne!(a, jitter_offset("billing", nap, 0.1));
        assert_eq!(jitter_offset("orders", nap, 0.0), Duration::ZERO);
        assert_eq!(next_delay("orders", nap, 0.0), nap);
    }
}
