//! The `repeat_offender` rule: fleet rounds of [`crate::fleet::watch`] in,
//! fire / resolve requests per node out (one alert key per node, job
//! `fleet:<node>`, rank -1; at most one firing per node per `cooldown_secs`;
//! fires at `min_score`, resolves below `min_score / 2`).

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::super::engine::{AlertKey, Engine, Evidence, Transition};
use super::Rules;

/// The `repeat_offender` rule (fleet recurrence, `crate::fleet::watch`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RepeatOffenderRule {
    pub enabled: bool,
    pub severity: String,
    /// Recurrence score (-log10 of the chance of so many verdicts at the
    /// fleet's base rate) at or above which a unit offends.
    pub min_score: f64,
    /// Units seen in fewer jobs never offend (low exposure).
    pub min_jobs: u64,
    /// The fleet window evaluated, seconds back from now.
    pub window_secs: u64,
    /// How often the fleet query runs.
    pub evaluate_interval_ms: u64,
    /// After firing for a node, it does not fire again for this long.
    pub cooldown_secs: u64,
}

impl Default for RepeatOffenderRule {
    /// A score of 6 is a one-in-a-million chance per unit: at 80,000 GPUs
    /// about 0.08 false alarms per window (a Bonferroni-style margin).
    fn default() -> Self {
        Self {
            enabled: true,
            severity: "warning".into(),
            min_score: 6.0,
            min_jobs: 3,
            window_secs: 7 * 86_400,
            evaluate_interval_ms: 60_000,
            cooldown_secs: 86_400,
        }
    }
}

/// A node with a unit over the `repeat_offender` threshold.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Offender {
    pub node: String,
    /// The offending GPUs of the node (empty: the node as a whole).
    pub gpu_uuids: Vec<String>,
    /// The highest score among its offending units.
    pub score: f64,
    /// Jobs with a verdict on its offending units.
    pub jobs: Vec<String>,
    /// Verdicts and placements of its worst unit.
    pub verdicts: u64,
    pub placements: u64,
    pub cost_gpu_hours: f64,
}

impl Rules {
    pub(super) fn fleet_round(
        &mut self,
        offenders: Vec<Offender>,
        engine: &mut Engine,
        now: u64,
    ) -> Vec<Transition> {
        let r = &self.cfg.repeat_offender;
        let key = |node: &str| AlertKey {
            job: format!("fleet:{node}"),
            rule: "repeat_offender",
            rank: -1,
        };
        let mut out = Vec::new();
        let now_offending: BTreeSet<String> = if r.enabled {
            offenders.iter().map(|o| o.node.clone()).collect()
        } else {
            BTreeSet::new()
        };
        for node in self.offending.difference(&now_offending) {
            out.extend(engine.resolve(&key(node), now));
        }
        self.offending = now_offending;
        if !r.enabled {
            return out;
        }
        let cooldown_ns = r.cooldown_secs.saturating_mul(1_000_000_000);
        for o in offenders {
            let k = key(&o.node);
            let recent = self
                .offender_fired
                .get(&o.node)
                .is_some_and(|&t| now < t.saturating_add(cooldown_ns));
            let active = engine.is_active(&k);
            // Hysteresis: an active alert holds down to the clear level
            // (`min_score / 2`, the lowest score a round names), so a job
            // that starts on the node before its verdict arrives does not
            // resolve it; a new one needs `min_score`.
            if !active && (recent || o.score < r.min_score) {
                continue;
            }
            let what = if o.gpu_uuids.is_empty() {
                format!("node {}", o.node)
            } else {
                format!("GPU {} on node {}", o.gpu_uuids.join(", "), o.node)
            };
            let summary = format!(
                "{what} keeps slowing jobs down: straggler verdicts in {} of {} placements (score {:.1}: a chance of 10^-{:.1} at the fleet's rate), ~{:.2} GPU-hours lost; jobs: {}",
                o.verdicts,
                o.placements,
                o.score,
                o.score,
                o.cost_gpu_hours,
                o.jobs.join(", ")
            );
            let fields = serde_json::json!({
                "gpu_uuids": o.gpu_uuids, "score": o.score, "jobs": o.jobs,
                "verdicts": o.verdicts, "placements": o.placements,
                "cost_gpu_hours": o.cost_gpu_hours, "min_score": r.min_score,
                "window_secs": r.window_secs,
            });
            let ev = Evidence {
                node: o.node.clone(),
                summary,
                fields,
            };
            if let Some(t) = engine.fire(k, &r.severity, ev, now) {
                self.offender_fired.insert(o.node, now);
                out.push(t);
            }
        }
        out
    }
}
