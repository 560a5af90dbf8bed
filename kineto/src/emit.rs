//! Ordering passes and chunked output.
//!
//! In: the trace's events again (one or more passes), the [`Plan`]. Out:
//! `rankscope.v1` events in stream order, in [`Chunk`]s of at most
//! `chunk_events` events, handed to the caller's sink.
//!
//! Stream order: segments in order (see [`super::plan`]); within a segment
//! by start time, then trace order; `StepBegin(N)` before the first event
//! of step N's segment and `StepEnd(N)` after its last, emitted even for
//! steps without events. A Collective follows its NCCL kernel's Kernel.
//!
//! Bounded memory: a [`Window`] pass keeps only the `max_buffered` smallest
//! sort keys after the last emitted one (a bounded max-heap), so a pass
//! holds at most `max_buffered` compact records whatever the trace size; if
//! more were left, another pass follows from where this one stopped. The
//! output does not depend on `max_buffered` (keys are unique: the trace
//! ordinal is part of them; wire name ids are assigned at emission).

use std::collections::{BinaryHeap, HashSet};

use rankscope_proto::v1 as proto;

use super::event::{self, Class};
use super::names::{Interner, Published};
use super::plan::Plan;
use super::raw::{EventHandler, RawEvent};
use super::stats::ImportStats;
use super::{Chunk, Problem};

/// Sort key: (segment, start ns, trace ordinal, 0 = the event / 1 = its
/// Collective).
pub(crate) type Key = (u32, u64, u64, u8);

#[derive(Debug)]
enum Body {
    Kernel {
        kind: proto::KernelKind,
        name: u32,
        stream: u32,
        device: i32,
        end: u64,
        corr: u64,
        bytes: u64,
        linked: bool,
        /// The launch call: start, end, interned name.
        launch: Option<(u64, u64, u32)>,
        config: Option<Box<proto::KernelConfig>>,
    },
    Collective {
        index: usize,
        pg: u32,
        stream: u32,
        device: i32,
        end: u64,
    },
    Span {
        category: proto::SpanCategory,
        name: u32,
        end: u64,
        /// A GPU-side range (`gpu_user_annotation`): stream and device.
        gpu: Option<(u32, i32)>,
    },
}

/// One buffered output event (start and times relative to the trace base).
#[derive(Debug)]
pub(crate) struct Rec {
    key: Key,
    body: Body,
}

impl Rec {
    pub(crate) fn key(&self) -> Key {
        self.key
    }
}

impl PartialEq for Rec {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key
    }
}
impl Eq for Rec {}
impl PartialOrd for Rec {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Rec {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.key.cmp(&other.key)
    }
}

/// One ordering pass: keeps the `cap` smallest records with key > `after`.
pub(crate) struct Window<'a> {
    plan: &'a Plan,
    interner: &'a mut Interner,
    after: Option<Key>,
    cap: usize,
    held: Held,
    overflow: bool,
    peak: usize,
}

/// A pass's records: as offered while fewer than the cap (sorted once at
/// the end: the common case, a file whose output fits one window), a heap
/// of the smallest keys once the cap was reached.
enum Held {
    Unsorted(Vec<Rec>),
    Heap(BinaryHeap<Rec>),
}

impl<'a> Window<'a> {
    pub(crate) fn new(
        plan: &'a Plan,
        interner: &'a mut Interner,
        after: Option<Key>,
        cap: usize,
    ) -> Self {
        Self {
            plan,
            interner,
            after,
            cap: cap.max(1),
            held: Held::Unsorted(Vec::new()),
            overflow: false,
            peak: 0,
        }
    }

    /// The pass's records in stream order, whether records were left for
    /// another pass, and the most records held at once.
    pub(crate) fn finish(self) -> (Vec<Rec>, bool, usize) {
        let recs = match self.held {
            // Keys are unique (they end with the ordinal), so an unstable
            // sort gives the heap's order.
            Held::Unsorted(mut v) => {
                v.sort_unstable_by_key(|r| r.key);
                v
            }
            Held::Heap(h) => h.into_sorted_vec(),
        };
        (recs, self.overflow, self.peak)
    }

    fn offer(&mut self, key: Key, build: impl FnOnce(&mut Interner) -> Body) {
        if self.after.is_some_and(|a| key <= a) {
            return;
        }
        if let Held::Unsorted(v) = &mut self.held {
            if v.len() >= self.cap {
                self.held = Held::Heap(BinaryHeap::from(std::mem::take(v)));
            }
        }
        let heap = match &mut self.held {
            Held::Unsorted(v) => {
                v.push(Rec {
                    key,
                    body: build(self.interner),
                });
                self.peak = self.peak.max(v.len());
                return;
            }
            Held::Heap(heap) => heap,
        };
        if heap.len() >= self.cap {
            self.overflow = true;
            match heap.peek() {
                Some(top) if key < top.key => {
                    heap.pop();
                }
                _ => return,
            }
        }
        heap.push(Rec {
            key,
            body: build(self.interner),
        });
        self.peak = self.peak.max(heap.len());
    }
}

/// What an ordering pass needs of one usable trace event: its fields,
/// read once (by the scan when the whole file fits one window, see
/// [`Pending`]'s use in `run`), names interned.
#[derive(Debug, Clone)]
pub(crate) struct Pending {
    ordinal: u64,
    start: u64,
    end: u64,
    what: What,
}

#[derive(Debug, Clone)]
enum What {
    Gpu {
        kind: proto::KernelKind,
        name: u32,
        corr: Option<u64>,
        stream: u32,
        device: i32,
        bytes: u64,
        /// An NCCL kernel (it may have a Collective record too).
        nccl: bool,
        /// Its launch configuration, when the trace records one.
        config: Option<Box<proto::KernelConfig>>,
    },
    /// A CPU annotation or op: a phase span (category, name) and/or a
    /// host-side collective (found by ordinal in the plan).
    Cpu {
        span: Option<(proto::SpanCategory, u32)>,
        host_comm: bool,
    },
    /// A `gpu_user_annotation` range (issue 29: GPU time per user
    /// annotation): an `OTHER` span on its stream and device; also a host
    /// event with a `stream` argument (`event::hta_stream`), on device
    /// `event::HOST_STREAM_DEVICE`.
    GpuSpan { name: u32, stream: u32, device: i32 },
}

/// A kernel's launch configuration from its args (Kineto's names, see
/// `proto::KernelConfig`); `None` when it records none of them.
fn kernel_config(a: &super::raw::RawArgs) -> Option<Box<proto::KernelConfig>> {
    let dims = |v: &super::scalar::Scalar| -> Vec<u32> { v.as_ranks().unwrap_or_default() };
    let small = |v: &super::scalar::Scalar| v.as_u64().and_then(|x| u32::try_from(x).ok());
    let c = proto::KernelConfig {
        blocks_per_sm: a.blocks_per_sm.as_f64().filter(|x| x.is_finite()),
        est_achieved_occupancy_pct: a.occupancy_pct.as_f64().filter(|x| x.is_finite()),
        grid: dims(&a.grid),
        block: dims(&a.block),
        registers_per_thread: small(&a.registers).unwrap_or(0),
        shared_memory_bytes: small(&a.shared_memory).unwrap_or(0),
    };
    (c != proto::KernelConfig::default()).then(|| Box::new(c))
}

impl Pending {
    /// The fields of a usable event (`class` and `start..end` as the scan
    /// found them) that may become output; `None` for the others.
    /// `host_comm`: whether the scan took it for a host-side collective.
    pub(crate) fn of(
        ordinal: u64,
        ev: &RawEvent,
        class: Class,
        (start, end): (u64, u64),
        host_comm: bool,
        names: &mut Interner,
    ) -> Option<Self> {
        let name = ev.name.as_str().unwrap_or("");
        let what = match class {
            Class::Gpu(kind) => What::Gpu {
                kind,
                name: names.intern(name),
                corr: ev.args.correlation.as_u64(),
                stream: ev
                    .args
                    .stream
                    .as_u64()
                    .or_else(|| ev.tid.as_u64_loose())
                    .and_then(|s| u32::try_from(s).ok())
                    .unwrap_or(0),
                device: ev
                    .args
                    .device
                    .as_u64()
                    .or_else(|| ev.pid.as_u64_loose())
                    .and_then(|d| i32::try_from(d).ok())
                    .unwrap_or(-1),
                bytes: match kind {
                    proto::KernelKind::Kernel | proto::KernelKind::Unspecified => 0,
                    _ => ev.args.bytes.as_u64().unwrap_or_else(|| {
                        // GB/s = bytes per ns.
                        let bw = ev.args.bandwidth_gbps.as_f64().unwrap_or(0.0);
                        (bw * (end - start) as f64).round().max(0.0) as u64
                    }),
                },
                nccl: kind == proto::KernelKind::Kernel && event::is_nccl_kernel(name),
                config: match kind {
                    proto::KernelKind::Kernel => kernel_config(&ev.args),
                    _ => None,
                },
            },
            Class::CpuAnnotation | Class::CpuOp => {
                let span = event::span_category(class, name)
                    .or_else(|| ev.cat.as_str().and_then(event::paddle_phase))
                    .map(|c| (c, names.intern(name)));
                // A host event with a `stream` argument (HTA counts it as
                // GPU work) and no phase is that, whether or not it could be
                // a host collective: ordering passes call this with
                // `host_comm` true for every event, and the answer must not
                // depend on the pass.
                match (span, event::hta_stream(ev, class)) {
                    (None, Some(stream)) => What::GpuSpan {
                        name: names.intern(name),
                        stream,
                        device: event::HOST_STREAM_DEVICE,
                    },
                    (None, None) if !host_comm => return None,
                    _ => What::Cpu { span, host_comm },
                }
            }
            Class::GpuAnnotation => What::GpuSpan {
                name: names.intern(name),
                stream: ev
                    .args
                    .stream
                    .as_u64()
                    .or_else(|| ev.tid.as_u64_loose())
                    .and_then(|s| u32::try_from(s).ok())
                    .unwrap_or(0),
                device: ev
                    .args
                    .device
                    .as_u64()
                    .or_else(|| ev.pid.as_u64_loose())
                    .and_then(|d| i32::try_from(d).ok())
                    .unwrap_or(0)
                    .max(0),
            },
            Class::OtherComplete => What::GpuSpan {
                name: names.intern(name),
                stream: event::hta_stream(ev, class)?,
                device: event::HOST_STREAM_DEVICE,
            },
            _ => return None,
        };
        Some(Self {
            ordinal,
            start,
            end,
            what,
        })
    }
}

impl Pending {
    /// The most records it may become (an event, and a Collective).
    pub(crate) fn records(&self) -> usize {
        match self.what {
            What::Gpu { nccl, .. } => 1 + usize::from(nccl),
            What::Cpu { span, host_comm } => usize::from(span.is_some()) + usize::from(host_comm),
            What::GpuSpan { .. } => 1,
        }
    }
}

impl Window<'_> {
    /// Offers the records of one event.
    pub(crate) fn place(&mut self, p: Pending) {
        let Pending {
            ordinal,
            start,
            end,
            what,
        } = p;
        match what {
            What::Gpu {
                kind,
                name,
                corr,
                stream,
                device,
                bytes,
                nccl: _,
                config,
            } => {
                let (seg, linked) = self.plan.gpu_seg(corr, start);
                let launch = self.plan.launch_call(corr);
                self.offer((seg, start, ordinal, 0), |names| Body::Kernel {
                    launch: launch.map(|(ts, end, api)| (ts, end, names.intern(api))),
                    kind,
                    name,
                    stream,
                    device,
                    end,
                    corr: corr.unwrap_or(0),
                    bytes,
                    linked,
                    config,
                });
                let coll = self.plan.collective_index(ordinal);
                if let Some((index, c)) = coll.filter(|(_, c)| c.op.is_some()) {
                    self.offer((seg, start, ordinal, 1), |names| Body::Collective {
                        index,
                        pg: if c.pg.is_empty() {
                            0
                        } else {
                            names.intern(&c.pg)
                        },
                        stream,
                        device,
                        end,
                    });
                }
            }
            What::Cpu { span, .. } => {
                let host = self.plan.collective_index(ordinal);
                if let Some((index, c)) = host.filter(|(_, c)| c.op.is_some()) {
                    if let Some(end) = c.host_end {
                        let seg = self.plan.cpu_seg(start);
                        self.offer((seg, start, ordinal, 1), |names| Body::Collective {
                            index,
                            pg: if c.pg.is_empty() {
                                0
                            } else {
                                names.intern(&c.pg)
                            },
                            stream: 0,
                            device: -1,
                            end,
                        });
                    }
                }
                if let Some((category, name)) = span {
                    let seg = self.plan.cpu_seg(start);
                    self.offer((seg, start, ordinal, 0), |_| Body::Span {
                        category,
                        name,
                        end,
                        gpu: None,
                    });
                }
            }
            What::GpuSpan {
                name,
                stream,
                device,
            } => {
                let seg = self.plan.cpu_seg(start);
                self.offer((seg, start, ordinal, 0), |_| Body::Span {
                    category: proto::SpanCategory::Other,
                    name,
                    end,
                    gpu: Some((stream, device)),
                });
            }
        }
    }
}

/// A pass that reads the file again (the scan kept no [`Pending`]s).
impl EventHandler for Window<'_> {
    fn event(&mut self, ordinal: u64, ev: &RawEvent) {
        let class = event::classify(ev);
        let Ok(span) = event::span_ns(ev) else {
            return; // counted by the scan
        };
        // Host-side collectives are found by ordinal in the plan.
        if let Some(p) = Pending::of(ordinal, ev, class, span, true, self.interner) {
            self.place(p);
        }
    }
}

/// Turns ordered records into wire events and chunks.
pub(crate) struct Emitter<'p, F> {
    plan: &'p Plan,
    identity: proto::RankIdentity,
    base_ns: u64,
    chunk_events: usize,
    published: Published,
    events: Vec<proto::Event>,
    next_marker: usize,
    ranks_sent: HashSet<u32>,
    sink: F,
    pub(crate) stats: ImportStats,
    /// Put into every chunk ([`Chunk::file_digest`]).
    pub(crate) file_digest: u64,
}

impl<'p, F, E> Emitter<'p, F>
where
    F: FnMut(Chunk) -> Result<(), E>,
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    pub(crate) fn new(
        plan: &'p Plan,
        identity: proto::RankIdentity,
        base_ns: u64,
        chunk_events: usize,
        sink: F,
        stats: ImportStats,
    ) -> Self {
        Self {
            plan,
            identity,
            base_ns,
            chunk_events: chunk_events.max(1),
            published: Published::new(),
            events: Vec::new(),
            next_marker: 0,
            ranks_sent: HashSet::new(),
            sink,
            stats,
            file_digest: 0,
        }
    }

    /// Emits one pass's records (already in stream order).
    pub(crate) fn emit(&mut self, recs: Vec<Rec>, names: &Interner) -> Result<(), Problem> {
        for rec in recs {
            let (seg, start, _, _) = rec.key;
            self.advance(seg, names)?;
            let at = |t: u64| self.base_ns.saturating_add(t);
            let kind = match rec.body {
                Body::Kernel {
                    kind,
                    name,
                    stream,
                    device,
                    end,
                    corr,
                    bytes,
                    linked,
                    launch,
                    config,
                } => {
                    self.stats.gpu_events_unlinked += u64::from(!linked);
                    self.stats.gpu_events_outside_steps += u64::from(seg & 1 == 0);
                    proto::event::Kind::Kernel(proto::Kernel {
                        kind: kind as i32,
                        name_id: self.published.use_name(name),
                        stream,
                        device,
                        start_ns: at(start),
                        end_ns: at(end),
                        correlation: corr,
                        bytes,
                        launch_start_ns: launch.map_or(0, |l| at(l.0)),
                        launch_end_ns: launch.map_or(0, |l| at(l.1)),
                        launch_name_id: launch.map_or(0, |l| self.published.use_name(l.2)),
                        config,
                    })
                }
                Body::Collective {
                    index,
                    pg,
                    stream,
                    device,
                    end,
                } => {
                    let c = &self.plan.collectives[index];
                    let pg = self.published.use_name(pg);
                    let group_ranks = if self.ranks_sent.insert(pg) {
                        c.group_ranks.clone()
                    } else {
                        Vec::new()
                    };
                    proto::event::Kind::Collective(proto::Collective {
                        op: c.op.map_or(0, |op| op as i32),
                        process_group_id: pg,
                        group_ranks,
                        group_size: c.group_size,
                        dtype: c.dtype as i32,
                        count: c.count,
                        bytes: c.bytes,
                        seq: c.seq,
                        stream,
                        device,
                        start_ns: at(start),
                        end_ns: at(end),
                        peer: 0,
                    })
                }
                Body::Span {
                    category,
                    name,
                    end,
                    gpu,
                } => proto::event::Kind::Span(proto::Span {
                    category: category as i32,
                    name_id: self.published.use_name(name),
                    start_ns: at(start),
                    end_ns: at(end),
                    stream: gpu.map_or(0, |g| g.0),
                    device: gpu.map_or(-1, |g| g.1),
                }),
            };
            self.push(proto::Event { kind: Some(kind) }, names)?;
        }
        Ok(())
    }

    /// Emits the remaining step markers, then `views` (operator and
    /// memory view events, outside the steps; their name ids are `names`'),
    /// and the last chunk.
    pub(crate) fn finish(
        mut self,
        views: Vec<proto::Event>,
        names: &Interner,
    ) -> Result<ImportStats, Problem> {
        self.advance(u32::MAX, names)?;
        for mut ev in views {
            use proto::event::Kind;
            match &mut ev.kind {
                Some(Kind::OperatorStat(o)) => o.name_id = self.published.use_name(o.name_id),
                Some(Kind::MemoryOpStat(m)) => m.name_id = self.published.use_name(m.name_id),
                Some(Kind::MemorySample(m)) => m.name_id = self.published.use_name(m.name_id),
                _ => {}
            }
            self.push(ev, names)?;
        }
        self.flush(names)?;
        Ok(self.stats)
    }

    /// Emits the step markers that precede events of segment `seg`: marker
    /// `m` (StepBegin of step m/2 when even, its StepEnd when odd) precedes
    /// segments >= m + 1.
    fn advance(&mut self, seg: u32, names: &Interner) -> Result<(), Problem> {
        let markers = 2 * self.plan.steps.len();
        while self.next_marker < markers && (self.next_marker as u64) < u64::from(seg) {
            let s = self.plan.steps[self.next_marker / 2];
            let is_begin = self.next_marker == 2 * (self.next_marker / 2);
            let kind = if is_begin {
                proto::event::Kind::StepBegin(proto::StepBegin {
                    step: s.step,
                    ts_ns: self.base_ns.saturating_add(s.start),
                })
            } else {
                proto::event::Kind::StepEnd(proto::StepEnd {
                    step: s.step,
                    ts_ns: self.base_ns.saturating_add(s.end),
                })
            };
            self.next_marker += 1;
            self.push(proto::Event { kind: Some(kind) }, names)?;
        }
        Ok(())
    }

    fn push(&mut self, ev: proto::Event, names: &Interner) -> Result<(), Problem> {
        self.stats.events_by_kind.add(&ev);
        self.events.push(ev);
        if self.events.len() >= self.chunk_events {
            self.flush(names)?;
        }
        Ok(())
    }

    fn flush(&mut self, names: &Interner) -> Result<(), Problem> {
        if self.events.is_empty() {
            return Ok(());
        }
        let index = self.stats.chunks;
        let chunk = Chunk {
            index,
            identity: self.identity.clone(),
            names: self.published.take_chunk_names(names),
            events: std::mem::take(&mut self.events),
            file_digest: self.file_digest,
        };
        self.ranks_sent.clear();
        self.stats.chunks += 1;
        (self.sink)(chunk).map_err(|e| Problem::Sink {
            chunk: index,
            error: e.into(),
        })
    }
}
