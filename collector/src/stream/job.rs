//! Per-job step assembly: the events of every rank, in stream order, become
//! finalized steps, per-rank breakdowns and straggler verdicts.
//!
//! In: [`RankInput`]s of one job, in each rank's stream order, and the wall
//! clock (`now_ns`) as an argument. Out: [`JobOutput`] — step breakdown rows,
//! verdict changes and hang suspects — when steps finalize. Pure: no I/O, no
//! clock of its own.
//!
//! Step membership is by stream position: the GPU events, dataloader spans and
//! collectives a rank sends between its `StepBegin(n)` and `StepEnd(n)` belong
//! to step n (the importer places GPU events by their CPU launch, as HTA does;
//! a live rank sends them as it observes them). Events outside any step are
//! stored raw but take no part in step analytics.
//!
//! A step is finalized when all `world_size` ranks ended it, or
//! `step_timeout_ns` after its first rank ended it, or when more than
//! `max_pending_steps` steps are pending; steps finalize in step order. Per
//! finalized step: collectives are matched across ranks by (process group,
//! seq) and each rank's wait is summed (PyTorch Profiler "synchronizing"
//! time: its duration minus the shortest duration of that collective on any
//! rank), then the ranks' durations feed the job's [`StragglerTracker`].
//!
//! Compute without GPU kernels: a rank-step that carries no kernel records
//! takes its COMPUTATION time from its compute spans instead — spans timed
//! on the GPU with CUDA events when there are any, else host spans (a
//! CPU-only job, e.g. gloo), minus the time the rank had a collective in
//! flight: a CPU rank's host thread can sit blocked inside a compute span
//! waiting for a collective (DDP waits for its gradient all-reduces at the
//! end of `backward()`), and that wait is not compute. On such steps
//! compute and communication therefore never overlap (`overlap_ns` = 0).
//!
//! Memory bound: only open rank-steps and unfinalized steps are held; a
//! rank-step holds at most `max_events_per_rank_step` GPU events and
//! collectives (more are counted in `dropped_events` and ignored).

use std::collections::{BTreeMap, HashMap};

use rankscope_analysis::{
    breakdown, interval, longest_gap, match_collectives, Breakdown, CollectiveObs, Gap, GpuEvent,
    Interval, RankStepStats, StragglerPolicy, StragglerTracker, VerdictChange,
};

use super::{RankInput, StreamEvent};

/// Limits and timeouts of step assembly.
#[derive(Debug, Clone, Copy)]
pub struct AssemblyLimits {
    /// A step is finalized this long after its first rank ended it.
    pub step_timeout_ns: u64,
    /// Most unfinalized steps per job; the oldest is finalized beyond it.
    pub max_pending_steps: usize,
    /// Most GPU events + collectives kept per rank-step.
    pub max_events_per_rank_step: usize,
    /// A rank silent this long while the others end steps is a hang suspect.
    pub hang_after_ns: u64,
}

/// One rank's finished step, waiting for the other ranks.
#[derive(Debug, Clone)]
struct RankStepDone {
    node: String,
    run_id: String,
    start_ns: u64,
    step_time_ns: u64,
    breakdown: Breakdown,
    gpu_events: u64,
    dataloader_ns: u64,
    collectives: Vec<CollectiveObs>,
    gap: Option<Gap>,
}

#[derive(Debug, Default)]
struct PendingStep {
    first_end_wall_ns: u64,
    ranks: BTreeMap<u32, RankStepDone>,
}

#[derive(Debug)]
struct OpenStep {
    step: u64,
    begin_ns: u64,
    gpu: Vec<GpuEvent>,
    dataloader: Vec<Interval>,
    collectives: Vec<CollectiveObs>,
    host_compute: Vec<Interval>,
    device_compute: Vec<Interval>,
    /// Phase and input spans with their labels (where unexplained time sits).
    phases: Vec<(u64, u64, &'static str)>,
}

impl OpenStep {
    fn new(step: u64, begin_ns: u64) -> Self {
        Self {
            step,
            begin_ns,
            gpu: Vec::new(),
            dataloader: Vec::new(),
            collectives: Vec::new(),
            host_compute: Vec::new(),
            device_compute: Vec::new(),
            phases: Vec::new(),
        }
    }

    /// Events held (bounded by `max_events_per_rank_step`).
    fn held(&self) -> usize {
        self.gpu.len()
            + self.collectives.len()
            + self.host_compute.len()
            + self.device_compute.len()
    }
}

#[derive(Debug, Default)]
struct RankState {
    node: String,
    run_id: String,
    open: Option<OpenStep>,
    last_step_end: Option<u64>,
    last_activity_wall_ns: u64,
    hang_reported_for: Option<Option<u64>>,
    /// The rank's stream ended (the process is gone).
    closed: bool,
}

/// One row of per-rank step analytics.
#[derive(Debug, Clone, PartialEq)]
pub struct RankStepResult {
    pub step: u64,
    pub rank: u32,
    pub node: String,
    pub run_id: String,
    pub step_start_ns: u64,
    pub step_time_ns: u64,
    pub breakdown: Breakdown,
    pub dataloader_ns: u64,
    pub comm_wait_ns: u64,
    pub comm_transfer_ns: u64,
    pub gpu_events: u64,
    /// The longest stretch of the step outside the rank's phase, input and
    /// collective spans (`rankscope_analysis::longest_gap`).
    pub gap: Option<Gap>,
}

/// A rank that stopped ending steps while others went on.
#[derive(Debug, Clone, PartialEq)]
pub struct HangSuspect {
    pub rank: u32,
    pub node: String,
    /// Last step the rank ended, `None` if it never ended one.
    pub last_step: Option<u64>,
    /// Highest step any rank of the job ended.
    pub job_step: u64,
    /// How long the rank has been silent.
    pub silent_ns: u64,
}

/// What a call produced.
#[derive(Debug, Default)]
pub struct JobOutput {
    pub steps: Vec<RankStepResult>,
    pub verdicts: Vec<VerdictChange>,
    pub hangs: Vec<HangSuspect>,
    /// Ranks reported as hung that ended a step again.
    pub resumed: Vec<u32>,
    /// No rank ended a step for `hang_after` while some are still connected:
    /// (last step of the job, silence in ns).
    pub stalled: Option<(u64, u64)>,
    /// A stalled job ended a step again.
    pub progressed: bool,
    /// Per finalized step, the bus bandwidth of each collective key.
    pub collectives: Vec<CollectiveStepBw>,
}

/// Bus bandwidth of one (process group, op, size bucket) in one step, from
/// transfer times (nccl-tests busbw over the shortest duration of each
/// matched collective, so waiting for a straggler does not count).
#[derive(Debug, Clone, PartialEq)]
pub struct CollectiveStepBw {
    pub step: u64,
    pub op: &'static str,
    pub process_group: String,
    pub size_bucket: String,
    pub busbw_gbps: f64,
}

/// Step assembly state of one job.
#[derive(Debug)]
pub struct JobAssembler {
    world_size: u32,
    limits: AssemblyLimits,
    ranks: HashMap<u32, RankState>,
    pending: BTreeMap<u64, PendingStep>,
    last_finalized: Option<u64>,
    tracker: StragglerTracker,
    /// Events beyond `max_events_per_rank_step`.
    pub dropped_events: u64,
    /// Rank-steps that arrived after their step was finalized.
    pub late_rank_steps: u64,
    /// Steps finalized before every rank reported them.
    pub partial_steps: u64,
    /// When any rank last ended a step.
    last_step_end_wall_ns: u64,
    /// The current stall was reported.
    stall_reported: bool,
}

impl JobAssembler {
    /// A new job of `world_size` ranks.
    pub fn new(world_size: u32, policy: StragglerPolicy, limits: AssemblyLimits) -> Self {
        Self {
            world_size: world_size.max(1),
            limits,
            ranks: HashMap::new(),
            pending: BTreeMap::new(),
            last_finalized: None,
            tracker: StragglerTracker::new(policy),
            dropped_events: 0,
            late_rank_steps: 0,
            partial_steps: 0,
            last_step_end_wall_ns: 0,
            stall_reported: false,
        }
    }

    /// A job's assembler rebuilt after a restart (`stream::recover`): the
    /// straggler tracker replayed from stored breakdowns, steps up to
    /// `last_finalized` final, and each rank as (rank, node, run id, last
    /// ended step), active as of `now_ns`.
    pub fn resume(
        world_size: u32,
        limits: AssemblyLimits,
        tracker: StragglerTracker,
        last_finalized: Option<u64>,
        ranks: impl IntoIterator<Item = (u32, String, String, Option<u64>)>,
        now_ns: u64,
    ) -> Self {
        let mut a = Self::new(world_size, *tracker.policy(), limits);
        a.tracker = tracker;
        a.last_finalized = last_finalized;
        a.last_step_end_wall_ns = now_ns;
        for (rank, node, run_id, last_step_end) in ranks {
            a.ranks.insert(
                rank,
                RankState {
                    node,
                    run_id,
                    last_step_end,
                    last_activity_wall_ns: now_ns,
                    // Connected again only when it sends (see `push`).
                    closed: true,
                    ..RankState::default()
                },
            );
        }
        a
    }

    /// The active straggler verdicts.
    pub fn active_verdicts(&self) -> Vec<rankscope_analysis::Verdict> {
        self.tracker.active_verdicts()
    }

    /// Unfinalized steps held.
    pub fn pending_steps(&self) -> usize {
        self.pending.len()
    }

    /// Consumes one rank group in stream order.
    pub fn push(&mut self, input: RankInput, now_ns: u64, out: &mut JobOutput) {
        self.world_size = self.world_size.max(input.world_size);
        let max_events = self.limits.max_events_per_rank_step;
        let state = self.ranks.entry(input.rank).or_default();
        state.node = input.node;
        state.run_id = input.run_id;
        state.last_activity_wall_ns = now_ns;
        state.closed = input.closed;
        let mut finished = Vec::new();
        let mut resumed = Vec::new();
        for ev in input.events {
            match ev {
                StreamEvent::StepBegin { step, ts_ns } => {
                    state.open = Some(OpenStep::new(step, ts_ns));
                }
                StreamEvent::StepEnd { step, ts_ns } => {
                    let open = match state.open.take() {
                        Some(o) if o.step == step => o,
                        // Begin not seen (joined mid-step): a step without events.
                        other => {
                            state.open = other;
                            OpenStep::new(step, ts_ns)
                        }
                    };
                    state.last_step_end = Some(step);
                    if state.hang_reported_for.take().is_some() {
                        resumed.push(input.rank);
                    }
                    finished.push((open, ts_ns));
                }
                StreamEvent::Gpu(g) => {
                    if let Some(o) = state.open.as_mut() {
                        if o.held() < max_events {
                            o.gpu.push(g);
                        } else {
                            self.dropped_events += 1;
                        }
                    }
                }
                StreamEvent::HostCompute(iv, phase) | StreamEvent::DeviceCompute(iv, phase) => {
                    if let Some(o) = state.open.as_mut() {
                        if o.held() >= max_events {
                            self.dropped_events += 1;
                        } else {
                            o.phases.push((iv.start_ns, iv.end_ns, phase));
                            if matches!(ev, StreamEvent::HostCompute(..)) {
                                o.host_compute.push(iv);
                            } else {
                                o.device_compute.push(iv);
                            }
                        }
                    }
                }
                StreamEvent::Dataloader(iv) => {
                    if let Some(o) = state.open.as_mut() {
                        o.phases.push((iv.start_ns, iv.end_ns, "input"));
                        o.dataloader.push(iv);
                    }
                }
                StreamEvent::Collective(c) => {
                    if let Some(o) = state.open.as_mut() {
                        if o.held() < max_events {
                            o.collectives.push(c);
                        } else {
                            self.dropped_events += 1;
                        }
                    }
                }
            }
        }
        out.resumed.extend(resumed);
        if !finished.is_empty() {
            self.last_step_end_wall_ns = now_ns;
            if self.stall_reported {
                self.stall_reported = false;
                out.progressed = true;
            }
        }
        let (node, run_id) = (state.node.clone(), state.run_id.clone());
        for (open, end_ns) in finished {
            self.finish_rank_step(input.rank, &node, &run_id, open, end_ns, now_ns);
        }
        // Hangs are looked for on the tick ([`JobAssembler::poll`]): that
        // walks every rank, and doing it per input costs ranks^2 per step
        // (16,384-rank jobs spent 14 % of the collector's CPU there).
        self.finalize_due(now_ns, out);
    }

    fn finish_rank_step(
        &mut self,
        rank: u32,
        node: &str,
        run_id: &str,
        open: OpenStep,
        end_ns: u64,
        now_ns: u64,
    ) {
        if self.last_finalized.is_some_and(|f| open.step <= f) {
            self.late_rank_steps += 1;
            return;
        }
        // Where the rank's time outside its spans sits (phases, input and
        // collectives; kernels run asynchronously and do not say).
        let mut marks = open.phases;
        marks.extend(
            open.collectives
                .iter()
                .map(|c| (c.start_ns, c.end_ns, c.op.as_str())),
        );
        let gap = longest_gap(open.begin_ns, end_ns, &marks);
        // Collectives are communication GPU time too (a trace may carry only
        // the collective, not its NCCL kernel; duplicates merge in the union).
        let mut gpu = open.gpu;
        let kernels = gpu.len();
        gpu.extend(open.collectives.iter().map(|c| GpuEvent {
            start_ns: c.start_ns,
            end_ns: c.end_ns,
            class: rankscope_analysis::KernelClass::Communication,
        }));
        if kernels == 0 {
            gpu.extend(span_compute(
                open.device_compute,
                open.host_compute,
                &open.collectives,
            ));
        }
        let done = RankStepDone {
            node: node.to_owned(),
            run_id: run_id.to_owned(),
            start_ns: open.begin_ns,
            step_time_ns: end_ns.saturating_sub(open.begin_ns),
            breakdown: breakdown(&gpu),
            gpu_events: gpu.len() as u64,
            dataloader_ns: interval::total_len(&interval::union_vec(open.dataloader)),
            collectives: open.collectives,
            gap,
        };
        let p = self.pending.entry(open.step).or_default();
        if p.ranks.is_empty() {
            p.first_end_wall_ns = now_ns;
        }
        p.ranks.insert(rank, done);
    }

    /// Finalizes what is due and reports hang suspects.
    pub fn poll(&mut self, now_ns: u64, out: &mut JobOutput) {
        self.finalize_due(now_ns, out);
        self.detect_hangs(now_ns, out);
    }

    /// Finalizes the steps that are due, in step order.
    fn finalize_due(&mut self, now_ns: u64, out: &mut JobOutput) {
        while let Some((&step, p)) = self.pending.first_key_value() {
            let complete = p.ranks.len() as u32 >= self.world_size;
            let timed_out =
                now_ns.saturating_sub(p.first_end_wall_ns) >= self.limits.step_timeout_ns;
            let over = self.pending.len() > self.limits.max_pending_steps;
            if !(complete || timed_out || over) {
                break;
            }
            if let Some(p) = self.pending.remove(&step) {
                if !complete {
                    self.partial_steps += 1;
                }
                self.finalize(step, p, out);
            }
        }
    }

    fn finalize(&mut self, step: u64, mut p: PendingStep, out: &mut JobOutput) {
        self.last_finalized = Some(step);
        // Moved, not cloned: at 16,384 ranks this runs between the last
        // rank's StepEnd and the verdict, and a clone is two strings per
        // collective.
        let all: Vec<CollectiveObs> = p
            .ranks
            .values_mut()
            .flat_map(|r| std::mem::take(&mut r.collectives))
            .collect();
        let mut wait: HashMap<u32, u64> = HashMap::new();
        let mut transfer: HashMap<u32, u64> = HashMap::new();
        // (pg, op, bucket) -> (sum of bytes x busbw factor, sum of transfer ns)
        let mut bw: BTreeMap<(String, &'static str, rankscope_analysis::SizeBucket), (f64, u64)> =
            BTreeMap::new();
        for m in match_collectives(&all) {
            for part in &m.participants {
                *wait.entry(part.rank).or_default() += part.wait_ns;
                *transfer.entry(part.rank).or_default() += m.transfer_ns;
            }
            let factor = rankscope_analysis::busbw_factor(m.op, m.group_size);
            if m.complete && factor > 0.0 {
                let e = bw
                    .entry((
                        m.process_group.clone(),
                        m.op.as_str(),
                        rankscope_analysis::size_bucket(m.bytes),
                    ))
                    .or_default();
                e.0 += m.bytes as f64 * factor;
                e.1 += m.transfer_ns;
            }
        }
        for ((process_group, op, bucket), (bytes, ns)) in bw {
            if ns > 0 {
                out.collectives.push(CollectiveStepBw {
                    step,
                    op,
                    process_group,
                    size_bucket: bucket.label(),
                    busbw_gbps: bytes / ns as f64,
                });
            }
        }
        let mut stats = Vec::with_capacity(p.ranks.len());
        out.steps.reserve(p.ranks.len());
        for (rank, r) in p.ranks {
            let comm_wait_ns = wait.get(&rank).copied().unwrap_or(0);
            stats.push(RankStepStats {
                rank,
                node: r.node.clone(),
                step,
                compute_ns: r.breakdown.compute_ns,
                dataloader_ns: r.dataloader_ns,
                step_time_ns: r.step_time_ns,
                comm_wait_ns,
                comm_ns: r.breakdown.comm_ns,
            });
            out.steps.push(RankStepResult {
                step,
                rank,
                node: r.node,
                run_id: r.run_id,
                step_start_ns: r.start_ns,
                step_time_ns: r.step_time_ns,
                breakdown: r.breakdown,
                dataloader_ns: r.dataloader_ns,
                comm_wait_ns,
                comm_transfer_ns: transfer.get(&rank).copied().unwrap_or(0),
                gpu_events: r.gpu_events,
                gap: r.gap,
            });
        }
        out.verdicts.extend(self.tracker.observe(step, &stats));
    }

    fn detect_hangs(&mut self, now_ns: u64, out: &mut JobOutput) {
        let Some(job_step) = self.ranks.values().filter_map(|r| r.last_step_end).max() else {
            return;
        };
        // The whole job: no step ended for hang_after while ranks are still
        // connected (a job whose streams all ended has finished or died).
        let silent = now_ns.saturating_sub(self.last_step_end_wall_ns);
        let connected = self.ranks.values().any(|r| !r.closed);
        if connected && silent >= self.limits.hang_after_ns && !self.stall_reported {
            self.stall_reported = true;
            out.stalled = Some((job_step, silent));
        }
        for (&rank, r) in &mut self.ranks {
            let behind = r.last_step_end.is_none_or(|s| s < job_step);
            let silent_ns = now_ns.saturating_sub(r.last_activity_wall_ns);
            if behind
                && silent_ns >= self.limits.hang_after_ns
                && r.hang_reported_for != Some(r.last_step_end)
            {
                r.hang_reported_for = Some(r.last_step_end);
                out.hangs.push(HangSuspect {
                    rank,
                    node: r.node.clone(),
                    last_step: r.last_step_end,
                    job_step,
                    silent_ns,
                });
            }
        }
    }
}

/// COMPUTATION events of a rank-step without kernel records (module docs):
/// the CUDA-event spans if any, else the host spans minus the time a
/// collective of the rank was in flight.
fn span_compute(
    device: Vec<Interval>,
    host: Vec<Interval>,
    collectives: &[CollectiveObs],
) -> Vec<GpuEvent> {
    let compute = if !device.is_empty() {
        interval::union_vec(device)
    } else {
        let comm = interval::union_vec(
            collectives
                .iter()
                .map(|c| Interval::new(c.start_ns, c.end_ns))
                .collect(),
        );
        interval::difference(&interval::union_vec(host), &comm)
    };
    compute
        .into_iter()
        .map(|iv| GpuEvent {
            start_ns: iv.start_ns,
            end_ns: iv.end_ns,
            class: rankscope_analysis::KernelClass::Computation,
        })
        .collect()
}

#[cfg(test)]
#[path = "job_tests.rs"]
mod tests;
