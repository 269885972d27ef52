//! Properties of the slice format: round trips, and every truncation or bit flip is caught.

// A test file: its helpers unwrap like its tests (clippy's allow-unwrap-in-tests covers only
// #[test] functions).
#![allow(clippy::unwrap_used)]

use pg_retention_format::{
    check_slice, count_frames, decode_frames, encode_frame, summarize, summarize_slice,
    verify_slice, Row, StreamDecoder,
};
use proptest::prelude::*;

fn value() -> impl Strategy<Value = Option<String>> {
    prop::option::of(any::<String>())
}

fn row() -> impl Strategy<Value = Row> {
    (
        prop::collection::vec(value(), 1..3),
        prop::collection::vec(value(), 0..12),
    )
        .prop_map(|(key, columns)| Row { key, columns })
}

fn slice_of(rows: &[Row]) -> (Vec<u8>, Vec<Vec<u8>>) {
    let frames: Vec<Vec<u8>> = rows.iter().map(|r| encode_frame(r).unwrap()).collect();
    (frames.concat(), frames)
}

proptest! {
    #[test]
    fn encode_then_decode_round_trips(rows in prop::collection::vec(row(), 0..20)) {
        let (slice, _) = slice_of(&rows);
        prop_assert_eq!(decode_frames(&slice).unwrap(), rows);
    }

    #[test]
    fn streaming_decode_in_any_chunks_equals_whole_decode(rows in prop::collection::vec(row(), 0..10), chunk in 1usize..64) {
        let (slice, _) = slice_of(&rows);
        let mut d = StreamDecoder::new();
        let mut out = Vec::new();
        for part in slice.chunks(chunk) {
            out.extend(d.push(part).unwrap());
        }
        d.finish().unwrap();
        prop_assert_eq!(out, rows);
    }

    #[test]
    fn any_truncation_is_detected(rows in prop::collection::vec(row(), 1..8), cut in any::<prop::sample::Index>()) {
        let (slice, frames) = slice_of(&rows);
        let (digest, n, bytes) = summarize(frames.iter().map(Vec::as_slice));
        let at = cut.index(slice.len());
        prop_assert!(verify_slice(&slice[..at], &digest, n, bytes).is_err());
        // Cut inside a frame, the decoder alone notices; cut between frames, only the digest and
        // the counts can (checked above).
        let boundaries: Vec<usize> = frames.iter().scan(0, |end, f| { *end += f.len(); Some(*end) }).collect();
        if at > 0 && !boundaries.contains(&at) {
            let mut d = StreamDecoder::new();
            let partial = d.push(&slice[..at]);
            prop_assert!(partial.is_err() || d.finish().is_err());
        }
    }

    #[test]
    fn any_bit_flip_is_detected(rows in prop::collection::vec(row(), 1..8), pos in any::<prop::sample::Index>(), bit in 0u8..8) {
        let (mut slice, frames) = slice_of(&rows);
        let (digest, n, bytes) = summarize(frames.iter().map(Vec::as_slice));
        let at = pos.index(slice.len());
        slice[at] ^= 1 << bit;
        prop_assert!(verify_slice(&slice, &digest, n, bytes).is_err());
        prop_assert!(check_slice(&slice, &digest, n, bytes).is_err());
    }

    #[test]
    fn check_and_count_agree_with_decode(rows in prop::collection::vec(row(), 0..10), garbage in prop::collection::vec(any::<u8>(), 0..64)) {
        let (slice, frames) = slice_of(&rows);
        let (digest, n, bytes) = summarize(frames.iter().map(Vec::as_slice));
        prop_assert_eq!(summarize_slice(&slice, n), (digest.clone(), n, bytes));
        prop_assert!(check_slice(&slice, &digest, n, bytes).is_ok());
        prop_assert_eq!(count_frames(&slice).unwrap(), rows.len() as u64);
        let mut tail = slice.clone();
        tail.extend(&garbage);
        prop_assert_eq!(count_frames(&tail).ok(), decode_frames(&tail).ok().map(|r| r.len() as u64));
    }

    #[test]
    fn decoding_garbage_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        let _ = decode_frames(&bytes);
        let _ = count_frames(&bytes);
        let mut d = StreamDecoder::new();
        if d.push(&bytes).is_ok() {
            let _ = d.finish();
        }
    }
}
