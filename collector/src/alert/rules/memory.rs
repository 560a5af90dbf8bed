//! The `memory_headroom` rule: per-rank memory observations in, fire /
//! resolve requests per (job, rank) out.
//!
//! A [`MemoryObs`] is one peak of one rank against the memory it lives in:
//! - `cuda`: the rank SDK's per-step device peak
//!   (`torch.cuda.max_memory_allocated` of the step, reset each step)
//!   against the device's total memory (`MemoryPeak.per_step`);
//! - `rss`: for a CPU rank, the "device" is the host: the agent's per-rank
//!   process RSS sample against the node's total memory (`HostSample`).
//!
//! Fires when `peak / total > max_share` (default 0.9: the TensorBoard
//! plugin 0.4.3's memory recommendation fires above 90 % of the device,
//! ../shared/SEED-VIEWS.md §1.5), resolves at the first later observation
//! of the same source at or below it. Once a rank has sent a device peak its
//! RSS samples are ignored (its device is the GPU, not the host). State:
//! the set of such ranks, dropped with the job.

use serde::{Deserialize, Serialize};

use super::super::engine::{AlertKey, Engine, Evidence, Transition};
use super::Rules;

/// The `memory_headroom` rule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MemoryHeadroomRule {
    pub enabled: bool,
    pub severity: String,
    /// Share of the device's (or, for CPU ranks, the host's) memory above
    /// which a rank's peak fires, in (0, 1].
    pub max_share: f64,
}

impl Default for MemoryHeadroomRule {
    fn default() -> Self {
        Self {
            enabled: true,
            severity: "warning".into(),
            max_share: 0.9,
        }
    }
}

/// Where a [`MemoryObs`] comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemorySource {
    /// The rank SDK's per-step CUDA peak against the device's memory.
    Cuda,
    /// The rank process's RSS against its host's memory (CPU ranks).
    Rss,
}

impl MemorySource {
    /// `cuda` / `rss`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Cuda => "cuda",
            Self::Rss => "rss",
        }
    }
}

/// One memory peak of a rank.
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryObs {
    pub job: String,
    pub rank: u32,
    pub node: String,
    /// The step of a per-step device peak; `None` for an RSS sample.
    pub step: Option<u64>,
    /// The CUDA device index; -1 for RSS.
    pub device: i32,
    pub peak_bytes: u64,
    /// The device's (or host's) memory; 0 = unknown, never fires.
    pub total_bytes: u64,
    pub source: MemorySource,
}

impl Rules {
    /// Applies one memory observation.
    pub(super) fn memory(
        &mut self,
        o: MemoryObs,
        engine: &mut Engine,
        now: u64,
    ) -> Option<Transition> {
        let r = &self.cfg.memory_headroom;
        if o.total_bytes == 0 {
            return None;
        }
        match o.source {
            MemorySource::Cuda => {
                self.device_ranks.insert((o.job.clone(), o.rank));
            }
            MemorySource::Rss if self.device_ranks.contains(&(o.job.clone(), o.rank)) => {
                return None;
            }
            MemorySource::Rss => {}
        }
        let share = o.peak_bytes as f64 / o.total_bytes as f64;
        let key = AlertKey {
            job: o.job.clone(),
            rule: "memory_headroom",
            rank: i64::from(o.rank),
        };
        if share <= r.max_share {
            return engine.resolve(&key, now);
        }
        let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
        let (what, of) = match o.source {
            MemorySource::Cuda => (
                format!("peak allocated memory of GPU {}", o.device),
                "the device's",
            ),
            MemorySource::Rss => ("process RSS".to_owned(), "the host's"),
        };
        let at = o.step.map(|s| format!(" in step {s}")).unwrap_or_default();
        let summary = format!(
            "rank {} on {}: {what}{at} is {:.2} GiB, {:.1}% of {of} {:.2} GiB (limit {:.0}%)",
            o.rank,
            o.node,
            gib(o.peak_bytes),
            100.0 * share,
            gib(o.total_bytes),
            100.0 * r.max_share
        );
        let fields = serde_json::json!({
            "source": o.source.as_str(), "step": o.step, "device": o.device,
            "peak_bytes": o.peak_bytes, "total_bytes": o.total_bytes,
            "share": share, "max_share": r.max_share,
        });
        let ev = Evidence {
            node: o.node,
            summary,
            fields,
        };
        engine.fire(key, &r.severity, ev, now)
    }
}

#[cfg(test)]
mod tests {
    use super::super::{AlertInput, RulesConfig};
    use super::*;

    fn obs(rank: u32, peak: u64, source: MemorySource) -> AlertInput {
        AlertInput::RankMemory(MemoryObs {
            job: "j".into(),
            rank,
            node: "n".into(),
            step: (source == MemorySource::Cuda).then_some(4),
            device: if source == MemorySource::Cuda { 0 } else { -1 },
            peak_bytes: peak,
            total_bytes: 100,
            source,
        })
    }

    #[test]
    fn fires_above_the_share_and_resolves_at_or_below() {
        let mut rules = Rules::new(RulesConfig::default());
        let mut e = Engine::new(0, 0);
        assert!(rules
            .apply(obs(1, 90, MemorySource::Cuda), &mut e, 1)
            .is_empty());
        let t = rules.apply(obs(1, 91, MemorySource::Cuda), &mut e, 2);
        let a = t[0].alert();
        assert_eq!((a.key.rule, a.key.rank), ("memory_headroom", 1));
        assert_eq!(a.evidence.fields["share"], 0.91);
        assert!(
            a.evidence.summary.contains("GPU 0 in step 4")
                && a.evidence.summary.contains("91.0% of the device's"),
            "{}",
            a.evidence.summary
        );
        // A device rank's RSS does not resolve its device alert.
        assert!(rules
            .apply(obs(1, 10, MemorySource::Rss), &mut e, 3)
            .is_empty());
        let t = rules.apply(obs(1, 50, MemorySource::Cuda), &mut e, 4);
        assert!(matches!(t[0], Transition::Resolved(_)));
    }

    #[test]
    fn a_cpu_rank_is_measured_against_its_host_and_the_share_is_configurable() {
        let mut cfg = RulesConfig::default();
        cfg.memory_headroom.max_share = 0.2;
        let mut rules = Rules::new(cfg);
        let mut e = Engine::new(0, 0);
        let t = rules.apply(obs(2, 30, MemorySource::Rss), &mut e, 1);
        assert!(
            t[0].alert().evidence.summary.contains("process RSS is")
                && t[0].alert().evidence.summary.contains("of the host's"),
            "{}",
            t[0].alert().evidence.summary
        );
        assert!(rules
            .apply(obs(3, 20, MemorySource::Rss), &mut e, 1)
            .is_empty());
        // Unknown totals never fire.
        let mut unknown = obs(4, 99, MemorySource::Rss);
        if let AlertInput::RankMemory(o) = &mut unknown {
            o.total_bytes = 0;
        }
        assert!(rules.apply(unknown, &mut e, 1).is_empty());
    }

    #[test]
    fn a_share_outside_0_1_is_refused() {
        for bad in [0.0, 1.5, f64::NAN] {
            let mut cfg = RulesConfig::default();
            cfg.memory_headroom.max_share = bad;
            let err = cfg.validate().unwrap_err();
            assert!(err.contains("memory_headroom.max_share"), "{err}");
        }
    }
}
