//! The label sets of `retention.metrics()`'s samples (api/metrics.rs) as jsonb, built directly
//! as PostgreSQL lays jsonb out: a scrape builds one per policy and failure reason, and parsing
//! JSON text for each cost more than the rest of the scrape.

use crate::error::{Result, RetentionError};
use pgrx::prelude::*;

/// A jsonb value, built once per label set and written into as many rows as carry it.
#[derive(Clone, Copy)]
pub struct Labels(pub pg_sys::Datum);

impl Labels {
    /// `object` as jsonb, its keys and values strings: the bytes `jsonb_build_object` would
    /// build (a test compares them), written directly, since a scrape builds one label set per
    /// policy and failure reason.
    pub fn of(object: &[(&str, &str)]) -> Result<Labels> {
        let bytes = jsonb_object(object)
            .ok_or_else(|| RetentionError::Internal("metrics labels too long".into()))?;
        // Safety: a palloc'd copy of a complete varlena (its header written by jsonb_object).
        unsafe {
            let datum = pg_sys::palloc(bytes.len()).cast::<u8>();
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), datum, bytes.len());
            Ok(Labels(pg_sys::Datum::from(datum)))
        }
    }
}

/// The on-disk jsonb of an object whose keys and values are strings (PostgreSQL's
/// jsonb_util.c, convertToJsonb): a 4-byte varlena header, the container header (the pair
/// count and the object flag), one entry per key then per value (its length; every 32nd its end
/// offset instead, flagged), then the keys' and the values' bytes. Keys sorted by length, then
/// bytes, as jsonb orders them; None past jsonb's size limits.
fn jsonb_object(object: &[(&str, &str)]) -> Option<Vec<u8>> {
    const OBJECT: u32 = 0x2000_0000;
    const HAS_OFFSET: u32 = 0x8000_0000;
    const OFFSET_STRIDE: usize = 32;
    const MAX_LENGTH: usize = 0x0FFF_FFFF;
    // A key given twice keeps its last value, as in jsonb_build_object.
    let mut pairs: Vec<_> = object.iter().rev().copied().collect();
    pairs.sort_by(|a, b| (a.0.len(), a.0.as_bytes()).cmp(&(b.0.len(), b.0.as_bytes())));
    pairs.dedup_by(|a, b| a.0 == b.0);
    let strings: Vec<&str> = pairs
        .iter()
        .map(|p| p.0)
        .chain(pairs.iter().map(|p| p.1))
        .collect();
    let data: usize = strings.iter().map(|s| s.len()).sum();
    let size = 4 + 4 + 4 * strings.len() + data;
    if data > MAX_LENGTH || size > 0x3FFF_FFFF {
        return None;
    }
    let mut out = Vec::with_capacity(size);
    // A 4-byte varlena header on a little- or big-endian machine (SET_VARSIZE).
    let header = if cfg!(target_endian = "little") {
        (size as u32) << 2
    } else {
        size as u32 & 0x3FFF_FFFF
    };
    out.extend_from_slice(&header.to_ne_bytes());
    out.extend_from_slice(&(pairs.len() as u32 | OBJECT).to_ne_bytes());
    let mut end = 0;
    for (i, s) in strings.iter().enumerate() {
        end += s.len();
        let entry = if i % OFFSET_STRIDE == 0 {
            end as u32 | HAS_OFFSET
        } else {
            s.len() as u32
        };
        out.extend_from_slice(&entry.to_ne_bytes());
    }
    for s in &strings {
        out.extend_from_slice(s.as_bytes());
    }
    Some(out)
}

#[cfg(any(test, feature = "pg_test"))]
#[pg_schema]
// A panic is how a #[pg_test] fails (allow-unwrap-in-tests sees only #[test] functions).
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::Labels;
    use pgrx::prelude::*;
    use pgrx::FromDatum;

    #[pg_test]
    fn labels_are_the_jsonb_postgres_builds() {
        let cases: &[&[(&str, &str)]] = &[
            &[],
            &[("policy", "p0")],
            &[("reason", "other"), ("policy", "a \"quoted\" \\ name ü 雪")],
            &[("database", "")],
            &[("a", "1"), ("bb", "2"), ("a", "3")],
        ];
        for object in cases {
            let Labels(ours) = Labels::of(object).unwrap();
            // PostgreSQL's own build of the same object, from its text.
            let mut expected = serde_json::Map::new();
            for (k, v) in object.iter() {
                expected.insert((*k).to_owned(), serde_json::Value::from(*v));
            }
            let text =
                std::ffi::CString::new(serde_json::Value::Object(expected.clone()).to_string())
                    .unwrap();
            // Safety: jsonb_in of a NUL-terminated string; both Datums are untoasted varlenas
            // with 4-byte headers, read for their own sizes.
            unsafe {
                let theirs = pgrx::direct_function_call_as_datum(
                    pg_sys::jsonb_in,
                    &[Some(text.as_ptr().into())],
                )
                .unwrap();
                let bytes = |d: pg_sys::Datum| {
                    let p = d.cast_mut_ptr::<pg_sys::varlena>();
                    std::slice::from_raw_parts(p.cast::<u8>(), pgrx::varsize_any(p))
                };
                assert_eq!(bytes(ours), bytes(theirs), "{object:?}");
                let decoded = pgrx::JsonB::from_datum(ours, false).unwrap();
                assert_eq!(decoded.0, serde_json::Value::Object(expected), "{object:?}");
            }
        }
    }
}
