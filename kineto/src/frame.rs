//! The trace document's structure, read through a window of bytes: each
//! value (a top-level entry, one element of `traceEvents`) is deserialized
//! from a slice of the window.
//!
//! Why: `serde_json` over an `io::Read` pulls the document one byte at a
//! time through the reader; over a slice it runs several times faster
//! (borrowed strings, whole-slice scans). The window keeps the streaming
//! contract: it holds the bytes not yet consumed, at least 1 MiB read at a
//! time, and grows only while a single value does not fit (so memory is
//! the window plus the largest single value, never the document).
//!
//! How a value is read ([`Frame::value`]): deserialize from the window's
//! unread bytes; if the slice ended inside the value (`serde_json`'s EOF
//! category), or the value ends exactly at the window's end (a number cut
//! short looks complete), read more and parse again from the value's
//! start. At most one retry per window refill, so the extra work is a
//! fraction of a value per MiB.
//!
//! The elements of `traceEvents` are first tried with [`flat::event`],
//! which reads Kineto's flat event objects without `serde` and leaves any
//! other element to the path above.
//!
//! The grammar around the values (the top-level object, the `traceEvents`
//! array, commas, colons) is read here byte by byte, with the errors
//! `serde_json` gives for the same faults; positions (line, column) are
//! those of the whole document.

use std::io::{self, Read};

use serde::de::{DeserializeOwned, DeserializeSeed, IgnoredAny};
use serde_json::de::SliceRead;

use super::raw::{
    DeviceProp, DistInfo, EventHandler, EventSeed, LenientVec, RawEvent, TopKey, TopMeta,
};
use super::scalar::Scalar;
use super::{flat, Problem};

/// Bytes read from the decoded stream at a time (and the window's first size).
const READ_BYTES: usize = 1 << 20;

/// A window over a decoded JSON stream.
pub(crate) struct Frame<R> {
    reader: R,
    buf: Vec<u8>,
    /// Next unread byte.
    pos: usize,
    /// Bytes of `buf` that hold data.
    len: usize,
    eof: bool,
    /// Bytes read at a time.
    read_bytes: usize,
    gzip: bool,
    max_json: u64,
    /// Newlines in the bytes dropped from the window's front, and the bytes
    /// since the last of them (for error positions).
    dropped_lines: usize,
    dropped_col: usize,
}

impl<R: Read> Frame<R> {
    pub(crate) fn new(reader: R, gzip: bool, max_json: u64) -> Self {
        Self::with_read_size(reader, gzip, max_json, READ_BYTES)
    }

    /// A frame that reads `read_bytes` (>= 1) at a time (tests use tiny
    /// reads to cut values at every byte).
    pub(crate) fn with_read_size(reader: R, gzip: bool, max_json: u64, read_bytes: usize) -> Self {
        let read_bytes = read_bytes.max(1);
        Self {
            reader,
            buf: vec![0; read_bytes],
            pos: 0,
            len: 0,
            eof: false,
            read_bytes,
            gzip,
            max_json,
            dropped_lines: 0,
            dropped_col: 0,
        }
    }

    /// Reads the whole document: metadata into `meta` (when `read_meta`),
    /// events into `handler`; then only whitespace may follow.
    pub(crate) fn document<H: EventHandler>(
        &mut self,
        meta: &mut TopMeta,
        handler: &mut H,
        read_meta: bool,
    ) -> Result<(), Problem> {
        match self.peek()? {
            Some(b'{') => {
                self.pos += 1;
                self.object(meta, handler, read_meta)?;
            }
            Some(b'[') => {
                self.pos += 1;
                meta.has_events = true;
                self.events(meta, handler)?;
            }
            _ => {
                // A value of another type (read as `serde` describes it, so
                // that a fault inside it is reported the same way).
                self.value::<Scalar>()?;
                return Err(Problem::NotKinetoTrace(
                    "the document is not a trace object with a traceEvents array".into(),
                ));
            }
        }
        match self.peek()? {
            None => Ok(()),
            Some(_) => Err(self.syntax("trailing characters")),
        }
    }

    /// The top-level object, after its `{`.
    fn object<H: EventHandler>(
        &mut self,
        meta: &mut TopMeta,
        handler: &mut H,
        read_meta: bool,
    ) -> Result<(), Problem> {
        if self.peek()? == Some(b'}') {
            self.pos += 1;
            return Ok(());
        }
        loop {
            match self.peek()? {
                Some(b'"') => {}
                None => return Err(self.truncated()),
                Some(_) => return Err(self.syntax("key must be a string")),
            }
            let key = self.value::<TopKey>()?.0;
            match self.peek()? {
                Some(b':') => self.pos += 1,
                None => return Err(self.truncated()),
                Some(_) => return Err(self.syntax("expected `:`")),
            }
            match key {
                0 => {
                    meta.has_events = true;
                    match self.peek()? {
                        Some(b'[') => {
                            self.pos += 1;
                            self.events(meta, handler)?;
                        }
                        _ => {
                            self.value::<Scalar>()?;
                            return Err(Problem::NotKinetoTrace(
                                "traceEvents is not an array".into(),
                            ));
                        }
                    }
                }
                1 if read_meta => meta.dist = Some(self.value::<DistInfo>()?),
                2 if read_meta => meta.devices = self.value::<LenientVec<DeviceProp>>()?.0,
                3 if read_meta => meta.base_time_ns = self.value::<Scalar>()?.as_u64(),
                4 => {
                    meta.format.paddle_key();
                    self.value::<IgnoredAny>()?;
                }
                _ => {
                    self.value::<IgnoredAny>()?;
                }
            }
            match self.peek()? {
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    self.pos += 1;
                    return Ok(());
                }
                None => return Err(self.truncated()),
                Some(_) => return Err(self.syntax("expected `,` or `}`")),
            }
        }
    }

    /// The elements of an events array, after its `[`.
    fn events<H: EventHandler>(
        &mut self,
        meta: &mut TopMeta,
        handler: &mut H,
    ) -> Result<(), Problem> {
        let mut ordinal = 0u64;
        if self.peek()? == Some(b']') {
            self.pos += 1;
        } else {
            // One event, reused: deserialized in place each time.
            let mut ev = RawEvent::default();
            loop {
                // Kineto's flat objects without serde; anything else (and an
                // element cut by the window's end) through `EventSeed`.
                match flat::event(&self.buf[self.pos..self.len], &mut ev) {
                    Some(n) if self.pos + n < self.len || self.eof => self.pos += n,
                    _ => self.parse(|de| EventSeed(&mut ev).deserialize(de))?,
                }
                meta.format.apply(&mut ev);
                handler.event(ordinal, &ev);
                ordinal += 1;
                match self.peek()? {
                    Some(b',') => self.pos += 1,
                    Some(b']') => {
                        self.pos += 1;
                        break;
                    }
                    None => return Err(self.truncated()),
                    Some(_) => return Err(self.syntax("expected `,` or `]`")),
                }
            }
        }
        meta.event_count = ordinal;
        Ok(())
    }

    /// The next value, deserialized from the window (see the module doc).
    fn value<T: DeserializeOwned>(&mut self) -> Result<T, Problem> {
        self.parse(|de| T::deserialize(de))
    }

    /// Runs `f` on a deserializer over the window's unread bytes until it
    /// parsed one whole value (reading more after a cut), and consumes it.
    /// `f` may run several times on the same value: it must start afresh.
    fn parse<T>(
        &mut self,
        mut f: impl FnMut(&mut serde_json::Deserializer<SliceRead<'_>>) -> serde_json::Result<T>,
    ) -> Result<T, Problem> {
        loop {
            let slice = &self.buf[self.pos..self.len];
            let mut de = serde_json::Deserializer::from_slice(slice);
            match f(&mut de) {
                Ok(v) => {
                    // Where the value ended (the stream starts there).
                    let end = self.pos + de.into_iter::<IgnoredAny>().byte_offset();
                    if end < self.len || self.eof {
                        self.pos = end;
                        return Ok(v);
                    }
                }
                // The slice ended inside the value: EOF, or a syntax error
                // at its last byte (`serde_json` calls a number cut after
                // its `.`, `e` or `-` invalid, not cut short).
                Err(e) if !self.eof && at_end(slice, &e) => {}
                Err(e) => return Err(self.json_problem(&e)),
            }
            self.fill()?;
        }
    }

    /// The next non-whitespace byte, not consumed; `None` at the end.
    fn peek(&mut self) -> Result<Option<u8>, Problem> {
        loop {
            while self.pos < self.len {
                match self.buf[self.pos] {
                    b' ' | b'\n' | b'\t' | b'\r' => self.pos += 1,
                    b => return Ok(Some(b)),
                }
            }
            if self.eof {
                return Ok(None);
            }
            self.fill()?;
        }
    }

    /// Reads more of the stream behind the unread bytes (growing the window
    /// when they fill it), or marks the end.
    fn fill(&mut self) -> Result<(), Problem> {
        if self.pos > 0 {
            let dropped = &self.buf[..self.pos];
            match memchr::memrchr(b'\n', dropped) {
                Some(i) => {
                    self.dropped_lines += bytecount(dropped);
                    self.dropped_col = self.pos - i - 1;
                }
                None => self.dropped_col += self.pos,
            }
            self.buf.copy_within(self.pos..self.len, 0);
            self.len -= self.pos;
            self.pos = 0;
        }
        if self.buf.len() - self.len < self.read_bytes {
            self.buf.resize(self.len + self.read_bytes, 0);
        }
        loop {
            let end = self.len + self.read_bytes;
            match self.reader.read(&mut self.buf[self.len..end]) {
                Ok(0) => {
                    self.eof = true;
                    return Ok(());
                }
                Ok(n) => {
                    self.len += n;
                    return Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.io_problem(e)),
            }
        }
    }

    /// (line, column) of window index `i`, as `serde_json` counts them
    /// (line from 1, column = bytes since the line's start).
    fn position(&self, i: usize) -> (usize, usize) {
        let before = &self.buf[..i];
        match memchr::memrchr(b'\n', before) {
            Some(nl) => (1 + self.dropped_lines + bytecount(before), i - nl - 1),
            None => (1 + self.dropped_lines, self.dropped_col + i),
        }
    }

    fn truncated(&self) -> Problem {
        self.truncated_at(self.pos)
    }

    fn truncated_at(&self, i: usize) -> Problem {
        let (line, column) = self.position(i);
        Problem::Truncated { line, column }
    }

    /// A syntax error at the next unread byte (1-based column, as
    /// `serde_json` reports the byte it stopped at).
    fn syntax(&self, message: &str) -> Problem {
        let (line, column) = self.position(self.pos + 1);
        Problem::NotJson {
            message: message.to_owned(),
            line,
            column,
        }
    }

    /// What a `serde_json` error from the slice at `pos` means for the user,
    /// with its position in the whole document.
    fn json_problem(&self, e: &serde_json::Error) -> Problem {
        use serde_json::error::Category;
        let (base_line, base_col) = self.position(self.pos);
        let (line, column) = match e.line() {
            0 | 1 => (base_line, base_col + e.column()),
            l => (base_line + l - 1, e.column()),
        };
        let message = without_position(e);
        match e.classify() {
            Category::Eof => Problem::Truncated { line, column },
            Category::Syntax => Problem::NotJson {
                message,
                line,
                column,
            },
            Category::Data | Category::Io => {
                Problem::NotKinetoTrace(format!("{message} at line {line} column {column}"))
            }
        }
    }

    fn io_problem(&self, io: io::Error) -> Problem {
        match io.kind() {
            io::ErrorKind::FileTooLarge => Problem::JsonTooLarge {
                max_bytes: self.max_json,
            },
            io::ErrorKind::UnexpectedEof if self.gzip => Problem::TruncatedGzip,
            io::ErrorKind::InvalidInput | io::ErrorKind::InvalidData if self.gzip => {
                Problem::CorruptGzip(io.to_string())
            }
            _ => Problem::Io(io),
        }
    }
}

/// Whether `e`, from parsing `slice`, is about its end: an EOF, or a fault
/// found at the slice's last byte or past it (a real fault there is
/// reported again once more bytes follow it).
fn at_end(slice: &[u8], e: &serde_json::Error) -> bool {
    if e.classify() == serde_json::error::Category::Eof {
        return true;
    }
    let line_start = match e.line() {
        0 | 1 => 0,
        l => match memchr::memchr_iter(b'\n', slice).nth(l - 2) {
            Some(i) => i + 1,
            None => return true,
        },
    };
    line_start + e.column() + 1 >= slice.len()
}

/// Newlines in `bytes`.
fn bytecount(bytes: &[u8]) -> usize {
    memchr::memchr_iter(b'\n', bytes).count()
}

/// serde_json's message without its " at line L column C" suffix.
fn without_position(e: &serde_json::Error) -> String {
    let text = e.to_string();
    match text.rfind(" at line ") {
        Some(i) => text[..i].to_owned(),
        None => text,
    }
}

#[cfg(test)]
#[path = "frame_tests.rs"]
mod tests;
