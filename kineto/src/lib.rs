//! `rankscope-kineto`: PyTorch profiler (Kineto) Chrome-trace files to
//! `rankscope.v1` event streams, one stream per file (= per rank). Used by
//! `rankscope import` (the CLI sends the chunks to the collector) and by the
//! agent (traces it captures through libkineto's daemon protocol). Pure
//! parsing: files in, proto values out; no network, no async runtime.
//!
//! In: a `.json` or `.json.gz` trace (gzip is recognised by its magic
//! bytes) of one of the [`Format`]s, told apart by content: Kineto's, a
//! PaddlePaddle profiler trace or an ONNX Runtime profile (the `format`
//! module rewrites the last two into Kineto's vocabulary as they are read;
//! their rank is `--rank` or `rank<N>` in the file name), [`ImportOptions`]. Out: [`Chunk`]s of `rankscope.v1` events for
//! one rank, each a self-contained `RankEvents` group (identity, the
//! definitions of every name id it references, at most `chunk_events`
//! events), handed to a sink in stream order; then an [`ImportSummary`]
//! with [`ImportStats`]. [`discover()`] expands folders into trace files.
//!
//! Entry points: [`import_file`] / [`import_file_with_progress`] (streaming,
//! bounded memory, any file size), [`import_to_memory`] (all events at
//! once), [`import_bytes`] (the same for a file already in memory),
//! [`import_source_with_progress`] (a [`TraceSource`]: a file in object
//! storage, streamed once per pass) and
//! [`parse_trace_file`] (the agent's: a rank identity it already knows and
//! a cap on the file size, all events at once).
//!
//! What becomes what:
//! - identity: `distributedInfo.rank` / `world_size` (or the caller's
//!   overrides; without either the file is rejected), `local_rank` = the
//!   device of the GPU activities, labels `source=kineto`, `trace_file`,
//!   `gpu` (from `deviceProperties`), `backend`, `nccl_version`;
//! - steps: CPU `ProfilerStep#N` annotations become `StepBegin(N)` /
//!   `StepEnd(N)` (GPU-side `gpu_user_annotation` ones if the CPU ones are
//!   missing; without either, torch's `Optimizer.step#*` ops mark the
//!   iterations, numbered 0, 1, ... (a trace libkineto's daemon mode
//!   started in an unmodified script); a trace with none of these is one
//!   step 0 over the whole trace; [`ImportStats::steps_from`] says which);
//! - GPU activities (`kernel`, `gpu_memcpy`, `gpu_memset`) become `Kernel`
//!   events (kind, name, stream = `args.stream` or `tid`, device =
//!   `args.device` or `pid`, correlation, memcpy/memset bytes, and the
//!   start, end and name of the CUDA runtime/driver call with the same
//!   correlation when the trace has it: `launch_*`); each
//!   belongs to the step of its CPU launch (same `args.correlation`, as HTA
//!   does); those launched outside any step, or before the trace started,
//!   are kept, outside the steps (see the `plan` module);
//! - NCCL kernels (`^nccl.*Kernel`) also become `Collective` events (see
//!   the `nccl` module for op, dtype, bytes, process group and sequence numbers);
//! - CPU-side collectives (gloo and other host backends: `c10d::*` ops,
//!   `record_param_comms`, `gloo:*` annotations) that launched no NCCL
//!   kernel become host `Collective` events (device -1; see the `cpu_comm`
//!   module), one per call;
//! - a host event (CPU op or annotation) with a `stream` argument (a
//!   Triton launcher `cpu_op`) becomes an `OTHER` `Span` on that stream
//!   with device `event::HOST_STREAM_DEVICE` (-2): HTA 0.5.0 counts such
//!   rows as GPU work, and the collector's HTA views do too (`--exact`
//!   leaves them out);
//! - a few CPU phase annotations become `Span`s (`## forward ##`,
//!   `## backward ##`, `## optimizer ##`, `DistributedDataParallel.forward`,
//!   `Optimizer.step#*`, `Optimizer.zero_grad#*`, `enumerate(DataLoader)#*`).
//!
//! Time: `ts`/`dur` are microseconds, integers (old traces) or floats with
//! nanosecond precision (new ones). Output times are u64 ns since the Unix
//! epoch: `baseTimeNanoseconds` (0 when absent: old traces' `ts` are epoch
//! microseconds already) + `ts * 1000`, rounded to the nanosecond. HTA's
//! rounding of float timestamps to whole microseconds and its ProfilerStep
//! window are not applied here: every GPU activity is kept at its real
//! precision, and the collector's HTA-style views apply both at query time
//! (`rankscope_analysis::hta_load`), with the window's end recorded as the
//! rank label `hta_last_step_end_ns` (the `identity` module).
//!
//! Stream order: `StepBegin(N)`, the events of step N (by start time),
//! `StepEnd(N)`, with out-of-step events between steps where they belong
//! in time; every interval has `end_ns >= start_ns`. The output is a pure
//! function of the file (and the options other than `max_buffered_events`).
//!
//! Memory: the document is streamed (never a DOM), through a window of
//! 1 MiB (more only while a single value is larger; see the `frame`
//! module). A first pass keeps O(steps + API calls + NCCL kernels) facts
//! (about 24 bytes per CUDA API call) and, while the output fits one
//! ordering window, the fields of every output event (about 64 bytes
//! each): then that window is filled from them and the file is read once.
//! Otherwise ordering passes read it again, each keeping at most
//! `max_buffered_events` compact records (about 64 bytes each); a chunk
//! holds at most `chunk_events` events.
//! Unusable single events (no numeric `ts`/`dur`) are skipped and counted;
//! structural problems fail the file with an [`ImportError`] naming it.

mod cpu_comm;
mod digest;
mod discover;
mod emit;
mod error;
mod event;
#[cfg(test)]
mod fixtures;
mod flat;
mod format;
mod frame;
mod identity;
mod names;
mod nccl;
mod ops;
mod parse;
mod plan;
#[macro_use]
mod raw;
mod scalar;
mod scan;
mod shapes;
mod source;
mod stats;
mod time;
mod views;

use std::collections::HashMap;
use std::path::Path;

use rankscope_proto::v1 as proto;

pub use digest::Digest;
pub use discover::{discover, discover_spans};
pub use error::{ImportError, Problem};
pub use event::HOST_STREAM_DEVICE;
pub use format::{Format, FORMATS_READ};
pub use ops::{op_summary, op_summary_with_host_ops, OpStat};
pub use parse::{parse_trace_file, MAX_GZIP_EXPANSION};
pub use rankscope_analysis::HostOp;
pub use source::TraceSource;
pub use stats::{EventCounts, ImportStats, StepSource, MAX_WARNINGS};

use emit::{Emitter, Window};
use plan::Plan;
use raw::TopMeta;
use scan::Scan;
use source::Input;

/// Default events per chunk.
pub const DEFAULT_CHUNK_EVENTS: usize = 10_000;
/// Default bound on records buffered by one ordering pass (~64 MiB).
pub const DEFAULT_MAX_BUFFERED_EVENTS: usize = 1_000_000;

/// How to import.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportOptions {
    /// Job id the events are filed under. Required.
    pub job: String,
    /// Run id (empty = unknown).
    pub run_id: String,
    /// Node name for the identity (empty: the trace does not record it).
    pub node: String,
    /// Rank to use instead of `distributedInfo.rank`.
    pub rank_override: Option<u32>,
    /// World size to use instead of `distributedInfo.world_size`.
    pub world_size_override: Option<u32>,
    /// Most events per chunk (>= 1).
    pub chunk_events: usize,
    /// Most records one ordering pass buffers (>= 1); more events need more
    /// passes over the file, the output is the same.
    pub max_buffered_events: usize,
    /// Most decompressed JSON bytes one pass may read (`None`: no cap);
    /// more fails the import with [`Problem::JsonTooLarge`]. Bounds the
    /// time a gzip bomb costs (its memory is bounded anyway: streaming).
    pub max_json_bytes: Option<u64>,
}

impl ImportOptions {
    /// Defaults for `job`.
    pub fn new(job: impl Into<String>) -> Self {
        Self {
            job: job.into(),
            run_id: String::new(),
            node: String::new(),
            rank_override: None,
            world_size_override: None,
            chunk_events: DEFAULT_CHUNK_EVENTS,
            max_buffered_events: DEFAULT_MAX_BUFFERED_EVENTS,
            max_json_bytes: None,
        }
    }
}

/// A piece of one rank's event stream: a self-contained `RankEvents` group.
#[derive(Debug, Clone, PartialEq)]
pub struct Chunk {
    /// 0, 1, 2, ... within the file.
    pub index: u64,
    /// The rank (same in every chunk of a file).
    pub identity: proto::RankIdentity,
    /// Definitions of every name id the events reference (ids are stable
    /// across the chunks of a file).
    pub names: Vec<proto::InternedName>,
    /// Events in stream order.
    pub events: Vec<proto::Event>,
    /// [`Digest`] of the file's bytes (compressed ones for gzip), the same
    /// in every chunk of a file: a content fingerprint taken while the scan
    /// read it (`rankscope import` derives its session id from it).
    pub file_digest: u64,
}

impl Chunk {
    /// As the wire group the collector ingests.
    pub fn into_rank_events(self) -> proto::RankEvents {
        proto::RankEvents {
            identity: Some(self.identity),
            names: self.names,
            events: self.events,
            ..Default::default()
        }
    }
}

/// Where an import is, for progress display.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// 1 = the scan (the only pass when the output fits one ordering
    /// window), 2.. = ordering passes.
    pub pass: u32,
    /// File bytes read in this pass.
    pub file_bytes_read: u64,
    /// File size.
    pub file_bytes_total: u64,
}

/// The result of importing one file.
#[derive(Debug, Clone, PartialEq)]
pub struct ImportSummary {
    pub identity: proto::RankIdentity,
    pub stats: ImportStats,
}

/// A whole file in memory (for tests and small traces).
#[derive(Debug, Clone, PartialEq)]
pub struct ImportedRank {
    pub identity: proto::RankIdentity,
    /// Every name definition, by id.
    pub names: Vec<proto::InternedName>,
    pub events: Vec<proto::Event>,
    pub stats: ImportStats,
}

/// Imports `path`, handing chunks to `sink` (see the module doc).
pub fn import_file<F, E>(
    path: &Path,
    opts: &ImportOptions,
    sink: F,
) -> Result<ImportSummary, ImportError>
where
    F: FnMut(Chunk) -> Result<(), E>,
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    import_file_with_progress(path, opts, |_| {}, sink)
}

/// [`import_file`] with progress callbacks (about one per MiB read).
pub fn import_file_with_progress<F, E>(
    path: &Path,
    opts: &ImportOptions,
    mut progress: impl FnMut(&Progress),
    sink: F,
) -> Result<ImportSummary, ImportError>
where
    F: FnMut(Chunk) -> Result<(), E>,
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    run(Input::File(path), path, opts, &mut progress, sink).map_err(|p| p.at(path))
}

/// [`import_file_with_progress`] for a file that is not local (object
/// storage): `name` stands for its path (the `trace_file` label, errors);
/// each pass opens `source` again and streams it.
pub fn import_source_with_progress<F, E>(
    name: &Path,
    source: &dyn TraceSource,
    opts: &ImportOptions,
    mut progress: impl FnMut(&Progress),
    sink: F,
) -> Result<ImportSummary, ImportError>
where
    F: FnMut(Chunk) -> Result<(), E>,
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    run(Input::Source(source), name, opts, &mut progress, sink).map_err(|p| p.at(name))
}

/// Whether a file found under a folder or prefix should be imported (the
/// rule [`discover()`] applies to local folders): everything but a JSON
/// object whose first 64 KiB mention none of Kineto's top-level keys.
pub fn looks_like_trace_source(source: &dyn TraceSource) -> bool {
    source::looks_like_trace_input(Input::Source(source))
}

/// Whether a file name is a trace file's (`.json` or `.json.gz`), the
/// names [`discover()`] takes from a folder.
pub fn is_trace_file_name(name: &str) -> bool {
    name.ends_with(".json") || name.ends_with(".json.gz")
}

/// Imports `path` into memory: all chunks joined.
pub fn import_to_memory(path: &Path, opts: &ImportOptions) -> Result<ImportedRank, ImportError> {
    to_memory(Input::File(path), path, opts)
}

/// [`import_to_memory`] for a trace file's bytes (plain or gzip JSON)
/// already in memory; `name` stands for the file's path (the `trace_file`
/// label and errors).
pub fn import_bytes(
    name: &Path,
    bytes: &[u8],
    opts: &ImportOptions,
) -> Result<ImportedRank, ImportError> {
    to_memory(Input::Bytes(bytes), name, opts)
}

fn to_memory(
    input: Input<'_>,
    path: &Path,
    opts: &ImportOptions,
) -> Result<ImportedRank, ImportError> {
    let mut names = HashMap::new();
    let mut events = Vec::new();
    let summary = run(input, path, opts, &mut |_| {}, |c: Chunk| {
        for n in c.names {
            names.entry(n.id).or_insert(n);
        }
        events.extend(c.events);
        Ok::<(), std::convert::Infallible>(())
    })
    .map_err(|p| p.at(path))?;
    let mut names: Vec<proto::InternedName> = names.into_values().collect();
    names.sort_by_key(|n| n.id);
    Ok(ImportedRank {
        identity: summary.identity,
        names,
        events,
        stats: summary.stats,
    })
}

fn run<F, E>(
    input: Input<'_>,
    path: &Path,
    opts: &ImportOptions,
    progress: &mut dyn FnMut(&Progress),
    sink: F,
) -> Result<ImportSummary, Problem>
where
    F: FnMut(Chunk) -> Result<(), E>,
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    if opts.job.is_empty() {
        return Err(Problem::BadOptions("the job id is empty".into()));
    }
    let file_bytes_total = input.len().map_err(Problem::Io)?;
    let max_json = opts.max_json_bytes.unwrap_or(u64::MAX);
    let report = |pass: u32| {
        move |read: u64| Progress {
            pass,
            file_bytes_read: read,
            file_bytes_total,
        }
    };

    // Pass 1: the facts needed to place events.
    let mut meta = TopMeta::default();
    let mut scan = Scan::keeping(opts.max_buffered_events.max(1));
    let mut views = views::Collect::default();
    let at = report(1);
    let first = source::pass(
        input,
        max_json,
        &mut meta,
        &mut Both(&mut scan, &mut views),
        true,
        true,
        Some(&mut |n| progress(&at(n))),
    )?;
    check_events(&meta, &scan)?;
    let (identity, id_note) = identity::identity(path, opts, &meta, &scan)?;
    let base_ns = meta.base_time_ns.unwrap_or(0);
    if let Some((_, end)) = scan.bounds {
        if base_ns.checked_add(end).is_none() {
            return Err(Problem::TimeOverflow {
                base_ns,
                offset_ns: end,
            });
        }
    }
    let mut stats = std::mem::take(&mut scan.stats);
    if let Some(note) = id_note {
        stats.warn(note);
    }
    if stats.skipped_bad_events > 0 {
        stats.warn(format!(
            "{} event(s) without a usable ts/dur skipped",
            stats.skipped_bad_events
        ));
    }
    stats.file_bytes = file_bytes_total;
    stats.bytes_read = first.file;
    stats.json_bytes = first.json;
    stats.trace_events = meta.event_count;
    let pg_config = meta
        .dist
        .as_mut()
        .and_then(|d| d.pg_config.take())
        .unwrap_or_default();
    let plan = Plan::new(&mut scan, identity.world_size, &pg_config, &mut stats);
    let kept = scan.keep.take();
    let mut interner = std::mem::take(&mut scan.names);
    drop(scan);
    let view_events = views.finish(&mut interner, base_ns, meta.format.format());

    let mut emitter = Emitter::new(
        &plan,
        identity.clone(),
        base_ns,
        opts.chunk_events,
        sink,
        stats,
    );
    emitter.file_digest = first.digest.unwrap_or(0);
    let mut passes = 1;
    if let Some(kept) = kept {
        // The scan kept every output event's fields: one window holds them
        // all, no second read of the file.
        let mut window = Window::new(&plan, &mut interner, None, opts.max_buffered_events);
        for p in kept {
            window.place(p);
        }
        let (recs, _, peak) = window.finish();
        emitter.stats.max_buffered_events = peak as u64;
        emitter.emit(recs, &interner)?;
    } else {
        // Ordering passes over the file, each emitting what it buffered.
        let mut after = None;
        loop {
            passes += 1;
            let mut window = Window::new(&plan, &mut interner, after, opts.max_buffered_events);
            let mut again = TopMeta::default();
            let at = report(passes);
            let bytes = source::pass(
                input,
                max_json,
                &mut again,
                &mut window,
                false,
                false,
                Some(&mut |n| progress(&at(n))),
            )?;
            if again.event_count != meta.event_count {
                return Err(Problem::Changed {
                    was: meta.event_count,
                    now: again.event_count,
                });
            }
            let (recs, more, peak) = window.finish();
            emitter.stats.bytes_read += bytes.file;
            emitter.stats.max_buffered_events = emitter.stats.max_buffered_events.max(peak as u64);
            after = recs.last().map(emit::Rec::key).or(after);
            let done = !more || recs.is_empty();
            emitter.emit(recs, &interner)?;
            if done {
                break;
            }
        }
    }
    let mut stats = emitter.finish(view_events, &interner)?;
    stats.passes = passes;
    if stats.gpu_events_unlinked > 0 {
        stats.warn(format!(
            "{} GPU event(s) have no CPU launch in the trace (launched before profiling \
             started): kept outside the steps",
            stats.gpu_events_unlinked
        ));
    }
    Ok(ImportSummary { identity, stats })
}

/// File-level checks after the scan.
fn check_events(meta: &TopMeta, scan: &Scan) -> Result<(), Problem> {
    if !meta.has_events {
        return Err(Problem::NotKinetoTrace(
            "no traceEvents array in the top-level object".into(),
        ));
    }
    if meta.event_count == 0 {
        return Err(Problem::EmptyTrace);
    }
    if scan.usable == 0
        && scan.stats.skipped_bad_events == 0
        && (meta.base_time_ns.is_some() || !meta.devices.is_empty())
    {
        // A profiler's own top-level keys, but not one complete event.
        return Err(Problem::NoActivity {
            events: meta.event_count,
        });
    }
    if scan.usable == 0 && scan.stats.skipped_bad_events == 0 {
        // Not one complete event: an array or object of something else.
        return Err(Problem::NotKinetoTrace(format!(
            "none of its {} events is a complete (\"ph\": \"X\") trace event",
            meta.event_count
        )));
    }
    if scan.usable == 0 {
        return Err(Problem::NoUsableEvents {
            events: meta.event_count,
            skipped: scan.stats.skipped_bad_events,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests;

/// The scan and the views' collector on one pass.
struct Both<'a>(&'a mut Scan, &'a mut views::Collect);

impl raw::EventHandler for Both<'_> {
    fn event(&mut self, ordinal: u64, ev: &raw::RawEvent) {
        self.0.event(ordinal, ev);
        self.1.event(ordinal, ev);
    }
}
