//! What an import did: counts of emitted events, skipped input, warnings.
//!
//! Invariants: `warnings` holds at most [`MAX_WARNINGS`] messages (the rest
//! are only counted in `warnings_suppressed`); every skipped event is
//! counted in `skipped_bad_events` whether or not its warning was kept.

use rankscope_proto::v1 as proto;

/// Warnings kept verbatim per file; further ones are only counted.
pub const MAX_WARNINGS: usize = 20;

/// Emitted events by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EventCounts {
    pub step_begin: u64,
    pub step_end: u64,
    pub span: u64,
    pub kernel: u64,
    pub collective: u64,
    /// Operator and memory view records (`OperatorStat`, `MemoryOpStat`,
    /// `MemoryPeak`, `MemorySample`).
    pub views: u64,
}

impl EventCounts {
    /// Counts one event.
    pub fn add(&mut self, ev: &proto::Event) {
        use proto::event::Kind;
        match ev.kind {
            Some(Kind::StepBegin(_)) => self.step_begin += 1,
            Some(Kind::StepEnd(_)) => self.step_end += 1,
            Some(Kind::Span(_)) => self.span += 1,
            Some(Kind::Kernel(_)) => self.kernel += 1,
            Some(Kind::Collective(_)) => self.collective += 1,
            Some(
                Kind::OperatorStat(_)
                | Kind::MemoryOpStat(_)
                | Kind::MemoryPeak(_)
                | Kind::MemorySample(_),
            ) => self.views += 1,
            None => {}
        }
    }

    /// All events.
    pub fn total(&self) -> u64 {
        self.step_begin + self.step_end + self.span + self.kernel + self.collective + self.views
    }
}

/// Statistics of one imported file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImportStats {
    /// Events emitted, by kind.
    pub events_by_kind: EventCounts,
    /// Trace events skipped because they were unusable (no numeric
    /// `ts`/`dur`, negative or overflowing times).
    pub skipped_bad_events: u64,
    /// The first [`MAX_WARNINGS`] warnings.
    pub warnings: Vec<String>,
    /// Warnings beyond [`MAX_WARNINGS`], counted only.
    pub warnings_suppressed: u64,
    /// Size of the file on disk.
    pub file_bytes: u64,
    /// Bytes read from the file over all passes (compressed size for gzip).
    pub bytes_read: u64,
    /// Decompressed JSON bytes of one pass over the file.
    pub json_bytes: u64,
    /// Passes over the file: the scan, plus ordering passes unless the scan
    /// kept every output event (output over `max_buffered_events` records).
    pub passes: u32,
    /// Chunks handed to the sink.
    pub chunks: u64,
    /// Elements of `traceEvents`.
    pub trace_events: u64,
    /// GPU activities with no CPU launch in the trace (launched before the
    /// profiler started): kept, outside any step, placed by start time.
    pub gpu_events_unlinked: u64,
    /// GPU activities emitted outside any step (warm-up and unlinked ones).
    pub gpu_events_outside_steps: u64,
    /// NCCL kernels whose op is unknown (e.g. `ncclDevKernel_Generic` with
    /// no metadata): imported as kernels, without a `Collective` event.
    pub collectives_unknown_op: u64,
    /// CPU-side collective calls (gloo, ...) imported as host collectives.
    pub host_collectives: u64,
    /// Most records held at once by the ordering passes (bounded by
    /// `ImportOptions::max_buffered_events`).
    pub max_buffered_events: u64,
    /// Where the steps came from.
    pub steps_from: StepSource,
}

/// What a trace's steps were made of.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum StepSource {
    /// `ProfilerStep#N` annotations (CPU, else GPU-side): numbered by the trace.
    #[default]
    ProfilerStep,
    /// torch's `Optimizer.step#*` ops: numbered 0, 1, ... within the trace.
    OptimizerStep,
    /// Neither: the whole trace is step 0.
    WholeTrace,
}

impl ImportStats {
    /// Records a warning (kept if fewer than [`MAX_WARNINGS`] are held).
    pub(crate) fn warn(&mut self, msg: impl Into<String>) {
        if self.warnings.len() < MAX_WARNINGS {
            self.warnings.push(msg.into());
        } else {
            self.warnings_suppressed += 1;
        }
    }
}
