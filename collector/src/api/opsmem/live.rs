//! Live memory of a job's ranks, with no trace: per (step, rank) the peak
//! of the rank's process RSS samples (the agent's sampler, CPU ranks) that
//! overlap the step's window (`step_breakdown`), or the rank SDK's per-step
//! device peaks (`memory_stats` kind `peak`, `per_step`) when it sent them;
//! per step the imbalance across ranks (max / median) and per rank the
//! headroom against its device (CUDA) or its node's memory (RSS).

use std::collections::BTreeMap;

use serde::Serialize;

use crate::store::views::{MemStat, NodeMemory, RssSample, Window};

/// A (step, rank) peak.
#[derive(Debug, Serialize, PartialEq)]
pub(in crate::api) struct StepPeak {
    step: u64,
    rank: u32,
    peak_bytes: u64,
    /// `rss` (process RSS) or `cuda` (max_memory_allocated of the step).
    source: &'static str,
}

/// One step across ranks.
#[derive(Debug, Serialize, PartialEq)]
pub(in crate::api) struct StepImbalance {
    step: u64,
    max_rank: u32,
    max_bytes: u64,
    median_bytes: f64,
    /// max / median (1 = balanced).
    imbalance: f64,
}

/// One rank over the whole job.
#[derive(Debug, Serialize, PartialEq)]
pub(in crate::api) struct RankPeak {
    pub(in crate::api) rank: u32,
    pub(in crate::api) peak_bytes: u64,
    /// The (first) step of that peak.
    peak_step: u64,
    pub(in crate::api) source: &'static str,
    /// The device's (or node's) memory; 0 = unknown.
    pub(in crate::api) total_bytes: u64,
    /// 100 x (1 - peak / total); null when the total is unknown.
    headroom_pct: Option<f64>,
}

#[derive(Debug, Serialize, PartialEq, Default)]
pub(in crate::api) struct Live {
    /// Every (step, rank) peak; in a job-wide answer only while there are
    /// at most `bounded::LIVE_STEPS` of them (else empty: ask `rank=R` or
    /// `full=true`).
    steps: Vec<StepPeak>,
    /// How many (step, rank) peaks there are (sent or not).
    steps_total: u64,
    imbalance: Vec<StepImbalance>,
    pub(in crate::api) ranks: Vec<RankPeak>,
    /// The rank with the largest peak, and that peak.
    pub(in crate::api) max_rank: Option<u32>,
    max_peak_bytes: u64,
}

fn median(mut v: Vec<u64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_unstable();
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2] as f64
    } else {
        (v[n / 2 - 1] as f64 + v[n / 2] as f64) / 2.0
    }
}

/// The live view from its inputs (`rss` sorted by (rank, ts)).
pub(in crate::api) fn live(
    windows: &[Window],
    rss: &[RssSample],
    nodes: &[NodeMemory],
    sdk_peaks: &[MemStat],
    rank: Option<u32>,
) -> Live {
    let mut peaks: BTreeMap<(u64, u32), (u64, &'static str, u64)> = BTreeMap::new();
    for p in sdk_peaks.iter().filter(|p| p.per_step != 0) {
        let e = peaks.entry((p.step, p.rank)).or_insert((0, "cuda", 0));
        e.0 = e.0.max(p.allocated_bytes.max(0) as u64);
        e.2 = e.2.max(p.device_total_bytes);
    }
    let node_total: BTreeMap<&str, u64> = nodes
        .iter()
        .map(|n| (n.node.as_str(), n.mem_total_bytes))
        .collect();
    for w in windows {
        if peaks.contains_key(&(w.step, w.rank)) {
            continue;
        }
        let start = w.step_start_ns;
        let end = start.saturating_add(w.step_time_ns).max(start + 1);
        let lo = rss.partition_point(|s| (s.rank, s.ts_ns) <= (w.rank, start));
        let mut best: Option<(u64, u64)> = None;
        for s in rss[lo..].iter().take_while(|s| s.rank == w.rank) {
            // The sample's interval (ts - period, ts] overlaps the step.
            if s.ts_ns.saturating_sub(s.period_ns) >= end {
                break;
            }
            let total = node_total.get(s.node.as_str()).copied().unwrap_or(0);
            best = Some(best.map_or((s.rss_bytes, total), |b| (b.0.max(s.rss_bytes), total)));
        }
        if let Some((b, total)) = best {
            peaks.insert((w.step, w.rank), (b, "rss", total));
        }
    }
    peaks.retain(|k, _| rank.is_none_or(|r| r == k.1));
    let mut out = Live::default();
    // rank -> (peak, source, total, step of the peak).
    let mut per_rank: BTreeMap<u32, (u64, &'static str, u64, u64)> = BTreeMap::new();
    let mut per_step: BTreeMap<u64, Vec<(u32, u64)>> = BTreeMap::new();
    for (&(step, r), &(b, source, total)) in &peaks {
        out.steps.push(StepPeak {
            step,
            rank: r,
            peak_bytes: b,
            source,
        });
        let e = per_rank.entry(r).or_insert((0, source, total, step));
        if b > e.0 {
            e.0 = b;
            e.3 = step;
        }
        e.2 = e.2.max(total);
        per_step.entry(step).or_default().push((r, b));
    }
    for (step, v) in per_step {
        let (max_rank, max_bytes) = v
            .iter()
            .copied()
            .fold((0, 0), |m, x| if x.1 > m.1 { x } else { m });
        let med = median(v.iter().map(|x| x.1).collect());
        out.imbalance.push(StepImbalance {
            step,
            max_rank,
            max_bytes,
            median_bytes: med,
            imbalance: if med > 0.0 {
                max_bytes as f64 / med
            } else {
                0.0
            },
        });
    }
    out.steps_total = out.steps.len() as u64;
    for (r, (b, source, total, peak_step)) in per_rank {
        if b > out.max_peak_bytes || out.max_rank.is_none() {
            out.max_rank = Some(r);
            out.max_peak_bytes = b;
        }
        out.ranks.push(RankPeak {
            rank: r,
            peak_bytes: b,
            peak_step,
            source,
            total_bytes: total,
            headroom_pct: (total > 0).then(|| 100.0 * (1.0 - b as f64 / total as f64)),
        });
    }
    out
}

impl Live {
    /// Leaves the (step, rank) peaks out (`steps_total` still counts them).
    pub(in crate::api) fn drop_steps(&mut self) {
        self.steps = Vec::new();
    }

    pub(in crate::api) fn steps_len(&self) -> usize {
        self.steps.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(step: u64, rank: u32, start: u64, len: u64) -> Window {
        Window {
            step,
            rank,
            step_start_ns: start,
            step_time_ns: len,
        }
    }

    fn s(rank: u32, ts: u64, rss: u64) -> RssSample {
        RssSample {
            rank,
            node: "n".into(),
            ts_ns: ts,
            period_ns: 10,
            rss_bytes: rss,
        }
    }

    #[test]
    fn each_step_takes_the_largest_overlapping_rss_sample_and_names_the_max_rank() {
        let windows = [
            w(0, 0, 0, 100),
            w(0, 1, 0, 100),
            w(1, 0, 100, 100),
            w(1, 1, 100, 100),
        ];
        let rss = [
            s(0, 50, 10),
            s(0, 150, 12),
            s(1, 50, 30),
            s(1, 95, 40),
            s(1, 150, 35),
        ];
        let nodes = [NodeMemory {
            node: "n".into(),
            mem_total_bytes: 100,
        }];
        let l = live(&windows, &rss, &nodes, &[], None);
        assert_eq!(l.max_rank, Some(1));
        assert_eq!(l.max_peak_bytes, 40);
        assert_eq!(
            l.steps.iter().map(|p| p.peak_bytes).collect::<Vec<_>>(),
            vec![10, 40, 12, 35]
        );
        assert_eq!(l.imbalance[0].imbalance, 40.0 / 25.0);
        assert_eq!(l.ranks[1].headroom_pct, Some(60.0));
        assert_eq!(l.ranks[1].peak_step, 0, "rank 1 peaked in step 0");
        assert_eq!(l.ranks[0].peak_step, 1, "rank 0 peaked in step 1");
        assert_eq!(l.steps_total, 4);
    }
}
