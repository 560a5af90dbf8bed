//! Node steps: which step every live rank stream of this agent has ended.
//!
//! The collector decides a step (breakdown, stragglers) once every rank of
//! the job ended it, so the last StepEnd of a node is what a verdict waits
//! for. When the events of a chunk complete a node step (every live stream
//! has ended it), the batcher cuts the batch at once instead of waiting for
//! `batch_max_delay_ms`.
//!
//! In: the events of each live rank chunk (trace imports are not live and
//! are not tracked) and stream closes. Out: whether a step of the stream's
//! job completed on this node (jobs are apart: their steps are unrelated).
//! A stream that has not ended any step yet holds completion back (the
//! batch then waits for its deadline, as before); a closed stream no longer
//! counts. Memory: one entry per live stream.

use std::collections::HashMap;

use rankscope_proto::v1 as proto;

/// The highest step a `StepEnd` of `events` ends.
pub(crate) fn last_step_end(events: &[proto::Event]) -> Option<u64> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            Some(proto::event::Kind::StepEnd(s)) => Some(s.step),
            _ => None,
        })
        .max()
}

/// Per job of the node: the last step each live stream ended.
#[derive(Debug, Default)]
pub(crate) struct NodeSteps {
    jobs: HashMap<String, JobSteps>,
}

#[derive(Debug, Default)]
struct JobSteps {
    /// Stream id -> the last step it ended (`None`: none yet).
    ended: HashMap<u64, Option<u64>>,
    /// The highest step every live stream had ended when last checked.
    complete: Option<u64>,
}

impl NodeSteps {
    /// Records the events of a live stream of `job`, of which `last_end`
    /// is the highest step ended ([`last_step_end`]); true when they
    /// complete a step of the job on this node.
    pub(crate) fn record(&mut self, job: &str, stream: u64, last_end: Option<u64>) -> bool {
        let steps = match self.jobs.get_mut(job) {
            Some(s) => s,
            None => self.jobs.entry(job.to_owned()).or_default(),
        };
        let entry = steps.ended.entry(stream).or_insert(None);
        match last_end {
            Some(step) if entry.is_none_or(|e| step > e) => {
                *entry = Some(step);
                steps.check()
            }
            _ => false,
        }
    }

    /// The highest step every live stream of `job` on this node has ended.
    pub(crate) fn complete(&self, job: &str) -> Option<u64> {
        self.jobs.get(job).and_then(|s| s.complete)
    }

    /// Forgets a closed stream of `job`; true when the job's streams left
    /// complete a step. A job without streams is forgotten.
    pub(crate) fn close(&mut self, job: &str, stream: u64) -> bool {
        let Some(steps) = self.jobs.get_mut(job) else {
            return false;
        };
        if steps.ended.remove(&stream).is_none() {
            return false;
        }
        if steps.ended.is_empty() {
            self.jobs.remove(job);
            return false;
        }
        steps.check()
    }
}

impl JobSteps {
    /// Whether the step every live stream has ended grew.
    fn check(&mut self) -> bool {
        let mut min = None;
        for e in self.ended.values() {
            let Some(step) = *e else {
                return false;
            };
            min = Some(min.map_or(step, |m: u64| m.min(step)));
        }
        match min {
            Some(m) if self.complete.is_none_or(|c| m > c) => {
                self.complete = Some(m);
                true
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records `events` as the batcher does.
    fn rec(s: &mut NodeSteps, job: &str, stream: u64, events: &[proto::Event]) -> bool {
        s.record(job, stream, last_step_end(events))
    }

    fn end(step: u64) -> proto::Event {
        proto::Event {
            kind: Some(proto::event::Kind::StepEnd(proto::StepEnd {
                step,
                ts_ns: 1,
            })),
        }
    }

    fn begin(step: u64) -> proto::Event {
        proto::Event {
            kind: Some(proto::event::Kind::StepBegin(proto::StepBegin {
                step,
                ts_ns: 1,
            })),
        }
    }

    #[test]
    fn a_step_completes_with_the_last_streams_end() {
        let mut s = NodeSteps::default();
        assert!(!rec(&mut s, "j", 1, &[begin(0)]));
        assert!(!rec(&mut s, "j", 2, &[begin(0)]));
        assert!(
            !rec(&mut s, "j", 1, &[end(0)]),
            "stream 2 has not ended step 0"
        );
        assert!(
            rec(&mut s, "j", 2, &[end(0), begin(1)]),
            "both ended step 0"
        );
        assert!(
            !rec(&mut s, "j", 2, &[end(1)]),
            "stream 1 is still in step 1"
        );
        assert!(rec(&mut s, "j", 1, &[end(1)]));
    }

    #[test]
    fn a_step_completes_once() {
        let mut s = NodeSteps::default();
        assert!(rec(&mut s, "j", 1, &[end(3)]));
        assert!(
            !rec(&mut s, "j", 1, &[end(3)]),
            "a repeated end is not news"
        );
        assert!(
            !rec(&mut s, "j", 2, &[begin(4)]),
            "a new stream holds it back"
        );
        assert!(
            !rec(&mut s, "j", 2, &[end(3)]),
            "step 3 was already complete"
        );
        assert!(!rec(&mut s, "j", 1, &[end(4)]));
        assert!(rec(&mut s, "j", 2, &[end(4)]));
    }

    #[test]
    fn a_closed_stream_stops_holding_the_node_back() {
        let mut s = NodeSteps::default();
        assert!(!rec(&mut s, "j", 2, &[begin(0)]));
        assert!(!rec(&mut s, "j", 1, &[end(0)]), "stream 2 is in step 0");
        assert!(s.close("j", 2), "the only stream left ended step 0");
        assert!(!s.close("j", 2), "unknown stream");
        assert!(!s.close("j", 1), "no stream left: nothing completes");
        assert!(
            rec(&mut s, "j", 3, &[end(0)]),
            "a new run of the job starts afresh"
        );
    }

    #[test]
    fn jobs_are_apart() {
        let mut s = NodeSteps::default();
        assert!(!rec(&mut s, "a", 1, &[begin(5)]));
        assert!(
            rec(&mut s, "b", 2, &[end(0)]),
            "job a's stream does not hold b back"
        );
        assert!(rec(&mut s, "a", 1, &[end(5)]));
        assert!(!rec(&mut s, "b", 3, &[begin(0)]));
        assert!(!rec(&mut s, "b", 3, &[end(0)]), "b's step 0 was complete");
        assert!(
            !rec(&mut s, "b", 3, &[end(1)]),
            "stream 2 has not ended step 1"
        );
        assert!(rec(&mut s, "b", 2, &[end(1)]));
    }

    #[test]
    fn streams_far_apart_complete_the_lowest_common_step() {
        let mut s = NodeSteps::default();
        assert!(!rec(&mut s, "j", 1, &[begin(0)]));
        assert!(!rec(&mut s, "j", 2, &[end(0), end(1), end(2)]));
        assert!(rec(&mut s, "j", 1, &[end(0)]));
        assert!(rec(&mut s, "j", 1, &[end(2)]), "both ended step 2 now");
        assert!(!rec(&mut s, "j", 1, &[end(1)]), "out of order: not news");
    }
}
