//! Why a file could not be imported.
//!
//! Every error names the file ([`ImportError::path`]) and the problem in
//! words a user can act on ([`Problem`]); positions in the JSON are given
//! as line and column of the decompressed text.

use std::path::PathBuf;

/// A file that could not be imported, and why.
#[derive(Debug, thiserror::Error)]
#[error("{}: {problem}", path.display())]
pub struct ImportError {
    /// The file (or folder, for discovery errors).
    pub path: PathBuf,
    /// What is wrong with it.
    pub problem: Problem,
}

/// What is wrong with a trace file.
#[derive(Debug, thiserror::Error)]
pub enum Problem {
    /// The file cannot be opened or read.
    #[error("cannot read: {0}")]
    Io(std::io::Error),
    /// The file is larger than the caller's cap.
    #[error("too large: {bytes} bytes, the limit is {max_bytes}")]
    TooLarge { bytes: u64, max_bytes: u64 },
    /// The decompressed JSON is larger than the caller's cap
    /// (`ImportOptions::max_json_bytes`; a gzip bomb).
    #[error("too large: the decompressed JSON exceeds {max_bytes} bytes")]
    JsonTooLarge { max_bytes: u64 },
    /// The JSON ends before the document is complete.
    #[error("truncated: the JSON ends early (line {line}, column {column})")]
    Truncated { line: usize, column: usize },
    /// The gzip stream ends before its end marker.
    #[error("truncated: the gzip stream ends early")]
    TruncatedGzip,
    /// The gzip data is damaged.
    #[error("corrupt gzip data: {0}")]
    CorruptGzip(String),
    /// The text is not JSON.
    #[error("not JSON: {message} at line {line} column {column}")]
    NotJson {
        message: String,
        line: usize,
        column: usize,
    },
    /// Valid JSON, but not shaped like any trace format rankscope reads.
    #[error("not a trace rankscope reads ({formats}): {0}", formats = crate::FORMATS_READ)]
    NotKinetoTrace(String),
    /// `traceEvents` has no elements.
    #[error("traceEvents is empty: nothing to import")]
    EmptyTrace,
    /// No `distributedInfo` and no rank / world size given by the caller.
    #[error(
        "no distributedInfo (rank, world_size) in the trace; \
         pass --rank and --world-size to import it anyway"
    )]
    MissingDistributedInfo,
    /// No `distributedInfo`, a rank in the file name (rankscope-agent's
    /// daemon trace naming or `rank<N>`) other than 0, and no world size.
    #[error(
        "no distributedInfo in the trace, and its file name says rank {0} (rankscope-agent's \
         <trace>-r<rank>-<pid> naming or rank<N>): pass --world-size (the job's) to import it \
         as that rank, or --rank and --world-size"
    )]
    NamedRankNeedsWorldSize(u32),
    /// A format that records no rank (PaddlePaddle, ONNX Runtime) and no
    /// rank or world size from the caller or the file name.
    #[error(
        "a {0} trace records no rank or world size: pass --world-size, and --rank or a \
         file name with rank<N> in it (e.g. rank3_time_....paddle_trace.json)"
    )]
    NoRank(&'static str),
    /// `distributedInfo` is present but unusable.
    #[error("bad distributedInfo: {0}")]
    BadDistributedInfo(String),
    /// A profiler's trace (it has `baseTimeNanoseconds` or
    /// `deviceProperties`) whose events are all metadata and markers: the
    /// profiler traced a window with no activity (seen from a real H200 job
    /// whose steps ended before Kineto's on-demand trace began).
    #[error(
        "the trace holds no activity: its {events} events are metadata and markers, none a \
         complete (\"ph\": \"X\") event (the profiler traced an idle window, e.g. the job's \
         steps ended before the trace began)"
    )]
    NoActivity { events: u64 },
    /// Every complete event lacks a usable `ts` or `dur`.
    #[error(
        "no event has a usable ts and dur ({skipped} complete events lack them, \
         {events} trace events in all)"
    )]
    NoUsableEvents { events: u64, skipped: u64 },
    /// Timestamps do not fit u64 nanoseconds since the epoch.
    #[error(
        "timestamps overflow u64 nanoseconds (baseTimeNanoseconds {base_ns} + {offset_ns} ns)"
    )]
    TimeOverflow { base_ns: u64, offset_ns: u64 },
    /// The file changed between two passes over it.
    #[error("the file changed while being imported ({was} events in the first pass, {now} later)")]
    Changed { was: u64, now: u64 },
    /// A folder holds no trace files.
    #[error("no .json or .json.gz trace files in this folder")]
    NoTraceFiles,
    /// The caller's options are unusable.
    #[error("invalid import options: {0}")]
    BadOptions(String),
    /// The caller's sink failed on a chunk.
    #[error("sending chunk {chunk} failed: {error}")]
    Sink {
        chunk: u64,
        error: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl Problem {
    /// Attaches the file.
    pub(crate) fn at(self, path: impl Into<PathBuf>) -> ImportError {
        ImportError {
            path: path.into(),
            problem: self,
        }
    }
}
