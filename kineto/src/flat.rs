//! Kineto's trace events read without `serde`: the importer's hot path.
//!
//! In: the window's unread bytes, starting at one element of `traceEvents`.
//! Out: that event written into a [`RawEvent`] and the bytes it took, or
//! `None`: the element holds something this reader leaves to `serde_json`
//! (an escape or a control character in a string, invalid UTF-8 in a string
//! that is read, an exponent or more than 19 digits in a number, nesting
//! deeper than [`MAX_DEPTH`], an element that is not an object), is not
//! valid JSON, or does not end inside the slice. The caller then parses the
//! element with [`EventSeed`](super::raw::EventSeed), which stays the
//! definition: whatever this reader returns is what `EventSeed` gives for
//! the same bytes (`flat_tests` checks it on real traces, on every
//! truncation and on byte substitutions).
//!
//! Why: Kineto writes flat objects with ASCII keys, short strings and plain
//! numbers. `serde_json` reads them through a visitor call per key and per
//! value; this reads them with one cursor over the bytes, matches keys as
//! bytes and keeps the event's string buffers (a field that held a string
//! reuses its allocation for the next event's). The nested values of fields
//! that are read (`Input Dims`, `Input type`, an array of ranks) are cut out
//! here and parsed by `serde_json` from that slice: the same code as in the
//! fallback, so they cannot differ.
//!
//! Numbers are read as `serde_json` reads them: an integer as `u64`, a
//! negative one as `i64` (`-0` and values below `i64::MIN` as floats); a
//! decimal fraction as `serde_json` computes it without its
//! `float_roundtrip` feature: the digits as one integer, converted to `f64`
//! and divided by the power of ten of the fraction's length (one correctly
//! rounded division: Kineto's `ts` with three decimals below 2^53 are
//! exact before it).

use super::raw::{
    arg_key, arg_scalar, event_key, event_scalar, Num, RawArgs, RawEvent, Scalar, ARG_INPUT_DIMS,
    ARG_INPUT_TYPES, EVENT_ARGS,
};

/// Deepest nesting read here (the event object is depth 1); `serde_json`
/// allows 128 from the element, so nothing it rejects for depth passes.
const MAX_DEPTH: usize = 64;

/// Digits of a number read here (19 always fit a `u64`).
const MAX_DIGITS: usize = 19;

/// `serde_json`'s `POW10` table up to 10^19 (every entry exact in `f64`).
const POW10: [f64; MAX_DIGITS + 1] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18, 1e19,
];

/// Bytes of a string checked one by one before memchr takes over.
const SHORT_STRING: usize = 24;

/// [`arg_scalar`]s are the [`arg_key`] indexes below this, [`event_scalar`]s
/// the [`event_key`] indexes below `args`.
const ARG_SCALARS: usize = ARG_INPUT_DIMS;
const EVENT_SCALARS: usize = EVENT_ARGS;

/// Reads the event at the start of `b` into `ev` (see the module doc);
/// returns the bytes it took. On `None`, `ev` holds a partial event.
pub(crate) fn event(b: &[u8], ev: &mut RawEvent) -> Option<usize> {
    let mut c = Cursor { b, i: 0 };
    if c.peek()? != b'{' {
        return None;
    }
    c.i += 1;
    // Fields written by this element (bit = key index); the others are
    // reset at the end, so a string field keeps its buffer across events.
    let (mut seen, mut args_seen) = (0u32, 0u64);
    if c.peek()? == b'}' {
        c.i += 1;
    } else {
        loop {
            let key = event_key(c.key()?);
            match key {
                k if k < EVENT_SCALARS => {
                    c.scalar(event_scalar(ev, k)?)?;
                    seen |= 1 << k;
                }
                EVENT_ARGS => {
                    // A repeated `args` replaces the first (the last wins).
                    args_seen = 0;
                    c.args(&mut ev.args, &mut args_seen)?;
                }
                _ => c.skip(2)?,
            }
            match c.peek()? {
                b',' => c.i += 1,
                b'}' => {
                    c.i += 1;
                    break;
                }
                _ => return None,
            }
        }
    }
    for k in 0..EVENT_SCALARS {
        if seen & (1 << k) == 0 {
            if let Some(slot) = event_scalar(ev, k) {
                *slot = Scalar::Absent;
            }
        }
    }
    let a = &mut ev.args;
    for k in 0..ARG_SCALARS {
        if args_seen & (1 << k) == 0 {
            if let Some(slot) = arg_scalar(a, k) {
                *slot = Scalar::Absent;
            }
        }
    }
    if args_seen & (1 << ARG_INPUT_DIMS) == 0 {
        a.input_dims = Default::default();
        a.input_shape.clear();
    }
    if args_seen & (1 << ARG_INPUT_TYPES) == 0 {
        a.input_types = Default::default();
    }
    Some(c.i)
}

/// The leading ASCII digits of `b`: how many, and `acc` followed by them
/// as decimal digits (wrapped past 19 digits in all, which callers refuse).
/// Eight at a time while eight digits follow (`ts` has 16).
#[inline]
fn digits(b: &[u8], mut acc: u64) -> (usize, u64) {
    let mut n = 0;
    while let Some(eight) = b.get(n..n + 8) {
        let w = u64::from_le_bytes(eight.try_into().expect("eight bytes"));
        if !eight_digits(w) {
            break;
        }
        acc = acc
            .wrapping_mul(100_000_000)
            .wrapping_add(eight_digits_value(w));
        n += 8;
    }
    while let Some(&d @ b'0'..=b'9') = b.get(n) {
        acc = acc.wrapping_mul(10).wrapping_add(u64::from(d - b'0'));
        n += 1;
    }
    (n, acc)
}

/// Whether all eight bytes of `w` are ASCII digits: each high nibble is 3,
/// and adding 6 keeps it 3 (a carry out of a byte comes only from a byte
/// whose own high nibble is not 3).
#[inline]
fn eight_digits(w: u64) -> bool {
    const HIGH: u64 = 0xF0F0_F0F0_F0F0_F0F0;
    (w & HIGH) | ((w.wrapping_add(0x0606_0606_0606_0606) & HIGH) >> 4) == 0x3333_3333_3333_3333
}

/// The value of eight ASCII digits read little-endian (the first digit in
/// the low byte): pairs, then quads, then the whole, by multiplies that keep
/// every partial sum inside its lane.
#[inline]
fn eight_digits_value(w: u64) -> u64 {
    let v = w.wrapping_sub(0x3030_3030_3030_3030);
    let v = v.wrapping_mul(10).wrapping_add(v >> 8);
    let lo = (v & 0x0000_00FF_0000_00FF).wrapping_mul(100 + (1_000_000 << 32));
    let hi = ((v >> 16) & 0x0000_00FF_0000_00FF).wrapping_mul(1 + (10_000 << 32));
    lo.wrapping_add(hi) >> 32
}

/// A string value, in the slot's own buffer when it already holds one.
fn put_str(slot: &mut Scalar, s: &str) {
    match slot {
        Scalar::Str(old) => {
            old.clear();
            old.push_str(s);
        }
        _ => *slot = Scalar::Str(s.to_owned()),
    }
}

struct Cursor<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> Cursor<'a> {
    /// Skips whitespace; the next byte, not consumed (`None` at the end).
    #[inline]
    fn peek(&mut self) -> Option<u8> {
        while let Some(&c) = self.b.get(self.i) {
            match c {
                b' ' | b'\n' | b'\t' | b'\r' => self.i += 1,
                _ => return Some(c),
            }
        }
        None
    }

    /// A key and its `:`.
    #[inline]
    fn key(&mut self) -> Option<&'a [u8]> {
        if self.peek()? != b'"' {
            return None;
        }
        let k = self.string()?;
        if self.peek()? != b':' {
            return None;
        }
        self.i += 1;
        Some(k)
    }

    /// The string whose `"` is at the cursor: its bytes between the quotes
    /// (`None` on an escape or a control character: `serde_json` decodes
    /// the one and rejects the other).
    #[inline]
    fn string(&mut self) -> Option<&'a [u8]> {
        let start = self.i + 1;
        let rest = self.b.get(start..)?;
        // Keys and short values byte by byte; the rest of a long one (a
        // kernel's name) through memchr, then checked.
        let mut len = 0;
        for &c in rest.iter().take(SHORT_STRING) {
            match c {
                b'"' => {
                    self.i = start + len + 1;
                    return Some(&rest[..len]);
                }
                b'\\' | 0..=0x1f => return None,
                _ => len += 1,
            }
        }
        len += memchr::memchr(b'"', rest.get(len..)?)?;
        let s = &rest[..len];
        if s.iter()
            .fold(false, |bad, &c| bad | (c < 0x20) | (c == b'\\'))
        {
            return None;
        }
        self.i = start + len + 1;
        Some(s)
    }

    /// The number at the cursor (see the module doc).
    #[inline]
    fn number(&mut self) -> Option<Num> {
        let b = self.b;
        let negative = b[self.i] == b'-';
        let int_start = self.i + usize::from(negative);
        let (int_len, int) = digits(&b[int_start..], 0);
        if int_len == 0 || (int_len > 1 && b[int_start] == b'0') {
            return None;
        }
        let mut end = int_start + int_len;
        let (mut frac_len, mut all) = (0, int);
        if b.get(end) == Some(&b'.') {
            (frac_len, all) = digits(&b[end + 1..], int);
            if frac_len == 0 {
                return None;
            }
            end += 1 + frac_len;
        }
        // At the slice's end the number may go on past it.
        if matches!(b.get(end), None | Some(b'e' | b'E')) || int_len + frac_len > MAX_DIGITS {
            return None;
        }
        self.i = end;
        Some(if frac_len > 0 {
            let f = all as f64 / POW10[frac_len];
            Num::F(if negative { -f } else { f })
        } else if !negative {
            Num::U(int)
        } else {
            let n = (int as i64).wrapping_neg();
            if n >= 0 {
                Num::F(-(int as f64))
            } else {
                Num::I(n)
            }
        })
    }

    /// `word` at the cursor.
    #[inline]
    fn literal(&mut self, word: &[u8]) -> Option<()> {
        if self.b.get(self.i..self.i + word.len())? != word {
            return None;
        }
        self.i += word.len();
        Some(())
    }

    /// One value into a [`Scalar`] slot, as `Scalar::deserialize` reads it.
    #[inline]
    fn scalar(&mut self, slot: &mut Scalar) -> Option<()> {
        match self.peek()? {
            b'"' => put_str(slot, std::str::from_utf8(self.string()?).ok()?),
            b'-' | b'0'..=b'9' => *slot = Scalar::Num(self.number()?),
            b't' => {
                self.literal(b"true")?;
                *slot = Scalar::Other;
            }
            b'f' => {
                self.literal(b"false")?;
                *slot = Scalar::Other;
            }
            b'n' => {
                self.literal(b"null")?;
                *slot = Scalar::Absent;
            }
            _ => *slot = self.nested(3)?,
        }
        Some(())
    }

    /// One value (at `depth`) cut out and deserialized by `serde_json`.
    fn nested<T: serde::de::DeserializeOwned>(&mut self, depth: usize) -> Option<T> {
        self.peek()?;
        let start = self.i;
        self.skip(depth)?;
        serde_json::from_slice(&self.b[start..self.i]).ok()
    }

    /// The value of `args` into `a`, marking the fields written in `seen`
    /// (a value that is not an object writes none, as `ArgsSeed`).
    fn args(&mut self, a: &mut RawArgs, seen: &mut u64) -> Option<()> {
        if self.peek()? != b'{' {
            return self.skip(2);
        }
        self.i += 1;
        if self.peek()? == b'}' {
            self.i += 1;
            return Some(());
        }
        loop {
            match arg_key(self.key()?) {
                k if k < ARG_SCALARS => {
                    self.scalar(arg_scalar(a, k)?)?;
                    *seen |= 1 << k;
                }
                ARG_INPUT_DIMS => {
                    self.peek()?;
                    let start = self.i;
                    a.input_dims = self.nested(3)?;
                    super::shapes::shape_text(&self.b[start..self.i], &mut a.input_shape);
                    *seen |= 1 << ARG_INPUT_DIMS;
                }
                ARG_INPUT_TYPES => {
                    a.input_types = self.nested(3)?;
                    *seen |= 1 << ARG_INPUT_TYPES;
                }
                _ => self.skip(3)?,
            }
            match self.peek()? {
                b',' => self.i += 1,
                b'}' => {
                    self.i += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// Passes over one value at `depth` (1 = the event), checking it is
    /// JSON this reader accepts.
    fn skip(&mut self, depth: usize) -> Option<()> {
        match self.peek()? {
            b'"' => {
                self.string()?;
            }
            b'-' | b'0'..=b'9' => {
                self.number()?;
            }
            b't' => self.literal(b"true")?,
            b'f' => self.literal(b"false")?,
            b'n' => self.literal(b"null")?,
            open @ (b'[' | b'{') => {
                if depth > MAX_DEPTH {
                    return None;
                }
                let close = if open == b'[' { b']' } else { b'}' };
                self.i += 1;
                if self.peek()? == close {
                    self.i += 1;
                    return Some(());
                }
                loop {
                    if open == b'{' {
                        self.key()?;
                    }
                    self.skip(depth + 1)?;
                    match self.peek()? {
                        b',' => self.i += 1,
                        c if c == close => {
                            self.i += 1;
                            return Some(());
                        }
                        _ => return None,
                    }
                }
            }
            _ => return None,
        }
        Some(())
    }
}

#[cfg(test)]
#[path = "flat_tests.rs"]
mod tests;
