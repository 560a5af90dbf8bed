//! Live cross-rank analytics: per-job step assembly, straggler and hang
//! detection, fed by the batches the writer has accepted.
//!
//! In: a [`StreamInput`] per agent batch (extracted by
//! `convert::stream_input` in the rank's stream order), submitted with the
//! batch identity as soon as the writer took the batch's rows, not after
//! ClickHouse committed them: the live verdict does not wait for the flush
//! (`writer.flush_interval_ms`). A batch whose flush fails is retried by its
//! agent with the same seq; the reorder buffer drops the second copy
//! (`rankscope_collector_stream_duplicate_batches_total`). `None` for a seq
//! that carries nothing (a rejected batch). Out: `step_breakdown`,
//! `straggler_verdicts` (with `straggler_gains` when a version's gain is exact)
//! and `hang_suspects` rows, written through the writer.
//!
//! One task owns all state (`run`: one `select!` over input, a tick and
//! shutdown). Backpressure: submission is `try_send` into a bounded queue; when
//! it is full the batch is left out of the live analytics and counted
//! (`rankscope_collector_stream_dropped_batches_total`) — ingest is never
//! slowed by analytics. Result rows are written by spawned tasks; a failed
//! write is logged and counted, never retried (the raw events are stored).
//! Memory: per job only open rank-steps and unfinalized steps; reorder buffers
//! are bounded; jobs idle for `job_idle_secs` are forgotten.

pub mod evidence;
pub mod job;
pub mod live;
pub mod outside;
pub mod recent;
pub mod recover;
pub mod reorder;

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use rankscope_analysis::{CollectiveObs, GpuEvent, Interval, StragglerPolicy, VerdictChange};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use crate::service::now_ns;
use crate::store::{BreakdownRow, GainRow, HangRow, RowSet, VerdictRow, WriterHandle};
use job::{AssemblyLimits, JobAssembler, JobOutput};
use reorder::Reorder;

/// One event as step assembly sees it.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamEvent {
    StepBegin {
        step: u64,
        ts_ns: u64,
    },
    StepEnd {
        step: u64,
        ts_ns: u64,
    },
    /// A kernel, memcpy or memset, classified.
    Gpu(GpuEvent),
    /// A dataloader span (input time).
    Dataloader(Interval),
    /// A forward / backward / optimizer / compute span timed on the host
    /// (`device` < 0): the rank's compute when it has no GPU kernels. The
    /// label names the phase (`forward`, `backward`, `optimizer`,
    /// `compute`): where a straggler's unexplained time sits.
    HostCompute(Interval, &'static str),
    /// The same timed on a GPU with CUDA events (`device` >= 0): the rank's
    /// compute when it sends no kernel records.
    DeviceCompute(Interval, &'static str),
    /// An NCCL collective.
    Collective(CollectiveObs),
}

/// The events of one rank in one batch, in stream order.
#[derive(Debug, Clone, PartialEq)]
pub struct RankInput {
    pub job: String,
    pub run_id: String,
    pub rank: u32,
    pub world_size: u32,
    pub node: String,
    pub events: Vec<StreamEvent>,
    /// The rank's stream ended after these events.
    pub closed: bool,
}

/// The analytics input of one agent batch.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StreamInput {
    pub groups: Vec<RankInput>,
    /// GPU samples mapped to ranks (straggler evidence).
    pub gpu: Vec<evidence::GpuObs>,
    /// Memory peaks of ranks (`memory_headroom` alerts).
    pub memory: Vec<crate::alert::rules::MemoryObs>,
}

/// Straggler thresholds (see `rankscope_analysis::StragglerPolicy`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StragglerConfig {
    /// Modified z-score a rank's work must reach.
    pub z_threshold: f64,
    /// Work / median work a rank must reach (1.10 = 10% slower).
    pub min_slowdown: f64,
    /// N: steps in the persistence window.
    pub window_steps: u32,
    /// K: flagged steps within the window that make a verdict.
    pub min_flagged: u32,
    /// Fewest ranks in a step for scoring.
    pub min_ranks: u32,
    /// MAD floor as a fraction of the median.
    pub mad_floor_frac: f64,
    /// Least what-if cost (% of the step time) of a rank flagged by its own
    /// time (step time - collective wait) alone: cause `other`.
    pub min_gain_pct: f64,
}

impl Default for StragglerConfig {
    fn default() -> Self {
        let p = StragglerPolicy::default();
        Self {
            z_threshold: p.z_threshold(),
            min_slowdown: p.min_slowdown(),
            window_steps: p.window_steps(),
            min_flagged: p.min_flagged(),
            min_ranks: p.min_ranks(),
            mad_floor_frac: p.mad_floor_frac(),
            min_gain_pct: p.min_gain_pct(),
        }
    }
}

impl StragglerConfig {
    /// The validated policy.
    pub fn policy(&self) -> Result<StragglerPolicy, String> {
        StragglerPolicy::try_new(
            self.z_threshold,
            self.min_slowdown,
            self.window_steps,
            self.min_flagged,
            self.min_ranks,
            self.mad_floor_frac,
        )
        .and_then(|p| p.with_min_gain_pct(self.min_gain_pct))
        .map_err(|e| format!("straggler: {e}"))
    }
}

/// Configuration of live analytics.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StreamConfig {
    /// A step is finalized this long after its first rank ended it, even if
    /// ranks are missing.
    pub step_timeout_ms: u64,
    /// Most unfinalized steps held per job.
    pub max_pending_steps: usize,
    /// Most GPU events + collectives analysed per rank-step.
    pub max_events_per_rank_step: usize,
    /// How long a batch waits for an earlier one of its agent session.
    pub reorder_timeout_ms: u64,
    /// Most batches waiting behind a gap per agent session.
    pub reorder_max_batches: usize,
    /// Stored batches waiting for analytics; beyond it they are left out.
    pub queue_capacity: usize,
    /// How often timeouts are checked.
    pub tick_ms: u64,
    /// Jobs without input for this long are forgotten.
    pub job_idle_secs: u64,
    /// Straggler thresholds.
    pub straggler: StragglerConfig,
    /// GPU samples kept per GPU for straggler evidence.
    pub gpu_history_samples: usize,
    /// Most GPUs whose samples are kept (beyond: ignored, counted).
    pub gpu_history_max_gpus: usize,
    /// At start-up, jobs with a step marker this recent get their live state
    /// (unfinalized steps, straggler window) rebuilt from ClickHouse; 0: off.
    pub recover_horizon_secs: u64,
    /// A job with more rows than this after its last finalized step (in any
    /// table) is not rebuilt.
    pub recover_max_rows: u64,
}

impl Default for StreamConfig {
    fn default() -> Self {
        Self {
            step_timeout_ms: 30_000,
            max_pending_steps: 64,
            max_events_per_rank_step: 1_000_000,
            reorder_timeout_ms: 5_000,
            reorder_max_batches: 256,
            queue_capacity: 4096,
            tick_ms: 250,
            job_idle_secs: 3_600,
            straggler: StragglerConfig::default(),
            gpu_history_samples: 128,
            gpu_history_max_gpus: 4096,
            recover_horizon_secs: 3_600,
            recover_max_rows: 5_000_000,
        }
    }
}

/// Counters of live analytics.
#[derive(Debug, Default)]
pub struct StreamMetrics {
    pub dropped_batches: AtomicU64,
    /// Batches offered again after analytics had them (a retried flush).
    pub duplicate_batches: AtomicU64,
    pub steps_finalized: AtomicU64,
    /// Steps finalized by the step timeout before every rank ended them.
    pub partial_steps: AtomicU64,
    pub verdict_changes: AtomicU64,
    pub hang_suspects: AtomicU64,
    pub result_write_failures: AtomicU64,
    /// Straggler verdict versions that carried evidence (GPU or `other`).
    pub verdict_evidence: AtomicU64,
    /// New verdicts the API could not serve before storing them
    /// (`live::MAX_VERSIONS` held).
    pub live_verdicts_dropped: AtomicU64,
}

struct Submission {
    session: (String, u64),
    seq: u64,
    /// Where the session starts if analytics have not seen it.
    start: u64,
    input: Option<StreamInput>,
}

/// Ownership's orders to the analytics task (`crate::ownership`); taken
/// before any submission sent after them.
pub enum Control {
    /// Take a job over: rebuild its live state from this snapshot.
    Restore(Box<recover::JobSnapshot>),
    /// Drop a job's live state, open steps unfinalized (another collector
    /// owns it, or it sent nothing for `release_after_ms`), and forget its
    /// agent sessions' order.
    Release {
        job: String,
        sessions: Vec<(String, u64)>,
        /// The job sent nothing for long (not moved): its alerts end, as
        /// when analytics forget an idle job.
        gone: bool,
    },
}

/// Submits stored batches to the analytics task. Cheap to clone.
#[derive(Clone)]
pub struct StreamHandle {
    tx: mpsc::Sender<Submission>,
    control: mpsc::Sender<Control>,
    metrics: Arc<StreamMetrics>,
}

impl StreamHandle {
    /// Hands an accepted (or, with `None`, a consumed) batch to analytics;
    /// never waits.
    ///
    /// `start` is the first seq of the session not yet stored (duplicate
    /// detection's watermark + 1): where analytics start a session they have
    /// not seen, so its batches are taken in order even when a later one
    /// reaches the writer first.
    pub fn submit(
        &self,
        agent_id: &str,
        session: u64,
        seq: u64,
        start: u64,
        input: Option<StreamInput>,
    ) {
        let sub = Submission {
            session: (agent_id.to_owned(), session),
            seq,
            start,
            input,
        };
        if self.tx.try_send(sub).is_err() {
            self.metrics.dropped_batches.fetch_add(1, Relaxed);
        }
    }

    /// Counters.
    pub fn metrics(&self) -> &StreamMetrics {
        &self.metrics
    }

    /// Hands an ownership order to analytics, waiting for room (orders are
    /// rare: one per job taken or released).
    pub async fn control(&self, c: Control) {
        if self.control.send(c).await.is_err() {
            tracing::debug!("analytics stopped; ownership order dropped");
        }
    }
}

/// Starts the analytics task.
pub fn spawn_stream(
    cfg: StreamConfig,
    policy: StragglerPolicy,
    outputs: Outputs,
    writer: WriterHandle,
    recovered: Vec<recover::JobSnapshot>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> (StreamHandle, tokio::task::JoinHandle<()>) {
    let (tx, rx) = mpsc::channel(cfg.queue_capacity.max(1));
    let (control, control_rx) = mpsc::channel(64);
    let metrics = Arc::new(StreamMetrics::default());
    let task = Stream {
        reorder: Reorder::new(
            cfg.reorder_max_batches,
            cfg.reorder_timeout_ms.saturating_mul(1_000_000),
        ),
        limits: AssemblyLimits {
            step_timeout_ns: cfg.step_timeout_ms.saturating_mul(1_000_000),
            max_pending_steps: cfg.max_pending_steps.max(1),
            max_events_per_rank_step: cfg.max_events_per_rank_step,
            hang_after_ns: outputs.hang_after_secs.saturating_mul(1_000_000_000),
        },
        outputs,
        gpus: evidence::GpuHistory::new(cfg.gpu_history_samples, cfg.gpu_history_max_gpus),
        cfg,
        policy,
        jobs: HashMap::new(),
        writer,
        metrics: metrics.clone(),
    };
    let handle = tokio::spawn(task.run(rx, control_rx, recovered, shutdown));
    (
        StreamHandle {
            tx,
            control,
            metrics,
        },
        handle,
    )
}

/// Where live analytics results go besides the tables.
pub struct Outputs {
    /// Alert rules (straggler, hang, collective slowdown); `None`: no alerting.
    pub alerts: Option<crate::alert::AlertHandle>,
    /// Latest values for `/metrics` and OTLP.
    pub gauges: Arc<crate::gauges::JobGauges>,
    /// A rank silent this long while others end steps is a suspected hang
    /// (`alerts.rules.hang.hang_after_secs`).
    pub hang_after_secs: u64,
    /// Automatic Kineto traces (`[traces.auto]`); `None`: none.
    pub traces: Option<crate::traces::TraceHub>,
    /// Verdict versions as raised, served by the API before they are stored.
    pub live: Arc<live::LiveVerdicts>,
}

impl Outputs {
    fn alert(&self, input: crate::alert::AlertInput) {
        if let Some(a) = &self.alerts {
            a.submit(input);
        }
    }
}

struct JobEntry {
    assembler: JobAssembler,
    last_input_ns: u64,
    /// Wall time each active verdict was first seen (its partition time).
    first_seen: HashMap<(u32, u64), u64>,
    /// Time spans of recent steps (the windows of GPU evidence).
    spans: evidence::StepSpans,
    /// The assembler's `partial_steps` already added to the counter.
    partial_steps_counted: u64,
    /// Per-rank figures of the last [`RECENT_STEPS`] finalized steps (the
    /// what-if gain of a straggler verdict as it is raised).
    recent: recent::RecentSteps,
    /// Per rank, its latest finalized step and that step's longest stretch
    /// outside its spans (where an `other` straggler's time sits).
    gaps: HashMap<u32, (u64, rankscope_analysis::Gap)>,
    /// The gap windows of ranks with an active `other` verdict, since it
    /// (what the operators of their traces are matched against).
    gap_windows: outside::GapWindows,
}

/// Finalized steps whose per-rank figures a job keeps for what-if gains.
const RECENT_STEPS: usize = 16;

/// GPUs without samples for this long leave the evidence history.
const GPU_HISTORY_HORIZON_NS: u64 = 600_000_000_000;

struct Stream {
    cfg: StreamConfig,
    policy: StragglerPolicy,
    limits: AssemblyLimits,
    reorder: Reorder<StreamInput>,
    jobs: HashMap<String, JobEntry>,
    gpus: evidence::GpuHistory,
    outputs: Outputs,
    writer: WriterHandle,
    metrics: Arc<StreamMetrics>,
}

impl Stream {
    async fn run(
        mut self,
        mut rx: mpsc::Receiver<Submission>,
        mut control: mpsc::Receiver<Control>,
        recovered: Vec<recover::JobSnapshot>,
        shutdown: impl Future<Output = ()>,
    ) {
        tokio::pin!(shutdown);
        if !recovered.is_empty() {
            self.restore(recovered, now_ns());
        }
        let mut tick = tokio::time::interval(Duration::from_millis(self.cfg.tick_ms.max(1)));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut ready = Vec::new();
        loop {
            tokio::select! {
                biased;
                () = &mut shutdown => break,
                Some(c) = control.recv() => match c {
                    Control::Restore(snap) => self.restore(vec![*snap], now_ns()),
                    Control::Release { job, sessions, gone } => {
                        if self.jobs.remove(&job).is_some() {
                            self.outputs.live.end(&job);
                            self.outputs.gauges.forget(&job);
                            if gone {
                                self.outputs.alert(crate::alert::AlertInput::JobGone { job: job.clone() });
                            }
                        }
                        for s in sessions {
                            self.reorder.forget(&s);
                        }
                    }
                },
                sub = rx.recv() => match sub {
                    Some(s) => {
                        let now = now_ns();
                        self.reorder.push_from(s.session, s.seq, s.start, s.input, now, &mut ready);
                        self.metrics.duplicate_batches.store(self.reorder.duplicates, Relaxed);
                        self.consume(&mut ready, now);
                    }
                    None => break,
                },
                _ = tick.tick() => {
                    let now = now_ns();
                    self.reorder.tick(now, &mut ready);
                    self.consume(&mut ready, now);
                    self.poll_jobs(now);
                }
            }
        }
    }

    /// Rebuilds the live state of `snaps` (`recover`), then pushes the
    /// stored events of their open steps through assembly: what finalizes
    /// now is written and alerted as usual.
    fn restore(&mut self, snaps: Vec<recover::JobSnapshot>, now: u64) {
        let mut inputs = Vec::new();
        for snap in snaps {
            let replayed = recover::replay(self.policy, &snap.finalized, RECENT_STEPS);
            let world_size = snap.ranks.iter().map(|r| r.world_size).max().unwrap_or(1);
            let ranks = snap.ranks.iter().map(|r| {
                let last = (r.ends > 0).then_some(r.last_end);
                (r.rank, r.node.clone(), r.run_id.clone(), last)
            });
            let assembler = JobAssembler::resume(
                world_size,
                self.limits,
                replayed.tracker,
                snap.last_finalized,
                ranks,
                now,
            );
            let mut spans = evidence::StepSpans::default();
            for (step, start, end) in replayed.spans {
                spans.record(step, start, end);
            }
            let active: std::collections::HashSet<(u32, u64)> = assembler
                .active_verdicts()
                .iter()
                .map(|v| (v.rank, v.first_step))
                .collect();
            let first_seen = snap
                .first_seen
                .iter()
                .filter(|(k, _)| active.contains(k))
                .map(|(k, v)| (*k, *v))
                .collect();
            inputs.push(StreamInput {
                groups: recover::rank_inputs(&snap),
                gpu: Vec::new(),
                memory: Vec::new(),
            });
            self.outputs.live.begin(&snap.job);
            self.jobs.insert(
                snap.job,
                JobEntry {
                    assembler,
                    last_input_ns: now,
                    first_seen,
                    spans,
                    partial_steps_counted: 0,
                    recent: replayed.recent,
                    gaps: HashMap::new(),
                    gap_windows: outside::GapWindows::default(),
                },
            );
        }
        self.consume(&mut inputs, now);
    }

    fn consume(&mut self, ready: &mut Vec<StreamInput>, now: u64) {
        let mut rows = RowSet::default();
        // Whether a job these inputs fed has no step left open: its last
        // breakdowns are awaited (`rankscope import` waits for them).
        let mut caught_up = false;
        for input in ready.drain(..) {
            for o in input.gpu {
                self.gpus.push(o);
            }
            for m in input.memory {
                self.outputs.alert(crate::alert::AlertInput::RankMemory(m));
            }
            for group in input.groups {
                let job = group.job.clone();
                let entry = self.jobs.entry(job.clone()).or_insert_with(|| {
                    self.outputs.live.begin(&job);
                    JobEntry {
                        assembler: JobAssembler::new(group.world_size, self.policy, self.limits),
                        last_input_ns: now,
                        first_seen: HashMap::new(),
                        spans: evidence::StepSpans::default(),
                        partial_steps_counted: 0,
                        recent: recent::RecentSteps::new(RECENT_STEPS),
                        gaps: HashMap::new(),
                        gap_windows: outside::GapWindows::default(),
                    }
                });
                entry.last_input_ns = now;
                let mut out = JobOutput::default();
                entry.assembler.push(group, now, &mut out);
                caught_up |= entry.assembler.pending_steps() == 0;
                collect(
                    &job,
                    entry,
                    out,
                    now,
                    Shared {
                        metrics: &self.metrics,
                        gpus: &self.gpus,
                        outputs: &self.outputs,
                    },
                    &mut rows,
                );
            }
        }
        // Only the breakdowns of steps while later ones are still open: they
        // may wait for the relaxed flush (fewer step_breakdown parts under
        // load); a verdict, a hang or a caught-up job's last steps may not.
        let relaxed = !caught_up && rows.total_rows() == rows.breakdowns.len();
        self.write_with(rows, relaxed);
    }

    fn poll_jobs(&mut self, now: u64) {
        let mut rows = RowSet::default();
        for (job, entry) in &mut self.jobs {
            let mut out = JobOutput::default();
            entry.assembler.poll(now, &mut out);
            collect(
                job,
                entry,
                out,
                now,
                Shared {
                    metrics: &self.metrics,
                    gpus: &self.gpus,
                    outputs: &self.outputs,
                },
                &mut rows,
            );
        }
        self.gpus.prune(now.saturating_sub(GPU_HISTORY_HORIZON_NS));
        let idle_ns = self.cfg.job_idle_secs.saturating_mul(1_000_000_000);
        let outputs = &self.outputs;
        self.jobs.retain(|job, e| {
            let keep =
                e.assembler.pending_steps() > 0 || now.saturating_sub(e.last_input_ns) < idle_ns;
            if !keep {
                outputs.live.end(job);
                outputs.gauges.forget(job);
                outputs.alert(crate::alert::AlertInput::JobGone { job: job.clone() });
            }
            keep
        });
        self.write(rows);
    }

    fn write(&self, rows: RowSet) {
        self.write_with(rows, false);
    }

    fn write_with(&self, rows: RowSet, relaxed: bool) {
        if rows.is_empty() {
            return;
        }
        let writer = self.writer.clone();
        let metrics = self.metrics.clone();
        tokio::spawn(async move {
            let written = if relaxed {
                writer.write_relaxed(rows).await
            } else {
                writer.write(rows).await
            };
            if let Err(e) = written {
                metrics.result_write_failures.fetch_add(1, Relaxed);
                tracing::warn!(error = %e, "storing analytics results failed");
            }
        });
    }
}

/// What [`collect`] reads besides the job: counters, GPU history, outputs.
#[derive(Clone, Copy)]
struct Shared<'a> {
    metrics: &'a StreamMetrics,
    gpus: &'a evidence::GpuHistory,
    outputs: &'a Outputs,
}

/// Turns one job's output into rows.
fn collect(
    job: &str,
    entry: &mut JobEntry,
    out: JobOutput,
    now: u64,
    shared: Shared<'_>,
    rows: &mut RowSet,
) {
    let Shared {
        metrics,
        gpus,
        outputs,
    } = shared;
    use crate::alert::AlertInput;
    let finalized: std::collections::BTreeSet<u64> = out.steps.iter().map(|s| s.step).collect();
    metrics
        .steps_finalized
        .fetch_add(finalized.len() as u64, Relaxed);
    let partial = entry.assembler.partial_steps;
    metrics
        .partial_steps
        .fetch_add(partial.saturating_sub(entry.partial_steps_counted), Relaxed);
    entry.partial_steps_counted = partial;
    for s in &out.steps {
        let w = rankscope_analysis::RankStepWait {
            step: s.step,
            rank: s.rank,
            step_time_ns: s.step_time_ns,
            work_ns: s.breakdown.compute_ns + s.dataloader_ns,
            // At most the time in collectives (`rankscope_analysis::wait_wall_ns`).
            wait_ns: s.comm_wait_ns.min(s.breakdown.comm_ns),
        };
        entry.recent.push(w);
    }
    for s in out.steps {
        match s.gap {
            Some(g) => {
                entry.gap_windows.record(s.rank, &g);
                entry.gaps.insert(s.rank, (s.step, g))
            }
            None => entry.gaps.remove(&s.rank),
        };
        let end = s.step_start_ns.saturating_add(s.step_time_ns);
        entry.spans.record(s.step, s.step_start_ns, end);
        if let Some(util) = gpus.mean_util(job, s.rank, s.step_start_ns, end) {
            outputs.alert(AlertInput::RankStepGpu {
                job: job.to_owned(),
                rank: s.rank,
                node: s.node.clone(),
                step: s.step,
                gpu_util_pct: util,
            });
        }
        let b = &s.breakdown;
        outputs.gauges.step(
            job,
            s.rank,
            &s.node,
            s.step,
            s.step_time_ns,
            b.compute_ns,
            b.comm_ns,
            b.overlap_ns,
            s.comm_wait_ns,
        );
        rows.breakdowns.push(BreakdownRow {
            job_id: job.to_owned(),
            run_id: s.run_id,
            step: s.step,
            rank: s.rank,
            node: s.node,
            step_start_ns: s.step_start_ns,
            step_time_ns: s.step_time_ns,
            gpu_span_ns: b.gpu_span_ns,
            gpu_busy_ns: b.gpu_busy_ns,
            idle_ns: b.idle_ns,
            compute_ns: b.compute_ns,
            comm_ns: b.comm_ns,
            memory_ns: b.memory_ns,
            overlap_ns: b.overlap_ns,
            exposed_comm_ns: b.exposed_comm_ns,
            non_compute_ns: b.non_compute_ns,
            dataloader_ns: s.dataloader_ns,
            comm_wait_ns: s.comm_wait_ns,
            comm_transfer_ns: s.comm_transfer_ns,
            gpu_events: s.gpu_events,
            computed_ns: now,
        });
    }
    for change in out.verdicts {
        metrics.verdict_changes.fetch_add(1, Relaxed);
        let cleared = matches!(change, VerdictChange::Cleared(_));
        let v = change.verdict();
        // A new straggler: an automatic trace of it and two healthy peers
        // (`[traces.auto]`); its id goes into the alert's evidence.
        let auto_trace = match (&change, &outputs.traces) {
            (VerdictChange::Activated(_), Some(hub)) => hub.auto(job, v.rank, "straggler"),
            _ => None,
        };
        let key = (v.rank, v.first_step);
        let first_seen_ns = *entry.first_seen.entry(key).or_insert(now);
        if cleared {
            entry.first_seen.remove(&key);
        }
        // The gain of this version (its sums end when the verdict clears).
        let gain = entry
            .recent
            .gain(v.rank, v.first_step, v.last_step, v.cause);
        if cleared {
            entry.recent.forget(v.rank, v.first_step);
        }
        let row = VerdictRow {
            job_id: job.to_owned(),
            rank: v.rank,
            node: v.node.clone(),
            first_step: v.first_step,
            last_step: v.last_step,
            steps_flagged: v.steps_flagged,
            slowdown: v.slowdown,
            score: v.score,
            cause: v.cause.as_str().to_owned(),
            active: u8::from(v.active),
            first_seen_ns,
            updated_ns: now,
        };
        if !outputs
            .live
            .record(&row, gain.complete.then_some(gain.pct), now)
        {
            metrics.live_verdicts_dropped.fetch_add(1, Relaxed);
        }
        // Stored with the version when exact (migration 0017): the route
        // then reads no breakdowns for it, before or after a restart.
        if gain.complete {
            rows.gains.push(GainRow {
                job_id: row.job_id.clone(),
                rank: row.rank,
                first_step: row.first_step,
                last_step: row.last_step,
                expected_gain_pct: gain.pct,
                first_seen_ns: row.first_seen_ns,
                updated_ns: row.updated_ns,
            });
        }
        rows.verdicts.push(row);
        let mut hardware = String::new();
        if let Some(row) =
            evidence::verdict_evidence(job, v, &entry.spans, gpus, first_seen_ns, now)
        {
            metrics.verdict_evidence.fetch_add(1, Relaxed);
            hardware = row.evidence.clone();
            outputs.live.record_evidence(&row);
            rows.telemetry.evidence.push(row);
        }
        let gap = entry.gaps.get(&v.rank).copied();
        // The operators filling the gap, once a trace of the rank is held.
        let fill = entry.gap_windows.follow(v).and_then(|windows| {
            let hub = outputs.traces.as_ref()?;
            hub.gap.fill(job, v.rank, v.first_step, &windows)
        });
        if let Some(row) = outside::outside_evidence(job, v, gap, fill.as_ref(), first_seen_ns, now)
        {
            metrics.verdict_evidence.fetch_add(1, Relaxed);
            hardware = row.evidence.clone();
            outputs.live.record_evidence(&row);
            rows.telemetry.evidence.push(row);
        }
        if let Some(id) = auto_trace {
            if !hardware.is_empty() {
                hardware.push_str("; ");
            }
            hardware.push_str(&format!(
                "kineto trace {id} requested (rankscope trace-diff --job {job} --trace {id})"
            ));
        }
        outputs
            .gauges
            .straggler(job, v.rank, &v.node, v.slowdown, v.active);
        outputs.alert(AlertInput::Straggler {
            job: job.to_owned(),
            rank: v.rank,
            node: v.node.clone(),
            active: v.active,
            first_step: v.first_step,
            last_step: v.last_step,
            steps_flagged: v.steps_flagged,
            slowdown: v.slowdown,
            score: v.score,
            cause: v.cause.as_str().to_owned(),
            evidence: hardware,
            // Over the steps held when the verdict is longer.
            expected_gain_pct: gain.pct,
        });
    }
    for c in out.collectives {
        outputs
            .gauges
            .busbw(job, c.op, &c.process_group, &c.size_bucket, c.busbw_gbps);
        outputs.alert(AlertInput::CollectiveStep {
            job: job.to_owned(),
            step: c.step,
            key: format!("{} {} {}", c.op, c.process_group, c.size_bucket),
            busbw_gbps: c.busbw_gbps,
        });
    }
    if let Some((last_step, silent_ns)) = out.stalled {
        tracing::warn!(
            job,
            last_step,
            silent_ns,
            "suspected hang: no rank of the job ended a step"
        );
        outputs.alert(AlertInput::JobStalled {
            job: job.to_owned(),
            last_step,
            silent_ns,
        });
    }
    if out.progressed {
        outputs.alert(AlertInput::JobProgress {
            job: job.to_owned(),
        });
    }
    for rank in out.resumed {
        outputs.alert(AlertInput::RankProgress {
            job: job.to_owned(),
            rank,
        });
    }
    for h in out.hangs {
        metrics.hang_suspects.fetch_add(1, Relaxed);
        if let Some(hub) = outputs.traces.as_ref().filter(|t| t.config().auto.on_hang) {
            hub.auto(job, h.rank, "hang");
        }
        outputs.alert(AlertInput::RankHang {
            job: job.to_owned(),
            rank: h.rank,
            node: h.node.clone(),
            last_step: h.last_step,
            job_step: h.job_step,
            silent_ns: h.silent_ns,
        });
        tracing::warn!(job, rank = h.rank, node = %h.node, last_step = ?h.last_step, job_step = h.job_step, "suspected hang: rank stopped ending steps");
        rows.hangs.push(HangRow {
            job_id: job.to_owned(),
            rank: h.rank,
            node: h.node,
            last_step: h
                .last_step
                .map_or(-1, |s| i64::try_from(s).unwrap_or(i64::MAX)),
            job_step: h.job_step,
            silent_ns: h.silent_ns,
            detected_ns: now,
        });
    }
}
