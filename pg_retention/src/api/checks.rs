//! Argument checks for the functions written in SQL, raised from here so that they carry
//! their SQLSTATE, detail and hint and no procedural frame.

use crate::engine::validate::interval_sign;
use crate::error::{OrReport, Result, RetentionError};
use pgrx::prelude::*;
use std::cmp::Ordering;

fn positive(name: &str, value: Option<&str>, detail: &str, hint: &str) -> Result<()> {
    let positive = match value {
        Some(v) => interval_sign(v)? == Ordering::Greater,
        None => false,
    };
    if positive {
        return Ok(());
    }
    Err(RetentionError::invalid(
        format!(
            "{name} must be a positive interval, got {}",
            value.unwrap_or("NULL")
        ),
        detail,
        hint,
    ))
}

/// Refuses (22023) an interval argument `name` that is NULL or not positive; `detail` and
/// `hint` say what it is for.
#[pg_extern(immutable)]
#[search_path(pg_catalog, pg_temp)]
fn _require_positive(
    name: Option<&str>,
    value: Option<&str>,
    detail: Option<&str>,
    hint: Option<&str>,
) {
    let name = name.unwrap_or("the interval");
    positive(name, value, detail.unwrap_or(""), hint.unwrap_or("")).or_report();
}
