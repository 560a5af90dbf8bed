//! First pass: the small facts needed to place every event.
//!
//! In: every [`RawEvent`] of the trace, in file order. Out: a [`Scan`]:
//! the `ProfilerStep#N` intervals (CPU and GPU side), every CUDA/HIP API
//! call's correlation id, start and `External id` (to link GPU activities
//! to their launch, as HTA does), the NCCL metadata of `record_param_comms`
//! ops by `External id`, the NCCL kernels, the trace's time bounds, and the
//! count of unusable events.
//!
//! It also keeps the [`Pending`] fields of every event that may become
//! output, as long as the records they may become are at most
//! `max_buffered_events` (one ordering window): then the ordering needs no
//! second read of the file (one parse instead of two). Past that bound the
//! kept fields are dropped and the ordering passes read the file again.
//!
//! Memory: O(steps + API calls + NCCL kernels), about 24 bytes per API
//! call, plus at most `max_buffered_events` [`Pending`]s (about 64 bytes
//! each). Times are ns relative to the trace's base time
//! (`baseTimeNanoseconds` may come after `traceEvents`).

use std::collections::HashMap;

use super::cpu_comm::HostComm;
use super::emit::Pending;
use super::event::{self, Class};
use super::names::Interner;
use super::nccl::CommMeta;
use super::raw::{EventHandler, RawEvent};
use super::stats::ImportStats;

/// A `ProfilerStep#N` interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StepMark {
    pub step: u64,
    pub start: u64,
    pub end: u64,
    pub ordinal: u64,
}

/// A host API call that may have launched GPU work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Launch {
    pub corr: u64,
    pub ts: u64,
    pub end: u64,
    /// `External id` (0 = none).
    pub ext: u64,
    /// Index of the call's name in [`Scan::launch_apis`].
    pub api: u16,
}

/// An NCCL kernel seen in the scan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NcclDraft {
    pub ordinal: u64,
    pub start: u64,
    pub name: String,
    pub corr: Option<u64>,
    pub ext: Option<u64>,
    /// Metadata on the kernel itself.
    pub meta: Option<CommMeta>,
}

/// Everything the first pass learns.
#[derive(Debug, Default)]
pub(crate) struct Scan {
    pub cpu_steps: Vec<StepMark>,
    pub gpu_steps: Vec<StepMark>,
    /// torch's `Optimizer.step#*` ops (the iteration marker of a trace
    /// without `ProfilerStep#N`, e.g. one libkineto's daemon mode started
    /// in an unmodified script); `step` is 0.
    pub optimizer_steps: Vec<StepMark>,
    /// `ProfilerStep#N` written as `cpu_op` events (the TensorBoard plugin
    /// takes those as steps too, see [`crate::identity::plugin_steps_span`]).
    pub op_steps: Vec<StepMark>,
    /// Earliest start and latest end of the `cpu_op` events.
    pub op_bounds: Option<(u64, u64)>,
    pub launches: Vec<Launch>,
    /// Distinct names of the launch calls (`cudaLaunchKernel`, ...), by
    /// [`Launch::api`]; a name past `u16::MAX` distinct ones is stored as "".
    pub launch_apis: Vec<String>,
    /// Index of each name in `launch_apis`.
    pub launch_api_ids: HashMap<String, u16>,
    pub comm_meta: HashMap<u64, CommMeta>,
    pub nccl: Vec<NcclDraft>,
    /// `c10d::*` / `record_param_comms` ops, `gloo:*` / `nccl:*`
    /// annotations (CPU-side collectives, see `cpu_comm`).
    pub host_comm: Vec<HostComm>,
    /// Earliest start and latest end over all usable complete events.
    pub bounds: Option<(u64, u64)>,
    /// Device of the first GPU activity (`args.device`, else `pid`).
    pub first_device: Option<u64>,
    /// Host process id of the first step annotation or API call.
    pub host_pid: Option<u64>,
    /// Usable complete events.
    pub usable: u64,
    /// GPU activities.
    pub gpu_events: u64,
    /// Skipped-event count and warnings.
    pub stats: ImportStats,
    /// The output events' fields, in file order, while the records they may
    /// become are at most `keep_cap` (`None`: more, or not kept).
    pub keep: Option<Vec<Pending>>,
    pub keep_cap: usize,
    pub kept_records: usize,
    /// Names of the kept events.
    pub names: Interner,
}

impl Scan {
    /// A scan that keeps the fields of up to `cap` output records.
    pub(crate) fn keeping(cap: usize) -> Self {
        Self {
            keep: Some(Vec::new()),
            keep_cap: cap,
            ..Self::default()
        }
    }

    /// Records a host-side collective; whether `ev` is one.
    fn host_comm(
        &mut self,
        ordinal: u64,
        start: u64,
        end: u64,
        is_op: bool,
        name: &str,
        ev: &RawEvent,
    ) -> bool {
        let Some((kind, op)) = HostComm::kind_of(name, is_op) else {
            return false;
        };
        let a = &ev.args;
        let first = a.input_dims.0;
        self.host_comm.push(HostComm {
            kind,
            ordinal,
            start,
            end,
            pid: ev.pid.as_u64_loose().unwrap_or(0),
            tid: ev.tid.as_u64_loose().unwrap_or(0),
            op,
            ext: a.external_id.as_u64(),
            meta: CommMeta::from_args(a),
            elems: first.map(|(_, e)| e),
            dtype: first.and_then(|(i, _)| a.input_types.get(i)),
        });
        true
    }

    /// The index of a launch call's name, interned.
    fn launch_api(&mut self, name: &str) -> u16 {
        if let Some(&id) = self.launch_api_ids.get(name) {
            return id;
        }
        if self.launch_apis.is_empty() {
            self.launch_apis.push(String::new()); // 0: unnamed / overflow
        }
        match u16::try_from(self.launch_apis.len()) {
            Ok(id) => {
                self.launch_apis.push(name.to_owned());
                self.launch_api_ids.insert(name.to_owned(), id);
                id
            }
            Err(_) => 0,
        }
    }
}

/// How many skipped events are described individually in warnings.
const DESCRIBED_BAD_EVENTS: u64 = 5;

impl EventHandler for Scan {
    fn event(&mut self, ordinal: u64, ev: &RawEvent) {
        let class = event::classify(ev);
        if class == Class::Ignored {
            return;
        }
        let (start, end) = match event::span_ns(ev) {
            Ok(t) => t,
            Err(why) => {
                self.stats.skipped_bad_events += 1;
                if self.stats.skipped_bad_events <= DESCRIBED_BAD_EVENTS {
                    let name = ev.name.as_str().unwrap_or("");
                    self.stats.warn(format!(
                        "traceEvents[{ordinal}] ({name:?}) {}: skipped",
                        why.as_str()
                    ));
                }
                return;
            }
        };
        self.usable += 1;
        self.bounds = Some(match self.bounds {
            None => (start, end),
            Some((lo, hi)) => (lo.min(start), hi.max(end)),
        });
        let name = ev.name.as_str().unwrap_or("");
        let host_comm = matches!(class, Class::CpuOp | Class::CpuAnnotation)
            && self.host_comm(ordinal, start, end, class == Class::CpuOp, name, ev);
        if let Some(keep) = self.keep.as_mut() {
            let kept = Pending::of(ordinal, ev, class, (start, end), host_comm, &mut self.names);
            if let Some(p) = kept {
                self.kept_records += p.records();
                if self.kept_records <= self.keep_cap {
                    keep.push(p);
                } else {
                    self.keep = None;
                }
            }
        }
        match class {
            Class::Gpu(kind) => {
                self.gpu_events += 1;
                if self.first_device.is_none() {
                    self.first_device = ev.args.device.as_u64().or(ev.pid.as_u64_loose());
                }
                if kind == rankscope_proto::v1::KernelKind::Kernel && event::is_nccl_kernel(name) {
                    self.nccl.push(NcclDraft {
                        ordinal,
                        start,
                        name: name.to_owned(),
                        corr: ev.args.correlation.as_u64(),
                        ext: ev.args.external_id.as_u64(),
                        meta: CommMeta::from_args(&ev.args),
                    });
                }
            }
            Class::Launch => {
                if let Some(corr) = ev.args.correlation.as_u64() {
                    if self.host_pid.is_none() {
                        self.host_pid = ev.pid.as_u64();
                    }
                    let api = self.launch_api(name);
                    self.launches.push(Launch {
                        corr,
                        ts: start,
                        end,
                        ext: ev.args.external_id.as_u64().unwrap_or(0),
                        api,
                    });
                }
            }
            Class::CpuAnnotation | Class::GpuAnnotation => {
                if class == Class::CpuAnnotation && name.starts_with("Optimizer.step#") {
                    self.optimizer_steps.push(StepMark {
                        step: 0,
                        start,
                        end,
                        ordinal,
                    });
                }
                if let Some(step) = event::profiler_step(name) {
                    let mark = StepMark {
                        step,
                        start,
                        end,
                        ordinal,
                    };
                    if class == Class::CpuAnnotation {
                        self.host_pid = ev.pid.as_u64().or(self.host_pid);
                        self.cpu_steps.push(mark);
                    } else {
                        self.gpu_steps.push(mark);
                    }
                }
            }
            Class::CpuOp => {
                self.op_bounds = Some(match self.op_bounds {
                    None => (start, end),
                    Some((a, b)) => (a.min(start), b.max(end)),
                });
                if let Some(step) = event::profiler_step(name) {
                    self.op_steps.push(StepMark {
                        step,
                        start,
                        end,
                        ordinal,
                    });
                }
                if name.starts_with("Optimizer.step#") {
                    self.optimizer_steps.push(StepMark {
                        step: 0,
                        start,
                        end,
                        ordinal,
                    });
                }
                if name == "record_param_comms" {
                    if let (Some(ext), Some(meta)) =
                        (ev.args.external_id.as_u64(), CommMeta::from_args(&ev.args))
                    {
                        self.comm_meta.entry(ext).or_insert(meta);
                    }
                }
            }
            Class::OtherComplete | Class::Ignored => {}
        }
    }
}
