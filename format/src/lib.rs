//! The archive slice format shared by the extension and the archiver.
//!
//! A slice is a concatenation of frames, one per row. Each frame is a 4-byte big-endian length
//! followed by a MessagePack array: the row's key values, then every column's value in Postgres
//! text output form, `nil` for NULL. The encoding is deterministic so the extension can re-derive
//! the digest of the rows it is about to delete. This crate does no I/O.
#![deny(missing_docs, unreachable_pub, rust_2018_idioms)]

pub mod digest;
pub mod error;
pub mod frame;
pub mod manifest;
pub mod names;
pub mod stream;
pub mod verify;

pub use digest::SliceHasher;
pub use error::{FormatError, Result};
pub use frame::{
    append_frame, append_frame_keyed, count_frames, decode_frames, encode_frame, Row, MAX_FRAME_LEN,
};
pub use manifest::{ColumnSpec, Manifest, FORMAT_VERSION};
pub use names::quote_ident;
pub use stream::StreamDecoder;
pub use verify::{check_copy, check_slice, summarize, summarize_slice, verify_slice};
