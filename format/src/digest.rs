//! The slice digest: BLAKE3 over the exact concatenation of frames.

/// Incremental BLAKE3 over frames, so neither side has to hold a whole slice.
#[derive(Debug, Default)]
pub struct SliceHasher {
    hasher: blake3::Hasher,
    rows: u64,
    bytes: u64,
}

impl SliceHasher {
    /// A hasher over an empty slice.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one complete frame (length prefix included).
    pub fn update(&mut self, frame: &[u8]) {
        self.hasher.update(frame);
        self.rows += 1;
        self.bytes += frame.len() as u64;
    }

    /// Frames seen so far.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// Bytes seen so far.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Lower-case hex of the digest of everything seen.
    pub fn hex(&self) -> String {
        self.hasher.finalize().to_hex().to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_equals_digest_of_concatenation() {
        let mut h = SliceHasher::new();
        h.update(b"abc");
        h.update(b"def");
        assert_eq!(h.hex(), blake3::hash(b"abcdef").to_hex().to_string());
        assert_eq!((h.rows(), h.bytes()), (2, 6));
    }
}
