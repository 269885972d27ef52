//! Every refusal says exactly where and by how much: offsets, missing byte counts and the frame
//! limit, at and around each boundary. (These pin the arithmetic that cargo-mutants showed no
//! other test looked at.)

use pg_retention_format::{
    append_frame, check_slice, decode_frames, encode_frame, summarize_slice, verify_slice,
    FormatError, Row, StreamDecoder, MAX_FRAME_LEN,
};

fn row(key: &str) -> Row {
    Row {
        key: vec![Some(key.into())],
        columns: vec![Some(key.into()), None],
    }
}

fn prefix(len: usize) -> Vec<u8> {
    (len as u32).to_be_bytes().to_vec()
}

#[test]
fn the_frame_limit_is_256_mib() {
    assert_eq!(MAX_FRAME_LEN, 268_435_456);
}

#[test]
fn a_row_of_exactly_the_limit_frames_and_one_byte_more_does_not() {
    // Body: outer array (1) + key array (1) + str32 header (5) + the string + empty columns (1).
    let at_limit = Row {
        key: vec![Some("x".repeat(MAX_FRAME_LEN - 8))],
        columns: vec![],
    };
    let frame = encode_frame(&at_limit).expect("a body of exactly the limit is allowed");
    assert_eq!(frame.len(), MAX_FRAME_LEN + 4);
    assert_eq!(&frame[..4], &prefix(MAX_FRAME_LEN)[..]);
    drop(frame);
    let over = Row {
        key: vec![Some("x".repeat(MAX_FRAME_LEN - 7))],
        columns: vec![],
    };
    assert_eq!(
        encode_frame(&over),
        Err(FormatError::RowTooLarge {
            len: MAX_FRAME_LEN + 1,
            max: MAX_FRAME_LEN
        })
    );
}

#[test]
fn append_frame_returns_the_frame_length_and_leaves_a_refused_row_out() {
    let mut out = encode_frame(&row("a")).unwrap();
    let first = out.len();
    let n = append_frame(&mut out, &[Some("b")], &[Some("b"), None]).unwrap();
    assert_eq!(n, out.len() - first);
    assert_eq!(&out[first..first + 4], &prefix(n - 4)[..]);
    assert_eq!(decode_frames(&out).unwrap(), vec![row("a"), row("b")]);
}

#[test]
fn a_bare_length_prefix_is_a_malformed_frame_not_a_truncation() {
    assert!(matches!(
        decode_frames(&prefix(0)),
        Err(FormatError::Malformed { offset: 0, .. })
    ));
    let mut s = StreamDecoder::new();
    assert!(matches!(
        s.push(&prefix(0)),
        Err(FormatError::Malformed { offset: 0, .. })
    ));
}

#[test]
fn truncations_say_how_many_bytes_are_missing() {
    for (bytes, needed) in [(&[0u8][..], 3), (&[0, 0][..], 2), (&[0, 0, 0][..], 1)] {
        assert_eq!(
            decode_frames(bytes),
            Err(FormatError::Truncated { offset: 0, needed }),
            "{bytes:?}"
        );
    }
    let mut bytes = prefix(10);
    bytes.extend_from_slice(&[0x92, 0x91, 0xc0]);
    assert_eq!(
        decode_frames(&bytes),
        Err(FormatError::Truncated {
            offset: 0,
            needed: 7
        })
    );
    // In a second frame, the offset is where that frame starts.
    let first = encode_frame(&row("a")).unwrap();
    let mut two = first.clone();
    two.extend_from_slice(&bytes);
    assert_eq!(
        decode_frames(&two),
        Err(FormatError::Truncated {
            offset: first.len(),
            needed: 7
        })
    );
    let mut s = StreamDecoder::new();
    assert_eq!(s.push(&two).unwrap(), vec![row("a")]);
    assert_eq!(
        s.finish(),
        Err(FormatError::Truncated {
            offset: first.len(),
            needed: 7
        })
    );
    // Inside the prefix, and right after it.
    for (fed, needed) in [(vec![0u8], 3), (vec![0, 0, 0], 1), (prefix(10), 10)] {
        let mut s = StreamDecoder::new();
        assert_eq!(s.push(&fed).unwrap(), vec![]);
        assert_eq!(
            s.finish(),
            Err(FormatError::Truncated { offset: 0, needed }),
            "after {fed:?}"
        );
    }
}

#[test]
fn a_frame_may_declare_the_limit_but_not_one_byte_more() {
    let mut at = prefix(MAX_FRAME_LEN);
    at.push(0x92);
    assert_eq!(
        decode_frames(&at),
        Err(FormatError::Truncated {
            offset: 0,
            needed: MAX_FRAME_LEN - 1
        })
    );
    let mut s = StreamDecoder::new();
    assert_eq!(s.push(&at).unwrap(), vec![], "waits for the rest");
    assert_eq!(
        s.finish(),
        Err(FormatError::Truncated {
            offset: 0,
            needed: MAX_FRAME_LEN - 1
        })
    );
    let over = prefix(MAX_FRAME_LEN + 1);
    let oversized = Err(FormatError::Oversized {
        offset: 0,
        len: MAX_FRAME_LEN + 1,
        max: MAX_FRAME_LEN,
    });
    assert_eq!(decode_frames(&over), oversized);
    assert_eq!(StreamDecoder::new().push(&over), oversized);
}

#[test]
fn a_malformed_second_frame_is_reported_where_it_starts() {
    let first = encode_frame(&row("a")).unwrap();
    let mut bytes = first.clone();
    bytes.extend_from_slice(&prefix(1));
    bytes.push(0x93);
    assert!(matches!(
        decode_frames(&bytes),
        Err(FormatError::Malformed { offset, .. }) if offset == first.len()
    ));
    let mut s = StreamDecoder::new();
    assert!(matches!(
        s.push(&bytes),
        Err(FormatError::Malformed { offset, .. }) if offset == first.len()
    ));
    // The same, fed one byte at a time: the stream's own offset moves frame by frame.
    let mut s = StreamDecoder::new();
    let mut result = Ok(vec![]);
    for b in &bytes {
        result = s.push(std::slice::from_ref(b));
        if result.is_err() {
            break;
        }
    }
    assert!(matches!(
        result,
        Err(FormatError::Malformed { offset, .. }) if offset == first.len()
    ));
}

#[test]
fn a_manifest_claiming_the_wrong_row_count_is_refused() {
    let mut slice = encode_frame(&row("a")).unwrap();
    slice.extend(encode_frame(&row("b")).unwrap());
    let (digest, rows, bytes) = summarize_slice(&slice, 2);
    assert!(verify_slice(&slice, &digest, rows, bytes).is_ok());
    let wrong = Err(FormatError::Mismatch {
        what: "rows",
        expected: "3".into(),
        found: "2".into(),
    });
    assert_eq!(verify_slice(&slice, &digest, 3, bytes).map(|_| ()), wrong);
    assert_eq!(check_slice(&slice, &digest, 3, bytes), wrong);
}
