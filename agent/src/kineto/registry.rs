//! Which libkineto processes run on this node, which trace requests they
//! must receive, and what became of each (rank, trace).
//!
//! In: registrations and config polls (already attributed to a job and
//! rank by the caller), trace requests, and observations of trace files
//! and processes; the clock as an argument. Out: the config text a poll
//! receives, and [`TraceUpdate`]s (state changes) for the collector, with a
//! wake-up ([`Registry::changed`]) whenever what the collector is told
//! changes: trace states, captured traces, the attributed processes. No I/O.
//!
//! A request names a job and ranks (empty: all ranks of the job seen on
//! this node). Each matching process receives the request's config once,
//! at its next poll, with its own `ACTIVITIES_LOG_FILE` under the trace
//! directory; that (rank, trace) is then `delivered`. The file watcher
//! reports it `captured` when the file is complete, the importer
//! `imported` or `failed`. Bounded: at most [`MAX_PROCESSES`] processes and
//! [`MAX_TRACES`] (rank, trace) records (oldest finished ones go first).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::sync::Notify;

/// Most processes remembered; the least recently polling go first.
pub const MAX_PROCESSES: usize = 4096;
/// Most (rank, trace) records kept.
pub const MAX_TRACES: usize = 4096;
/// A process silent this long is forgotten (libkineto polls about 1/s).
pub const PROCESS_TTL_NS: u64 = 60_000_000_000;

/// Trace length for an iteration request where libkineto ignores the
/// iteration form (see [`Registry::poll`]).
pub const ITERATION_FALLBACK_MS: u64 = 2000;

/// How long or how many iterations to trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceMode {
    /// For this long, from the poll that delivers it (each rank polls on
    /// its own, about once a second).
    DurationMs(u64),
    /// `iterations` steps, starting at the next multiple of `roundup`
    /// (the same iteration on every rank; Kineto's iteration round-up).
    Iterations { iterations: u64, roundup: u64 },
}

/// A trace request from the collector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceRequest {
    pub trace_id: String,
    pub job_id: String,
    /// Empty: every rank of the job.
    pub ranks: Vec<u32>,
    pub mode: TraceMode,
    pub requested_at_ns: u64,
}

/// State of one rank's trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TraceState {
    Delivered,
    Captured,
    Imported,
    Failed(String),
}

impl TraceState {
    pub fn name(&self) -> &'static str {
        match self {
            Self::Delivered => "delivered",
            Self::Captured => "captured",
            Self::Imported => "imported",
            Self::Failed(_) => "failed",
        }
    }

    fn finished(&self) -> bool {
        matches!(self, Self::Imported | Self::Failed(_))
    }
}

/// One (rank, trace) on this node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankTrace {
    pub trace_id: String,
    pub job_id: String,
    pub rank: u32,
    pub world_size: u32,
    pub pid: i32,
    /// Where libkineto was told to write the trace.
    pub path: PathBuf,
    pub state: TraceState,
    pub iterations: u64,
    pub delivered_at_ns: u64,
    /// The process streams through the SDK (attributed by its stream).
    pub sdk: bool,
}

/// A state change to report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceUpdate {
    pub trace_id: String,
    pub job_id: String,
    pub rank: u32,
    pub state: TraceState,
    pub at_ns: u64,
}

/// A process's job and rank, as attribution found them.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ProcessIdentity {
    pub job_id: String,
    pub rank: u32,
    pub world_size: u32,
    /// Found through an open SDK stream of the process.
    pub sdk: bool,
}

#[derive(Debug, Clone)]
struct Process {
    identity: Option<ProcessIdentity>,
    last_poll_ns: u64,
}

/// The daemon's state.
#[derive(Debug)]
pub struct Registry {
    trace_dir: PathBuf,
    processes: HashMap<i32, Process>,
    requests: Vec<TraceRequest>,
    traces: BTreeMap<(String, u32), RankTrace>,
    updates: Vec<TraceUpdate>,
    /// Captured traces waiting for the node-side import (bounded by
    /// [`MAX_TRACES`]).
    captured: Vec<RankTrace>,
    /// Set while the trace directory is over its budget with open traces
    /// alone: why new deliveries fail.
    over_budget: Option<String>,
    /// Notified at each change of what [`Registry::take_updates`],
    /// [`Registry::take_captured`] or [`Registry::processes`] return.
    changed: Arc<Notify>,
}

impl Registry {
    /// An empty registry writing traces under `trace_dir`.
    pub fn new(trace_dir: PathBuf) -> Self {
        Self {
            trace_dir,
            processes: HashMap::new(),
            requests: Vec::new(),
            traces: BTreeMap::new(),
            updates: Vec::new(),
            captured: Vec::new(),
            over_budget: None,
            changed: Arc::new(Notify::new()),
        }
    }

    /// Notified whenever trace states, captured traces or the attributed
    /// processes change. It keeps one permit, so a change made while
    /// nobody waits wakes the next wait: the agent's control stream
    /// reports on these wake-ups instead of looking every 200 ms.
    pub fn changed(&self) -> Arc<Notify> {
        Arc::clone(&self.changed)
    }

    /// Whether the file watcher has work: requests that expire, or traces
    /// delivered and not finished. Without, the socket thread sleeps until
    /// a datagram (or its idle look, for the directory budget).
    pub fn needs_watch(&self) -> bool {
        !self.requests.is_empty() || self.traces.values().any(|t| !t.state.finished())
    }

    /// A registration of process `pid`: the number of processes of its job.
    pub fn register(&mut self, pid: i32, identity: Option<ProcessIdentity>, now_ns: u64) -> i32 {
        self.touch(pid, identity.clone(), now_ns);
        let Some(id) = identity else { return 1 };
        self.processes
            .values()
            .filter(|p| p.identity.as_ref().is_some_and(|i| i.job_id == id.job_id))
            .count() as i32
    }

    /// A config poll of process `pid`: the config to hand it ("" = none).
    pub fn poll(&mut self, pid: i32, identity: Option<ProcessIdentity>, now_ns: u64) -> String {
        self.touch(pid, identity.clone(), now_ns);
        let Some(id) = identity else {
            return String::new();
        };
        let due = self.requests.iter().find(|r| {
            r.job_id == id.job_id
                && (r.ranks.is_empty() || r.ranks.contains(&id.rank))
                && !self.traces.contains_key(&(r.trace_id.clone(), id.rank))
        });
        let Some(req) = due.cloned() else {
            return String::new();
        };
        let path = self
            .trace_dir
            .join(format!("{}-r{}-{}.json", req.trace_id, id.rank, pid));
        let (trigger, iterations) = match req.mode {
            TraceMode::DurationMs(ms) => (
                // 0: at once. This CPU build of libkineto ignored a start
                // time in the future (measured: no trace), so ranks start at
                // their own delivery, up to a poll interval (~1 s) apart.
                format!("PROFILE_START_TIME=0\nACTIVITIES_DURATION_MSECS={ms}"),
                0,
            ),
            TraceMode::Iterations {
                iterations,
                roundup,
            } => (
                // The duration is a fallback: the CPU build of libkineto in
                // torch 2.15 sometimes ignores the iteration form and traces
                // for ACTIVITIES_DURATION_MSECS (default 500 ms) from the poll.
                // Ranks poll up to ~1 s apart, so 2 s windows overlap by about
                // a second, from which the collector keeps the same
                // iterations on every rank.
                // One iteration more than asked: libkineto's iteration
                // form starts inside an optimizer step (torch counts
                // iterations there), so the first traced "iteration" is
                // only the tail of one (seen: 2 asked, 1 whole traced).
                format!(
                    "PROFILE_START_ITERATION=0\nPROFILE_START_ITERATION_ROUNDUP={}\nACTIVITIES_ITERATIONS={}\nACTIVITIES_DURATION_MSECS={ITERATION_FALLBACK_MS}",
                    roundup.max(1),
                    iterations + 1
                ),
                iterations,
            ),
        };
        let config = format!("ACTIVITIES_LOG_FILE={}\n{trigger}", path.display());
        let (state, config) = match &self.over_budget {
            Some(why) => (TraceState::Failed(why.clone()), String::new()),
            None => (TraceState::Delivered, config),
        };
        self.set(
            RankTrace {
                trace_id: req.trace_id.clone(),
                job_id: id.job_id.clone(),
                rank: id.rank,
                world_size: id.world_size,
                pid,
                path,
                state,
                iterations,
                delivered_at_ns: now_ns,
                sdk: id.sdk,
            },
            now_ns,
        );
        config
    }

    /// Adds a request (a repeated trace id is ignored).
    pub fn request(&mut self, req: TraceRequest) {
        if !self.requests.iter().any(|r| r.trace_id == req.trace_id) {
            self.requests.push(req);
        }
    }

    /// Drops requests older than `ttl_ns` (ranks not seen by then are not on this node).
    pub fn expire(&mut self, now_ns: u64, ttl_ns: u64) {
        self.requests
            .retain(|r| now_ns.saturating_sub(r.requested_at_ns) < ttl_ns);
        let before = self.processes.len();
        self.processes
            .retain(|_, p| now_ns.saturating_sub(p.last_poll_ns) < PROCESS_TTL_NS);
        if self.processes.len() != before {
            self.changed.notify_one();
        }
    }

    /// Traces delivered and not yet finished (for the file watcher).
    pub fn open_traces(&self) -> Vec<RankTrace> {
        self.traces
            .values()
            .filter(|t| !t.state.finished())
            .cloned()
            .collect()
    }

    /// Moves (trace, rank) to `state`, recording an update when it changed.
    pub fn transition(&mut self, trace_id: &str, rank: u32, state: TraceState, now_ns: u64) {
        if let Some(t) = self.traces.get(&(trace_id.to_owned(), rank)).cloned() {
            if t.state != state && !t.state.finished() {
                self.set(RankTrace { state, ..t }, now_ns);
            }
        }
    }

    /// Where (trace, rank)'s file actually is (libkineto may add the pid).
    pub fn set_path(&mut self, trace_id: &str, rank: u32, path: PathBuf) {
        if let Some(t) = self.traces.get_mut(&(trace_id.to_owned(), rank)) {
            t.path = path;
        }
    }

    /// Sets (or clears) why deliveries fail now.
    pub fn set_over_budget(&mut self, why: Option<String>) {
        self.over_budget = why;
    }

    /// Queues captured traces for the importer.
    pub fn push_captured(&mut self, traces: Vec<RankTrace>) {
        if !traces.is_empty() {
            self.changed.notify_one();
        }
        self.captured.extend(traces);
        let over = self.captured.len().saturating_sub(MAX_TRACES);
        self.captured.drain(..over);
    }

    /// Captured traces not yet handed to the importer.
    pub fn take_captured(&mut self) -> Vec<RankTrace> {
        std::mem::take(&mut self.captured)
    }

    /// The attributed processes polling now: (pid, identity), by pid.
    pub fn processes(&self) -> Vec<(i32, ProcessIdentity)> {
        let mut v: Vec<(i32, ProcessIdentity)> = self
            .processes
            .iter()
            .filter_map(|(pid, p)| p.identity.clone().map(|i| (*pid, i)))
            .collect();
        v.sort_by_key(|(pid, _)| *pid);
        v
    }

    /// State changes since the last call.
    pub fn take_updates(&mut self) -> Vec<TraceUpdate> {
        std::mem::take(&mut self.updates)
    }

    /// Every (rank, trace) known, for status queries.
    pub fn traces(&self) -> impl Iterator<Item = &RankTrace> {
        self.traces.values()
    }

    /// The trace directory.
    pub fn trace_dir(&self) -> &Path {
        &self.trace_dir
    }

    fn set(&mut self, t: RankTrace, now_ns: u64) {
        self.updates.push(TraceUpdate {
            trace_id: t.trace_id.clone(),
            job_id: t.job_id.clone(),
            rank: t.rank,
            state: t.state.clone(),
            at_ns: now_ns,
        });
        self.traces.insert((t.trace_id.clone(), t.rank), t);
        self.changed.notify_one();
        while self.traces.len() > MAX_TRACES {
            let oldest = self
                .traces
                .iter()
                .filter(|(_, t)| t.state.finished())
                .min_by_key(|(_, t)| t.delivered_at_ns)
                .or_else(|| self.traces.iter().min_by_key(|(_, t)| t.delivered_at_ns))
                .map(|(k, _)| k.clone());
            match oldest {
                Some(k) => {
                    self.traces.remove(&k);
                }
                None => break,
            }
        }
    }

    fn touch(&mut self, pid: i32, identity: Option<ProcessIdentity>, now_ns: u64) {
        if self.processes.len() >= MAX_PROCESSES && !self.processes.contains_key(&pid) {
            if let Some((&old, _)) = self.processes.iter().min_by_key(|(_, p)| p.last_poll_ns) {
                self.processes.remove(&old);
                self.changed.notify_one();
            }
        }
        let p = self.processes.entry(pid).or_insert(Process {
            identity: None,
            last_poll_ns: now_ns,
        });
        p.last_poll_ns = now_ns;
        if identity.is_some() && p.identity != identity {
            p.identity = identity;
            self.changed.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(rank: u32) -> Option<ProcessIdentity> {
        Some(ProcessIdentity {
            job_id: "j".into(),
            rank,
            world_size: 2,
            sdk: false,
        })
    }

    fn req(trace: &str, ranks: Vec<u32>) -> TraceRequest {
        TraceRequest {
            trace_id: trace.into(),
            job_id: "j".into(),
            ranks,
            mode: TraceMode::Iterations {
                iterations: 2,
                roundup: 10,
            },
            requested_at_ns: 0,
        }
    }

    #[test]
    fn each_matching_rank_gets_the_config_once_with_its_own_file() {
        let mut r = Registry::new("/t".into());
        assert_eq!(r.poll(10, id(0), 1), "");
        r.request(req("T1", vec![]));
        let c0 = r.poll(10, id(0), 2);
        assert!(c0.contains("ACTIVITIES_LOG_FILE=/t/T1-r0-10.json"), "{c0}");
        assert!(c0.contains("PROFILE_START_ITERATION_ROUNDUP=10"), "{c0}");
        assert!(c0.contains("ACTIVITIES_ITERATIONS=3"), "2 whole ones: {c0}");
        assert_eq!(r.poll(10, id(0), 3), "", "delivered once");
        assert!(r.poll(11, id(1), 3).contains("T1-r1-11.json"));
        let u = r.take_updates();
        assert_eq!(u.len(), 2);
        assert!(u.iter().all(|u| u.state == TraceState::Delivered));
        // Another job's process and an unattributed one get nothing.
        let other = Some(ProcessIdentity {
            job_id: "other".into(),
            rank: 0,
            world_size: 1,
            sdk: false,
        });
        assert_eq!(r.poll(12, other, 4), "");
        assert_eq!(r.poll(13, None, 4), "");
    }

    #[test]
    fn a_request_for_one_rank_reaches_only_that_rank() {
        let mut r = Registry::new("/t".into());
        let mut q = req("T2", vec![1]);
        q.mode = TraceMode::DurationMs(500);
        r.request(q);
        assert_eq!(r.poll(10, id(0), 1), "");
        let c = r.poll(11, id(1), 1);
        assert!(c.contains("ACTIVITIES_DURATION_MSECS=500"), "{c}");
        assert!(c.contains("PROFILE_START_TIME=0\n"), "{c}");
    }

    #[test]
    fn transitions_are_reported_once_and_finished_traces_stay_finished() {
        let mut r = Registry::new("/t".into());
        r.request(req("T", vec![]));
        r.poll(10, id(0), 1);
        r.take_updates();
        r.transition("T", 0, TraceState::Captured, 2);
        r.transition("T", 0, TraceState::Captured, 3);
        r.transition("T", 0, TraceState::Failed("bad".into()), 4);
        r.transition("T", 0, TraceState::Imported, 5);
        let states: Vec<_> = r.take_updates().into_iter().map(|u| u.state).collect();
        assert_eq!(
            states,
            [TraceState::Captured, TraceState::Failed("bad".into())]
        );
        assert!(r.open_traces().is_empty());
    }

    #[test]
    fn over_its_budget_the_trace_directory_fails_new_deliveries_with_the_reason() {
        let mut r = Registry::new("/t".into());
        r.request(req("T", vec![]));
        r.set_over_budget(Some("full".into()));
        assert_eq!(r.poll(10, id(0), 1), "", "nothing delivered");
        let u = r.take_updates();
        assert_eq!(u[0].state, TraceState::Failed("full".into()));
        r.set_over_budget(None);
        assert!(r.poll(11, id(1), 2).contains("ACTIVITIES_LOG_FILE"));
    }

    #[test]
    fn registration_counts_the_jobs_processes_and_requests_expire() {
        let mut r = Registry::new("/t".into());
        assert_eq!(r.register(1, id(0), 0), 1);
        assert_eq!(r.register(2, id(1), 0), 2);
        r.request(req("T", vec![]));
        r.expire(100, 50);
        assert_eq!(r.poll(1, id(0), 100), "", "the request expired");
    }

    /// Whether `n` holds a wake-up (consumed by asking).
    fn woken(n: &Notify) -> bool {
        let f = n.notified();
        std::pin::pin!(f).enable()
    }

    #[test]
    fn what_the_collector_is_told_wakes_the_control_stream_and_nothing_else_does() {
        let mut r = Registry::new("/t".into());
        let changed = r.changed();
        assert!(!woken(&changed), "a new registry holds no wake-up");
        assert!(!r.needs_watch(), "nothing to look at");

        // A new attributed process changes `processes()`; its later polls
        // with the same identity, and an unattributed one, do not.
        r.register(10, id(0), 1);
        assert!(woken(&changed));
        r.poll(10, id(0), 2);
        r.poll(11, None, 2);
        assert!(!woken(&changed));
        // Several changes before anyone waits: one wake-up, not lost.
        r.register(12, id(1), 3);
        r.register(13, id(1), 3);
        assert!(woken(&changed));
        assert!(!woken(&changed));

        // A request alone is not reported (the collector sent it) but
        // needs the watcher (it expires); its delivery is a state change.
        r.request(req("T", vec![0]));
        assert!(!woken(&changed));
        assert!(r.needs_watch());
        assert!(r.poll(10, id(0), 4).contains("ACTIVITIES_LOG_FILE"));
        assert!(woken(&changed));
        r.expire(5, 1);
        assert!(r.needs_watch(), "the delivered trace is not finished");
        assert!(!woken(&changed), "no process went silent");

        r.push_captured(Vec::new());
        assert!(!woken(&changed));
        let t = r.open_traces().remove(0);
        r.push_captured(vec![t]);
        assert!(woken(&changed));
        r.transition("T", 0, TraceState::Imported, 6);
        assert!(woken(&changed));
        assert!(!r.needs_watch(), "finished, and the request expired");

        // Processes going silent change `processes()` too.
        r.expire(PROCESS_TTL_NS + 10, u64::MAX);
        assert!(r.processes().is_empty());
        assert!(woken(&changed));
    }
}
