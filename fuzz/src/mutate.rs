//! Input generation: structure-blind byte mutation steered by tokens.
//!
//! In: a corpus of valid inputs, a target's dictionary of interesting
//! tokens, a seeded `SmallRng`. Out: one new input per call, made from a
//! corpus entry (or a splice of two) by 1-6 edits: bit flips, random bytes,
//! deletions, duplications, truncation, token insertion / replacement,
//! number replacement and deep nesting. Deterministic for a given seed.

use rand::rngs::SmallRng;
use rand::{Rng, RngCore};

/// Numbers worth trying wherever a number is.
pub const NUMBERS: &[&str] = &[
    "0",
    "-1",
    "1",
    "-0",
    "1e309",
    "-1e309",
    "1e-400",
    "NaN",
    "inf",
    "0.5",
    "4294967295",
    "4294967296",
    "18446744073709551615",
    "18446744073709551616",
    "9223372036854775807",
    "-9223372036854775808",
    "99999999999999999999999999999",
    "1.7976931348623157e308",
    "2147483648",
    "65536",
];

/// Most bytes a mutated input may have (inputs beyond are cut).
pub const MAX_LEN: usize = 256 << 10;

/// Makes one input from `corpus` using `tokens` (see the module doc).
pub fn mutate(rng: &mut SmallRng, corpus: &[Vec<u8>], tokens: &[&str]) -> Vec<u8> {
    let mut out = corpus[rng.random_range(0..corpus.len())].clone();
    if rng.random_ratio(1, 10) {
        // Splice: a head of this entry and a tail of another.
        let other = &corpus[rng.random_range(0..corpus.len())];
        let a = rng.random_range(0..=out.len());
        let b = rng.random_range(0..=other.len());
        out.truncate(a);
        out.extend_from_slice(&other[b..]);
    }
    for _ in 0..rng.random_range(1..=6) {
        edit(rng, &mut out, tokens);
    }
    out.truncate(MAX_LEN);
    out
}

/// One random edit of `buf`.
pub fn edit(rng: &mut SmallRng, buf: &mut Vec<u8>, tokens: &[&str]) {
    let len = buf.len();
    let at = rng.random_range(0..=len);
    match rng.random_range(0..10) {
        0 if len > 0 => buf[at.min(len - 1)] ^= 1 << rng.random_range(0..8),
        1 if len > 0 => buf[at.min(len - 1)] = rng.next_u32() as u8,
        2 => {
            let end = (at + rng.random_range(1..=16)).min(len);
            buf.drain(at..end);
        }
        3 => buf.truncate(at),
        4 if len > 0 => {
            // Duplicate a short range (repetition, e.g. of a whole event).
            let start = rng.random_range(0..len);
            let end = (start + rng.random_range(1..=256)).min(len);
            let piece = buf[start..end].to_vec();
            let to = rng.random_range(0..=len);
            buf.splice(to..to, piece);
        }
        5 | 6 if !tokens.is_empty() => {
            let t = tokens[rng.random_range(0..tokens.len())].as_bytes();
            buf.splice(at..at, t.iter().copied());
        }
        7 => replace_number(rng, buf),
        8 => {
            // Deep nesting: many opening brackets (a JSON / TOML bomb).
            let open = if rng.random_bool(0.5) { b'[' } else { b'{' };
            let n = rng.random_range(1..=4096);
            buf.splice(at..at, std::iter::repeat_n(open, n));
        }
        _ => {
            let n = NUMBERS[rng.random_range(0..NUMBERS.len())].as_bytes();
            buf.splice(at..at, n.iter().copied());
        }
    }
}

/// Replaces one run of digits in `buf` by an interesting number.
fn replace_number(rng: &mut SmallRng, buf: &mut Vec<u8>) {
    if buf.is_empty() {
        return;
    }
    let from = rng.random_range(0..buf.len());
    let Some(start) = buf[from..].iter().position(u8::is_ascii_digit) else {
        return;
    };
    let start = from + start;
    let end = buf[start..]
        .iter()
        .position(|b| !(b.is_ascii_digit() || *b == b'.' || *b == b'e'))
        .map_or(buf.len(), |n| start + n);
    let n = NUMBERS[rng.random_range(0..NUMBERS.len())].as_bytes();
    buf.splice(start..end, n.iter().copied());
}
