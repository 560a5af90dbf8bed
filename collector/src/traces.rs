//! Kineto traces on request: the collector's side of issue 12.
//!
//! In: requests (`POST /api/v1/jobs/{job}/traces`, and automatic ones from
//! the straggler detector), agents' control streams ([`control`]: hello,
//! libkineto processes they see, per-rank trace states) and stored batches
//! whose events came from a trace ([`TraceHub::stored`]). Out: trace and
//! import commands to the agents, the per-rank state of every trace
//! (`GET .../traces`), and one `trace_ranks` row per state change.
//!
//! States of one (trace, rank): `requested` (the collector has it) ->
//! `delivered` (the agent handed the config to the rank's libkineto at its
//! poll) -> `captured` (the trace file is complete and parsed on the node)
//! -> `imported` (its events are stored; the collector sees the batch with
//! the trace's last group) — or `failed`, with the reason, from any of them.
//! A rank no agent delivers to within `request_ttl_secs` fails saying so;
//! one delivered or captured that reaches no end within `result_timeout_secs`
//! fails too.
//!
//! Step numbers of an unmodified script's trace: its iterations carry no
//! number (no `ProfilerStep#N`; torch's `Optimizer.step` ops mark them, and
//! each rank's libkineto starts at its own poll, up to a second apart).
//! The collector numbers them: once every rank of the trace is captured or
//! finished (or `align_wait_secs` after the first capture), the rank whose
//! first iteration ends earliest gets steps `base, base + 1, ...` (`base` =
//! the job's highest stored step + 1, or 0), and every other rank's
//! iterations take the number of the reference iteration that ends nearest
//! to them in time (within half an iteration). So the same iteration has the
//! same step on every rank, as long as the nodes' clocks agree to better than
//! half an iteration: each captured rank's iteration ends are put on the
//! job's reference clock first (the node clock estimate of
//! `Store::clock_estimate`, read when the capture is reported). A rank that streams through the SDK keeps its SDK
//! steps; only the trace's GPU activities are imported for it.
//!
//! State: in memory, bounded (`max_traces`, oldest first), behind a mutex
//! held only for in-memory work; reloaded from `trace_ranks` at start-up.

pub mod control;
pub mod gap_ops;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use rankscope_proto::v1 as proto;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use crate::store::{RowSet, Store, TraceOpRow, TraceRankRow, WriterHandle};

/// `[traces]` of the collector's configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TracesConfig {
    /// A rank no agent delivered the request to within this long fails.
    pub request_ttl_secs: u64,
    /// A delivered or captured rank with no result within this long fails.
    pub result_timeout_secs: u64,
    /// Captured ranks wait this long for the trace's other ranks before
    /// their iterations are numbered without them.
    pub align_wait_secs: u64,
    /// Largest `iterations` a request may ask for.
    pub max_iterations: u64,
    /// Largest `duration_ms` a request may ask for.
    pub max_duration_ms: u64,
    /// Iteration requests start on the next multiple of this (Kineto's
    /// `PROFILE_START_ITERATION_ROUNDUP`) unless the request says otherwise.
    pub iteration_roundup: u64,
    /// Most traces remembered (the oldest are forgotten first; their rows
    /// stay in ClickHouse).
    pub max_traces: usize,
    /// Automatic traces when a straggler appears.
    pub auto: AutoTraceConfig,
}

impl Default for TracesConfig {
    fn default() -> Self {
        Self {
            request_ttl_secs: 120,
            result_timeout_secs: 600,
            align_wait_secs: 30,
            max_iterations: 100,
            max_duration_ms: 60_000,
            iteration_roundup: 10,
            max_traces: 1024,
            auto: AutoTraceConfig::default(),
        }
    }
}

/// `[traces.auto]`: trace a straggler and two healthy peers when its
/// verdict becomes active.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AutoTraceConfig {
    pub enabled: bool,
    /// Also when a hang is suspected.
    pub on_hang: bool,
    /// Iterations each automatic trace covers.
    pub iterations: u64,
    /// Healthy peers traced with the straggler.
    pub peers: u32,
    /// At most one automatic trace per job this often.
    pub cooldown_secs: u64,
    /// At most this many automatic traces per job per hour.
    pub max_per_hour: u32,
}

impl Default for AutoTraceConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            on_hang: false,
            iterations: 2,
            peers: 2,
            cooldown_secs: 600,
            max_per_hour: 4,
        }
    }
}

impl TracesConfig {
    /// Checks the values.
    pub fn validate(&self) -> Result<(), String> {
        if self.request_ttl_secs == 0 || self.result_timeout_secs == 0 {
            return Err(
                "traces.request_ttl_secs and traces.result_timeout_secs must be >= 1".into(),
            );
        }
        if self.max_iterations == 0 || self.max_duration_ms == 0 || self.iteration_roundup == 0 {
            return Err(
                "traces.max_iterations, traces.max_duration_ms and traces.iteration_roundup must be >= 1"
                    .into(),
            );
        }
        if self.max_traces == 0 {
            return Err("traces.max_traces must be >= 1".into());
        }
        let a = &self.auto;
        if a.enabled && (a.iterations == 0 || a.iterations > self.max_iterations) {
            return Err(format!(
                "traces.auto.iterations must be 1..={} (traces.max_iterations)",
                self.max_iterations
            ));
        }
        Ok(())
    }
}

/// How much to trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TraceMode {
    DurationMs(u64),
    Iterations { iterations: u64, roundup: u64 },
}

/// A trace request as the API and the auto-tracer make it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewTrace {
    pub job: String,
    /// Empty: every rank of the job.
    pub ranks: Vec<u32>,
    pub mode: TraceMode,
    /// `manual` or `auto:<why>`.
    pub origin: String,
    /// The rank the trace is about (a straggler), compared with the others
    /// by `trace-diff`.
    pub subject: Option<u32>,
}

/// Why a request was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Unavailable(String),
}

/// One (trace, rank) as `GET /api/v1/jobs/{job}/traces` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceRankView {
    pub trace_id: String,
    pub job_id: String,
    pub rank: u32,
    /// Node of the agent that reported the rank ("" until one did).
    pub node: String,
    /// requested | delivered | captured | imported | failed
    pub state: String,
    /// Why it failed ("" otherwise).
    pub reason: String,
    /// `manual`, or `auto:<rule>` for an automatic trace.
    pub origin: String,
    pub requested_at_ns: u64,
    pub updated_at_ns: u64,
    /// Requested iterations (0 for a duration request).
    pub iterations: u64,
    /// Requested duration (0 for an iteration request).
    pub duration_ms: u64,
    /// First step the trace's iterations were stored as (-1: not yet, or
    /// numbered by the trace itself / by the SDK).
    pub first_step: i64,
    /// Iterations the captured trace holds.
    pub steps: u64,
    /// Events imported.
    pub events: u64,
    /// pid of the traced process (0 until delivered).
    pub pid: i32,
    /// The rank the trace is about (-1: none named).
    #[serde(default = "no_subject")]
    pub subject: i64,
    /// Where the agent archived the rank's trace file (its `[traces]
    /// archive_url`; `rankscope import <url>` brings it back); "" if not.
    /// Held in memory: a restarted collector lists it empty.
    #[serde(default)]
    pub archive_url: String,
}

fn no_subject() -> i64 {
    -1
}

/// States a rank moves through, in order (failed can follow any).
const ORDER: [&str; 4] = ["requested", "delivered", "captured", "imported"];

fn rank_of_state(s: &str) -> usize {
    ORDER.iter().position(|x| *x == s).unwrap_or(usize::MAX)
}

fn finished(s: &str) -> bool {
    s == "imported" || s == "failed"
}

#[derive(Debug, Clone)]
struct Captured {
    ends: Vec<u64>,
    numbered: bool,
    sdk: bool,
    at_ns: u64,
    agent: u64,
}

#[derive(Debug, Clone)]
struct Trace {
    job: String,
    mode: TraceMode,
    origin: String,
    requested_at_ns: u64,
    /// Ranks named by the request (empty: all).
    asked: Vec<u32>,
    ranks: BTreeMap<u32, TraceRankView>,
    /// Captured ranks waiting for their step numbers.
    waiting: BTreeMap<u32, Captured>,
    /// The reference iterations' ends and the step of the first.
    clock: Option<(Vec<u64>, i64)>,
    /// Steps every rank keeps: (first, count); count 0 = all.
    keep: (i64, u64),
    /// The job's highest stored step when the trace was requested.
    job_max_step: Option<u64>,
}

impl Trace {
    /// A rank of this trace in the `requested` state.
    fn requested_view(&self, trace_id: &str, rank: u32, subject: i64, now: u64) -> TraceRankView {
        let (iterations, duration_ms) = mode_fields(self.mode);
        TraceRankView {
            trace_id: trace_id.to_owned(),
            job_id: self.job.clone(),
            rank,
            node: String::new(),
            state: "requested".into(),
            reason: String::new(),
            origin: self.origin.clone(),
            requested_at_ns: self.requested_at_ns,
            updated_at_ns: now,
            iterations,
            duration_ms,
            first_step: -1,
            steps: 0,
            events: 0,
            pid: 0,
            subject,
            archive_url: String::new(),
        }
    }
}

struct AgentConn {
    node: String,
    tx: mpsc::Sender<proto::ControlCommand>,
    processes: Vec<proto::KinetoProcess>,
}

#[derive(Default)]
struct Book {
    traces: BTreeMap<String, Trace>,
    agents: HashMap<u64, AgentConn>,
    next_agent: u64,
    next_trace: u64,
    /// Times of the automatic traces of each job in the last hour.
    auto: HashMap<String, Vec<u64>>,
}

/// One row of a trace diff (see [`TraceHub::diff`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DiffRow {
    /// `category` (a whole category) or `op` (one operator or kernel).
    pub level: String,
    pub category: String,
    /// Operator or kernel name ("" for a category row).
    pub name: String,
    pub subject_calls_per_iter: f64,
    pub subject_ns_per_iter: f64,
    /// Mean over the peers.
    pub peers_calls_per_iter: f64,
    pub peers_ns_per_iter: f64,
    /// subject - peers, ns per iteration.
    pub diff_ns_per_iter: f64,
    /// `subject` or `peers` when only one side ran it, else "".
    pub only_on: String,
}

/// A trace diff: the subject rank against the trace's other ranks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TraceDiff {
    pub job_id: String,
    pub trace_id: String,
    pub subject_rank: u32,
    pub peer_ranks: Vec<u32>,
    /// Iterations the subject's trace holds.
    pub subject_iterations: u64,
    /// Where the subject spends the most time more than its peers first
    /// (what makes it slow), down to where it spends the least (e.g. the
    /// peers' wait for it).
    pub rows: Vec<DiffRow>,
}

/// Counters of the hub (exported with the collector's metrics).
#[derive(Debug, Default)]
pub struct TraceMetrics {
    pub requested: std::sync::atomic::AtomicU64,
    pub imported: std::sync::atomic::AtomicU64,
    pub failed: std::sync::atomic::AtomicU64,
    pub commands_dropped: std::sync::atomic::AtomicU64,
    pub control_streams_opened: std::sync::atomic::AtomicU64,
}

/// The trace hub. Cheap to clone.
#[derive(Clone)]
pub struct TraceHub {
    book: Arc<Mutex<Book>>,
    writer: WriterHandle,
    store: Store,
    cfg: Arc<TracesConfig>,
    pub metrics: Arc<TraceMetrics>,
    /// Host operators of traced ranks: what fills `other` stragglers' gaps.
    pub gap: Arc<gap_ops::GapOps>,
}

fn now_ns() -> u64 {
    crate::service::now_ns()
}

impl TraceHub {
    /// A hub storing through `writer`; call [`TraceHub::reload`] once.
    pub fn new(cfg: TracesConfig, store: Store, writer: WriterHandle) -> Self {
        Self {
            book: Arc::new(Mutex::new(Book::default())),
            writer,
            store,
            cfg: Arc::new(cfg),
            metrics: Arc::default(),
            gap: Arc::default(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &TracesConfig {
        &self.cfg
    }

    fn book(&self) -> std::sync::MutexGuard<'_, Book> {
        self.book.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reloads the traces of the last day from ClickHouse (after a restart,
    /// `GET .../traces` still lists them and open ones are still offered).
    pub async fn reload(&self) -> Result<usize, crate::store::StoreError> {
        let since = now_ns().saturating_sub(86_400_000_000_000);
        let rows = self
            .store
            .trace_ranks_since(since, (self.cfg.max_traces as u64).saturating_mul(64))
            .await?;
        let n = rows.len();
        let mut book = self.book();
        for r in rows {
            let mode = if r.iterations > 0 {
                TraceMode::Iterations {
                    iterations: r.iterations,
                    roundup: self.cfg.iteration_roundup,
                }
            } else {
                TraceMode::DurationMs(r.duration_ms)
            };
            let t = book
                .traces
                .entry(r.trace_id.clone())
                .or_insert_with(|| Trace {
                    job: r.job_id.clone(),
                    mode,
                    origin: r.origin.clone(),
                    requested_at_ns: r.requested_at_ns,
                    asked: Vec::new(),
                    ranks: BTreeMap::new(),
                    waiting: BTreeMap::new(),
                    clock: None,
                    keep: (0, 0),
                    job_max_step: None,
                });
            t.ranks.insert(r.rank, view_of_row(r));
        }
        trim(&mut book, self.cfg.max_traces);
        Ok(n)
    }

    /// Starts a trace: checks the request, decides the ranks, tells every
    /// connected agent. Returns the trace's ranks (all `requested`).
    pub async fn request(&self, req: NewTrace) -> Result<Vec<TraceRankView>, RequestError> {
        let cfg = &self.cfg;
        match req.mode {
            TraceMode::DurationMs(ms) if ms == 0 || ms > cfg.max_duration_ms => {
                return Err(RequestError::Invalid(format!(
                    "duration_ms must be 1..={} (traces.max_duration_ms), got {ms}",
                    cfg.max_duration_ms
                )))
            }
            TraceMode::Iterations { iterations, .. }
                if iterations == 0 || iterations > cfg.max_iterations =>
            {
                return Err(RequestError::Invalid(format!(
                    "iterations must be 1..={} (traces.max_iterations), got {iterations}",
                    cfg.max_iterations
                )))
            }
            _ => {}
        }
        if req.job.is_empty() {
            return Err(RequestError::Invalid("the job id is empty".into()));
        }
        let store_err =
            |e: crate::store::StoreError| RequestError::Unavailable(format!("query failed: {e}"));
        let streamed = self
            .store
            .job_rank_list(&req.job)
            .await
            .map_err(store_err)?;
        let max_step = self.store.job_max_step(&req.job).await.map_err(store_err)?;
        let now = now_ns();
        let (views, commands) = {
            let mut book = self.book();
            let mut known: BTreeSet<u32> = streamed.iter().map(|r| r.rank).collect();
            let mut world = streamed.iter().map(|r| r.world_size).max().unwrap_or(0);
            for p in book.agents.values().flat_map(|a| &a.processes) {
                if p.job_id == req.job {
                    known.insert(p.rank);
                    world = world.max(p.world_size);
                }
            }
            if known.is_empty() {
                return Err(RequestError::NotFound(format!(
                    "job {:?} not found: no rank of it streamed events and no libkineto process of it \
                     (KINETO_USE_DAEMON=1) polls a connected agent",
                    req.job
                )));
            }
            let mut ranks: Vec<u32> = req.ranks.clone();
            ranks.sort_unstable();
            ranks.dedup();
            if let Some(bad) = ranks.iter().find(|r| world > 0 && **r >= world) {
                return Err(RequestError::Invalid(format!(
                    "rank {bad} is out of range: job {:?} has world size {world}",
                    req.job
                )));
            }
            let targets: Vec<u32> = if ranks.is_empty() {
                if world > 0 {
                    (0..world).collect()
                } else {
                    known.into_iter().collect()
                }
            } else {
                ranks.clone()
            };
            book.next_trace += 1;
            let trace_id = format!("tr-{}-{}", now / 1_000_000, book.next_trace);
            let mut t = Trace {
                job: req.job.clone(),
                mode: req.mode,
                origin: req.origin.clone(),
                requested_at_ns: now,
                asked: ranks,
                ranks: BTreeMap::new(),
                waiting: BTreeMap::new(),
                clock: None,
                keep: (0, 0),
                job_max_step: max_step,
            };
            let subject = req.subject.map_or(-1, i64::from);
            for r in &targets {
                let v = t.requested_view(&trace_id, *r, subject, now);
                t.ranks.insert(*r, v);
            }
            let cmd = command_of(&trace_id, &t);
            let views: Vec<TraceRankView> = t.ranks.values().cloned().collect();
            book.traces.insert(trace_id, t);
            trim(&mut book, cfg.max_traces);
            let commands: Vec<_> = book.agents.values().map(|a| a.tx.clone()).collect();
            (
                views,
                commands
                    .into_iter()
                    .map(|tx| (tx, cmd.clone()))
                    .collect::<Vec<_>>(),
            )
        };
        for (tx, cmd) in commands {
            self.send(&tx, cmd);
        }
        self.metrics
            .requested
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        tracing::info!(job = %req.job, trace = %views[0].trace_id, ranks = views.len(), origin = %req.origin, "trace requested");
        self.persist(&views);
        Ok(views)
    }

    /// Requests an automatic trace of `rank` of `job` and up to
    /// `auto.peers` other ranks with libkineto processes, unless the job is
    /// in its cooldown or over its hourly cap, or no agent sees a libkineto
    /// process of that rank. Returns the trace id at once (the request is
    /// stored and sent on a task).
    pub fn auto(&self, job: &str, rank: u32, why: &str) -> Option<String> {
        let a = &self.cfg.auto;
        if !a.enabled {
            return None;
        }
        let now = now_ns();
        let (trace_id, views, txs) = {
            let mut book = self.book();
            let hour = 3_600_000_000_000u64;
            let recent = book.auto.entry(job.to_owned()).or_default();
            recent.retain(|t| now.saturating_sub(*t) < hour);
            let cooling = recent.last().is_some_and(|t| {
                now.saturating_sub(*t) < a.cooldown_secs.saturating_mul(1_000_000_000)
            });
            if cooling || recent.len() >= a.max_per_hour as usize {
                return None;
            }
            let mut ranks: BTreeSet<u32> = book
                .agents
                .values()
                .flat_map(|c| &c.processes)
                .filter(|p| p.job_id == job)
                .map(|p| p.rank)
                .collect();
            if !ranks.remove(&rank) {
                tracing::debug!(
                    job,
                    rank,
                    "no libkineto process of the rank polls an agent: no automatic trace"
                );
                return None;
            }
            let mut targets = vec![rank];
            // Healthy peers: the ranks nearest to it (the same node first, usually).
            let mut others: Vec<u32> = ranks.into_iter().collect();
            others.sort_by_key(|r| (r.abs_diff(rank), *r));
            targets.extend(others.into_iter().take(a.peers as usize));
            targets.sort_unstable();
            if let Some(v) = book.auto.get_mut(job) {
                v.push(now);
            }
            book.next_trace += 1;
            let trace_id = format!("tr-{}-{}", now / 1_000_000, book.next_trace);
            let mode = TraceMode::Iterations {
                iterations: a.iterations,
                roundup: self.cfg.iteration_roundup,
            };
            let origin = format!("auto:{why}");
            let mut t = Trace {
                job: job.to_owned(),
                mode,
                origin: origin.clone(),
                requested_at_ns: now,
                asked: targets.clone(),
                ranks: BTreeMap::new(),
                waiting: BTreeMap::new(),
                clock: None,
                keep: (0, 0),
                job_max_step: None,
            };
            for r in targets {
                let v = t.requested_view(&trace_id, r, i64::from(rank), now);
                t.ranks.insert(r, v);
            }
            let cmd = command_of(&trace_id, &t);
            let views: Vec<TraceRankView> = t.ranks.values().cloned().collect();
            book.traces.insert(trace_id.clone(), t);
            trim(&mut book, self.cfg.max_traces);
            let txs: Vec<_> = book
                .agents
                .values()
                .map(|c| (c.tx.clone(), cmd.clone()))
                .collect();
            (trace_id, views, txs)
        };
        for (tx, cmd) in txs {
            self.send(&tx, cmd);
        }
        self.metrics
            .requested
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        tracing::info!(job, rank, trace = %trace_id, why, "automatic trace requested");
        self.persist(&views);
        // The job's highest stored step numbers the trace's iterations.
        let (hub, job, id) = (self.clone(), job.to_owned(), trace_id.clone());
        tokio::spawn(async move {
            if let Ok(max) = hub.store.job_max_step(&job).await {
                if let Some(t) = hub.book().traces.get_mut(&id) {
                    if t.clock.is_none() {
                        t.job_max_step = max;
                    }
                }
            }
        });
        Some(trace_id)
    }

    /// The newest automatic trace of (job, rank) requested at or after `since_ns`.
    pub fn auto_trace_of(&self, job: &str, rank: u32, since_ns: u64) -> Option<String> {
        let book = self.book();
        book.traces
            .iter()
            .filter(|(_, t)| {
                t.job == job
                    && t.origin.starts_with("auto:")
                    && t.requested_at_ns >= since_ns
                    && t.ranks
                        .values()
                        .next()
                        .is_some_and(|v| v.subject == i64::from(rank))
            })
            .max_by_key(|(_, t)| t.requested_at_ns)
            .map(|(id, _)| id.clone())
    }

    /// Compares the subject rank of a trace (`subject`, else the trace's own,
    /// else the rank with the most time per iteration) with its other ranks:
    /// per category and per operator / kernel, calls and self time per
    /// iteration on each side (the peers' mean), the subject's largest
    /// excess first (HTA's TraceDiff compares two traces' operators the
    /// same way, by counts and durations per name:
    /// `hta/analyzers/trace_diff.py`, v0.5.0).
    pub async fn diff(
        &self,
        job: &str,
        trace_id: &str,
        subject: Option<u32>,
    ) -> Result<TraceDiff, RequestError> {
        let own_subject = {
            let book = self.book();
            let t = book.traces.get(trace_id).filter(|t| t.job == job);
            t.and_then(|t| t.ranks.values().next())
                .and_then(|v| u32::try_from(v.subject).ok())
        };
        let (ops, steps) = self
            .store
            .trace_ops(job, trace_id)
            .await
            .map_err(|e| RequestError::Unavailable(format!("query failed: {e}")))?;
        if steps.is_empty() {
            return Err(RequestError::NotFound(format!(
                "trace {trace_id:?} of job {job:?} has no imported operator summary (not found, or not imported yet)"
            )));
        }
        let steps: BTreeMap<u32, u64> = steps.into_iter().collect();
        let per_iter =
            |rank: u32, v: u64| v as f64 / steps.get(&rank).copied().unwrap_or(1).max(1) as f64;
        let mut totals: BTreeMap<u32, f64> = BTreeMap::new();
        for o in &ops {
            *totals.entry(o.rank).or_default() += per_iter(o.rank, o.self_ns);
        }
        let subject = match subject.or(own_subject) {
            Some(r) if steps.contains_key(&r) => r,
            Some(r) => {
                return Err(RequestError::Invalid(format!(
                    "rank {r} is not in trace {trace_id:?} (its ranks: {:?})",
                    steps.keys().collect::<Vec<_>>()
                )))
            }
            None => *totals
                .iter()
                .max_by(|a, b| a.1.total_cmp(b.1))
                .map(|(r, _)| r)
                .unwrap_or(&0),
        };
        let peers: Vec<u32> = steps.keys().copied().filter(|r| *r != subject).collect();
        if peers.is_empty() {
            return Err(RequestError::Invalid(format!(
                "trace {trace_id:?} holds only rank {subject}: nothing to compare it with"
            )));
        }
        // (category, name) -> (subject calls, subject ns, peers' calls sum, peers' ns sum)
        let mut rows: BTreeMap<(String, String), [f64; 4]> = BTreeMap::new();
        for o in &ops {
            for key in [
                (o.category.clone(), o.name.clone()),
                (o.category.clone(), String::new()),
            ] {
                let e = rows.entry(key).or_default();
                let (c, n) = (per_iter(o.rank, o.calls), per_iter(o.rank, o.self_ns));
                if o.rank == subject {
                    e[0] += c;
                    e[1] += n;
                } else {
                    e[2] += c;
                    e[3] += n;
                }
            }
        }
        let np = peers.len() as f64;
        let mut out: Vec<DiffRow> = rows
            .into_iter()
            .map(|((category, name), v)| {
                let (pc, pn) = (v[2] / np, v[3] / np);
                DiffRow {
                    level: if name.is_empty() { "category" } else { "op" }.into(),
                    category,
                    name,
                    subject_calls_per_iter: v[0],
                    subject_ns_per_iter: v[1],
                    peers_calls_per_iter: pc,
                    peers_ns_per_iter: pn,
                    diff_ns_per_iter: v[1] - pn,
                    only_on: match (v[0] > 0.0, pc > 0.0) {
                        (true, false) => "subject".into(),
                        (false, true) => "peers".into(),
                        _ => String::new(),
                    },
                }
            })
            .collect();
        out.sort_by(|a, b| {
            b.diff_ns_per_iter
                .total_cmp(&a.diff_ns_per_iter)
                .then_with(|| a.level.cmp(&b.level))
                .then_with(|| a.name.cmp(&b.name))
        });
        Ok(TraceDiff {
            job_id: job.to_owned(),
            trace_id: trace_id.to_owned(),
            subject_rank: subject,
            peer_ranks: peers,
            subject_iterations: steps.get(&subject).copied().unwrap_or(0),
            rows: out,
        })
    }

    /// Every (trace, rank) of `job`, newest trace first, then by rank.
    pub fn list(&self, job: &str) -> Vec<TraceRankView> {
        let book = self.book();
        let mut out: Vec<TraceRankView> = book
            .traces
            .values()
            .filter(|t| t.job == job)
            .flat_map(|t| t.ranks.values().cloned())
            .collect();
        out.sort_by(|a, b| {
            b.requested_at_ns
                .cmp(&a.requested_at_ns)
                .then_with(|| a.trace_id.cmp(&b.trace_id))
                .then(a.rank.cmp(&b.rank))
        });
        out
    }

    /// The ranks of one trace (None: unknown trace id).
    pub fn trace(&self, trace_id: &str) -> Option<Vec<TraceRankView>> {
        let book = self.book();
        book.traces
            .get(trace_id)
            .map(|t| t.ranks.values().cloned().collect())
    }

    /// A new control stream; its commands go to `tx`. Sends every open trace.
    pub(crate) fn connect(
        &self,
        hello: &proto::AgentHello,
        tx: mpsc::Sender<proto::ControlCommand>,
    ) -> u64 {
        let mut book = self.book();
        book.next_agent += 1;
        let id = book.next_agent;
        let ttl = self.cfg.request_ttl_secs.saturating_mul(1_000_000_000);
        let now = now_ns();
        for (trace_id, t) in &book.traces {
            let open = now.saturating_sub(t.requested_at_ns) < ttl
                && t.ranks.values().any(|r| !finished(&r.state));
            if open {
                if let Err(e) = tx.try_send(command_of(trace_id, t)) {
                    tracing::debug!(error = %e, "control stream full at connect");
                }
            }
        }
        self.metrics
            .control_streams_opened
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        book.agents.insert(
            id,
            AgentConn {
                node: hello.node.clone(),
                tx,
                processes: Vec::new(),
            },
        );
        tracing::info!(agent = %hello.agent_id, node = %hello.node, kineto = hello.kineto_listening, "agent control stream open");
        id
    }

    /// The control stream `id` ended.
    pub(crate) fn disconnect(&self, id: u64) {
        self.book().agents.remove(&id);
    }

    /// A report on control stream `id`.
    pub(crate) async fn report(&self, id: u64, mut report: proto::AgentReport) {
        let now = now_ns();
        let report_ops = std::mem::take(&mut report.trace_ops);
        let clocks = self.clocks_of_captures(&report).await;
        let mut changed = Vec::new();
        {
            let mut book = self.book();
            let node = match book.agents.get_mut(&id) {
                Some(a) => {
                    if report.processes_snapshot {
                        a.processes = report.processes;
                    }
                    a.node.clone()
                }
                None => return,
            };
            for s in report.traces {
                let Some(t) = book.traces.get_mut(&s.trace_id) else {
                    continue; // forgotten or from another collector
                };
                if !t.asked.is_empty() && !t.asked.contains(&s.rank) {
                    continue;
                }
                let subject = t.ranks.values().next().map_or(-1, |v| v.subject);
                if !t.ranks.contains_key(&s.rank) {
                    let v = t.requested_view(&s.trace_id, s.rank, subject, now);
                    t.ranks.insert(s.rank, v);
                }
                let Some(v) = t.ranks.get_mut(&s.rank) else {
                    continue;
                };
                let state = s.state.as_str();
                let forward = state == "failed" || rank_of_state(state) > rank_of_state(&v.state);
                if finished(&v.state)
                    || !forward
                    || !matches!(state, "delivered" | "captured" | "failed")
                {
                    continue;
                }
                v.state = state.to_owned();
                v.reason = s.reason.clone();
                v.node = node.clone();
                v.pid = s.pid;
                v.updated_at_ns = now;
                if state == "captured" {
                    v.steps = s.iteration_end_ns.len() as u64;
                    v.archive_url = s.archive_url.clone();
                    // Iteration ends on the job's reference clock, so ranks
                    // of different nodes are numbered on one time axis.
                    let clock = clocks.get(&t.job);
                    let ends = s
                        .iteration_end_ns
                        .iter()
                        .map(|e| clock.map_or(*e, |c| c.correct(&node, *e)))
                        .collect();
                    t.waiting.insert(
                        s.rank,
                        Captured {
                            ends,
                            numbered: s.numbered,
                            sdk: s.sdk,
                            at_ns: now,
                            agent: id,
                        },
                    );
                }
                if state == "failed" {
                    t.waiting.remove(&s.rank);
                    self.metrics
                        .failed
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                changed.push(v.clone());
            }
        }
        self.persist(&changed);
        self.store_ops(report_ops, now);
        self.align(now);
    }

    fn store_ops(&self, mut ops: Vec<proto::TraceOps>, now: u64) {
        for t in &mut ops {
            // Held for traces of this collector only (of the job they name).
            let known = self
                .book()
                .traces
                .get(&t.trace_id)
                .is_some_and(|k| k.job == t.job_id);
            let host = std::mem::take(&mut t.host_ops);
            if known {
                let host = host
                    .into_iter()
                    .map(|o| rankscope_analysis::HostOp {
                        name: o.name,
                        start_ns: o.start_ns,
                        end_ns: o.end_ns.max(o.start_ns),
                        self_ns: o.self_ns.min(o.end_ns.saturating_sub(o.start_ns)),
                    })
                    .collect();
                self.gap.hold(&t.job_id, t.rank, &t.trace_id, host, now);
            }
        }
        let rows: Vec<TraceOpRow> = ops
            .into_iter()
            .flat_map(|t| {
                let (job, trace, rank) = (t.job_id, t.trace_id, t.rank);
                t.ops.into_iter().map(move |o| TraceOpRow {
                    job_id: job.clone(),
                    trace_id: trace.clone(),
                    rank,
                    step: o.step,
                    category: o.category,
                    name: o.name,
                    calls: o.calls,
                    self_ns: o.self_ns,
                    stored_ns: now,
                })
            })
            .collect();
        if rows.is_empty() {
            return;
        }
        let rows = RowSet {
            trace_ops: rows,
            ..RowSet::default()
        };
        let writer = self.writer.clone();
        tokio::spawn(async move {
            if let Err(e) = writer.write(rows).await {
                tracing::warn!(error = %e, "storing a trace's operator summary failed");
            }
        });
    }

    /// The node clock estimates of the jobs whose traces `report` says were
    /// captured (`Store::clock_estimate`; a job whose estimate cannot be
    /// read is left uncorrected, logged).
    async fn clocks_of_captures(
        &self,
        report: &proto::AgentReport,
    ) -> HashMap<String, rankscope_analysis::clocks::ClockEstimate> {
        let jobs: BTreeSet<String> = {
            let book = self.book();
            report
                .traces
                .iter()
                .filter(|s| s.state == "captured")
                .filter_map(|s| book.traces.get(&s.trace_id).map(|t| t.job.clone()))
                .collect()
        };
        let mut out = HashMap::new();
        for job in jobs {
            match self.store.clock_estimate(&job).await {
                Ok(e) => {
                    out.insert(job, e);
                }
                Err(e) => {
                    tracing::warn!(job = %job, error = %e, "node clock estimate failed: trace iterations aligned on raw clocks")
                }
            }
        }
        out
    }

    /// Numbers captured ranks' iterations and tells their agents to import.
    fn align(&self, now: u64) {
        let wait = self.cfg.align_wait_secs.saturating_mul(1_000_000_000);
        let mut sends = Vec::new();
        let mut changed = Vec::new();
        {
            let mut book = self.book();
            let Book { traces, agents, .. } = &mut *book;
            for (trace_id, t) in traces.iter_mut() {
                if t.waiting.is_empty() {
                    continue;
                }
                if t.clock.is_none() {
                    let all_in = t
                        .ranks
                        .values()
                        .all(|r| r.state == "captured" || finished(&r.state));
                    let oldest = t.waiting.values().map(|c| c.at_ns).min().unwrap_or(now);
                    if !all_in && now.saturating_sub(oldest) < wait {
                        continue;
                    }
                    // The reference: the plain rank whose first iteration ends first.
                    let base = t.job_max_step.map_or(0, |m| m as i64 + 1);
                    let reference = t
                        .waiting
                        .values()
                        .filter(|c| !c.numbered && !c.sdk && !c.ends.is_empty())
                        .min_by_key(|c| c.ends[0])
                        .map(|c| c.ends.clone());
                    let reference = reference.unwrap_or_default();
                    // The iterations every rank holds, as many as asked for.
                    let spans: Vec<(i64, i64)> = t
                        .waiting
                        .values()
                        .filter(|c| !c.numbered && !c.sdk && !c.ends.is_empty())
                        .map(|c| {
                            let first = base + offset(&reference, &c.ends);
                            (first, first + c.ends.len() as i64)
                        })
                        .collect();
                    let lo = spans.iter().map(|s| s.0).max().unwrap_or(0);
                    let hi = spans.iter().map(|s| s.1).min().unwrap_or(0);
                    t.keep = match t.mode {
                        TraceMode::Iterations { iterations, .. } if hi > lo => {
                            (lo, iterations.min((hi - lo) as u64))
                        }
                        _ => (0, 0),
                    };
                    t.clock = Some((reference, base));
                }
                let (ref_ends, base) = t.clock.clone().unwrap_or_default();
                for (rank, c) in std::mem::take(&mut t.waiting) {
                    let first_step = if c.numbered || c.sdk {
                        -1
                    } else {
                        base + offset(&ref_ends, &c.ends)
                    };
                    if let Some(v) = t.ranks.get_mut(&rank) {
                        v.first_step = first_step;
                        if t.keep.1 > 0 && first_step >= 0 {
                            v.first_step = t.keep.0;
                            v.steps = t.keep.1;
                        }
                        v.updated_at_ns = now;
                        changed.push(v.clone());
                    }
                    if let Some(a) = agents.get(&c.agent) {
                        sends.push((
                            a.tx.clone(),
                            proto::ControlCommand {
                                command: Some(proto::control_command::Command::Import(
                                    proto::ImportCommand {
                                        trace_id: trace_id.clone(),
                                        rank,
                                        first_step,
                                        keep_from: t.keep.0,
                                        keep_steps: t.keep.1,
                                    },
                                )),
                            },
                        ));
                    }
                }
            }
        }
        for (tx, cmd) in sends {
            self.send(&tx, cmd);
        }
        self.persist(&changed);
    }

    /// A batch was stored: ranks whose trace's last group it holds are imported.
    pub fn stored(&self, batch: &proto::AgentBatch) {
        let done: Vec<&proto::RankEvents> = batch
            .ranks
            .iter()
            .filter(|r| r.trace_last && !r.trace_id.is_empty())
            .collect();
        if done.is_empty() {
            return;
        }
        let now = now_ns();
        let mut changed = Vec::new();
        {
            let mut book = self.book();
            for r in done {
                let rank = r.identity.as_ref().map_or(u32::MAX, |i| i.rank);
                let Some(v) = book
                    .traces
                    .get_mut(&r.trace_id)
                    .and_then(|t| t.ranks.get_mut(&rank))
                else {
                    continue;
                };
                if finished(&v.state) {
                    continue;
                }
                v.state = "imported".into();
                v.events = r.trace_events;
                v.updated_at_ns = now;
                changed.push(v.clone());
                self.metrics
                    .imported
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
        self.persist(&changed);
    }

    /// Fails ranks that waited too long; numbers ranks whose peers never came.
    pub fn tick(&self) {
        let now = now_ns();
        let ttl = self.cfg.request_ttl_secs.saturating_mul(1_000_000_000);
        let result = self.cfg.result_timeout_secs.saturating_mul(1_000_000_000);
        let mut changed = Vec::new();
        {
            let mut book = self.book();
            for t in book.traces.values_mut() {
                for v in t.ranks.values_mut() {
                    let reason = match v.state.as_str() {
                        "requested" if now.saturating_sub(v.requested_at_ns) >= ttl => format!(
                            "no libkineto process of rank {} of job {:?} polled a connected agent within {}s \
                             (start it with KINETO_USE_DAEMON=1 on a node running rankscope-agent)",
                            v.rank, v.job_id, self.cfg.request_ttl_secs
                        ),
                        s @ ("delivered" | "captured")
                            if now.saturating_sub(v.updated_at_ns) >= result =>
                        {
                            format!(
                                "{s} on node {:?} but no result within {}s (traces.result_timeout_secs)",
                                v.node, self.cfg.result_timeout_secs
                            )
                        }
                        _ => continue,
                    };
                    v.state = "failed".into();
                    v.reason = reason;
                    v.updated_at_ns = now;
                    t.waiting.remove(&v.rank);
                    changed.push(v.clone());
                    self.metrics
                        .failed
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            }
        }
        self.persist(&changed);
        self.align(now);
    }

    fn send(&self, tx: &mpsc::Sender<proto::ControlCommand>, cmd: proto::ControlCommand) {
        if tx.try_send(cmd).is_err() {
            // A stream this far behind is dead or stuck; the agent gets the
            // open traces again when it reconnects.
            self.metrics
                .commands_dropped
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    fn persist(&self, views: &[TraceRankView]) {
        if views.is_empty() {
            return;
        }
        let rows = RowSet {
            traces: views.iter().map(row_of_view).collect(),
            ..RowSet::default()
        };
        let writer = self.writer.clone();
        tokio::spawn(async move {
            if let Err(e) = writer.write(rows).await {
                tracing::warn!(error = %e, "storing trace states failed");
            }
        });
    }
}

/// Runs [`TraceHub::tick`] every second until `shutdown`.
pub async fn run_ticker(hub: TraceHub, shutdown: impl std::future::Future<Output = ()>) {
    tokio::pin!(shutdown);
    let mut every = tokio::time::interval(std::time::Duration::from_secs(1));
    loop {
        tokio::select! {
            _ = &mut shutdown => return,
            _ = every.tick() => hub.tick(),
        }
    }
}

/// Step offset of `ends` against the reference `ref_ends` (see the module doc).
fn offset(ref_ends: &[u64], ends: &[u64]) -> i64 {
    if ref_ends.is_empty() || ends.is_empty() {
        return 0;
    }
    let period = median_gap(ref_ends)
        .or_else(|| median_gap(ends))
        .unwrap_or(1_000_000_000)
        .max(1);
    let lo = ref_ends[0].saturating_sub(period / 2);
    let hi = ref_ends[ref_ends.len() - 1].saturating_add(period / 2);
    if let Some((i, e)) = ends
        .iter()
        .enumerate()
        .find(|(_, e)| (lo..=hi).contains(*e))
    {
        let j = match ref_ends.binary_search(e) {
            Ok(j) => j,
            Err(0) => 0,
            Err(k) if k >= ref_ends.len() => ref_ends.len() - 1,
            Err(k) => {
                if e - ref_ends[k - 1] <= ref_ends[k] - e {
                    k - 1
                } else {
                    k
                }
            }
        };
        return j as i64 - i as i64;
    }
    // No overlap: extrapolate by the iteration period.
    let d = ends[0] as i128 - ref_ends[0] as i128;
    (d as f64 / period as f64).round() as i64
}

fn median_gap(v: &[u64]) -> Option<u64> {
    let mut gaps: Vec<u64> = v.windows(2).map(|w| w[1].saturating_sub(w[0])).collect();
    if gaps.is_empty() {
        return None;
    }
    gaps.sort_unstable();
    Some(gaps[gaps.len() / 2])
}

fn mode_fields(mode: TraceMode) -> (u64, u64) {
    match mode {
        TraceMode::DurationMs(ms) => (0, ms),
        TraceMode::Iterations { iterations, .. } => (iterations, 0),
    }
}

fn command_of(trace_id: &str, t: &Trace) -> proto::ControlCommand {
    let (iterations, duration_ms) = mode_fields(t.mode);
    let roundup = match t.mode {
        TraceMode::Iterations { roundup, .. } => roundup,
        TraceMode::DurationMs(_) => 0,
    };
    proto::ControlCommand {
        command: Some(proto::control_command::Command::Trace(
            proto::TraceCommand {
                trace_id: trace_id.to_owned(),
                job_id: t.job.clone(),
                ranks: t.asked.clone(),
                duration_ms,
                iterations,
                iteration_roundup: roundup,
                requested_at_ns: t.requested_at_ns,
            },
        )),
    }
}

fn trim(book: &mut Book, max: usize) {
    while book.traces.len() > max {
        let oldest = book
            .traces
            .iter()
            .min_by_key(|(_, t)| t.requested_at_ns)
            .map(|(k, _)| k.clone());
        match oldest {
            Some(k) => book.traces.remove(&k),
            None => break,
        };
    }
}

fn row_of_view(v: &TraceRankView) -> TraceRankRow {
    TraceRankRow {
        job_id: v.job_id.clone(),
        trace_id: v.trace_id.clone(),
        rank: v.rank,
        node: v.node.clone(),
        state: v.state.clone(),
        reason: v.reason.clone(),
        origin: v.origin.clone(),
        requested_at_ns: v.requested_at_ns,
        updated_at_ns: v.updated_at_ns,
        duration_ms: v.duration_ms,
        iterations: v.iterations,
        first_step: v.first_step,
        steps: v.steps,
        events: v.events,
        pid: v.pid,
        subject: v.subject,
    }
}

fn view_of_row(r: TraceRankRow) -> TraceRankView {
    TraceRankView {
        trace_id: r.trace_id,
        job_id: r.job_id,
        rank: r.rank,
        node: r.node,
        state: r.state,
        reason: r.reason,
        origin: r.origin,
        requested_at_ns: r.requested_at_ns,
        updated_at_ns: r.updated_at_ns,
        iterations: r.iterations,
        duration_ms: r.duration_ms,
        first_step: r.first_step,
        steps: r.steps,
        events: r.events,
        pid: r.pid,
        subject: r.subject,
        archive_url: String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn iterations_take_the_number_of_the_reference_iteration_nearest_in_time() {
        // Reference: iterations ending every 50 ms from t = 1000 ms.
        let r: Vec<u64> = (0..10).map(|k| (1000 + 50 * k) * MS).collect();
        // A rank whose trace started 3 iterations later, clocks 4 ms apart.
        let e: Vec<u64> = (3..12).map(|k| (1000 + 50 * k + 4) * MS).collect();
        assert_eq!(offset(&r, &e), 3);
        // One that started earlier: its first iterations precede the reference.
        let e: Vec<u64> = (-2i64..5)
            .map(|k| ((1000 + 50 * k - 6) as u64) * MS)
            .collect();
        assert_eq!(offset(&r, &e), -2);
        // No overlap at all: extrapolated by the period.
        let e: Vec<u64> = (20..25).map(|k| (1000 + 50 * k) * MS).collect();
        assert_eq!(offset(&r, &e), 20);
        // The reference against itself.
        assert_eq!(offset(&r, &r), 0);
    }

    #[test]
    fn states_only_move_forward() {
        assert!(rank_of_state("captured") > rank_of_state("delivered"));
        assert!(rank_of_state("imported") > rank_of_state("captured"));
        assert!(finished("failed") && finished("imported") && !finished("captured"));
    }
}
