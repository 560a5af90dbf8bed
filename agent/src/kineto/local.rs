//! The local trace trigger (`trace_on_start_iterations`): traces each job
//! that appears on this node once, with no request from a collector (the
//! GPU capture kit runs the agent with a dump and no collector).
//!
//! In: the attributed libkineto processes polling the daemon endpoint
//! (looked at every [`TICK`]) and, from the batcher, the step every live
//! SDK stream of a job on this node has ended ([`Progress`]). Out: one
//! [`TraceRequest`] per job id: every rank of the job, the given number of
//! iterations, starting on the next multiple of [`ROUNDUP`] (the same
//! iteration on every rank; Kineto's round-up). The request's trace id is
//! `local-<n>`; ranks polling later still receive it while it lives
//! (`trace_request_ttl_ms`). Bounded: at most [`MAX_JOBS`] jobs remembered
//! (beyond, the oldest are forgotten).
//!
//! When: a job whose processes stream through the SDK is requested once
//! the node ended step [`START_AFTER_STEP`] (training runs): a request
//! delivered during start-up (process group, CUDA contexts) is wasted where
//! libkineto falls back to a duration trace from the poll (its CPU build
//! does, see `registry`). A job without SDK streams is requested when first
//! seen. Needs `flush_at_step_end` (default on): that is where steps are
//! followed.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

use super::{KinetoDaemon, ProcessIdentity, TraceMode, TraceRequest};

/// How often the polling processes are looked at.
pub const TICK: Duration = Duration::from_millis(200);
/// Traces start on a multiple of this iteration.
pub const ROUNDUP: u64 = 10;
/// Most job ids remembered as already traced (and in [`Progress`]).
pub const MAX_JOBS: usize = 1024;
/// An SDK job is requested once its ranks on this node ended this step.
pub const START_AFTER_STEP: u64 = 5;

/// The step every live stream of each job on this node has ended (written
/// by the batcher, read by the trigger).
#[derive(Debug, Default)]
pub struct Progress(Mutex<HashMap<String, u64>>);

impl Progress {
    /// Records that `job`'s ranks on this node all ended `step`.
    pub fn set(&self, job: &str, step: u64) {
        let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if m.len() >= MAX_JOBS && !m.contains_key(job) {
            m.clear();
        }
        m.insert(job.to_owned(), step);
    }

    /// The step `job`'s ranks on this node all ended, if any.
    pub fn step(&self, job: &str) -> Option<u64> {
        let m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        m.get(job).copied()
    }
}

/// Which jobs were already requested (pure; the clock is an argument).
#[derive(Debug, Default)]
pub struct Trigger {
    seen: VecDeque<String>,
    next: u64,
}

impl Trigger {
    /// The requests due for `processes`: one per job not requested before
    /// that is training (`step`: the job's completed node step).
    pub fn due(
        &mut self,
        processes: &[(i32, ProcessIdentity)],
        step: impl Fn(&str) -> Option<u64>,
        iterations: u64,
        now_ns: u64,
    ) -> Vec<TraceRequest> {
        let mut out = Vec::new();
        for (_, id) in processes {
            if self.seen.contains(&id.job_id) {
                continue;
            }
            let sdk = processes
                .iter()
                .any(|(_, p)| p.job_id == id.job_id && p.sdk);
            if sdk && step(&id.job_id).is_none_or(|s| s < START_AFTER_STEP) {
                continue;
            }
            if self.seen.len() >= MAX_JOBS {
                self.seen.pop_front();
            }
            self.seen.push_back(id.job_id.clone());
            self.next += 1;
            tracing::info!(job = %id.job_id, iterations, trace_id = %format!("local-{}", self.next), "local trigger: tracing a new job");
            out.push(TraceRequest {
                trace_id: format!("local-{}", self.next),
                job_id: id.job_id.clone(),
                ranks: Vec::new(),
                mode: TraceMode::Iterations {
                    iterations,
                    roundup: ROUNDUP,
                },
                requested_at_ns: now_ns,
            });
        }
        out
    }
}

/// Requests a trace of every new job until `stop` turns true.
pub(crate) async fn trace_on_start(
    daemon: Arc<KinetoDaemon>,
    progress: Arc<Progress>,
    iterations: u64,
    mut stop: watch::Receiver<bool>,
) {
    let mut trigger = Trigger::default();
    let mut tick = tokio::time::interval(TICK);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        let processes = daemon.processes();
        for req in trigger.due(
            &processes,
            |j| progress.step(j),
            iterations,
            super::now_ns(),
        ) {
            daemon.request(req);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(pid: i32, job: &str, rank: u32) -> (i32, ProcessIdentity) {
        let identity = ProcessIdentity {
            job_id: job.into(),
            rank,
            world_size: 2,
            sdk: false,
        };
        (pid, identity)
    }

    fn none(_: &str) -> Option<u64> {
        None
    }

    #[test]
    fn an_sdk_job_is_requested_once_it_trains() {
        let mut t = Trigger::default();
        let mut ps = vec![p(10, "a", 0), p(11, "a", 1)];
        ps[1].1.sdk = true;
        assert!(t.due(&ps, none, 3, 1).is_empty(), "no step yet");
        let early = |_: &str| Some(START_AFTER_STEP - 1);
        assert!(t.due(&ps, early, 3, 2).is_empty(), "still starting");
        let progress = Progress::default();
        progress.set("a", START_AFTER_STEP);
        let got = t.due(&ps, |j| progress.step(j), 3, 3);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].job_id, "a");
        assert!(t.due(&ps, |j| progress.step(j), 3, 4).is_empty(), "once");
    }

    #[test]
    fn each_job_is_requested_once_for_all_its_ranks() {
        let mut t = Trigger::default();
        let first = t.due(&[p(10, "a", 0)], none, 3, 5);
        assert_eq!(first.len(), 1);
        assert_eq!(first[0].trace_id, "local-1");
        assert_eq!(first[0].job_id, "a");
        assert!(first[0].ranks.is_empty(), "every rank of the job");
        assert_eq!(
            first[0].mode,
            TraceMode::Iterations {
                iterations: 3,
                roundup: ROUNDUP
            }
        );
        assert_eq!(first[0].requested_at_ns, 5);
        // Rank 1 of the same job shows up later: no second request.
        assert!(t
            .due(&[p(10, "a", 0), p(11, "a", 1)], none, 3, 6)
            .is_empty());
        let second = t.due(&[p(11, "a", 1), p(12, "b", 0), p(13, "b", 1)], none, 3, 7);
        let ids: Vec<(&str, &str)> = second
            .iter()
            .map(|r| (r.trace_id.as_str(), r.job_id.as_str()))
            .collect();
        assert_eq!(ids, [("local-2", "b")]);
    }

    #[test]
    fn the_memory_of_jobs_is_bounded() {
        let mut t = Trigger::default();
        for i in 0..MAX_JOBS + 5 {
            assert_eq!(t.due(&[p(1, &format!("j{i}"), 0)], none, 1, 0).len(), 1);
        }
        assert_eq!(t.seen.len(), MAX_JOBS);
        let progress = Progress::default();
        for i in 0..MAX_JOBS + 5 {
            progress.set(&format!("j{i}"), 1);
        }
        assert!(progress.0.lock().unwrap().len() <= MAX_JOBS);
    }
}
