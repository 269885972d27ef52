//! Frames: one length-prefixed MessagePack array per row.

use crate::error::{FormatError, Result};

/// Upper bound on one frame's body, so a corrupt length prefix cannot ask for gigabytes.
pub const MAX_FRAME_LEN: usize = 256 * 1024 * 1024;

/// One row as it is archived: key values first, then every column in attribute order.
/// `None` is SQL NULL; `Some` is the column's Postgres text output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// Primary-key values, in key order.
    pub key: Vec<Option<String>>,
    /// All column values, in attribute order.
    pub columns: Vec<Option<String>>,
}

/// A MessagePack array header for `n` elements: fixarray, array 16 or array 32, the smallest
/// that holds it (as every MessagePack encoder writes it).
fn put_array_len(buf: &mut Vec<u8>, n: usize) {
    if n < 16 {
        buf.push(0x90 | n as u8);
    } else if let Ok(n) = u16::try_from(n) {
        buf.push(0xdc);
        buf.extend_from_slice(&n.to_be_bytes());
    } else {
        buf.push(0xdd);
        buf.extend_from_slice(&(n as u32).to_be_bytes());
    }
}

/// A MessagePack string: fixstr, str 8, str 16 or str 32 header, the smallest that holds it,
/// then its bytes.
fn put_str(buf: &mut Vec<u8>, s: &str) {
    let n = s.len();
    if n < 32 {
        buf.push(0xa0 | n as u8);
    } else if let Ok(n) = u8::try_from(n) {
        buf.extend_from_slice(&[0xd9, n]);
    } else if let Ok(n) = u16::try_from(n) {
        buf.push(0xda);
        buf.extend_from_slice(&n.to_be_bytes());
    } else {
        buf.push(0xdb);
        buf.extend_from_slice(&(n as u32).to_be_bytes());
    }
    buf.extend_from_slice(s.as_bytes());
}

/// The bytes [`put_values`] writes for `values`: a 5-byte header bound per array and per
/// string, enough to reserve once.
fn values_len_bound<'v, S: AsRef<str> + 'v>(values: impl Iterator<Item = &'v Option<S>>) -> usize {
    values.fold(5, |n, v| {
        n.saturating_add(v.as_ref().map_or(1, |s| s.as_ref().len().saturating_add(5)))
    })
}

/// One array of strings and nils, written straight into `buf` (the frames are hand-encoded: a
/// generic encoder's writer calls cost as much as the values on a claim's hot path).
fn put_values<'v, S: AsRef<str> + 'v>(
    buf: &mut Vec<u8>,
    len: usize,
    values: impl Iterator<Item = &'v Option<S>>,
) {
    put_array_len(buf, len);
    for v in values {
        match v {
            None => buf.push(0xc0),
            Some(s) => put_str(buf, s.as_ref()),
        }
    }
}

/// Appends one row as a complete frame (length prefix included) to `out`; returns the frame's
/// length. On error `out` is left as it was.
pub fn append_frame<S: AsRef<str>>(
    out: &mut Vec<u8>,
    key: &[Option<S>],
    columns: &[Option<S>],
) -> Result<usize> {
    append(out, key.len(), || key.iter(), columns)
}

/// [`append_frame`] of a row whose key values are its columns at `key_at` (the same bytes; no
/// key is gathered first: a claim frames every row it reads).
pub fn append_frame_keyed<S: AsRef<str>>(
    out: &mut Vec<u8>,
    key_at: &[usize],
    columns: &[Option<S>],
) -> Result<usize> {
    if let Some(&past) = key_at.iter().find(|&&i| i >= columns.len()) {
        return Err(FormatError::Malformed {
            offset: out.len(),
            reason: format!("key column {past} of a row of {} columns", columns.len()),
        });
    }
    append(
        out,
        key_at.len(),
        || key_at.iter().map(|&i| &columns[i]),
        columns,
    )
}

fn append<'v, S: AsRef<str> + 'v, K: Iterator<Item = &'v Option<S>>>(
    out: &mut Vec<u8>,
    key_len: usize,
    key: impl Fn() -> K,
    columns: &'v [Option<S>],
) -> Result<usize> {
    // One reservation for the frame (at most the largest frame allowed: a row past it is
    // written, then refused, without reserving for all of it first).
    let bound = values_len_bound(key()).saturating_add(values_len_bound(columns.iter()));
    out.reserve(bound.min(MAX_FRAME_LEN).saturating_add(5));
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    // [key values, column values]
    out.push(0x92);
    put_values(out, key_len, key());
    put_values(out, columns.len(), columns.iter());
    let body = out.len() - start - 4;
    if body > MAX_FRAME_LEN {
        out.truncate(start);
        return Err(FormatError::RowTooLarge {
            len: body,
            max: MAX_FRAME_LEN,
        });
    }
    out[start..start + 4].copy_from_slice(&(body as u32).to_be_bytes());
    Ok(out.len() - start)
}

/// Encodes one row as a complete frame (length prefix included).
pub fn encode_frame(row: &Row) -> Result<Vec<u8>> {
    let mut frame = Vec::with_capacity(68);
    append_frame(&mut frame, &row.key, &row.columns)?;
    Ok(frame)
}

/// What a walk over frames hands out, in order: each value of a row (its key values, then its
/// column values), then the row's end.
enum Event<'a> {
    Key(Option<&'a str>),
    Column(Option<&'a str>),
    RowEnd,
}

/// Reads one MessagePack array of strings or nils, handing each value to `each` as `wrap` makes
/// it an event. Nothing is allocated: counting a slice's frames checks it as decoding does.
fn read_values<'a>(
    body: &mut &'a [u8],
    offset: usize,
    wrap: fn(Option<&'a str>) -> Event<'a>,
    each: &mut impl FnMut(Event<'a>),
) -> Result<()> {
    let malformed = |reason: String| FormatError::Malformed { offset, reason };
    let n = rmp::decode::read_array_len(body).map_err(|e| malformed(format!("array: {e}")))?;
    for _ in 0..n {
        let marker = body
            .first()
            .copied()
            .ok_or_else(|| malformed("value missing".into()))?;
        if marker == 0xc0 {
            *body = &body[1..];
            each(wrap(None));
            continue;
        }
        let len =
            rmp::decode::read_str_len(body).map_err(|e| malformed(format!("value: {e}")))? as usize;
        if body.len() < len {
            return Err(malformed("string runs past the frame".into()));
        }
        let (s, rest) = body.split_at(len);
        let s = std::str::from_utf8(s).map_err(|e| malformed(format!("utf-8: {e}")))?;
        each(wrap(Some(s)));
        *body = rest;
    }
    Ok(())
}

/// The length a frame's 4-byte big-endian prefix declares (the caller checked there are 4 bytes).
pub(crate) fn declared_len(prefix: &[u8]) -> usize {
    u32::from_be_bytes([prefix[0], prefix[1], prefix[2], prefix[3]]) as usize
}

/// Decodes a whole slice into rows, refusing truncated, oversized or malformed input.
pub fn decode_frames(bytes: &[u8]) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    let (mut key, mut columns) = (Vec::new(), Vec::new());
    let owned = |s: Option<&str>| s.map(str::to_owned);
    walk_frames(bytes, |e| match e {
        Event::Key(v) => key.push(owned(v)),
        Event::Column(v) => columns.push(owned(v)),
        Event::RowEnd => rows.push(Row {
            key: std::mem::take(&mut key),
            columns: std::mem::take(&mut columns),
        }),
    })?;
    Ok(rows)
}

/// Checks a whole slice as [`decode_frames`] does, without keeping the rows; returns how many
/// frames it holds.
pub fn count_frames(bytes: &[u8]) -> Result<u64> {
    let mut n = 0u64;
    walk_frames(bytes, |e| {
        if let Event::RowEnd = e {
            n += 1;
        }
    })?;
    Ok(n)
}

/// Walks every frame of `bytes`, refusing truncated, oversized or malformed input, and hands
/// each row's key values, column values and end to `each`.
fn walk_frames<'a>(mut bytes: &'a [u8], mut each: impl FnMut(Event<'a>)) -> Result<()> {
    let mut offset = 0usize;
    while !bytes.is_empty() {
        if bytes.len() < 4 {
            return Err(FormatError::Truncated {
                offset,
                needed: 4 - bytes.len(),
            });
        }
        let len = declared_len(bytes);
        if len > MAX_FRAME_LEN {
            return Err(FormatError::Oversized {
                offset,
                len,
                max: MAX_FRAME_LEN,
            });
        }
        if bytes.len() < 4 + len {
            return Err(FormatError::Truncated {
                offset,
                needed: 4 + len - bytes.len(),
            });
        }
        let mut body = &bytes[4..4 + len];
        let malformed = |reason: &str| FormatError::Malformed {
            offset,
            reason: reason.into(),
        };
        let outer = rmp::decode::read_array_len(&mut body).map_err(|_| malformed("row header"))?;
        if outer != 2 {
            return Err(malformed("row must be [key, columns]"));
        }
        read_values(&mut body, offset, Event::Key, &mut each)?;
        read_values(&mut body, offset, Event::Column, &mut each)?;
        if !body.is_empty() {
            return Err(malformed("trailing bytes inside frame"));
        }
        each(Event::RowEnd);
        bytes = &bytes[4 + len..];
        offset += 4 + len;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Row {
        Row {
            key: vec![Some("42".into())],
            columns: vec![Some("42".into()), None, Some("héllo \u{1F600}".into())],
        }
    }

    #[test]
    fn frame_round_trips() {
        let row = sample();
        let mut slice = encode_frame(&row).unwrap();
        slice.extend(encode_frame(&row).unwrap());
        assert_eq!(decode_frames(&slice).unwrap(), vec![row.clone(), row]);
    }

    /// The encoder before frames were hand-encoded: rmp's writers.
    fn rmp_frame(key: &[Option<String>], columns: &[Option<String>]) -> Vec<u8> {
        fn values(buf: &mut Vec<u8>, values: &[Option<String>]) {
            rmp::encode::write_array_len(buf, values.len() as u32).unwrap();
            for v in values {
                match v {
                    None => rmp::encode::write_nil(buf).unwrap(),
                    Some(s) => rmp::encode::write_str(buf, s).unwrap(),
                }
            }
        }
        let mut body = Vec::new();
        rmp::encode::write_array_len(&mut body, 2).unwrap();
        values(&mut body, key);
        values(&mut body, columns);
        let mut frame = (body.len() as u32).to_be_bytes().to_vec();
        frame.extend(body);
        frame
    }

    #[test]
    fn hand_encoded_frames_are_byte_identical_to_rmp_and_decode_back() {
        let text = |n: usize| Some("x".repeat(n));
        let multibyte = Some("é".repeat(40_000)); // 80,000 bytes of two-byte characters: str 32
        let mut tricky: Vec<Option<String>> =
            [0, 1, 31, 32, 33, 255, 256, 257, 65_535, 65_536, 70_000]
                .iter()
                .map(|&n| text(n))
                .collect();
        tricky.extend([
            None,
            Some(String::new()),
            multibyte,
            Some("\0\n\t\"".into()),
        ]);
        let widths = [
            0usize, 1, 2, 15, 16, 17, 40, 255, 256, 65_535, 65_536, 70_000,
        ];
        for &width in &widths {
            for key_len in [0usize, 1, 2, 16] {
                let columns: Vec<Option<String>> = (0..width)
                    .map(|i| {
                        if width > 1000 {
                            // Many columns: short values and NULLs.
                            (i % 3 != 0).then(|| i.to_string())
                        } else {
                            tricky[i % tricky.len()].clone()
                        }
                    })
                    .collect();
                let key: Vec<Option<String>> = (0..key_len)
                    .map(|i| tricky[(i * 7) % tricky.len()].clone())
                    .collect();
                let mut ours = vec![0xee]; // appended after what is there
                let n = append_frame(&mut ours, &key, &columns).unwrap();
                assert_eq!(n, ours.len() - 1);
                if key_len <= width {
                    // The same row keyed by the positions of its key among its columns.
                    let at: Vec<usize> = (0..key_len).map(|i| (i * 5) % width.max(1)).collect();
                    let keyed: Vec<Option<String>> =
                        at.iter().map(|&i| columns[i].clone()).collect();
                    let mut by_place = vec![0xee];
                    append_frame_keyed(&mut by_place, &at, &columns).unwrap();
                    let mut gathered = vec![0xee];
                    append_frame(&mut gathered, &keyed, &columns).unwrap();
                    assert_eq!(
                        by_place, gathered,
                        "width {width}, key {key_len}: keyed frame differs"
                    );
                }
                let theirs = rmp_frame(&key, &columns);
                assert!(
                    ours[1..] == theirs[..],
                    "width {width}, key {key_len}: frames differ"
                );
                let back = decode_frames(&ours[1..]).unwrap();
                assert_eq!(back, vec![Row { key, columns }]);
            }
        }
        for n in [0usize, 1, 31, 32, 255, 256, 65_535, 65_536] {
            let key = vec![Some("k".to_owned())];
            let columns = vec![text(n), None, Some(String::new())];
            let mut ours = Vec::new();
            append_frame(&mut ours, &key, &columns).unwrap();
            assert_eq!(ours, rmp_frame(&key, &columns), "a {n}-byte string");
        }
    }

    #[test]
    fn a_key_position_past_the_columns_is_refused_and_nothing_appended() {
        let mut out = vec![1, 2];
        let columns = [Some("a"), None];
        assert!(append_frame_keyed(&mut out, &[2], &columns).is_err());
        assert_eq!(out, vec![1, 2]);
    }

    #[test]
    fn every_truncation_is_refused() {
        let slice = encode_frame(&sample()).unwrap();
        for cut in 1..slice.len() {
            assert!(
                decode_frames(&slice[..cut]).is_err(),
                "cut at {cut} accepted"
            );
        }
    }

    #[test]
    fn oversized_length_prefix_is_refused() {
        let bytes = [0xff, 0xff, 0xff, 0xff, 0x92];
        assert!(matches!(
            decode_frames(&bytes),
            Err(FormatError::Oversized { .. })
        ));
    }
}
