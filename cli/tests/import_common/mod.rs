//! Helpers shared by the `import_*` integration tests: run an import while
//! checking every chunk the way the collector (per batch) and the agent
//! (per stream) validate them, and turn the result into analysis inputs.

#![allow(dead_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use rankscope_analysis::{classify_kernel, GpuEvent, GpuEventKind};
use rankscope_cli::import::{self, Chunk, ImportOptions, ImportStats};
use rankscope_proto::v1 as proto;
use rankscope_proto::validate::{self, StepState};

use proto::event::Kind;

/// `cli/tests/fixtures/kineto/<rel>`.
pub fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/kineto")
        .join(rel)
}

/// The real trace sets: `$RANKSCOPE_TRACES` when set (another collection),
/// else the vendored copy in `cli/tests/fixtures/kineto` (see its README).
pub fn trace_sets() -> PathBuf {
    let dir = std::env::var_os("RANKSCOPE_TRACES")
        .map(PathBuf::from)
        .unwrap_or_else(|| fixture(""));
    assert!(
        dir.is_dir(),
        "trace sets: {} is not a folder",
        dir.display()
    );
    dir
}

/// One imported file, as the chunks delivered it.
#[derive(Debug)]
pub struct Stream {
    pub identity: proto::RankIdentity,
    pub names: HashMap<u32, String>,
    pub events: Vec<proto::Event>,
    pub chunk_sizes: Vec<usize>,
    pub stats: ImportStats,
}

impl Stream {
    pub fn name(&self, id: u32) -> &str {
        self.names.get(&id).map_or("", String::as_str)
    }
}

/// Imports `path`, asserting on every chunk: it validates on its own as a
/// collector batch, the stream validates as an agent stream, it is at most
/// `chunk_events` long, names are never redefined differently, and the
/// identity never changes.
pub fn import_checked(path: &Path, opts: &ImportOptions) -> Stream {
    let mut names: HashMap<u32, String> = HashMap::new();
    let mut events = Vec::new();
    let mut sizes = Vec::new();
    let mut state = StepState::default();
    let mut first_identity: Option<proto::RankIdentity> = None;
    let summary = import::import_file(path, opts, |c: Chunk| {
        assert_eq!(c.index as usize, sizes.len(), "chunk indexes count up");
        assert!(!c.events.is_empty(), "no empty chunks");
        assert!(c.events.len() <= opts.chunk_events, "chunk too large");
        let id = validate::validate_identity(Some(&c.identity)).expect("identity");
        match &first_identity {
            Some(f) => validate::check_same_identity(f, id).expect("same identity"),
            None => first_identity = Some(id.clone()),
        }
        let none: HashMap<u32, String> = HashMap::new();
        validate::validate_names(&c.names, &none).expect("chunk names");
        validate::validate_events(&c.events, &c.names, &none, StepState::default())
            .expect("chunk validates as a batch on its own");
        validate::validate_names(&c.names, &names).expect("names stable across chunks");
        state = validate::validate_events(&c.events, &c.names, &names, state)
            .expect("stream validates");
        for n in c.names {
            names.insert(n.id, n.name);
        }
        sizes.push(c.events.len());
        events.extend(c.events);
        Ok::<(), std::convert::Infallible>(())
    })
    .unwrap_or_else(|e| panic!("import failed: {e}"));
    assert_eq!(state.open, None, "the last step is closed");
    assert_eq!(summary.stats.chunks as usize, sizes.len());
    Stream {
        identity: summary.identity,
        names,
        events,
        chunk_sizes: sizes,
        stats: summary.stats,
    }
}

/// Analysis GPU events from the stream's Kernel events (all of them, in or
/// out of steps).
pub fn gpu_events(s: &Stream) -> Vec<GpuEvent> {
    kernels(s.events.iter(), s)
}

fn kernels<'a>(events: impl Iterator<Item = &'a proto::Event>, s: &Stream) -> Vec<GpuEvent> {
    events
        .filter_map(|e| match &e.kind {
            Some(Kind::Kernel(k)) => Some(GpuEvent {
                start_ns: k.start_ns,
                end_ns: k.end_ns,
                class: classify_kernel(s.name(k.name_id), gpu_kind(k.kind)),
            }),
            _ => None,
        })
        .collect()
}

fn gpu_kind(kind: i32) -> GpuEventKind {
    match proto::KernelKind::try_from(kind) {
        Ok(proto::KernelKind::Memcpy) => GpuEventKind::Memcpy,
        Ok(proto::KernelKind::Memset) => GpuEventKind::Memset,
        _ => GpuEventKind::Kernel,
    }
}

/// Events split at the step markers: `(Some(step), events)` inside a step,
/// `(None, events)` between steps.
pub fn segments(s: &Stream) -> Vec<(Option<u64>, Vec<&proto::Event>)> {
    let mut out: Vec<(Option<u64>, Vec<&proto::Event>)> = vec![(None, Vec::new())];
    for e in &s.events {
        match &e.kind {
            Some(Kind::StepBegin(b)) => out.push((Some(b.step), Vec::new())),
            Some(Kind::StepEnd(_)) => out.push((None, Vec::new())),
            _ => out.last_mut().expect("non-empty").1.push(e),
        }
    }
    out
}

/// Start of a Kernel, Collective or Span.
pub fn start_ns(e: &proto::Event) -> Option<u64> {
    match &e.kind {
        Some(Kind::Kernel(k)) => Some(k.start_ns),
        Some(Kind::Collective(c)) => Some(c.start_ns),
        Some(Kind::Span(s)) => Some(s.start_ns),
        _ => None,
    }
}

/// The invariants every import must satisfy.
pub fn check_invariants(s: &Stream) {
    let st = &s.stats;
    assert_eq!(st.events_by_kind.total() as usize, s.events.len());
    assert_eq!(st.events_by_kind.step_begin, st.events_by_kind.step_end);
    assert!(st.events_by_kind.step_begin >= 1, "at least one step");
    assert!(
        st.events_by_kind.kernel >= 1 || st.host_collectives >= 1,
        "GPU events (or, in a CPU-only trace, host collectives) were imported"
    );
    assert!(st.max_buffered_events <= 1_000_000);

    // Per-segment counts add up to the totals.
    let segs = segments(s);
    let mut kernels_total = 0;
    let mut outside = 0;
    for (step, evs) in &segs {
        let k = evs
            .iter()
            .filter(|e| matches!(e.kind, Some(Kind::Kernel(_))))
            .count() as u64;
        kernels_total += k;
        if step.is_none() {
            outside += k;
        }
    }
    assert_eq!(kernels_total, st.events_by_kind.kernel);
    // Within a segment events are in start-time order.
    for (step, evs) in &segs {
        let starts: Vec<u64> = evs.iter().filter_map(|e| start_ns(e)).collect();
        assert!(
            starts.windows(2).all(|w| w[0] <= w[1]),
            "step {step:?} out of order"
        );
    }
    assert_eq!(outside, st.gpu_events_outside_steps);
    let spans_and_colls: u64 = segs
        .iter()
        .flat_map(|(_, e)| e.iter())
        .filter(|e| matches!(e.kind, Some(Kind::Span(_)) | Some(Kind::Collective(_))))
        .count() as u64;
    assert_eq!(
        spans_and_colls,
        st.events_by_kind.span + st.events_by_kind.collective
    );

    // Intervals, and each GPU collective right after its kernel (a host
    // collective, device -1, has no kernel).
    let mut prev_kernel: Option<&proto::Kernel> = None;
    for e in &s.events {
        match &e.kind {
            Some(Kind::Kernel(k)) => {
                assert!(k.end_ns >= k.start_ns);
                prev_kernel = Some(k);
            }
            Some(Kind::Collective(c)) if c.device == -1 => {
                assert!(c.end_ns >= c.start_ns);
                assert!(c.group_size >= 1);
                prev_kernel = None;
            }
            Some(Kind::Collective(c)) => {
                assert!(c.end_ns >= c.start_ns);
                let k = prev_kernel.expect("a collective follows its kernel");
                assert_eq!((k.start_ns, k.end_ns), (c.start_ns, c.end_ns));
                assert!(s.name(k.name_id).starts_with("nccl"));
                assert!(c.group_size >= 1);
            }
            Some(Kind::Span(sp)) => assert!(sp.end_ns >= sp.start_ns),
            _ => {}
        }
    }

    // Breakdown invariants, whole rank and per step; per-step kernel sums.
    let all = gpu_events(s);
    let b = rankscope_analysis::breakdown(&all);
    assert!(b.gpu_busy_ns <= b.gpu_span_ns);
    assert!(b.overlap_ns <= b.compute_ns.min(b.comm_ns));
    assert_eq!(b.idle_ns + b.compute_ns + b.non_compute_ns, b.gpu_span_ns);
    let mut per_step_kernels = 0;
    for (_, evs) in &segs {
        let g = kernels(evs.iter().copied(), s);
        per_step_kernels += g.len();
        let sb = rankscope_analysis::breakdown(&g);
        assert!(sb.gpu_busy_ns <= sb.gpu_span_ns);
        assert!(sb.overlap_ns <= sb.compute_ns.min(sb.comm_ns));
        assert!(sb.gpu_busy_ns <= b.gpu_busy_ns);
    }
    assert_eq!(per_step_kernels, all.len());

    // Collective sequence numbers: 0.. per process group, no gaps or repeats
    // beyond unknown-op kernels.
    let mut seqs: HashMap<u32, Vec<u64>> = HashMap::new();
    for e in &s.events {
        if let Some(Kind::Collective(c)) = &e.kind {
            seqs.entry(c.process_group_id).or_default().push(c.seq);
        }
    }
    for (pg, mut v) in seqs {
        let n = v.len();
        v.sort_unstable();
        v.dedup();
        assert_eq!(v.len(), n, "pg {pg}: sequence numbers are unique");
    }
}

/// A synthetic Kineto trace: `steps` ProfilerSteps of integer-µs events,
/// each with `kernels_per_step` launches and kernels (every 100th an NCCL
/// AllReduce, every 50th a memcpy), `filler_per_step` CPU ops carrying
/// `filler_bytes` of args, and `warm_up` kernels with no launch before the
/// first step. GPU events are written in reverse time order after the CPU
/// events, to exercise the ordering passes.
#[derive(Debug, Clone)]
pub struct Synth {
    pub steps: u64,
    pub kernels_per_step: u64,
    pub filler_per_step: u64,
    pub filler_bytes: usize,
    pub warm_up: u64,
    /// Write `traceEvents` before `distributedInfo`.
    pub events_first: bool,
    /// Leave out `distributedInfo`.
    pub no_dist: bool,
}

pub const SYNTH_T0_US: u64 = 1_700_000_000_000_000;
const STEP_US: u64 = 10_000;

/// Writes `s` to `path`.
pub fn write_synthetic(path: &Path, s: &Synth) {
    use std::io::Write;
    let f = std::fs::File::create(path).expect("create");
    let mut w = std::io::BufWriter::new(f);
    let dist = r#""distributedInfo": {"backend": "nccl", "rank": 3, "world_size": 4}"#;
    let head = r#"{"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "Synthetic GPU"}]"#;
    write!(w, "{head}").unwrap();
    if !s.events_first && !s.no_dist {
        write!(w, ", {dist}").unwrap();
    }
    write!(w, ", \"traceEvents\": [").unwrap();
    let mut first = true;
    let mut put = |w: &mut std::io::BufWriter<std::fs::File>, ev: String| {
        if !first {
            w.write_all(b",\n").unwrap();
        }
        first = false;
        w.write_all(ev.as_bytes()).unwrap();
    };
    let filler = "x".repeat(s.filler_bytes);
    for k in 0..s.steps {
        let t = SYNTH_T0_US + k * STEP_US;
        put(
            &mut w,
            format!(
                r#"{{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#{}", "pid": 10, "tid": 10, "ts": {t}, "dur": 9000, "args": {{"External id": 1}}}}"#,
                100 + k
            ),
        );
        put(
            &mut w,
            format!(
                r###"{{"ph": "X", "cat": "user_annotation", "name": "## forward ##", "pid": 10, "tid": 10, "ts": {}, "dur": 3000}}"###,
                t + 5
            ),
        );
        for i in 0..s.kernels_per_step {
            let corr = 1_000_000 + k * s.kernels_per_step + i;
            put(
                &mut w,
                format!(
                    r#"{{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 10, "tid": 10, "ts": {}, "dur": 1, "args": {{"correlation": {corr}, "External id": {corr}}}}}"#,
                    t + 10 + i * 5 / s.kernels_per_step.max(1)
                ),
            );
        }
        for i in 0..s.filler_per_step {
            put(
                &mut w,
                format!(
                    r#"{{"ph": "X", "cat": "cpu_op", "name": "aten::filler", "pid": 10, "tid": 10, "ts": {}, "dur": 1, "args": {{"Input Dims": [[1, 2], []], "Concrete Inputs": ["{filler}"], "Ev Idx": {i}}}}}"#,
                    t + 20
                ),
            );
        }
    }
    // GPU events, latest first.
    for k in (0..s.steps).rev() {
        let t = SYNTH_T0_US + k * STEP_US;
        for i in (0..s.kernels_per_step).rev() {
            let corr = 1_000_000 + k * s.kernels_per_step + i;
            let ts = t + 100 + i * 2;
            let ev = if i % 100 == 99 {
                format!(
                    r#"{{"ph": "X", "cat": "kernel", "name": "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", "pid": 0, "tid": 20, "ts": {ts}, "dur": 2, "args": {{"device": 0, "stream": 20, "correlation": {corr}}}}}"#
                )
            } else if i % 50 == 49 {
                format!(
                    r#"{{"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pinned -> Device)", "pid": 0, "tid": 7, "ts": {ts}, "dur": 1, "args": {{"device": 0, "stream": 7, "correlation": {corr}, "bytes": 4096}}}}"#
                )
            } else {
                format!(
                    r#"{{"ph": "X", "cat": "kernel", "name": "volta_sgemm_{}", "pid": 0, "tid": 7, "ts": {ts}, "dur": 1, "args": {{"device": 0, "stream": 7, "correlation": {corr}}}}}"#,
                    i % 7
                )
            };
            put(&mut w, ev);
        }
    }
    for i in 0..s.warm_up {
        put(
            &mut w,
            format!(
                r#"{{"ph": "X", "cat": "kernel", "name": "warm_up_kernel", "pid": 0, "tid": 7, "ts": {}, "dur": 1, "args": {{"device": 0, "stream": 7, "correlation": {}}}}}"#,
                SYNTH_T0_US - 1000 + i * 2,
                10 + i
            ),
        );
    }
    write!(w, "]").unwrap();
    if s.events_first && !s.no_dist {
        write!(w, ", {dist}").unwrap();
    }
    writeln!(w, "}}").unwrap();
    w.flush().unwrap();
}
