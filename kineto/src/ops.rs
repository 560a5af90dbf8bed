//! Per-iteration operator summary of one trace: what `rankscope trace-diff`
//! compares between a straggler and its peers.
//!
//! In: a trace file and the iterations' time windows (absolute ns, as the
//! importer's `StepBegin`/`StepEnd` give them). Out: per (iteration,
//! category, name): calls and self time. Categories: GPU kernels by HTA's
//! kernel type (`COMMUNICATION` for NCCL kernels, `MEMORY` for memcpy and
//! memset, `COMPUTATION` otherwise; HTA v0.5.0
//! `hta/analyzers/breakdown_analysis.py`), and `CPU_OP` for host operators
//! (`cpu_op` events) with their *self* time: duration minus the time of the
//! operators nested in them on the same thread (the PyTorch Profiler's
//! "Self CPU" of `key_averages()`). An event belongs to the iteration its
//! start falls in; events outside every window are left out.
//!
//! Every format the importer reads goes through here the same way:
//! PaddlePaddle `Operator` events and ONNX Runtime nodes (named by their
//! op type) are `CPU_OP`s (see the `format` module).
//!
//! [`op_summary_with_host_ops`] also gives the host operators themselves
//! (`CPU_OP`s inside the windows, absolute times and self time, the
//! `max_host_ops` of most self time): what names the operators filling an
//! `other` straggler's gap (`rankscope_analysis::gap_fill`).
//!
//! Memory: one compact record per event inside the windows.

use std::collections::HashMap;
use std::path::Path;

use rankscope_analysis::HostOp;
use rankscope_proto::v1 as proto;

use crate::event::{self, Class};
use crate::raw::{EventHandler, RawEvent, TopMeta};
use crate::{source, ImportError};

/// Calls and self time of one operator or kernel in one iteration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpStat {
    /// Index of the window (iteration) it ran in.
    pub iteration: usize,
    /// `COMPUTATION`, `COMMUNICATION`, `MEMORY` or `CPU_OP`.
    pub category: &'static str,
    pub name: String,
    pub calls: u64,
    pub self_ns: u64,
    /// Inclusive time: the events' durations summed (for `CPU_OP`, the
    /// nested operators included: PaddlePaddle's Operator Summary "CPU
    /// Total", the PyTorch Profiler's "CPU total"; equals `self_ns` for
    /// kernels).
    pub total_ns: u64,
}

#[derive(Debug, Clone, Copy)]
struct Rec {
    thread: (u64, u64),
    start: u64,
    end: u64,
    name: u32,
    category: &'static str,
}

#[derive(Default)]
struct Collect {
    names: HashMap<String, u32>,
    recs: Vec<Rec>,
}

impl EventHandler for Collect {
    fn event(&mut self, _ordinal: u64, ev: &RawEvent) {
        let category = match event::classify(ev) {
            Class::Gpu(proto::KernelKind::Kernel) => {
                if event::is_nccl_kernel(ev.name.as_str().unwrap_or("")) {
                    "COMMUNICATION"
                } else {
                    "COMPUTATION"
                }
            }
            Class::Gpu(_) => "MEMORY",
            Class::CpuOp => "CPU_OP",
            _ => return,
        };
        let Ok((start, end)) = event::span_ns(ev) else {
            return;
        };
        let name = ev.name.as_str().unwrap_or("").to_owned();
        let n = self.names.len() as u32;
        let id = *self.names.entry(name).or_insert(n);
        let thread = (
            ev.pid.as_u64_loose().unwrap_or(0),
            ev.tid.as_u64_loose().unwrap_or(0),
        );
        self.recs.push(Rec {
            thread,
            start,
            end,
            name: id,
            category,
        });
    }
}

/// The summary of `path` over `windows` (sorted, absolute ns).
pub fn op_summary(path: &Path, windows: &[(u64, u64)]) -> Result<Vec<OpStat>, ImportError> {
    op_summary_with_host_ops(path, windows, 0).map(|(ops, _)| ops)
}

/// The summary of `path` over `windows` (sorted, absolute ns) and its host
/// operators inside them: at most `max_host_ops`, those of most self time
/// (then earliest), in time order.
pub fn op_summary_with_host_ops(
    path: &Path,
    windows: &[(u64, u64)],
    max_host_ops: usize,
) -> Result<(Vec<OpStat>, Vec<HostOp>), ImportError> {
    let mut meta = TopMeta::default();
    let mut c = Collect::default();
    source::pass(
        source::Input::File(path),
        u64::MAX,
        &mut meta,
        &mut c,
        true,
        false,
        None,
    )
    .map_err(|p| p.at(path))?;
    let base = meta.base_time_ns.unwrap_or(0);
    let window_of = |t: u64| {
        let k = windows.partition_point(|w| w.0 <= t);
        (k > 0 && t < windows[k - 1].1).then(|| k - 1)
    };
    // Self time: CPU ops minus the ops nested in them on the same thread.
    let mut self_ns: Vec<u64> = c.recs.iter().map(|r| r.end - r.start).collect();
    let mut cpu: Vec<usize> = (0..c.recs.len())
        .filter(|&i| c.recs[i].category == "CPU_OP")
        .collect();
    cpu.sort_by_key(|&i| {
        let r = &c.recs[i];
        (r.thread, r.start, std::cmp::Reverse(r.end))
    });
    let mut stack: Vec<usize> = Vec::new();
    let mut thread = None;
    for i in cpu {
        let r = c.recs[i];
        if thread != Some(r.thread) {
            stack.clear();
            thread = Some(r.thread);
        }
        while stack.last().is_some_and(|&p| c.recs[p].end <= r.start) {
            stack.pop();
        }
        if let Some(&p) = stack.last() {
            if r.end <= c.recs[p].end {
                self_ns[p] = self_ns[p].saturating_sub(r.end - r.start);
            }
        }
        stack.push(i);
    }
    let mut names = vec![String::new(); c.names.len()];
    for (n, id) in c.names {
        names[id as usize] = n;
    }
    let mut agg: HashMap<(usize, &'static str, u32), (u64, u64, u64)> = HashMap::new();
    let mut host: Vec<usize> = Vec::new();
    for (i, r) in c.recs.iter().enumerate() {
        let Some(w) = window_of(base.saturating_add(r.start)) else {
            continue;
        };
        if max_host_ops > 0 && r.category == "CPU_OP" {
            host.push(i);
        }
        let e = agg.entry((w, r.category, r.name)).or_default();
        e.0 += 1;
        e.1 += self_ns[i];
        e.2 += r.end - r.start;
    }
    let mut out: Vec<OpStat> = agg
        .into_iter()
        .map(
            |((iteration, category, name), (calls, self_ns, total_ns))| OpStat {
                iteration,
                category,
                name: names[name as usize].clone(),
                calls,
                self_ns,
                total_ns,
            },
        )
        .collect();
    out.sort_by(|a, b| (a.iteration, a.category, &a.name).cmp(&(b.iteration, b.category, &b.name)));
    host.sort_by_key(|&i| (std::cmp::Reverse(self_ns[i]), c.recs[i].start, i));
    host.truncate(max_host_ops);
    host.sort_by_key(|&i| (c.recs[i].start, i));
    let host = host
        .into_iter()
        .map(|i| {
            let r = &c.recs[i];
            HostOp {
                name: names[r.name as usize].clone(),
                start_ns: base.saturating_add(r.start),
                end_ns: base.saturating_add(r.end),
                self_ns: self_ns[i],
            }
        })
        .collect();
    Ok((out, host))
}
