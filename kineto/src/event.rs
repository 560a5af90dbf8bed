//! What one raw trace event is to the importer.
//!
//! In: a [`RawEvent`]. Out: its [`Class`] (GPU activity, CUDA/HIP API call,
//! CPU annotation, ...), its `[start, end)` in nanoseconds relative to the
//! trace's base time, the step number of a `ProfilerStep#N` annotation and
//! the span category of a phase annotation.
//!
//! Categories are compared case-insensitively and accept the names of both
//! current Kineto (`kernel`, `gpu_memcpy`, `gpu_memset`, `cuda_runtime`,
//! `cuda_driver`) and early PyTorch 1.8-era traces (`Kernel`, `Memcpy`,
//! `Memset`, `Runtime`, `Driver`). Only complete events (`ph: "X"`) count.

use rankscope_proto::v1 as proto;

use super::raw::RawEvent;
use super::time::us_to_ns;

/// The role of an event in the import.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Class {
    /// A GPU activity: kernel, memcpy or memset.
    Gpu(proto::KernelKind),
    /// A host-side CUDA/HIP runtime or driver call (a launch when a GPU
    /// activity has the same `args.correlation`).
    Launch,
    /// A CPU `user_annotation` (steps, phases).
    CpuAnnotation,
    /// A GPU-side `gpu_user_annotation` (only steps are used, as a fallback).
    GpuAnnotation,
    /// A CPU operator (`record_param_comms` metadata, DataLoader spans).
    CpuOp,
    /// Another complete event (only its time range is used).
    OtherComplete,
    /// Not a complete event (metadata, instant, flow): ignored.
    Ignored,
}

pub(crate) fn classify(ev: &RawEvent) -> Class {
    if ev.ph.as_str() != Some("X") {
        return Class::Ignored;
    }
    let Some(cat) = ev.cat.as_str() else {
        return Class::OtherComplete;
    };
    let is = |c: &str| cat.eq_ignore_ascii_case(c);
    if is("kernel") {
        Class::Gpu(proto::KernelKind::Kernel)
    } else if is("gpu_memcpy") || is("memcpy") {
        Class::Gpu(proto::KernelKind::Memcpy)
    } else if is("gpu_memset") || is("memset") {
        Class::Gpu(proto::KernelKind::Memset)
    } else if is("cuda_runtime") || is("cuda_driver") || is("runtime") || is("driver") {
        Class::Launch
    } else if is("user_annotation") || paddle_phase(cat).is_some() {
        Class::CpuAnnotation
    } else if is("gpu_user_annotation") {
        Class::GpuAnnotation
    } else if is("cpu_op") || is("operator") {
        Class::CpuOp
    } else {
        Class::OtherComplete
    }
}

/// Why a complete event's time is unusable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BadTime {
    NoTs,
    NoDur,
    BadTs,
    BadDur,
}

impl BadTime {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::NoTs => "has no numeric ts",
            Self::NoDur => "has no numeric dur",
            Self::BadTs => "has a negative or out-of-range ts",
            Self::BadDur => "has a negative or out-of-range dur",
        }
    }
}

/// `[start, end)` of a complete event, ns relative to the trace base time.
pub(crate) fn span_ns(ev: &RawEvent) -> Result<(u64, u64), BadTime> {
    let ts = ev.ts.num().ok_or(BadTime::NoTs)?;
    let dur = ev.dur.num().ok_or(BadTime::NoDur)?;
    let start = us_to_ns(ts).ok_or(BadTime::BadTs)?;
    let dur = us_to_ns(dur).ok_or(BadTime::BadDur)?;
    let end = start.checked_add(dur).ok_or(BadTime::BadDur)?;
    Ok((start, end))
}

/// The span `device` of a host event that carries a CUDA `stream` argument
/// ([`hta_stream`]): an `OTHER` span on that stream with this device, so the
/// collector's HTA views find it (`job_hta_stream_ops.sql`) and nothing
/// takes it for a GPU annotation (device >= 0) or an SDK host span (-1).
pub const HOST_STREAM_DEVICE: i32 = -2;

/// The stream of a host event that HTA 0.5.0 counts as GPU work: HTA reads
/// `args.stream` of every event into its `stream` column, -1 when absent
/// (`hta/common/trace_parser.py` `_compress_df`, arg `cuda::stream` of
/// `hta/configs/default_event_args.py`), and its kernel breakdown, temporal
/// breakdown and overlap take every row with `stream != -1` as a GPU kernel
/// (`gpu_kernels = trace_df[trace_df["stream"].ne(-1)]`,
/// `hta/analyzers/breakdown_analysis.py` lines 79 and 650,
/// `hta/analyzers/communication_analysis.py` line 34, tag v0.5.0). Its idle
/// time, queue length and launch statistics take GPU categories or runtime
/// correlations only, so those views leave such events out as well. Such
/// host events are Triton
/// launcher `cpu_op`s (Inductor's `_RecordFunctionFast` passes the launch
/// stream). `None` for GPU activities, GPU annotations and runtime calls
/// (those are read as what they are) and events without a whole
/// non-negative stream.
pub(crate) fn hta_stream(ev: &RawEvent, class: Class) -> Option<u32> {
    if !matches!(
        class,
        Class::CpuOp | Class::CpuAnnotation | Class::OtherComplete
    ) {
        return None;
    }
    ev.args.stream.as_u64().and_then(|s| u32::try_from(s).ok())
}

/// `N` of a `ProfilerStep#N` annotation.
pub(crate) fn profiler_step(name: &str) -> Option<u64> {
    name.strip_prefix("ProfilerStep#")?.trim().parse().ok()
}

/// The phase a CPU annotation or operator marks, for the few names whose
/// meaning is unambiguous. Spans of one category may nest (e.g.
/// `## forward ##` around `DistributedDataParallel.forward`): consumers
/// take unions per category.
pub(crate) fn span_category(class: Class, name: &str) -> Option<proto::SpanCategory> {
    use proto::SpanCategory as C;
    if name.starts_with("enumerate(DataLoader)#") {
        return matches!(class, Class::CpuAnnotation | Class::CpuOp).then_some(C::Dataloader);
    }
    if class != Class::CpuAnnotation {
        return None;
    }
    match name.trim() {
        "## forward ##" | "DistributedDataParallel.forward" => Some(C::Forward),
        "## backward ##" => Some(C::Backward),
        "## optimizer ##" => Some(C::Optimizer),
        n if n.starts_with("Optimizer.step#") || n.starts_with("Optimizer.zero_grad#") => {
            Some(C::Optimizer)
        }
        _ => None,
    }
}

/// The phase of a PaddlePaddle phase event, by its category
/// (`TracerEventType` `Forward`, `Backward`, `Optimization`, `Dataloader`;
/// Paddle 3.x `paddle/phi/api/profiler/trace_event.h`).
pub(crate) fn paddle_phase(cat: &str) -> Option<proto::SpanCategory> {
    use proto::SpanCategory as C;
    match cat {
        "Forward" => Some(C::Forward),
        "Backward" => Some(C::Backward),
        "Optimization" => Some(C::Optimizer),
        "Dataloader" => Some(C::Dataloader),
        _ => None,
    }
}

/// `^nccl.*Kernel` on the first line (HTA's communication-kernel rule).
pub(crate) fn is_nccl_kernel(name: &str) -> bool {
    name.strip_prefix("nccl")
        .is_some_and(|rest| rest.split('\n').next().unwrap_or("").contains("Kernel"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::raw::{Num, Scalar};

    fn ev(ph: &str, cat: &str) -> RawEvent {
        RawEvent {
            ph: Scalar::Str(ph.into()),
            cat: Scalar::Str(cat.into()),
            ..RawEvent::default()
        }
    }

    #[test]
    fn classes() {
        use proto::KernelKind as K;
        assert_eq!(classify(&ev("X", "kernel")), Class::Gpu(K::Kernel));
        assert_eq!(classify(&ev("X", "Kernel")), Class::Gpu(K::Kernel));
        assert_eq!(classify(&ev("X", "gpu_memcpy")), Class::Gpu(K::Memcpy));
        assert_eq!(classify(&ev("X", "Memset")), Class::Gpu(K::Memset));
        assert_eq!(classify(&ev("X", "cuda_driver")), Class::Launch);
        assert_eq!(classify(&ev("X", "user_annotation")), Class::CpuAnnotation);
        assert_eq!(
            classify(&ev("X", "gpu_user_annotation")),
            Class::GpuAnnotation
        );
        assert_eq!(classify(&ev("X", "python_function")), Class::OtherComplete);
        assert_eq!(classify(&ev("s", "ac2g")), Class::Ignored);
        assert_eq!(classify(&RawEvent::default()), Class::Ignored);
    }

    #[test]
    fn times() {
        let mut e = ev("X", "kernel");
        assert_eq!(span_ns(&e), Err(BadTime::NoTs));
        e.ts = Scalar::Num(Num::F(10.5));
        assert_eq!(span_ns(&e), Err(BadTime::NoDur));
        e.dur = Scalar::Str("3".into());
        assert_eq!(span_ns(&e), Err(BadTime::NoDur));
        e.dur = Scalar::Num(Num::I(-1));
        assert_eq!(span_ns(&e), Err(BadTime::BadDur));
        e.dur = Scalar::Num(Num::U(3));
        assert_eq!(span_ns(&e), Ok((10_500, 13_500)));
        e.ts = Scalar::Num(Num::F(-1.0));
        assert_eq!(span_ns(&e), Err(BadTime::BadTs));
    }

    #[test]
    fn host_events_with_a_stream_are_hta_gpu_work() {
        let with_stream = |cat: &str, stream: Scalar| {
            let mut e = ev("X", cat);
            e.args.stream = stream;
            let class = classify(&e);
            hta_stream(&e, class)
        };
        assert_eq!(with_stream("cpu_op", Scalar::Num(Num::U(0))), Some(0));
        assert_eq!(
            with_stream("user_annotation", Scalar::Num(Num::U(7))),
            Some(7)
        );
        assert_eq!(with_stream("cuda_sync", Scalar::Num(Num::U(7))), Some(7));
        assert_eq!(with_stream("cpu_op", Scalar::Num(Num::I(-1))), None);
        assert_eq!(with_stream("cpu_op", Scalar::default()), None);
        // GPU activities and runtime calls are read as what they are.
        assert_eq!(with_stream("kernel", Scalar::Num(Num::U(7))), None);
        assert_eq!(with_stream("cuda_runtime", Scalar::Num(Num::U(7))), None);
        assert_eq!(
            with_stream("gpu_user_annotation", Scalar::Num(Num::U(7))),
            None
        );
    }

    #[test]
    fn steps_and_spans() {
        use proto::SpanCategory as C;
        assert_eq!(profiler_step("ProfilerStep#12"), Some(12));
        assert_eq!(profiler_step("ProfilerStep#x"), None);
        assert_eq!(profiler_step("ProfilerStep"), None);
        let cpu = Class::CpuAnnotation;
        assert_eq!(span_category(cpu, "## forward ##"), Some(C::Forward));
        assert_eq!(span_category(cpu, "## backward ##"), Some(C::Backward));
        assert_eq!(
            span_category(cpu, "Optimizer.step#SGD.step"),
            Some(C::Optimizer)
        );
        assert_eq!(
            span_category(
                Class::CpuOp,
                "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
            ),
            Some(C::Dataloader)
        );
        assert_eq!(span_category(Class::GpuAnnotation, "## forward ##"), None);
        assert_eq!(span_category(cpu, "nccl:all_reduce"), None);
        assert!(is_nccl_kernel(
            "ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)"
        ));
        assert!(!is_nccl_kernel("nccl_copy"));
    }
}
