//! Checking a whole slice against what its manifest claims.

use crate::digest::SliceHasher;
use crate::error::{FormatError, Result};
use crate::frame::{count_frames, decode_frames, Row};

/// Checks `slice` as [`verify_slice`] does, without keeping the decoded rows.
pub fn check_slice(slice: &[u8], blake3_hex: &str, rows: u64, bytes: u64) -> Result<()> {
    check_digest(slice, blake3_hex, bytes)?;
    check_rows(count_frames(slice)?, rows)
}

/// Decodes `slice` and checks its BLAKE3, row count and byte count. Any truncation, bit flip or
/// substitution fails here: a flipped bit may still decode, but it never hashes the same.
pub fn verify_slice(slice: &[u8], blake3_hex: &str, rows: u64, bytes: u64) -> Result<Vec<Row>> {
    check_digest(slice, blake3_hex, bytes)?;
    let decoded = decode_frames(slice)?;
    check_rows(decoded.len() as u64, rows)?;
    Ok(decoded)
}

/// Checks that `copy` holds the very bytes of a slice that was decoded and hashed before: its
/// length and BLAKE3. Equal digests mean equal bytes, so a slice read back from a store after
/// its frames were checked is not decoded a second time.
pub fn check_copy(copy: &[u8], blake3_hex: &str, bytes: u64) -> Result<()> {
    check_digest(copy, blake3_hex, bytes)
}

fn check_digest(slice: &[u8], blake3_hex: &str, bytes: u64) -> Result<()> {
    if slice.len() as u64 != bytes {
        return Err(FormatError::Mismatch {
            what: "bytes",
            expected: bytes.to_string(),
            found: slice.len().to_string(),
        });
    }
    let digest = blake3::hash(slice).to_hex().to_string();
    if digest != blake3_hex {
        return Err(FormatError::Mismatch {
            what: "blake3",
            expected: blake3_hex.to_owned(),
            found: digest,
        });
    }
    Ok(())
}

fn check_rows(found: u64, rows: u64) -> Result<()> {
    if found != rows {
        return Err(FormatError::Mismatch {
            what: "rows",
            expected: rows.to_string(),
            found: found.to_string(),
        });
    }
    Ok(())
}

/// BLAKE3 hex, row count and byte count of a whole `slice` of `rows` frames: the same as
/// [`summarize`] over its frames, but hashed in one call, which lets BLAKE3 work on many
/// chunks at once (several times faster than feeding it one small frame at a time).
pub fn summarize_slice(slice: &[u8], rows: u64) -> (String, u64, u64) {
    (
        blake3::hash(slice).to_hex().to_string(),
        rows,
        slice.len() as u64,
    )
}

/// BLAKE3 hex, row count and byte count of a slice made of `frames`.
pub fn summarize<'a>(frames: impl IntoIterator<Item = &'a [u8]>) -> (String, u64, u64) {
    let mut h = SliceHasher::new();
    for f in frames {
        h.update(f);
    }
    (h.hex(), h.rows(), h.bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::{encode_frame, Row};

    #[test]
    fn summarizing_a_whole_slice_equals_summarizing_its_frames() {
        let frames: Vec<Vec<u8>> = (0..300)
            .map(|i| {
                encode_frame(&Row {
                    key: vec![Some(i.to_string())],
                    columns: vec![Some(i.to_string()), None, Some("x".repeat(i % 97))],
                })
                .unwrap()
            })
            .collect();
        let slice = frames.concat();
        assert_eq!(
            summarize_slice(&slice, frames.len() as u64),
            summarize(frames.iter().map(Vec::as_slice))
        );
    }
}
