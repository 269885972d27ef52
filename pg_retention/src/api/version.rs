//! `retention.version()`.

use pgrx::prelude::*;

/// The extension's version, as built.
#[pg_extern(immutable, parallel_safe)]
fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

#[cfg(any(test, feature = "pg_test"))]
#[pg_schema]
// A panic is how a #[pg_test] fails (allow-unwrap-in-tests sees only #[test] functions).
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use pgrx::prelude::*;

    #[pg_test]
    fn version_is_the_crate_version() {
        let v = Spi::get_one::<String>("SELECT retention.version()").unwrap();
        assert_eq!(v.as_deref(), Some(env!("CARGO_PKG_VERSION")));
    }

    #[pg_test]
    fn settings_are_registered_under_the_prefix() {
        let n = Spi::get_one::<i64>(
            "SELECT count(*) FROM pg_settings WHERE name LIKE 'pg_retention.%'",
        )
        .unwrap()
        .unwrap_or(0);
        assert!(n >= 6, "expected the pg_retention.* settings, found {n}");
    }
}
