//! Between the passes: where every event goes, and what every NCCL kernel
//! was.
//!
//! In: a [`Scan`]. Out: a [`Plan`]: the steps, the segment of any CPU time
//! or GPU activity, and the resolved collectives.
//!
//! Segments order the output stream: with `n` steps (sorted by start),
//! segment `2k` is the gap before step `k` (out-of-step events), `2k + 1`
//! is step `k`, `2n` is after the last step. Assignment rules:
//! - a GPU activity belongs to the step of its CPU launch (the API call
//!   with the same `args.correlation`, as HTA does); a launch outside every
//!   step puts it in the gap where the launch happened;
//! - a GPU activity with no launch in the trace (launched before the
//!   profiler started) is outside every step (HTA: iteration -1), in the
//!   gap at or after its own start;
//! - CPU spans go by their start time;
//! - a trace without CPU `ProfilerStep#N` annotations uses GPU-side ones;
//!   without either it is one step, step 0, spanning the whole trace, and
//!   everything is in it.
//!
//! Step numbers strictly increase in time order: a repeated or decreasing
//! `ProfilerStep#N` is dropped with a warning (its events become
//! out-of-step). Collective sequence numbers count, per process group,
//! the rank's NCCL kernels in launch order (kernels launched before the
//! trace first) and its host (CPU-side, see `cpu_comm`) collective calls
//! by call start, together, starting at 0; ranks of one job match by
//! `(pg, seq)`. A host collective is placed by its call's start.

use std::collections::{HashMap, HashSet};

use rankscope_proto::v1 as proto;

use super::cpu_comm;
use super::nccl;
use super::raw::PgConfig;
use super::scan::{Launch, Scan, StepMark};
use super::stats::ImportStats;

/// A launch, indexed by correlation id.
#[derive(Debug, Clone, Copy)]
struct LaunchRef {
    corr: u64,
    ts: u64,
    end: u64,
    ext: u64,
    api: u16,
    seg: u32,
}

/// The host call that launched a GPU activity: start, end, name.
pub(crate) type LaunchCall<'a> = (u64, u64, &'a str);

/// Launch order of an NCCL kernel: (launch time, `None` = before the trace;
/// kernel start; trace ordinal).
type LaunchOrder = (Option<u64>, u64, u64);

/// One NCCL kernel, resolved.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Resolved {
    pub ordinal: u64,
    /// `None`: unknown op, no `Collective` is emitted.
    pub op: Option<proto::CollectiveOp>,
    /// Process group name ("" = default / unknown).
    pub pg: String,
    pub group_size: u32,
    pub group_ranks: Vec<u32>,
    pub dtype: proto::DataType,
    pub count: u64,
    pub bytes: u64,
    pub seq: u64,
    /// A host (CPU-side) collective: its end; `ordinal` is its outermost
    /// op. `None`: an NCCL kernel.
    pub host_end: Option<u64>,
}

/// The placement plan of one file.
#[derive(Debug)]
pub(crate) struct Plan {
    /// Steps in output order.
    pub steps: Vec<StepMark>,
    /// Everything is in the one synthetic step.
    pub single_step: bool,
    launches: Vec<LaunchRef>,
    /// Names of the launch calls, by `LaunchRef::api`.
    launch_apis: Vec<String>,
    /// NCCL kernels and host collective calls, by ordinal.
    pub collectives: Vec<Resolved>,
}

impl Plan {
    pub(crate) fn new(
        scan: &mut Scan,
        world_size: u32,
        pg_config: &[PgConfig],
        stats: &mut ImportStats,
    ) -> Self {
        let (steps, single_step) = pick_steps(scan, stats);
        let mut plan = Self {
            steps,
            single_step,
            launches: Vec::new(),
            launch_apis: std::mem::take(&mut scan.launch_apis),
            collectives: Vec::new(),
        };
        plan.launches = index_launches(std::mem::take(&mut scan.launches), &plan);
        plan.collectives = plan.resolve(scan, world_size, pg_config, stats);
        plan
    }

    /// Segment of a CPU-side time.
    pub(crate) fn cpu_seg(&self, t: u64) -> u32 {
        if self.single_step {
            return 1;
        }
        let k = self.steps.partition_point(|s| s.start <= t);
        if k > 0 && t < self.steps[k - 1].end {
            seg(2 * (k - 1) + 1)
        } else {
            seg(2 * k)
        }
    }

    /// Segment of a GPU activity, and whether its launch was found.
    pub(crate) fn gpu_seg(&self, corr: Option<u64>, start: u64) -> (u32, bool) {
        if self.single_step {
            return (1, self.launch(corr).is_some());
        }
        match self.launch(corr) {
            Some(l) => (l.seg, true),
            None => (
                seg(2 * self.steps.partition_point(|s| s.start <= start)),
                false,
            ),
        }
    }

    /// The launch call of the GPU activity with correlation `corr`.
    pub(crate) fn launch_call(&self, corr: Option<u64>) -> Option<LaunchCall<'_>> {
        self.launch(corr).map(|l| {
            let api = self.launch_apis.get(usize::from(l.api));
            (l.ts, l.end, api.map_or("", String::as_str))
        })
    }

    fn launch(&self, corr: Option<u64>) -> Option<&LaunchRef> {
        let corr = corr?;
        let i = self.launches.binary_search_by_key(&corr, |l| l.corr).ok()?;
        self.launches.get(i)
    }

    /// The resolved NCCL kernel at `ordinal` (and its index), if it is one.
    pub(crate) fn collective_index(&self, ordinal: u64) -> Option<(usize, &Resolved)> {
        let i = self
            .collectives
            .binary_search_by_key(&ordinal, |c| c.ordinal)
            .ok()?;
        Some((i, self.collectives.get(i)?))
    }

    fn resolve(
        &self,
        scan: &mut Scan,
        world_size: u32,
        pg_config: &[PgConfig],
        stats: &mut ImportStats,
    ) -> Vec<Resolved> {
        let pgs: HashMap<&str, &PgConfig> = pg_config
            .iter()
            .filter_map(|p| p.pg_name.as_str().map(|n| (n, p)))
            .collect();
        let mut out = Vec::with_capacity(scan.nccl.len());
        let mut order: Vec<(String, LaunchOrder, usize)> = Vec::new();
        let mut nccl_launches = Vec::new();
        let mut nccl_ext = HashSet::new();
        for draft in std::mem::take(&mut scan.nccl) {
            let launch = self.launch(draft.corr);
            let mut meta = draft.meta.unwrap_or_default();
            let ext = draft.ext.or(launch.map(|l| l.ext)).filter(|e| *e != 0);
            nccl_launches.extend(launch.map(|l| l.ts));
            nccl_ext.extend(ext);
            if let Some(rpc) = ext.and_then(|e| scan.comm_meta.get(&e)) {
                meta.fill_from(rpc);
            }
            let p = nccl::payload(&draft.name, &meta);
            let (pg, group_size, group_ranks) = group(&meta, &pgs, world_size);
            if p.op.is_none() {
                stats.collectives_unknown_op += 1;
            }
            order.push((
                pg.clone(),
                (launch.map(|l| l.ts), draft.start, draft.ordinal),
                out.len(),
            ));
            out.push(Resolved {
                ordinal: draft.ordinal,
                op: p.op,
                pg,
                group_size,
                group_ranks,
                dtype: p.dtype,
                count: p.count,
                bytes: p.bytes,
                seq: 0,
                host_end: None,
            });
        }
        nccl_launches.sort_unstable();
        let host = std::mem::take(&mut scan.host_comm);
        for call in cpu_comm::calls(host, &nccl_launches, &nccl_ext) {
            let (pg, group_size, group_ranks) = group(&call.meta, &pgs, world_size);
            let m = &call.meta;
            let (dtype, size) = m
                .dtype
                .as_deref()
                .and_then(nccl::dtype_from_c10)
                .or(call.dtype)
                .unwrap_or((proto::DataType::Unspecified, 0));
            let count = match (m.in_nelems, m.out_nelems) {
                _ if call.op == proto::CollectiveOp::Barrier => 0,
                (None, None) => {
                    cpu_comm::count_from_input(call.op, call.elems.unwrap_or(0), group_size)
                }
                (i, o) => i.unwrap_or(0).max(o.unwrap_or(0)),
            };
            let bytes = count.saturating_mul(size);
            stats.host_collectives += 1;
            order.push((
                pg.clone(),
                (Some(call.start), call.start, call.ordinal),
                out.len(),
            ));
            out.push(Resolved {
                ordinal: call.ordinal,
                op: Some(call.op),
                pg,
                group_size,
                group_ranks,
                dtype,
                count,
                bytes,
                seq: 0,
                host_end: Some(call.end),
            });
        }
        order.sort();
        let mut last_pg: Option<&str> = None;
        let mut seq = 0;
        for (pg, _, i) in &order {
            if last_pg != Some(pg.as_str()) {
                last_pg = Some(pg.as_str());
                seq = 0;
            }
            out[*i].seq = seq;
            seq += 1;
        }
        if stats.collectives_unknown_op > 0 {
            stats.warn(format!(
                "{} NCCL kernel(s) with no NCCL metadata and no op in their name \
                 (e.g. ncclDevKernel_Generic): imported as kernels, no collective events",
                stats.collectives_unknown_op
            ));
        }
        out.sort_by_key(|c| c.ordinal);
        out
    }
}

/// Process group name, size and ranks of a collective: its metadata, else
/// the trace's `pg_config`, else the whole world.
fn group(
    meta: &nccl::CommMeta,
    pgs: &HashMap<&str, &PgConfig>,
    world_size: u32,
) -> (String, u32, Vec<u32>) {
    let pg = meta.pg_name.clone().unwrap_or_default();
    let cfg = pgs.get(pg.as_str());
    let group_ranks = meta
        .pg_ranks
        .clone()
        .or_else(|| cfg.and_then(|c| c.ranks.as_ranks()))
        .unwrap_or_default();
    let group_size = meta
        .group_size
        .or_else(|| {
            cfg.and_then(|c| c.pg_size.as_u64())
                .and_then(|s| u32::try_from(s).ok())
        })
        .or_else(|| u32::try_from(group_ranks.len()).ok().filter(|n| *n > 0))
        .unwrap_or(world_size)
        .max(1);
    (pg, group_size, group_ranks)
}

fn seg(i: usize) -> u32 {
    u32::try_from(i).unwrap_or(u32::MAX)
}

/// CPU steps, else GPU-side steps, else one synthetic step over everything.
fn pick_steps(scan: &mut Scan, stats: &mut ImportStats) -> (Vec<StepMark>, bool) {
    let mut marks = if scan.cpu_steps.is_empty() {
        if !scan.gpu_steps.is_empty() {
            stats.warn("no CPU ProfilerStep annotations: using the GPU-side ones");
        }
        std::mem::take(&mut scan.gpu_steps)
    } else {
        std::mem::take(&mut scan.cpu_steps)
    };
    if marks.is_empty() && scan.optimizer_steps.len() >= 2 {
        // No ProfilerStep#N: iterations from torch's optimizer steps.
        // Iteration k runs from the end of optimizer step k-1 to the end of
        // optimizer step k (k = 1..n-1; time before the first optimizer
        // step is a partial iteration and stays outside the steps). They
        // are numbered 0, 1, ... in the trace; a caller that knows better
        // (the agent aligning ranks) renumbers them.
        let mut opt = std::mem::take(&mut scan.optimizer_steps);
        opt.sort_by_key(|m| (m.end, m.ordinal));
        let mut ends: Vec<(u64, u64)> = opt.iter().map(|m| (m.end, m.ordinal)).collect();
        // The time before the first optimizer step is an iteration too when
        // it is as long as the others (within 20 %): a trace libkineto
        // started at an iteration boundary (its iteration form). Otherwise
        // it is the tail of an iteration that began before the trace.
        let mut gaps: Vec<u64> = ends.windows(2).map(|w| w[1].0 - w[0].0).collect();
        gaps.sort_unstable();
        let median = gaps[gaps.len() / 2];
        let trace_start = scan.bounds.map_or(ends[0].0, |b| b.0);
        let lead = ends[0].0.saturating_sub(trace_start);
        if median > 0 && lead * 5 >= median * 4 && lead * 4 <= median * 5 {
            ends.insert(0, (trace_start, 0));
        }
        stats.warn(format!(
            "no ProfilerStep annotations: {} iterations taken from torch's Optimizer.step ops",
            ends.len() - 1
        ));
        let marks = ends
            .windows(2)
            .enumerate()
            .map(|(k, w)| StepMark {
                step: k as u64,
                start: w[0].0,
                end: w[1].0.max(w[0].0),
                ordinal: w[1].1,
            })
            .collect();
        stats.steps_from = crate::StepSource::OptimizerStep;
        return (marks, false);
    }
    if marks.is_empty() {
        let (start, end) = scan.bounds.unwrap_or((0, 0));
        stats.warn("no ProfilerStep annotations: the whole trace is imported as step 0");
        stats.steps_from = crate::StepSource::WholeTrace;
        let whole = StepMark {
            step: 0,
            start,
            end,
            ordinal: 0,
        };
        return (vec![whole], true);
    }
    marks.sort_by_key(|m| (m.start, m.ordinal));
    let mut kept: Vec<StepMark> = Vec::with_capacity(marks.len());
    for m in marks {
        match kept.last() {
            Some(last) if m.step <= last.step => stats.warn(format!(
                "ProfilerStep#{} (traceEvents[{}]) dropped: step numbers must increase in time \
                 order (previous is ProfilerStep#{})",
                m.step, m.ordinal, last.step
            )),
            _ => kept.push(m),
        }
    }
    (kept, false)
}

/// Sorts launches by correlation (the first in file order wins on
/// duplicates) and assigns each its segment.
fn index_launches(mut launches: Vec<Launch>, plan: &Plan) -> Vec<LaunchRef> {
    launches.sort_by_key(|l| l.corr); // stable: keeps file order among equals
    launches.dedup_by_key(|l| l.corr);
    launches
        .into_iter()
        .map(|l| LaunchRef {
            corr: l.corr,
            ts: l.ts,
            end: l.end,
            ext: l.ext,
            api: l.api,
            seg: plan.cpu_seg(l.ts),
        })
        .collect()
}
