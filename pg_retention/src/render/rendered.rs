//! A statement's rows once rendered ([`Rendered`]): their keys, frames and places, and what is
//! done with them afterwards (reordered to a claim's order, appended, summarized). Plain Rust
//! over owned buffers, with no SPI or unsafe code, apart from the rendering that fills them.

use crate::tid::Tid;
use std::collections::HashMap;

/// A row version: where it is and the transaction that wrote it (its `xmin`, as a number).
pub type Version = (Tid, i64);

/// A statement's rows rendered: their keys, their frames back to back (the slice they make;
/// empty when only keys were rendered) and their places.
#[derive(Default)]
pub struct Rendered {
    /// The frames, concatenated.
    pub slice: Vec<u8>,
    /// End offset of each frame in `slice`.
    pub ends: Vec<usize>,
    /// The rows' keys one after another (primary-key arity values each), in row order.
    pub keys: Vec<Option<String>>,
    /// Each row's place (its ctid, the statement's column after the rendered ones), when the
    /// statement has one.
    pub places: Vec<Tid>,
    /// Each row's `xmin` (the column after its ctid), when the statement has one.
    pub xmins: Vec<i64>,
}

impl Rendered {
    /// BLAKE3 hex, row count and byte count of the slice.
    pub fn summary(&self) -> (String, u64, u64) {
        pg_retention_format::summarize_slice(&self.slice, self.ends.len() as u64)
    }

    /// The same rows in the order of `places`, each found by its place; these rows back
    /// unless they are exactly those at `places`.
    pub fn reordered(
        self,
        places: &[Tid],
        arity: usize,
    ) -> std::result::Result<Rendered, Rendered> {
        if self.places == places && self.ends.len() == places.len() {
            // Already in that order (a table whose key order is its storage order).
            return Ok(self);
        }
        self.in_order_of(places, arity).ok_or(self)
    }

    fn in_order_of(&self, places: &[Tid], arity: usize) -> Option<Rendered> {
        if self.ends.len() != places.len() || self.places.len() != places.len() {
            return None;
        }
        let at: HashMap<Tid, usize> = self
            .places
            .iter()
            .enumerate()
            .map(|(i, &p)| (p, i))
            .collect();
        let starts: Vec<usize> = std::iter::once(0)
            .chain(self.ends.iter().copied())
            .collect();
        let mut out = Rendered {
            slice: Vec::with_capacity(self.slice.len()),
            ..Rendered::default()
        };
        for &place in places {
            let i = *at.get(&place)?;
            out.slice
                .extend_from_slice(&self.slice[starts[i]..self.ends[i]]);
            out.ends.push(out.slice.len());
            out.keys
                .extend_from_slice(self.keys.get(i * arity..(i + 1) * arity)?);
            out.places.push(place);
            if let Some(&x) = self.xmins.get(i) {
                out.xmins.push(x);
            }
        }
        Some(out)
    }

    /// Appends the rows of `other` after these.
    pub fn append(&mut self, other: Rendered) {
        let base = self.slice.len();
        self.slice.extend_from_slice(&other.slice);
        self.ends.extend(other.ends.iter().map(|end| base + end));
        self.keys.extend(other.keys);
        self.places.extend(other.places);
        self.xmins.extend(other.xmins);
    }

    /// Each row's version (place and `xmin`), for a statement that returned both.
    pub fn versions(&self) -> impl Iterator<Item = Version> + '_ {
        self.places.iter().copied().zip(self.xmins.iter().copied())
    }

    /// The frames one by one.
    pub fn frames(&self) -> impl Iterator<Item = &[u8]> {
        let mut start = 0;
        self.ends.iter().map(move |&end| {
            let frame = &self.slice[start..end];
            start = end;
            frame
        })
    }
}
