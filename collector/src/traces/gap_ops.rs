//! The operators that fill an `other` straggler's gap (issue 31): host
//! operators of recently traced ranks, and what they say about the stretch
//! of the step where the straggler's time sits.
//!
//! In: the host operators of each imported (trace, rank) ([`GapOps::hold`],
//! from the agents' `TraceOps` reports: absolute times on the node's clock)
//! and, from the stream, an active `other` verdict's gap windows — per
//! finalized step of that rank since the verdict, the longest stretch
//! outside its instrumented spans (`rankscope_analysis::longest_gap`)
//! ([`GapOps::fill`]). Out: [`Fill`]: the top operators by self time
//! inside those windows per step (`rankscope_analysis::gap_fill`), which the
//! stream writes into the verdict's evidence text and the stragglers route
//! serves as `gap_operators` ([`GapOps::fill_of`]).
//!
//! Memory: the operators of the latest trace of at most [`MAX_RANKS`]
//! (job, rank) pairs (a rank's newer trace replaces its older one; beyond,
//! the oldest received is dropped), each at most the agent's cap; one
//! [`Fill`] per such pair. In memory only, like the link from a verdict to
//! its automatic trace: after a restart the evidence text keeps what was
//! found.

use std::collections::HashMap;
use std::sync::Mutex;

use rankscope_analysis::HostOp;
use serde::Serialize;

/// Most (job, rank) pairs whose host operators are held.
pub const MAX_RANKS: usize = 64;
/// Most host operators held per (job, rank) (the agent sends at most as
/// many; more are cut).
pub const MAX_OPS: usize = 16_384;
/// Operators named per gap.
pub const TOP_OPERATORS: usize = 5;

/// Host operators and gap fills of recently traced ranks. Shared by the
/// trace hub, the stream and the API.
#[derive(Debug, Default)]
pub struct GapOps {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    held: HashMap<(String, u32), Held>,
    fills: HashMap<(String, u32), Fill>,
}

#[derive(Debug)]
struct Held {
    trace_id: String,
    received_ns: u64,
    ops: Vec<HostOp>,
}

/// The operators inside a verdict's gap windows, from one trace.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Fill {
    pub trace_id: String,
    /// The verdict's first step.
    #[serde(skip)]
    pub first_step: u64,
    /// Steps of the trace whose gap window was known.
    pub steps: u64,
    /// The gap's mean length over those steps, ms.
    pub gap_ms_per_step: f64,
    /// Self time of all host operators inside the gap per step, ms.
    pub ops_ms_per_step: f64,
    /// The top operators by self time inside the gap, largest first.
    pub operators: Vec<GapOperator>,
}

/// One operator inside the gap.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GapOperator {
    pub name: String,
    /// Its self time inside the gap per step, ms.
    pub ms_per_step: f64,
}

impl GapOps {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Holds the host operators of (`job`, `rank`) from `trace_id`,
    /// replacing an older trace's; none: nothing changes.
    pub fn hold(&self, job: &str, rank: u32, trace_id: &str, mut ops: Vec<HostOp>, now_ns: u64) {
        ops.truncate(MAX_OPS);
        if ops.is_empty() {
            return;
        }
        let mut st = self.lock();
        let key = (job.to_owned(), rank);
        if !st.held.contains_key(&key) && st.held.len() >= MAX_RANKS {
            if let Some(oldest) = st
                .held
                .iter()
                .min_by_key(|(k, h)| (h.received_ns, (*k).clone()))
                .map(|(k, _)| k.clone())
            {
                st.held.remove(&oldest);
                st.fills.remove(&oldest);
            }
        }
        st.held.insert(
            key,
            Held {
                trace_id: trace_id.to_owned(),
                received_ns: now_ns,
                ops,
            },
        );
    }

    /// The operators of the held trace of (`job`, `rank`) inside `windows`
    /// (the gap windows of its verdict starting at `first_step`), recorded
    /// for [`GapOps::fill_of`]; `None` without a held trace or when no
    /// window lies inside it.
    pub fn fill(
        &self,
        job: &str,
        rank: u32,
        first_step: u64,
        windows: &[(u64, u64)],
    ) -> Option<Fill> {
        let mut st = self.lock();
        let key = (job.to_owned(), rank);
        let held = st.held.get(&key)?;
        let f = rankscope_analysis::gap_fill(windows, &held.ops, TOP_OPERATORS);
        if f.steps == 0 {
            return None;
        }
        let fill = Fill {
            trace_id: held.trace_id.clone(),
            first_step,
            steps: f.steps,
            gap_ms_per_step: f.gap_ns_per_step / 1e6,
            ops_ms_per_step: f.ops_ns_per_step / 1e6,
            operators: f
                .ops
                .into_iter()
                .map(|(name, ns)| GapOperator {
                    name,
                    ms_per_step: ns / 1e6,
                })
                .collect(),
        };
        st.fills.insert(key, fill.clone());
        Some(fill)
    }

    /// The latest fill of the verdict of (`job`, `rank`) starting at
    /// `first_step`.
    pub fn fill_of(&self, job: &str, rank: u32, first_step: u64) -> Option<Fill> {
        self.lock()
            .fills
            .get(&(job.to_owned(), rank))
            .filter(|f| f.first_step == first_step)
            .cloned()
    }
}

impl Fill {
    /// e.g. "kineto trace t-1 (4 steps): host operators take 2.9 of its
    /// 101.3 ms per step, aten::mm 2.1 ms, aten::linalg_vector_norm 0.4 ms"
    /// (the rest is in no operator: Python, waits, sleeps).
    pub fn describe(&self) -> String {
        let ops: Vec<String> = self
            .operators
            .iter()
            .map(|o| format!("{} {:.1} ms", o.name, o.ms_per_step))
            .collect();
        format!(
            "kineto trace {} ({} steps): host operators take {:.1} of its {:.1} ms per step, {}",
            self.trace_id,
            self.steps,
            self.ops_ms_per_step,
            self.gap_ms_per_step,
            if ops.is_empty() {
                "none".to_owned()
            } else {
                ops.join(", ")
            }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(name: &str, start_ns: u64, end_ns: u64) -> HostOp {
        HostOp {
            name: name.into(),
            start_ns,
            end_ns,
            self_ns: end_ns - start_ns,
        }
    }

    #[test]
    fn fills_a_verdicts_windows_from_the_ranks_latest_trace() {
        let g = GapOps::default();
        let ms = 1_000_000;
        let windows = [(10 * ms, 110 * ms), (210 * ms, 310 * ms)];
        assert_eq!(g.fill("j", 2, 3, &windows), None, "no trace held");
        g.hold("j", 2, "old", vec![op("x", 0, 5)], 1);
        assert_eq!(g.fill("j", 2, 3, &windows), None, "no window inside it");
        g.hold(
            "j",
            2,
            "t-1",
            vec![
                op("aten::addmm", 0, 10 * ms),
                op("aten::mm", 20 * ms, 23 * ms),
                op("aten::mm", 220 * ms, 221 * ms),
                op("aten::norm", 30 * ms, 31 * ms),
                op("Optimizer.step", 310 * ms, 320 * ms),
            ],
            2,
        );
        let f = g.fill("j", 2, 3, &windows).expect("a fill");
        assert_eq!((f.trace_id.as_str(), f.steps), ("t-1", 2));
        assert_eq!(
            f.operators,
            vec![
                GapOperator {
                    name: "aten::mm".into(),
                    ms_per_step: 2.0
                },
                GapOperator {
                    name: "aten::norm".into(),
                    ms_per_step: 0.5
                }
            ]
        );
        assert_eq!(
            f.describe(),
            "kineto trace t-1 (2 steps): host operators take 2.5 of its 100.0 ms per step, \
             aten::mm 2.0 ms, aten::norm 0.5 ms"
        );
        assert_eq!(g.fill_of("j", 2, 3), Some(f));
        assert_eq!(g.fill_of("j", 2, 4), None, "another verdict");
        assert_eq!(g.fill_of("j", 1, 3), None);
    }

    #[test]
    fn holds_at_most_max_ranks_dropping_the_oldest() {
        let g = GapOps::default();
        for r in 0..=MAX_RANKS as u32 {
            g.hold("j", r, "t", vec![op("x", 0, 10)], u64::from(r));
        }
        let st = g.lock();
        assert_eq!(st.held.len(), MAX_RANKS);
        assert!(!st.held.contains_key(&("j".to_owned(), 0)));
    }
}
