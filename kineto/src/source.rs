//! Reading a trace file: plain or gzip JSON, one streaming pass at a time.
//!
//! In: a path, the bytes of a file, or a [`TraceSource`] (a file elsewhere,
//! e.g. in object storage, opened again for each pass) ([`Input`]). Out: one pass of
//! [`raw`](super::raw) deserialization over the file, read through a
//! [`Frame`] (events to a handler), byte counts, and progress callbacks
//! with the file bytes read so far; or a [`Problem`] saying what is wrong
//! with the file.
//!
//! Compression is decided by the gzip magic bytes (`1f 8b`), not by the
//! file name. Memory: a fixed-size file buffer and the frame's window (1 MiB,
//! more only while one value is larger); nothing grows with the file.

use std::cell::{Cell, RefCell};
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::Path;
use std::rc::Rc;

use flate2::bufread::MultiGzDecoder;

use super::digest::Digest;
use super::frame::Frame;
use super::raw::{EventHandler, TopMeta};
use super::Problem;

/// Progress callbacks come at most once per this many file bytes.
const PROGRESS_EVERY_BYTES: u64 = 1 << 20;
const FILE_BUFFER_BYTES: usize = 64 << 10;

/// Counts bytes read through it, reports file progress and, when asked,
/// digests them.
struct Counting<'a, R> {
    inner: R,
    count: Rc<Cell<u64>>,
    next_report: u64,
    on_progress: Option<&'a mut dyn FnMut(u64)>,
    digest: Option<Rc<RefCell<Digest>>>,
}

impl<R: Read> Read for Counting<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        if let Some(d) = &self.digest {
            d.borrow_mut().write(&buf[..n]);
        }
        let total = self.count.get() + n as u64;
        self.count.set(total);
        if total >= self.next_report {
            self.next_report = total + PROGRESS_EVERY_BYTES;
            if let Some(f) = self.on_progress.as_mut() {
                f(total);
            }
        }
        Ok(n)
    }
}

/// A trace file that is not on the local file system (object storage, an
/// https URL): the importer reads it as a stream, once per pass, never as a
/// whole (no copy on disk, no copy in memory).
pub trait TraceSource {
    /// The file's size in bytes (compressed size for gzip).
    fn size(&self) -> io::Result<u64>;
    /// A new stream over the file's bytes, from the first.
    fn open(&self) -> io::Result<Box<dyn Read + '_>>;
}

/// Where a trace comes from: a file, its bytes already in memory, or a
/// [`TraceSource`].
#[derive(Clone, Copy)]
pub(crate) enum Input<'a> {
    File(&'a Path),
    Bytes(&'a [u8]),
    Source(&'a dyn TraceSource),
}

impl Input<'_> {
    /// The size of the (possibly compressed) file.
    pub(crate) fn len(&self) -> io::Result<u64> {
        match self {
            Input::File(p) => Ok(std::fs::metadata(p)?.len()),
            Input::Bytes(b) => Ok(b.len() as u64),
            Input::Source(s) => s.size(),
        }
    }
}

/// Fails reads once more than `max` bytes came through (a gzip bomb).
struct Capped<R> {
    inner: R,
    left: u64,
}

impl<R: Read> Read for Capped<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.left == 0 {
            // One byte more than allowed means the limit is exceeded.
            let mut probe = [0u8; 1];
            return match self.inner.read(&mut probe)? {
                0 => Ok(0),
                _ => Err(io::Error::new(io::ErrorKind::FileTooLarge, "json limit")),
            };
        }
        let want = buf
            .len()
            .min(usize::try_from(self.left).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut buf[..want])?;
        self.left -= n as u64;
        Ok(n)
    }
}

/// Bytes one pass read.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct PassBytes {
    /// From the file (compressed size for gzip).
    pub file: u64,
    /// Decompressed JSON.
    pub json: u64,
    /// [`Digest`] of the file's bytes, when asked for.
    pub digest: Option<u64>,
}

/// Opens `input` as a decompressed byte stream of at most `max_json`
/// bytes (more fails the read with `ErrorKind::FileTooLarge`); the
/// counters see the file bytes and the JSON bytes read.
fn open<'a>(
    input: Input<'a>,
    max_json: u64,
    file_count: Rc<Cell<u64>>,
    json_count: Rc<Cell<u64>>,
    on_progress: Option<&'a mut dyn FnMut(u64)>,
    digest: Option<Rc<RefCell<Digest>>>,
) -> io::Result<(Box<dyn Read + 'a>, bool)> {
    let raw: Box<dyn Read + 'a> = match input {
        Input::File(path) => Box::new(File::open(path)?),
        Input::Bytes(bytes) => Box::new(bytes),
        Input::Source(source) => source.open()?,
    };
    let mut buffered = BufReader::with_capacity(
        FILE_BUFFER_BYTES,
        Counting {
            inner: raw,
            count: file_count,
            next_report: 0,
            on_progress,
            digest,
        },
    );
    let gzip = buffered.fill_buf()?.starts_with(&[0x1f, 0x8b]);
    let decoded: Box<dyn Read + 'a> = if gzip {
        Box::new(MultiGzDecoder::new(buffered))
    } else {
        Box::new(buffered)
    };
    let counted = Counting {
        inner: Capped {
            inner: decoded,
            left: max_json,
        },
        count: json_count,
        next_report: u64::MAX,
        on_progress: None,
        digest: None,
    };
    Ok((Box::new(counted), gzip))
}

/// One streaming pass over the file: metadata into `meta` (when
/// `read_meta`), events into `handler`; the file's [`Digest`] when
/// `digest`.
pub(crate) fn pass<'a, H: EventHandler>(
    input: Input<'a>,
    max_json: u64,
    meta: &mut TopMeta,
    handler: &mut H,
    read_meta: bool,
    digest: bool,
    on_progress: Option<&'a mut dyn FnMut(u64)>,
) -> Result<PassBytes, Problem> {
    let file_count = Rc::new(Cell::new(0));
    let json_count = Rc::new(Cell::new(0));
    let digest = digest.then(Rc::default);
    let (reader, gzip) = open(
        input,
        max_json,
        file_count.clone(),
        json_count.clone(),
        on_progress,
        digest.clone(),
    )
    .map_err(Problem::Io)?;
    // `document` reads to the end of the stream (only whitespace may follow
    // the document), so the digest covers every byte of the file.
    Frame::new(reader, gzip, max_json).document(meta, handler, read_meta)?;
    Ok(PassBytes {
        file: file_count.get(),
        json: json_count.get(),
        digest: digest.map(|d: Rc<RefCell<Digest>>| d.borrow().finish()),
    })
}

/// Whether a file found in a folder should be imported: everything except a
/// JSON object whose first 64 KiB mention none of the Kineto top-level keys
/// (e.g. a results file next to the traces). Unreadable or non-JSON files
/// are kept so that importing them reports the problem.
pub(crate) fn looks_like_trace(path: &Path) -> bool {
    looks_like_trace_input(Input::File(path))
}

/// [`looks_like_trace`] for any [`Input`].
pub(crate) fn looks_like_trace_input(input: Input<'_>) -> bool {
    const SNIFF_BYTES: u64 = 64 << 10;
    let (reader, _) = match open(input, u64::MAX, Rc::default(), Rc::default(), None, None) {
        Ok(r) => r,
        Err(_) => return true,
    };
    let mut head = Vec::new();
    if reader.take(SNIFF_BYTES).read_to_end(&mut head).is_err() {
        return true;
    }
    let text = String::from_utf8_lossy(&head);
    if !text.trim_start().starts_with('{') {
        return true;
    }
    [
        "\"traceEvents\"",
        "\"schemaVersion\"",
        "\"distributedInfo\"",
    ]
    .iter()
    .any(|k| text.contains(k))
}
