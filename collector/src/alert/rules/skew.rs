//! The `clock_skew` rule: per job, fires when a node's clock is estimated
//! further than `max_offset_us` from the job's reference node (the node of
//! its lowest rank), from at least `min_samples` collectives; resolves when
//! no node is over any more. One alert key per job (rank -1), naming every
//! skewed node. Input: the job's estimate on the tick of
//! [`crate::alert::clock_watch`] (`AlertInput::ClockRound`).
//!
//! Why it matters: the timeline export and trace alignment correct by the
//! estimate, but every other cross-node comparison of raw times (a user's
//! own trace tools, logs) is off by the skew; more than a millisecond on a
//! LAN means NTP is not doing its job on that node.

use serde::{Deserialize, Serialize};

use super::super::engine::{AlertKey, Engine, Evidence, Transition};
use super::Rules;

/// The `clock_skew` rule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClockSkewRule {
    pub enabled: bool,
    pub severity: String,
    /// Fires when |offset| of a node is above this, microseconds.
    pub max_offset_us: f64,
    /// A node's estimate counts from this many collectives (residuals kept).
    pub min_samples: u64,
    /// Jobs with a step marker in this many seconds back are evaluated.
    pub window_secs: u64,
    /// How often the estimates are computed.
    pub evaluate_interval_ms: u64,
}

impl Default for ClockSkewRule {
    /// 1 ms: NTP on a LAN keeps nodes within tens of microseconds to about
    /// a millisecond (../shared/SCALE-OUT.md "Node clocks").
    fn default() -> Self {
        Self {
            enabled: true,
            severity: "warning".into(),
            max_offset_us: 1000.0,
            min_samples: 20,
            window_secs: 600,
            evaluate_interval_ms: 60_000,
        }
    }
}

impl ClockSkewRule {
    /// Checks thresholds.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.max_offset_us.is_finite() && self.max_offset_us > 0.0)
            || self.min_samples == 0
            || self.window_secs == 0
            || self.evaluate_interval_ms < 10
        {
            return Err("alerts.rules.clock_skew: max_offset_us must be a number > 0, min_samples and window_secs >= 1, evaluate_interval_ms >= 10".into());
        }
        Ok(())
    }
}

/// One node's estimate, as the rule sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeClock {
    pub node: String,
    pub offset_ns: i64,
    pub uncertainty_ns: f64,
    pub samples: u64,
}

impl Rules {
    pub(super) fn clock_round(
        &mut self,
        job: String,
        reference: String,
        nodes: Vec<NodeClock>,
        engine: &mut Engine,
        now: u64,
    ) -> Option<Transition> {
        let r = &self.cfg.clock_skew;
        let k = AlertKey {
            job: job.clone(),
            rule: "clock_skew",
            rank: -1,
        };
        let limit_ns = r.max_offset_us * 1000.0;
        let over: Vec<&NodeClock> = nodes
            .iter()
            .filter(|n| n.samples >= r.min_samples && (n.offset_ns as f64).abs() > limit_ns)
            .collect();
        let Some(worst) = over.iter().max_by_key(|n| n.offset_ns.unsigned_abs()) else {
            return engine.resolve(&k, now);
        };
        let list = over
            .iter()
            .map(|n| {
                format!(
                    "{} {:+.0} us (+- {:.0})",
                    n.node,
                    n.offset_ns as f64 / 1e3,
                    n.uncertainty_ns / 1e3
                )
            })
            .collect::<Vec<_>>()
            .join(", ");
        let summary = format!(
            "clock skew in job {job}: {} node(s) more than {:.0} us off the reference node {reference}: {list}",
            over.len(),
            r.max_offset_us
        );
        let fields = serde_json::json!({
            "reference_node": reference,
            "max_offset_us": r.max_offset_us,
            "nodes": over.iter().map(|n| serde_json::json!({
                "node": n.node, "offset_us": n.offset_ns as f64 / 1e3,
                "uncertainty_us": n.uncertainty_ns / 1e3, "samples": n.samples,
            })).collect::<Vec<_>>(),
        });
        let ev = Evidence {
            node: worst.node.clone(),
            summary,
            fields,
        };
        engine.fire(k, &r.severity, ev, now)
    }
}
