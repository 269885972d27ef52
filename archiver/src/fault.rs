//! Fault-injection points for the fault suite. Setting `PG_RETENTION_ARCHIVER_FAULT` to a point's
//! name (or several, comma-separated) makes the process abort there, as abruptly as `kill -9`,
//! or behave as the point says. Unset in production.

use bytes::Bytes;
use std::collections::HashSet;
use std::sync::Mutex;

/// The variable that arms a fault point.
pub const VAR: &str = "PG_RETENTION_ARCHIVER_FAULT";

/// Whether `name` is armed.
pub fn armed(name: &str) -> bool {
    std::env::var(VAR).is_ok_and(|v| v.split(',').any(|p| p.trim() == name))
}

/// Whether `name` is armed and has not fired yet in this process (it fires once).
pub fn armed_once(name: &str) -> bool {
    static FIRED: Mutex<Option<HashSet<String>>> = Mutex::new(None);
    if !armed(name) {
        return false;
    }
    let Ok(mut fired) = FIRED.lock() else {
        return false;
    };
    fired
        .get_or_insert_with(HashSet::new)
        .insert(name.to_owned())
}

/// Aborts the process if `name` is armed.
pub fn point(name: &str) {
    if armed(name) {
        eprintln!("fault injected at {name}: aborting");
        std::process::abort();
    }
}

/// What a store keeps of an upload cut off half way.
pub fn first_half(object: &Bytes) -> Bytes {
    object.slice(..object.len() / 2)
}

/// The object with one bit of its middle byte flipped: a store that corrupted it at rest.
pub fn flip_middle_bit(object: &[u8]) -> Bytes {
    let mut bad = object.to_vec();
    if let Some(b) = bad.get_mut(object.len() / 2) {
        *b ^= 0x01;
    }
    Bytes::from(bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_off_upload_keeps_the_first_half() {
        let o = Bytes::from_static(b"0123456789");
        assert_eq!(&first_half(&o)[..], b"01234");
    }

    #[test]
    fn corruption_flips_exactly_one_bit_of_the_middle_byte() {
        assert_eq!(&flip_middle_bit(b"abcdef")[..], b"abceef");
        assert_eq!(&flip_middle_bit(b"xax")[..], b"x`x", "a set bit is cleared");
        assert_eq!(&flip_middle_bit(b"")[..], b"");
    }
}
