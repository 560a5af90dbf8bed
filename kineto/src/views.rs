//! The Operator and Memory views of one trace file, computed by the
//! importer (so imported and daemon traces get them the same way) and sent
//! as aggregates: `OperatorStat`, `MemoryOpStat`, `MemoryPeak` and
//! `MemorySample` events after the file's last step, and each `[memory]`
//! event itself (`MemorySample` with `event`: ts, device, bytes, totals,
//! operator; at most [`MAX_MEMORY_EVENTS`] per file).
//!
//! In: the scan pass's raw events (this collector rides along with it:
//! no extra read of the file). Out: those events, with the names interned
//! in the file's name table. The definitions (operator tree, self/total,
//! runtime call -> innermost enclosing operator, memory attribution) are
//! `rankscope_analysis::optree`'s; this module only picks the inputs the
//! TensorBoard plugin 0.4.3 picks (`profiler/trace.py`, `event_parser.py`):
//! host nodes = `cpu_op`/`operator` events, `python` events, `ProfilerStep#`
//! and `nccl:`/`gloo:` annotations and `python_function` events with a
//! `Python module id`, keyed by `tid` as the plugin does; runtime calls =
//! `cuda_runtime`/`cuda_driver`/`runtime` events (0.4.3 reads `runtime`
//! only, see the analysis module); device activities by correlation id;
//! memory = `[memory]` instant events.
//!
//! Memory: O(host events + runtime calls + device activities + memory
//! events) of one file, about 40 bytes each (the tree needs a thread's
//! whole timeline); the output is one event per (operator, call stack),
//! per (device, operator) and at most [`CURVE_POINTS`] curve points per
//! device.

use std::collections::HashMap;

use rankscope_analysis::optree::memory::{self as mem, MemDevice, MemRecord};
use rankscope_analysis::optree::{self, Device, Host, Runtime};
use rankscope_proto::v1 as proto;

use crate::event::{self, Class};
use crate::names::Interner;
use crate::raw::{EventHandler, RawEvent};
use crate::scalar::{Num, Scalar};
use crate::time::us_to_ns;

mod agg;

/// Most memory-curve points per device (the plugin keeps 10240 by LTTB;
/// here: the largest-allocation record of each of this many equal runs of
/// records, so the peak is always kept).
pub(crate) const CURVE_POINTS: usize = 2048;
/// Most `[memory]` events sent one by one per file (the first ones in
/// time; the curve, peaks and table always cover them all).
pub(crate) const MAX_MEMORY_EVENTS: usize = 1 << 20;
/// Most frames kept of an operator's call stack (innermost first).
const MAX_FRAMES: usize = 32;

/// What the scan pass collects for the views.
#[derive(Default)]
pub(crate) struct Collect {
    names: HashMap<String, u32>,
    name_list: Vec<String>,
    hosts: Vec<Host>,
    /// Per host: its `Call stack` arg (index into `name_list`), if any.
    host_stack: Vec<Option<u32>>,
    /// Per host: its `Input Dims` as Python prints them (index into
    /// `name_list`), if any.
    host_shape: Vec<Option<u32>>,
    runtimes: Vec<Runtime>,
    devices: Vec<Device>,
    records: Vec<MemRecord>,
    /// `python_function` events: (thread, start, end, name).
    py: Vec<(u64, u64, u64, u32)>,
}

fn thread_key(s: &Scalar) -> u64 {
    match s.num() {
        Some(Num::U(u)) => u,
        Some(Num::I(i)) => i as u64,
        _ => s.as_u64_loose().unwrap_or(0),
    }
}

fn int(s: &Scalar) -> Option<i64> {
    match s.num()? {
        Num::U(u) => i64::try_from(u).ok(),
        Num::I(i) => Some(i),
        Num::F(f) => Some(f as i64),
    }
}

impl Collect {
    fn name(&mut self, n: &str) -> u32 {
        if let Some(&id) = self.names.get(n) {
            return id;
        }
        let id = self.name_list.len() as u32;
        self.names.insert(n.to_owned(), id);
        self.name_list.push(n.to_owned());
        id
    }

    fn host(
        &mut self,
        thread: u64,
        span: (u64, u64),
        name: &str,
        op: bool,
        (stack, shape): (Option<&str>, Option<&str>),
    ) {
        let id = self.name(name);
        let stack = stack.filter(|s| !s.is_empty()).map(|s| self.name(s));
        let shape = shape.filter(|s| !s.is_empty()).map(|s| self.name(s));
        self.host_shape.push(shape);
        self.hosts.push(Host {
            thread,
            start_ns: span.0,
            end_ns: span.1,
            name: id,
            operator: op && !name.starts_with("ProfilerStep#"),
            counted: op && optree::is_listed_operator(name),
            tc_allowlisted: optree::op_tc_allowlisted(name),
        });
        self.host_stack.push(stack);
    }
}

impl EventHandler for Collect {
    fn event(&mut self, _ordinal: u64, ev: &RawEvent) {
        let name = ev.name.as_str().unwrap_or("");
        let thread = thread_key(&ev.tid);
        if ev.ph.as_str() == Some("i") && name == "[memory]" {
            let Some(ts) = ev.ts.num().and_then(us_to_ns) else {
                return;
            };
            let a = &ev.args;
            let device = MemDevice::from_kineto(
                int(&a.device_type).unwrap_or(-1),
                int(&a.device_id).unwrap_or(0),
            );
            self.records.push(MemRecord {
                thread,
                ts_ns: ts,
                bytes: int(&a.mem_bytes).unwrap_or(0),
                device,
                addr: int(&a.mem_addr).map(|x| x as u64),
                total_allocated: a.total_allocated.as_f64().unwrap_or(f64::NAN),
                total_reserved: a.total_reserved.as_f64().unwrap_or(f64::NAN),
            });
            return;
        }
        let class = event::classify(ev);
        if matches!(class, Class::Ignored) {
            return;
        }
        let Ok(span) = event::span_ns(ev) else {
            return;
        };
        match class {
            Class::CpuOp => {
                let stack = ev.args.call_stack.as_str().map(str::to_owned);
                let shape = Some(ev.args.input_shape.as_str());
                self.host(thread, span, name, true, (stack.as_deref(), shape));
                // An operator that carries a correlation id itself (an ONNX
                // Runtime node, `format::ort`) launched the device
                // activities of that id: a zero-length call at its start
                // attaches them to it without touching its host self time.
                if let Some(correlation) = ev.args.correlation.as_u64() {
                    self.runtimes.push(Runtime {
                        thread,
                        start_ns: span.0,
                        end_ns: span.0,
                        correlation,
                    });
                }
            }
            Class::CpuAnnotation => {
                let comm = ["nccl:", "gloo:"].iter().any(|p| {
                    name.strip_prefix(p).is_some_and(|op| {
                        matches!(
                            op,
                            "broadcast" | "reduce" | "all_reduce" | "all_gather" | "reduce_scatter"
                        )
                    })
                });
                if name.starts_with("ProfilerStep#") || comm {
                    self.host(thread, span, name, false, (None, None));
                }
            }
            Class::Launch => self.runtimes.push(Runtime {
                thread,
                start_ns: span.0,
                end_ns: span.1,
                correlation: ev.args.correlation.as_u64_loose().unwrap_or(0),
            }),
            Class::Gpu(kind) => self.devices.push(Device {
                correlation: ev.args.correlation.as_u64_loose().unwrap_or(0),
                dur_ns: span.1 - span.0,
                tensor_cores: kind == proto::KernelKind::Kernel
                    && optree::kernel_uses_tensor_cores(name),
            }),
            Class::OtherComplete => {
                let cat = ev.cat.as_str().unwrap_or("");
                if cat.eq_ignore_ascii_case("python") {
                    self.host(thread, span, name, false, (None, None));
                } else if cat.eq_ignore_ascii_case("python_function") {
                    let id = self.name(name);
                    self.py.push((thread, span.0, span.1, id));
                    if !matches!(ev.args.python_module_id, Scalar::Absent) {
                        self.host(thread, span, name, false, (None, None));
                    }
                }
            }
            _ => {}
        }
    }
}

impl Collect {
    /// The view events (name ids are `names`' ids; times absolute with
    /// `base_ns`), in a deterministic order; a Paddle trace's operator tree
    /// by Paddle's rules ([`optree::TreeRules::PADDLE`]: its Operator
    /// Summary's calls and CPU Total), every other by the plugin's.
    pub(crate) fn finish(
        self,
        names: &mut Interner,
        base_ns: u64,
        format: crate::Format,
    ) -> Vec<proto::Event> {
        let rules = match format {
            crate::Format::Paddle => optree::TreeRules::PADDLE,
            _ => optree::TreeRules::PLUGIN,
        };
        let (tree, nodes) =
            optree::operator_tree_with(&self.hosts, &self.runtimes, &self.devices, rules);
        let stacks = self.python_stacks(&nodes);
        let mut ids: Vec<u32> = vec![u32::MAX; self.name_list.len()];
        let mut id = |names: &mut Interner, k: u32| {
            let slot = &mut ids[k as usize];
            if *slot == u32::MAX {
                *slot = names.intern(&self.name_list[k as usize]);
            }
            *slot
        };
        let mut out = Vec::new();
        let ev = |k| proto::Event { kind: Some(k) };
        use proto::event::Kind;
        // Rows by (name, call stack); with `Input Dims` in the file, also
        // by (name, input shape) (`by_shape`).
        let mut groups = vec![(false, stacks)];
        if self.host_shape.iter().any(Option::is_some) {
            let shapes = nodes
                .iter()
                .map(|n| {
                    self.host_shape[n.host]
                        .map_or_else(|| "[]".to_owned(), |s| self.name_list[s as usize].clone())
                })
                .collect();
            groups.push((true, shapes));
        }
        for (by_shape, keys) in groups {
            for ((name, key), a) in agg::aggregate(&self.hosts, &self.name_list, &nodes, keys) {
                let (call_stack, input_shape) = if by_shape {
                    (String::new(), key)
                } else {
                    (key, String::new())
                };
                out.push(ev(Kind::OperatorStat(Box::new(proto::OperatorStat {
                    name_id: id(names, name),
                    call_stack,
                    calls: a.calls,
                    host_self_ns: a.host_self,
                    host_total_ns: a.host_total,
                    device_self_ns: a.device_self,
                    device_total_ns: a.device_total,
                    tc_self_ns: a.tc_self,
                    tc_total_ns: a.tc_total,
                    tc_eligible: a.tc_eligible,
                    runtime_ns: a.runtime,
                    host_total_min_ns: a.host_min,
                    host_total_max_ns: a.host_max,
                    device_total_min_ns: a.dev_min,
                    device_total_max_ns: a.dev_max,
                    input_shape,
                    by_shape,
                }))));
            }
        }
        let dev = |d: MemDevice| match d {
            MemDevice::Cpu => -1,
            MemDevice::Gpu(i) => i as i32,
        };
        let mut table = mem::op_memory_table(&self.hosts, &tree, &self.records);
        table.sort_by(|a, b| {
            (a.0, &self.name_list[a.1 as usize]).cmp(&(b.0, &self.name_list[b.1 as usize]))
        });
        for (d, name, r) in table {
            out.push(ev(Kind::MemoryOpStat(proto::MemoryOpStat {
                device: dev(d),
                name_id: id(names, name),
                calls: r.calls,
                size_increase_bytes: r.size_increase_bytes,
                self_size_increase_bytes: r.self_size_increase_bytes,
                allocation_count: r.allocation_count,
                self_allocation_count: r.self_allocation_count,
                allocation_size_bytes: r.allocation_size_bytes,
                self_allocation_size_bytes: r.self_allocation_size_bytes,
            })));
        }
        for (d, alloc, reserved) in mem::peaks(&self.records) {
            out.push(ev(Kind::MemoryPeak(proto::MemoryPeak {
                device: dev(d),
                peak_allocated_bytes: alloc as i64,
                peak_reserved_bytes: reserved as i64,
                ..Default::default()
            })));
        }
        for (d, ts, alloc, reserved) in curve(&self.records) {
            out.push(ev(Kind::MemorySample(proto::MemorySample {
                device: dev(d),
                ts_ns: base_ns.saturating_add(ts),
                allocated_bytes: alloc as i64,
                reserved_bytes: reserved as i64,
                ..Default::default()
            })));
        }
        // The allocation / release events themselves, each with its
        // operator (the table's attribution), in time order.
        let ops = mem::record_operators(&self.hosts, &tree, &self.records);
        let mut order: Vec<usize> = (0..self.records.len())
            .filter(|&i| self.records[i].device.is_some())
            .collect();
        order.sort_by_key(|&i| self.records[i].ts_ns);
        order.truncate(MAX_MEMORY_EVENTS);
        for i in order {
            let r = &self.records[i];
            let Some(d) = r.device else { continue };
            let total = |v: f64| if v.is_finite() { v as i64 } else { -1 };
            out.push(ev(Kind::MemorySample(proto::MemorySample {
                device: dev(d),
                ts_ns: base_ns.saturating_add(r.ts_ns),
                allocated_bytes: total(r.total_allocated),
                reserved_bytes: total(r.total_reserved),
                bytes: r.bytes,
                name_id: ops[i].map_or(0, |n| id(names, n)),
                event: true,
            })));
        }
        out
    }

    /// Per operator node: its `Call stack` arg, else the `python_function`
    /// events enclosing it on its thread, innermost first, `;`-joined.
    fn python_stacks(&self, nodes: &[optree::OpNode]) -> Vec<String> {
        let mut py = self.py.clone();
        py.sort_by_key(|p| (p.0, p.1, std::cmp::Reverse(p.2)));
        let mut order: Vec<usize> = (0..nodes.len()).collect();
        let host = |k: usize| &self.hosts[nodes[k].host];
        order.sort_by_key(|&k| (host(k).thread, host(k).start_ns));
        let mut out = vec![String::new(); nodes.len()];
        let (mut j, mut stack): (usize, Vec<usize>) = (0, Vec::new());
        let mut thread = None;
        for k in order {
            let h = host(k);
            if let Some(s) = self.host_stack[nodes[k].host] {
                out[k] = self.name_list[s as usize].clone();
                continue;
            }
            if thread != Some(h.thread) {
                stack.clear();
                thread = Some(h.thread);
                j = py.partition_point(|p| p.0 < h.thread);
            }
            while j < py.len() && py[j].0 == h.thread && py[j].1 <= h.start_ns {
                while stack.last().is_some_and(|&t| py[t].2 <= py[j].1) {
                    stack.pop();
                }
                stack.push(j);
                j += 1;
            }
            while stack.last().is_some_and(|&t| py[t].2 <= h.start_ns) {
                stack.pop();
            }
            let frames: Vec<&str> = stack
                .iter()
                .rev()
                .filter(|&&t| py[t].2 >= h.end_ns)
                .take(MAX_FRAMES)
                .map(|&t| self.name_list[py[t].3 as usize].as_str())
                .collect();
            out[k] = frames.join(";");
        }
        out
    }
}

/// Per device, time-ordered records with an `Addr` and finite totals,
/// reduced to at most [`CURVE_POINTS`]: (device, ts, allocated, reserved).
fn curve(records: &[MemRecord]) -> Vec<(MemDevice, u64, f64, f64)> {
    let mut by: std::collections::BTreeMap<MemDevice, Vec<&MemRecord>> = Default::default();
    for r in records {
        if let Some(d) = r.device {
            if r.addr.is_some() && r.total_allocated.is_finite() && r.total_reserved.is_finite() {
                by.entry(d).or_default().push(r);
            }
        }
    }
    let mut out = Vec::new();
    for (d, mut rs) in by {
        rs.sort_by_key(|r| r.ts_ns);
        let per = rs.len().div_ceil(CURVE_POINTS).max(1);
        for run in rs.chunks(per) {
            let best = run
                .iter()
                .max_by(|a, b| a.total_allocated.total_cmp(&b.total_allocated))
                .expect("chunks are non-empty");
            out.push((d, best.ts_ns, best.total_allocated, best.total_reserved));
        }
    }
    out
}
