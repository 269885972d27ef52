//! The one error type of the format crate.

/// Result with [`FormatError`] as the default error.
pub type Result<T, E = FormatError> = std::result::Result<T, E>;

/// Everything that can be wrong with bytes claiming to be a slice.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum FormatError {
    /// The input ends inside a frame (length prefix or body).
    #[error("slice truncated at byte {offset}: {needed} more bytes expected")]
    Truncated {
        /// Offset of the frame that is incomplete.
        offset: usize,
        /// How many more bytes the frame needed.
        needed: usize,
    },
    /// A frame declares a length beyond [`crate::MAX_FRAME_LEN`].
    #[error("frame at byte {offset} declares {len} bytes, above the limit of {max}")]
    Oversized {
        /// Offset of the frame.
        offset: usize,
        /// Declared length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A frame body is not the MessagePack shape a row must have.
    #[error("frame at byte {offset} is malformed: {reason}")]
    Malformed {
        /// Offset of the frame.
        offset: usize,
        /// What was wrong.
        reason: String,
    },
    /// A slice does not match what its manifest says.
    #[error("slice {what} mismatch: expected {expected}, found {found}")]
    Mismatch {
        /// Which figure: blake3, rows or bytes.
        what: &'static str,
        /// What the manifest says.
        expected: String,
        /// What the slice has.
        found: String,
    },
    /// A row is too large to be framed.
    #[error("row of {len} bytes exceeds the frame limit of {max}")]
    RowTooLarge {
        /// Encoded length.
        len: usize,
        /// The limit.
        max: usize,
    },
}
