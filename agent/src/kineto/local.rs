//! The local trace trigger (`trace_on_start_iterations`): traces each job
//! that appears on this node once, with no request from a collector (the
//! GPU capture kit runs the agent with a dump and no collector).
//!
//! In: the attributed libkineto processes polling the daemon endpoint
//! (looked at every [`TICK`]). Out: one [`TraceRequest`] per job id, the
//! first time a process of that job is seen: every rank of the job, the
//! given number of iterations, starting on the next multiple of
//! [`ROUNDUP`] (the same iteration on every rank; Kineto's round-up). The
//! request's trace id is `local-<n>`; ranks polling later still receive it
//! while it lives (`trace_request_ttl_ms`). Bounded: at most
//! [`MAX_JOBS`] jobs remembered (beyond, the oldest are forgotten).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::{KinetoDaemon, ProcessIdentity, TraceMode, TraceRequest};

/// How often the polling processes are looked at.
pub const TICK: Duration = Duration::from_millis(200);
/// Traces start on a multiple of this iteration.
pub const ROUNDUP: u64 = 10;
/// Most job ids remembered as already traced.
pub const MAX_JOBS: usize = 1024;

/// Which jobs were already requested (pure; the clock is an argument).
#[derive(Debug, Default)]
pub struct Trigger {
    seen: VecDeque<String>,
    next: u64,
}

impl Trigger {
    /// The requests due for `processes`: one per job not seen before.
    pub fn due(
        &mut self,
        processes: &[(i32, ProcessIdentity)],
        iterations: u64,
        now_ns: u64,
    ) -> Vec<TraceRequest> {
        let mut out = Vec::new();
        for (_, id) in processes {
            if self.seen.contains(&id.job_id) {
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
        for req in trigger.due(&daemon.processes(), iterations, super::now_ns()) {
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

    #[test]
    fn each_job_is_requested_once_for_all_its_ranks() {
        let mut t = Trigger::default();
        let first = t.due(&[p(10, "a", 0)], 3, 5);
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
        assert!(t.due(&[p(10, "a", 0), p(11, "a", 1)], 3, 6).is_empty());
        let second = t.due(&[p(11, "a", 1), p(12, "b", 0), p(13, "b", 1)], 3, 7);
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
            assert_eq!(t.due(&[p(1, &format!("j{i}"), 0)], 1, 0).len(), 1);
        }
        assert_eq!(t.seen.len(), MAX_JOBS);
    }
}
