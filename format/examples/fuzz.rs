//! Hostile-input run of the slice format's decoders (`scripts/fuzz`): generated and mutated
//! slices, streams and manifests, fed to every decoder; any panic is a defect.
//!
//! A small mutational engine on the stable toolchain (no nightly, no libFuzzer): a seeded
//! xorshift generator builds valid slices and manifests, then mutates them the ways a store or
//! an attacker would — bit flips, truncations, insertions, duplicated and spliced ranges,
//! rewritten length prefixes and MessagePack markers, random bytes. Each input goes through
//! `decode_frames`, `count_frames`, `StreamDecoder` (in random chunk sizes), `verify_slice` and
//! `check_slice` against the digest of the unmutated slice, and JSON decoding of `Manifest`.
//!
//! `cargo run --release -p pg_retention_format --example fuzz -- [inputs] [seed]`
//! prints one line of figures and exits 1 when any decoder panicked.

use pg_retention_format::{
    check_slice, count_frames, decode_frames, encode_frame, summarize_slice, verify_slice,
    Manifest, Row, StreamDecoder,
};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Instant;

/// xorshift64*: deterministic for a seed, good enough to spread mutations.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
    fn chance(&mut self, one_in: usize) -> bool {
        self.below(one_in) == 0
    }
}

const ALPHABET: &[&str] = &[
    "",
    "a",
    "0",
    "-1",
    "NULL",
    "\\N",
    "é",
    "😀",
    "\u{0}",
    "\t",
    "\n",
    "'",
    "\"",
    "2026-12-01 00:00:00+00",
    "{1,2}",
    "{\"k\": 1}",
    "\\x00ff",
];

fn text(rng: &mut Rng) -> Option<String> {
    if rng.chance(5) {
        return None;
    }
    let mut s = String::new();
    for _ in 0..rng.below(4) {
        s.push_str(ALPHABET[rng.below(ALPHABET.len())]);
    }
    if rng.chance(50) {
        s.push_str(&"x".repeat(rng.below(70_000)));
    }
    Some(s)
}

fn row(rng: &mut Rng) -> Row {
    Row {
        key: (0..1 + rng.below(2)).map(|_| text(rng)).collect(),
        columns: (0..rng.below(10)).map(|_| text(rng)).collect(),
    }
}

fn slice(rng: &mut Rng) -> (Vec<u8>, u64) {
    let rows = rng.below(12) as u64;
    let mut out = Vec::new();
    for _ in 0..rows {
        if let Ok(frame) = encode_frame(&row(rng)) {
            out.extend_from_slice(&frame);
        }
    }
    (out, rows)
}

/// MessagePack markers worth planting: array/str/bin/map headers of every width, nil, ints.
const MARKERS: &[u8] = &[
    0x90, 0x92, 0x9f, 0xdc, 0xdd, 0xa0, 0xbf, 0xd9, 0xda, 0xdb, 0xc4, 0xc5, 0xc6, 0x80, 0xde, 0xdf,
    0xc0, 0xc2, 0xc3, 0xcc, 0xcd, 0xce, 0xcf, 0xd0, 0xe0, 0xff, 0xc1,
];

fn mutate(rng: &mut Rng, input: &mut Vec<u8>) {
    for _ in 0..1 + rng.below(4) {
        let len = input.len();
        match rng.below(9) {
            0 if len > 0 => {
                let i = rng.below(len);
                input[i] ^= 1 << rng.below(8);
            }
            1 if len > 0 => input.truncate(rng.below(len)),
            2 => {
                let at = rng.below(len + 1);
                let junk: Vec<u8> = (0..1 + rng.below(8)).map(|_| rng.next() as u8).collect();
                input.splice(at..at, junk);
            }
            3 if len > 0 => {
                let a = rng.below(len);
                let b = a + rng.below(len - a);
                let copy = input[a..b].to_vec();
                let at = rng.below(input.len() + 1);
                input.splice(at..at, copy);
            }
            4 if len >= 4 => {
                // A length prefix (or any four bytes) rewritten to a boundary value.
                let at = rng.below(len - 3);
                let v: u32 = match rng.below(5) {
                    0 => 0,
                    1 => u32::MAX,
                    2 => (256 * 1024 * 1024) + 1,
                    3 => rng.next() as u32 % 64,
                    _ => rng.next() as u32,
                };
                input[at..at + 4].copy_from_slice(&v.to_be_bytes());
            }
            5 if len > 0 => {
                let at = rng.below(len);
                input[at] = MARKERS[rng.below(MARKERS.len())];
            }
            6 if len > 0 => {
                let a = rng.below(len);
                let b = (a + rng.below(16)).min(len);
                input.drain(a..b);
            }
            7 => *input = (0..rng.below(64)).map(|_| rng.next() as u8).collect(),
            _ => {}
        }
    }
}

fn manifest_json(rng: &mut Rng) -> Vec<u8> {
    let m = Manifest {
        format: 1,
        database: "app".into(),
        relation: "public.audit".into(),
        policy: "audit".into(),
        policy_version: 1,
        batch: "00000000-0000-0000-0000-000000000000".into(),
        columns: vec![pg_retention_format::ColumnSpec {
            name: text(rng).unwrap_or_default(),
            type_name: "int".into(),
        }],
        key_columns: vec!["id".into()],
        rows: rng.next() % 10,
        bytes: rng.next() % 1000,
        blake3: "00".repeat(32),
        age_min: text(rng),
        age_max: None,
        created_at: "2026-12-01T00:00:00Z".into(),
        supersedes: None,
    };
    serde_json::to_vec(&m).unwrap_or_default()
}

/// Every decoder over one input; each returns normally (Ok or Err) or the run counts a panic.
fn exercise(rng: &mut Rng, input: &[u8], digest: &str, rows: u64, bytes: u64) -> bool {
    let chunks: Vec<usize> = (0..4).map(|_| 1 + rng.below(input.len().max(1))).collect();
    catch_unwind(AssertUnwindSafe(|| {
        let decoded = decode_frames(input);
        let counted = count_frames(input);
        // The two must agree on whether the slice is well-formed.
        assert_eq!(
            decoded.is_ok(),
            counted.is_ok(),
            "decode and count disagree"
        );
        let mut stream = StreamDecoder::new();
        let mut streamed = 0usize;
        let mut rest = input;
        let mut failed = false;
        for &c in chunks.iter().cycle() {
            if rest.is_empty() {
                break;
            }
            let (head, tail) = rest.split_at(c.min(rest.len()));
            rest = tail;
            match stream.push(head) {
                Ok(rows) => streamed += rows.len(),
                Err(_) => {
                    failed = true;
                    break;
                }
            }
        }
        let stream_ok = !failed && stream.finish().is_ok();
        assert_eq!(
            stream_ok,
            decoded.is_ok(),
            "stream and whole decode disagree"
        );
        if let Ok(rows) = &decoded {
            assert_eq!(
                rows.len(),
                streamed,
                "stream and whole decode count differently"
            );
        }
        let _ = verify_slice(input, digest, rows, bytes);
        let _ = check_slice(input, digest, rows, bytes);
        let _ = summarize_slice(input, rows);
        let _ = serde_json::from_slice::<Manifest>(input);
    }))
    .is_ok()
}

fn main() {
    let mut args = std::env::args().skip(1);
    let inputs: u64 = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let seed: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(0x5eed);
    let mut rng = Rng(seed.max(1));
    // Panics are counted, not printed once per input.
    std::panic::set_hook(Box::new(|_| {}));
    let started = Instant::now();
    let (mut panics, mut well_formed, mut refused) = (0u64, 0u64, 0u64);
    let mut first_panic: Option<Vec<u8>> = None;
    for i in 0..inputs {
        let (mut input, rows) = if i % 7 == 6 {
            (manifest_json(&mut rng), 0)
        } else {
            slice(&mut rng)
        };
        let (digest, _, bytes) = summarize_slice(&input, rows);
        if !rng.chance(10) {
            mutate(&mut rng, &mut input);
        }
        if exercise(&mut rng, &input, &digest, rows, bytes) {
            if decode_frames(&input).is_ok() {
                well_formed += 1;
            } else {
                refused += 1;
            }
        } else {
            panics += 1;
            first_panic.get_or_insert(input);
        }
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "fuzz: {inputs} inputs (seed {seed}) in {secs:.1} s: {panics} panics, {well_formed} decoded, {refused} refused"
    );
    if let Some(input) = first_panic {
        println!(
            "first panicking input ({} bytes): {:02x?}",
            input.len(),
            &input[..input.len().min(256)]
        );
        std::process::exit(1);
    }
}
