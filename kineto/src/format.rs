//! The producers whose traces the importer reads, told apart by content,
//! and the rewriting that makes their events read like Kineto's.
//!
//! In: each `traceEvents` element (or element of a top-level array) as the
//! reader parsed it, and whether the top-level object has a key only one
//! producer writes. Out: the same [`RawEvent`], rewritten in place, so the
//! scan, the plan, the emitter and [`op_summary`](crate::op_summary) read
//! every format through one path; and what the file showed ([`Format`],
//! memory and provider facts) for the rank's identity labels.
//!
//! Detection (never by file name): PaddlePaddle's exporter
//! (`paddle.profiler.export_chrome_tracing`, C++ `ChromeTracingLogger`)
//! writes the top-level keys `span_index` (older: `span_indx`) and
//! `ExtraInfo`, and host thread ids as strings `"<tid>(C++)"` /
//! `"<tid>(Python)"`; ONNX Runtime's profiler
//! (`SessionOptions.enable_profiling`, `onnxruntime/core/common/profiler.cc`)
//! writes a bare array of events with `cat` `Session` or `Node`. Anything
//! else is read as Kineto. The first complete or instant event decides
//! (a Paddle top-level key before it decides at once).
//!
//! PaddlePaddle (3.x, `chrometracing_logger.cc`): names carry their
//! duration, `"matmul dygraph[0.123 ms]"`: the `[...]` suffix is dropped;
//! string thread ids become their number; `ProfileStep#N` becomes the step
//! annotation `ProfilerStep#N`; `CudaRuntime` is a CUDA runtime call;
//! `Operator` events are the operators (`cpu_op`); `Kernel` / `Memcpy` /
//! `Memset` and the `correlation id` argument are read as Kineto's; the
//! `Forward` / `Backward` / `Optimization` / `Dataloader` categories become
//! phase spans ([`event::paddle_phase`](crate::event)); `[memory]` instant
//! events (`Allocate`, `Free`, `ReservedAllocate`, `ReservedFree`) are
//! counted and their largest `peak_allocated` kept. Times are epoch µs as
//! in Kineto.
//!
//! ONNX Runtime ([`ort`]): each `Session` `model_run` event becomes step
//! `ProfilerStep#k` (k = 0, 1, ... in file order); each `Node` event
//! `<node>_kernel_time` becomes a `cpu_op` named by its `args.op_name` (the
//! operator type: per-type host time is ORT's own per-op total), its
//! `args.provider` kept; the `Kernel` events of a GPU provider become GPU
//! kernels (memcpys) on their stream, correlated with their node through
//! `parent_name`; `fence_before` / `fence_after` and the other `Session`
//! events only bound the trace. ORT's `ts` are µs since the profiler
//! started (no epoch in the file).

use std::collections::{BTreeSet, HashMap};

use super::raw::{Num, RawEvent, Scalar};

mod ort;

/// What every error about an unreadable file says rankscope reads.
pub const FORMATS_READ: &str = "PyTorch profiler (Kineto) Chrome-trace JSON, PaddlePaddle \
    profiler Chrome-trace JSON (paddle.profiler.export_chrome_tracing) and ONNX Runtime \
    profiles (SessionOptions.enable_profiling)";

/// The producer of a trace.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Format {
    /// PyTorch profiler / libkineto.
    #[default]
    Kineto,
    /// `paddle.profiler`.
    Paddle,
    /// ONNX Runtime's profiler.
    OnnxRuntime,
}

impl Format {
    /// The rank label `source`.
    pub fn label(self) -> &'static str {
        match self {
            Self::Kineto => "kineto",
            Self::Paddle => "paddle",
            Self::OnnxRuntime => "onnxruntime",
        }
    }
}

/// Detects the format and rewrites each event (see the module doc). Pure:
/// the same file gives the same rewriting on every pass.
#[derive(Debug, Clone, Default)]
pub(crate) struct Normaliser {
    decided: Option<Format>,
    /// ORT `model_run` events seen (the next step number).
    runs: u64,
    /// Paddle `[memory]` events.
    pub memory_events: u64,
    /// The largest Paddle `peak_allocated` (bytes).
    pub peak_allocated: Option<u64>,
    /// ORT execution providers of the operators.
    pub providers: BTreeSet<String>,
    /// ORT GPU `Kernel` events seen.
    pub gpu_kernels: u64,
    /// ORT `Node` events seen (the last one's correlation id).
    ort_nodes: u64,
    /// ORT node event name -> correlation id of its latest event.
    ort_node_ids: HashMap<String, u64>,
    /// ORT hex stream pointers (ROCm), in order of first appearance.
    ort_hex_streams: Vec<String>,
}

impl Normaliser {
    /// The format the content showed (Kineto until something else did).
    pub(crate) fn format(&self) -> Format {
        self.decided.unwrap_or_default()
    }

    /// A top-level key only PaddlePaddle writes.
    pub(crate) fn paddle_key(&mut self) {
        self.decided.get_or_insert(Format::Paddle);
    }

    /// Rewrites `ev` for its format.
    pub(crate) fn apply(&mut self, ev: &mut RawEvent) {
        if self.decided.is_none() {
            let paddle_tid = matches!(&ev.tid, Scalar::Str(t) if paddle_thread(t).is_some());
            if paddle_tid {
                self.decided = Some(Format::Paddle);
            } else if matches!(ev.cat.as_str(), Some("Session" | "Node")) {
                self.decided = Some(Format::OnnxRuntime);
            } else if matches!(ev.ph.as_str(), Some("X" | "i" | "I")) {
                self.decided = Some(Format::Kineto);
            }
        }
        match self.format() {
            Format::Kineto => {}
            Format::Paddle => self.paddle(ev),
            Format::OnnxRuntime => self.ort(ev),
        }
    }

    fn paddle(&mut self, ev: &mut RawEvent) {
        if let Scalar::Str(t) = &ev.tid {
            if let Some(tid) = paddle_thread(t) {
                ev.tid = Scalar::Num(Num::U(tid));
            }
        }
        if let Scalar::Str(name) = &mut ev.name {
            strip_duration(name);
        }
        match (ev.ph.as_str(), ev.cat.as_str()) {
            (Some("X"), Some("ProfileStep")) => {
                let step = ev
                    .name
                    .as_str()
                    .and_then(|n| n.strip_prefix("ProfileStep#"))
                    .map(str::to_owned);
                if let Some(step) = step {
                    ev.name = Scalar::Str(format!("ProfilerStep#{step}"));
                    ev.cat = Scalar::Str("user_annotation".into());
                }
            }
            (Some("X"), Some("CudaRuntime")) => ev.cat = Scalar::Str("cuda_runtime".into()),
            (Some("i"), Some("Allocate" | "Free" | "ReservedAllocate" | "ReservedFree")) => {
                self.memory_events += 1;
                if let Some(p) = ev.args.peak_allocated.as_u64() {
                    self.peak_allocated = Some(self.peak_allocated.map_or(p, |q| q.max(p)));
                }
            }
            _ => {}
        }
    }
}

/// The thread id of Paddle's `"<tid>(C++)"` / `"<tid>(Python)"`.
fn paddle_thread(t: &str) -> Option<u64> {
    let digits = t
        .strip_suffix("(C++)")
        .or_else(|| t.strip_suffix("(Python)"))?;
    digits.parse().ok()
}

/// Drops Paddle's `[<number> ms|us|ns|s]` duration suffix from a name.
fn strip_duration(name: &mut String) {
    let Some(open) = name.strip_suffix(']').and_then(|n| n.rfind('[')) else {
        return;
    };
    let inner = &name[open + 1..name.len() - 1];
    let Some((num, unit)) = inner.split_once(' ') else {
        return;
    };
    if matches!(unit, "ms" | "us" | "ns" | "s") && num.parse::<f64>().is_ok() {
        name.truncate(open);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn ev(ph: &str, cat: &str, name: &str, tid: Scalar) -> RawEvent {
        RawEvent {
            ph: Scalar::Str(ph.into()),
            cat: Scalar::Str(cat.into()),
            name: Scalar::Str(name.into()),
            tid,
            ..RawEvent::default()
        }
    }

    #[test]
    fn paddle_events_read_like_kineto() {
        let mut n = Normaliser::default();
        let mut e = ev(
            "X",
            "ProfileStep",
            "ProfileStep#3[38.321 ms]",
            Scalar::Str("9615(Python)".into()),
        );
        n.apply(&mut e);
        assert_eq!(n.format(), Format::Paddle);
        assert_eq!(e.name.as_str(), Some("ProfilerStep#3"));
        assert_eq!(e.cat.as_str(), Some("user_annotation"));
        assert_eq!(e.tid, Scalar::Num(Num::U(9615)));
        let mut e = ev(
            "X",
            "Operator",
            "matmul dygraph[12.5 us]",
            Scalar::Str("7(C++)".into()),
        );
        n.apply(&mut e);
        assert_eq!(e.name.as_str(), Some("matmul dygraph"));
        // A bracket that is not a duration stays.
        let mut e = ev("X", "Kernel", "k[abc]", Scalar::Num(Num::U(7)));
        n.apply(&mut e);
        assert_eq!(e.name.as_str(), Some("k[abc]"));
        let mut e = ev("i", "Allocate", "[memory]", Scalar::Str("7(C++)".into()));
        e.args.peak_allocated = Scalar::Num(Num::U(4096));
        n.apply(&mut e);
        assert_eq!((n.memory_events, n.peak_allocated), (1, Some(4096)));
    }

    #[test]
    fn kineto_is_left_alone() {
        let mut n = Normaliser::default();
        let mut e = ev("X", "cpu_op", "aten::mm[1.0 ms]", Scalar::Num(Num::U(1)));
        n.apply(&mut e);
        // Decided by the first complete event: a later `Node` is Kineto's.
        let mut later = ev("X", "Node", "x_kernel_time", Scalar::Num(Num::U(1)));
        n.apply(&mut later);
        assert_eq!(n.format(), Format::Kineto);
        assert_eq!(e.name.as_str(), Some("aten::mm[1.0 ms]"));
        assert_eq!(later.cat.as_str(), Some("Node"));
    }
}
