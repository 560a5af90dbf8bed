//! The alert rules: analytics events in, fire / resolve requests out.
//!
//! In: [`AlertInput`]s from live analytics (verdict changes, hang suspects,
//! per-rank step GPU utilization, per-step collective bandwidth). Out:
//! [`Transition`]s of the [`Engine`]. Pure apart from the time argument.
//!
//! Rules (thresholds in [`RulesConfig`]):
//! * `straggler`: fires when a straggler verdict becomes active, resolves
//!   when it clears;
//! * `hang`: fires when a rank reported no step for `hang_after_secs` while
//!   other ranks of its job progressed (rank alert), or when no rank of a job
//!   whose ranks are still connected progressed for that long (job alert,
//!   rank -1); resolves when it progresses again;
//! * `low_gpu_utilization`: fires when a rank's mean GPU utilization over its
//!   last `window_steps` steps is below `threshold_pct`, resolves at or above;
//! * `collective_slowdown`: per (process group, op, size bucket) of a job, the
//!   baseline is the median bus bandwidth of its first `baseline_steps` steps
//!   (transfer time only, so waiting for a straggler does not count); fires
//!   (job alert) when the median of the last `window_steps` steps falls below
//!   `min_fraction` of the baseline, resolves when every key is back above;
//! * `repeat_offender` (fleet-wide, [`crate::fleet::watch`]): fires per node
//!   when one of its units (the node, or a GPU on it) has a fleet recurrence
//!   score at or above `min_score`, at most once per node per
//!   `cooldown_secs`; resolves when no unit of the node is at or above
//!   `min_score / 2` any more (hysteresis).
//!   Its alert key is job `fleet:<node>`, rank -1;
//! * `memory_headroom` ([`memory`]): fires when a rank's memory peak passes
//!   `max_share` (0.9) of its device's memory (the SDK's per-step CUDA
//!   peaks) or, for a CPU rank, its process RSS passes that share of the
//!   host's memory; resolves at the next observation at or below;
//! * `clock_skew` ([`skew`], on the tick of [`crate::alert::clock_watch`]):
//!   fires per job (rank -1) when a node's clock offset is above
//!   `max_offset_us`, resolves when none is.
//!
//! Memory: windows per (job, rank) and per (job, collective key), dropped
//! when the job is forgotten.

use std::collections::{BTreeSet, HashMap, VecDeque};

use serde::{Deserialize, Serialize};

use super::engine::{AlertKey, Engine, Evidence, Transition};

mod memory;
mod offender;
mod skew;

pub use memory::{MemoryHeadroomRule, MemoryObs, MemorySource};
pub use offender::{Offender, RepeatOffenderRule};
pub use skew::{ClockSkewRule, NodeClock};

/// Every rule name an [`AlertKey`](super::AlertKey) carries.
pub const RULE_NAMES: [&str; 7] = [
    "straggler",
    "hang",
    "low_gpu_utilization",
    "collective_slowdown",
    "repeat_offender",
    "memory_headroom",
    "clock_skew",
];

/// Toggle and severity of a rule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StragglerRule {
    pub enabled: bool,
    pub severity: String,
}

impl Default for StragglerRule {
    fn default() -> Self {
        Self {
            enabled: true,
            severity: "warning".into(),
        }
    }
}

/// The `hang` rule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HangRule {
    pub enabled: bool,
    pub severity: String,
    /// Seconds without a step before a rank (or a job) counts as hung.
    pub hang_after_secs: u64,
}

impl Default for HangRule {
    fn default() -> Self {
        Self {
            enabled: true,
            severity: "critical".into(),
            hang_after_secs: 300,
        }
    }
}

/// The `low_gpu_utilization` rule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LowGpuRule {
    pub enabled: bool,
    pub severity: String,
    /// Mean GPU utilization (%) below which the rule fires.
    pub threshold_pct: f64,
    /// Steps averaged.
    pub window_steps: usize,
}

impl Default for LowGpuRule {
    fn default() -> Self {
        Self {
            enabled: true,
            severity: "warning".into(),
            threshold_pct: 30.0,
            window_steps: 20,
        }
    }
}

/// The `collective_slowdown` rule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CollectiveRule {
    pub enabled: bool,
    pub severity: String,
    /// Fires below this fraction of the baseline bus bandwidth.
    pub min_fraction: f64,
    /// Steps whose median is the baseline.
    pub baseline_steps: usize,
    /// Steps whose median is compared with the baseline.
    pub window_steps: usize,
}

impl Default for CollectiveRule {
    fn default() -> Self {
        Self {
            enabled: true,
            severity: "warning".into(),
            min_fraction: 0.6,
            baseline_steps: 20,
            window_steps: 5,
        }
    }
}

/// All rules.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RulesConfig {
    pub straggler: StragglerRule,
    pub hang: HangRule,
    pub low_gpu_utilization: LowGpuRule,
    pub collective_slowdown: CollectiveRule,
    pub repeat_offender: RepeatOffenderRule,
    pub memory_headroom: MemoryHeadroomRule,
    pub clock_skew: ClockSkewRule,
}

impl RulesConfig {
    /// Checks thresholds.
    pub fn validate(&self) -> Result<(), String> {
        let g = &self.low_gpu_utilization;
        if !(0.0..=100.0).contains(&g.threshold_pct) || g.window_steps == 0 {
            return Err("alerts.rules.low_gpu_utilization: threshold_pct must be in 0..=100 and window_steps >= 1".into());
        }
        let c = &self.collective_slowdown;
        if !(c.min_fraction > 0.0 && c.min_fraction < 1.0)
            || c.baseline_steps == 0
            || c.window_steps == 0
        {
            return Err("alerts.rules.collective_slowdown: min_fraction must be in (0, 1), baseline_steps and window_steps >= 1".into());
        }
        if self.hang.hang_after_secs == 0 {
            return Err("alerts.rules.hang.hang_after_secs must be >= 1".into());
        }
        let r = &self.repeat_offender;
        if !(r.min_score.is_finite() && r.min_score > 0.0)
            || r.min_jobs == 0
            || r.window_secs == 0
            || r.evaluate_interval_ms < 10
        {
            return Err("alerts.rules.repeat_offender: min_score must be a number > 0, min_jobs and window_secs >= 1, evaluate_interval_ms >= 10".into());
        }
        let m = self.memory_headroom.max_share;
        if !(m > 0.0 && m <= 1.0) {
            return Err(format!(
                "alerts.rules.memory_headroom.max_share must be in (0, 1], got {m}"
            ));
        }
        self.clock_skew.validate()
    }
}

/// An analytics event the rules react to.
#[derive(Debug, Clone, PartialEq)]
pub enum AlertInput {
    /// A straggler verdict changed (`active` false: it cleared).
    Straggler {
        job: String,
        rank: u32,
        node: String,
        active: bool,
        first_step: u64,
        last_step: u64,
        steps_flagged: u64,
        slowdown: f64,
        score: f64,
        cause: String,
        evidence: String,
        /// The job's step-time reduction (%) without this rank's slowness
        /// (`rankscope_analysis::expected_gain_pct`), when known.
        expected_gain_pct: Option<f64>,
    },
    /// A rank stopped ending steps while others went on.
    RankHang {
        job: String,
        rank: u32,
        node: String,
        last_step: Option<u64>,
        job_step: u64,
        silent_ns: u64,
    },
    /// A rank reported as hung ended a step again.
    RankProgress { job: String, rank: u32 },
    /// No rank of a job ended a step for `silent_ns` (streams still open).
    JobStalled {
        job: String,
        last_step: u64,
        silent_ns: u64,
    },
    /// A stalled job ended a step again.
    JobProgress { job: String },
    /// GPU utilization of a rank during a finalized step.
    RankStepGpu {
        job: String,
        rank: u32,
        node: String,
        step: u64,
        gpu_util_pct: f64,
    },
    /// Bus bandwidth of a collective key in a finalized step.
    CollectiveStep {
        job: String,
        step: u64,
        key: String,
        busbw_gbps: f64,
    },
    /// The job is no longer tracked: resolve its alerts, drop its state.
    JobGone { job: String },
    /// One evaluation of the fleet window: every node over the
    /// `repeat_offender` threshold (nodes not named resolve).
    FleetRound { offenders: Vec<Offender> },
    /// A rank's memory peak against its device's (or host's) memory.
    RankMemory(MemoryObs),
    /// A job's node clock estimate (`clock_skew`).
    ClockRound {
        job: String,
        reference: String,
        nodes: Vec<NodeClock>,
    },
}

#[derive(Debug, Default)]
struct CollState {
    baseline: Vec<f64>,
    window: VecDeque<f64>,
}

/// Rule state of all jobs.
#[derive(Debug)]
pub struct Rules {
    cfg: RulesConfig,
    gpu: HashMap<(String, u32), VecDeque<f64>>,
    coll: HashMap<(String, String), CollState>,
    slow_keys: HashMap<String, BTreeSet<String>>,
    /// Nodes offending in the last fleet round.
    pub(super) offending: BTreeSet<String>,
    /// When each node's `repeat_offender` alert last fired.
    pub(super) offender_fired: HashMap<String, u64>,
    /// (job, rank)s that sent device memory peaks (`memory_headroom`).
    device_ranks: BTreeSet<(String, u32)>,
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n == 0 {
        0.0
    } else if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

impl Rules {
    /// Rules with thresholds `cfg`.
    pub fn new(cfg: RulesConfig) -> Self {
        Self {
            cfg,
            gpu: HashMap::new(),
            coll: HashMap::new(),
            slow_keys: HashMap::new(),
            offending: BTreeSet::new(),
            offender_fired: HashMap::new(),
            device_ranks: BTreeSet::new(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &RulesConfig {
        &self.cfg
    }

    /// Applies one input.
    pub fn apply(&mut self, input: AlertInput, engine: &mut Engine, now: u64) -> Vec<Transition> {
        let key = |job: &str, rule: &'static str, rank: i64| AlertKey {
            job: job.to_owned(),
            rule,
            rank,
        };
        let mut out = Vec::new();
        match input {
            AlertInput::Straggler {
                job,
                rank,
                node,
                active,
                first_step,
                last_step,
                steps_flagged,
                slowdown,
                score,
                cause,
                evidence,
                expected_gain_pct,
            } if self.cfg.straggler.enabled => {
                let k = key(&job, "straggler", i64::from(rank));
                if active {
                    let gain = expected_gain_pct
                        .filter(|g| *g >= 0.5)
                        .map(|g| format!("; job ~{g:.0}% faster without rank {rank}"))
                        .unwrap_or_default();
                    // Cause `other` is flagged by its own time (step time
                    // minus collective wait), not by its work.
                    let what = if cause == "other" {
                        "more own time (step time minus collective wait) than"
                    } else {
                        "slower than"
                    };
                    let summary = format!(
                        "rank {rank} on {node} is a straggler ({cause}): {:.0}% {what} the median rank, flagged in {steps_flagged} steps since step {first_step}{gain}{}{}",
                        (slowdown - 1.0) * 100.0,
                        if evidence.is_empty() { "" } else { "; " },
                        evidence
                    );
                    let fields = serde_json::json!({
                        "first_step": first_step, "last_step": last_step,
                        "steps_flagged": steps_flagged, "slowdown": slowdown,
                        "score": score, "cause": cause, "hardware": evidence,
                        "expected_gain_pct": expected_gain_pct,
                    });
                    let ev = Evidence {
                        node,
                        summary,
                        fields,
                    };
                    out.extend(engine.fire(k, &self.cfg.straggler.severity, ev, now));
                } else {
                    out.extend(engine.resolve(&k, now));
                }
            }
            AlertInput::RankHang {
                job,
                rank,
                node,
                last_step,
                job_step,
                silent_ns,
            } if self.cfg.hang.enabled => {
                let last = last_step.map_or_else(|| "no step".to_string(), |s| format!("step {s}"));
                let summary = format!(
                    "rank {rank} on {node} has not ended a step for {:.0} s (last: {last}) while the job reached step {job_step}",
                    silent_ns as f64 / 1e9
                );
                let fields = serde_json::json!({
                    "last_step": last_step, "job_step": job_step, "silent_ns": silent_ns,
                    "hang_after_secs": self.cfg.hang.hang_after_secs,
                });
                let ev = Evidence {
                    node,
                    summary,
                    fields,
                };
                out.extend(engine.fire(
                    key(&job, "hang", i64::from(rank)),
                    &self.cfg.hang.severity,
                    ev,
                    now,
                ));
            }
            AlertInput::RankProgress { job, rank } => {
                out.extend(engine.resolve(&key(&job, "hang", i64::from(rank)), now));
            }
            AlertInput::JobStalled {
                job,
                last_step,
                silent_ns,
            } if self.cfg.hang.enabled => {
                let summary = format!(
                    "job {job} has not ended a step for {:.0} s (last step {last_step}) although its ranks are connected",
                    silent_ns as f64 / 1e9
                );
                let fields = serde_json::json!({"last_step": last_step, "silent_ns": silent_ns});
                let ev = Evidence {
                    node: String::new(),
                    summary,
                    fields,
                };
                out.extend(engine.fire(key(&job, "hang", -1), &self.cfg.hang.severity, ev, now));
            }
            AlertInput::JobProgress { job } => {
                out.extend(engine.resolve(&key(&job, "hang", -1), now));
            }
            AlertInput::RankStepGpu {
                job,
                rank,
                node,
                step,
                gpu_util_pct,
            } if self.cfg.low_gpu_utilization.enabled => {
                let r = &self.cfg.low_gpu_utilization;
                let w = self.gpu.entry((job.clone(), rank)).or_default();
                w.push_back(gpu_util_pct);
                while w.len() > r.window_steps {
                    w.pop_front();
                }
                if w.len() == r.window_steps {
                    let mean = w.iter().sum::<f64>() / w.len() as f64;
                    let k = key(&job, "low_gpu_utilization", i64::from(rank));
                    if mean < r.threshold_pct {
                        let summary = format!(
                            "rank {rank} on {node}: mean GPU utilization {mean:.1}% over the last {} steps (to step {step}) is below {:.0}%",
                            r.window_steps, r.threshold_pct
                        );
                        let fields = serde_json::json!({
                            "mean_gpu_util_pct": mean, "threshold_pct": r.threshold_pct,
                            "window_steps": r.window_steps, "last_step": step,
                        });
                        let ev = Evidence {
                            node,
                            summary,
                            fields,
                        };
                        out.extend(engine.fire(k, &r.severity, ev, now));
                    } else {
                        out.extend(engine.resolve(&k, now));
                    }
                }
            }
            AlertInput::CollectiveStep {
                job,
                step,
                key: ckey,
                busbw_gbps,
            } if self.cfg.collective_slowdown.enabled => {
                out.extend(self.collective(job, step, ckey, busbw_gbps, engine, now));
            }
            AlertInput::JobGone { job } => {
                self.gpu.retain(|(j, _), _| *j != job);
                self.coll.retain(|(j, _), _| *j != job);
                self.slow_keys.remove(&job);
                self.device_ranks.retain(|(j, _)| *j != job);
                out.extend(engine.resolve_job(&job, now));
            }
            AlertInput::FleetRound { offenders } => {
                out.extend(self.fleet_round(offenders, engine, now));
            }
            AlertInput::RankMemory(o) if self.cfg.memory_headroom.enabled => {
                out.extend(self.memory(o, engine, now));
            }
            AlertInput::ClockRound {
                job,
                reference,
                nodes,
            } if self.cfg.clock_skew.enabled => {
                out.extend(self.clock_round(job, reference, nodes, engine, now));
            }
            _ => {} // a disabled rule
        }
        out
    }

    fn collective(
        &mut self,
        job: String,
        step: u64,
        ckey: String,
        busbw: f64,
        engine: &mut Engine,
        now: u64,
    ) -> Option<Transition> {
        let r = &self.cfg.collective_slowdown;
        let st = self.coll.entry((job.clone(), ckey.clone())).or_default();
        if st.baseline.len() < r.baseline_steps {
            st.baseline.push(busbw);
            return None;
        }
        st.window.push_back(busbw);
        while st.window.len() > r.window_steps {
            st.window.pop_front();
        }
        if st.window.len() < r.window_steps {
            return None;
        }
        let base = median(&st.baseline);
        let recent = median(st.window.make_contiguous());
        let slow = self.slow_keys.entry(job.clone()).or_default();
        let k = AlertKey {
            job: job.clone(),
            rule: "collective_slowdown",
            rank: -1,
        };
        if base > 0.0 && recent < r.min_fraction * base {
            slow.insert(ckey.clone());
            let summary = format!(
                "{ckey}: bus bandwidth {recent:.1} GB/s over the last {} steps (to step {step}) is {:.0}% of the job's baseline {base:.1} GB/s",
                r.window_steps,
                100.0 * recent / base
            );
            let fields = serde_json::json!({
                "collective": ckey, "busbw_gbps": recent, "baseline_busbw_gbps": base,
                "min_fraction": r.min_fraction, "last_step": step,
                "slow_collectives": slow.iter().collect::<Vec<_>>(),
            });
            let ev = Evidence {
                node: String::new(),
                summary,
                fields,
            };
            engine.fire(k, &r.severity, ev, now)
        } else {
            slow.remove(&ckey);
            if slow.is_empty() {
                engine.resolve(&k, now)
            } else {
                None
            }
        }
    }
}

#[cfg(test)]
#[path = "rules_tests.rs"]
mod tests;
