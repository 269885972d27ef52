//! A push decoder: feed it bytes as they arrive, take rows out as frames complete. It holds at
//! most one incomplete frame, refuses a length prefix above [`crate::MAX_FRAME_LEN`] before
//! buffering anything, and reports a slice that ends inside a frame when it is finished.

use crate::error::{FormatError, Result};
use crate::frame::{declared_len, decode_frames, Row, MAX_FRAME_LEN};

/// Incremental slice decoder.
#[derive(Debug, Default)]
pub struct StreamDecoder {
    pending: Vec<u8>,
    /// Offset in the slice of the first byte of `pending`.
    offset: usize,
}

impl StreamDecoder {
    /// A decoder at the start of a slice.
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds bytes and returns every row they complete.
    pub fn push(&mut self, bytes: &[u8]) -> Result<Vec<Row>> {
        self.pending.extend_from_slice(bytes);
        let mut rows = Vec::new();
        loop {
            if self.pending.len() < 4 {
                break;
            }
            let len = declared_len(&self.pending);
            if len > MAX_FRAME_LEN {
                return Err(FormatError::Oversized {
                    offset: self.offset,
                    len,
                    max: MAX_FRAME_LEN,
                });
            }
            if self.pending.len() < 4 + len {
                break;
            }
            let frame: Vec<u8> = self.pending.drain(..4 + len).collect();
            let mut decoded = decode_frames(&frame).map_err(|e| shift(e, self.offset))?;
            rows.append(&mut decoded);
            self.offset += frame.len();
        }
        Ok(rows)
    }

    /// Ends the slice: an incomplete frame left over is a truncation.
    pub fn finish(self) -> Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let needed = if self.pending.len() < 4 {
            4 - self.pending.len()
        } else {
            let len = declared_len(&self.pending);
            4 + len - self.pending.len()
        };
        Err(FormatError::Truncated {
            offset: self.offset,
            needed,
        })
    }
}

/// Re-bases an error from a single-frame decode onto the slice offset. Only a malformed body
/// can come from decoding one whole frame: `push` checked its length and has all its bytes.
fn shift(e: FormatError, base: usize) -> FormatError {
    match e {
        FormatError::Malformed { offset, reason } => FormatError::Malformed {
            offset: offset + base,
            reason,
        },
        other => other,
    }
}
