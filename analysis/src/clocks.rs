//! Node clock offsets of one job, estimated from the ends of its blocking
//! collectives.
//!
//! In: [`NodeCall`]s, one per (collective instance, node): the instance's
//! key (process group, sequence number: the key that matches one collective
//! across ranks), the node's lowest rank in it, its ranks' latest start,
//! earliest end and median end, each read on that node's clock. Out: a
//! [`ClockEstimate`]: per node its offset against the reference node (the
//! node of the job's lowest rank), an uncertainty and the number of samples,
//! and a consistency count over the corrected instances.
//!
//! Method (../shared/SCALE-OUT.md "Node clocks"): every member of a blocking
//! collective (all-reduce, barrier, all-gather, reduce-scatter, all-to-all:
//! each member's result needs every member's input, so nobody can leave
//! before the last one arrived) leaves it within a network hop of the others,
//! while their starts differ by the wait. So for each instance that both a
//! node and the reference node took part in, the residual `end(node) -
//! end(reference)` is the node's clock offset plus a small noise. Per node:
//! - the residuals' median `m` and MAD (median absolute deviation);
//! - outliers rejected with the Hampel identifier: a residual with
//!   `|r - m| > 3 * 1.4826 * MAD` is dropped (1.4826 = 1 / Φ⁻¹(0.75) makes
//!   the MAD a consistent estimate of σ for normal noise; 3 is the
//!   conservative cut of Leys et al., "Detecting outliers: Do not use
//!   standard deviation around the mean, use absolute deviation around the
//!   median", J. Exp. Soc. Psychol. 49 (2013));
//! - the median `m'` of the kept residuals, and its standard error for
//!   normal noise, `sqrt(π/2) * σ / sqrt(n)` with `σ = 1.4826 * MAD` of the
//!   kept residuals (the sample median's asymptotic variance is
//!   `π σ² / (2 n)`): a one-sigma statistical error;
//! - the causal bounds: in each instance no member leaves before the last
//!   one arrived, so with `θ` = node clock − reference clock,
//!   `max_start(node) − min_end(ref) <= θ <= min_end(node) − max_start(ref)`
//!   whatever the noise (a recorded start is at or before the real arrival,
//!   a recorded end at or after the real exit). The interval agreed on by
//!   the most kept instances (Marzullo's algorithm, K. Marzullo, "Maintaining
//!   the time in a distributed system", PhD thesis, Stanford 1984; NTP's
//!   clock selection, RFC 5905 §11.2.1) is `[bound_lo, bound_hi]`; an
//!   instance where a node's own ranks contradict each other (`max_start >
//!   min_end` on one clock) bounds nothing;
//! - offset = the centre of the bounds, uncertainty = their half-width (a
//!   hard bound rather than a sigma); `m'` only when no instance bounds the
//!   offset (uncertainty: its standard error). Why not `m'` always: end
//!   residuals are biased where ranks leave a collective late because they
//!   wait for a CPU (measured on a 2-core host running a 4-rank gloo job,
//!   testkit/tests/clocks_torch.rs: `m'` 250 to 540 us off a 3 ms shift,
//!   the bounds' centre within 10 to 100 us); where ends agree (NCCL on
//!   GPUs, the simulator) both agree to microseconds.
//!
//! Consistency check: after correction (a node's times minus its offset),
//! every instance must satisfy `max(start) <= min(end)` over its nodes (no
//! member can leave before the last one arrived); the violations are
//! counted ([`ClockEstimate::inconsistent`]).
//!
//! Invariants: the result does not depend on input order; the reference
//! node's offset is 0; a node that shares no instance with the reference
//! node is listed with 0 samples and no offset.

use std::collections::BTreeMap;

use crate::stats::{median, median_abs_deviation};

/// MAD -> σ for normal noise, `1 / Φ⁻¹(0.75)`.
pub const MAD_TO_SIGMA: f64 = 1.4826;

/// Residuals further than this many σ (from the MAD) from the median are
/// rejected (Hampel identifier, Leys et al. 2013's conservative cut).
pub const REJECT_SIGMAS: f64 = 3.0;

/// Collective ops whose members cannot leave before every member arrived.
pub const BLOCKING_OPS: &[&str] = &[
    "all_reduce",
    "barrier",
    "all_gather",
    "reduce_scatter",
    "all_to_all",
];

/// One node's part of one collective instance, on that node's clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeCall {
    /// Process group of the instance.
    pub process_group: String,
    /// Sequence number of the instance in its group.
    pub seq: u64,
    /// Node (host) name.
    pub node: String,
    /// Lowest rank of the node in this instance.
    pub lowest_rank: u32,
    /// Latest start of the node's ranks, ns.
    pub max_start_ns: u64,
    /// Earliest end of the node's ranks, ns.
    pub min_end_ns: u64,
    /// Median end of the node's ranks, ns (the node's end of the instance).
    pub end_ns: u64,
}

/// One node's estimated offset: node clock minus reference clock.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeOffset {
    /// Node name.
    pub node: String,
    /// Offset, ns: subtract it from the node's timestamps to put them on the
    /// reference node's clock. `None`: no instance shared with the reference.
    pub offset_ns: Option<i64>,
    /// Uncertainty of the offset, ns: the half-width of the bounds, or for
    /// an offset from the median, its one-sigma standard error.
    pub uncertainty_ns: f64,
    /// The offsets consistent with the most kept instances (causal bounds),
    /// ns; `None` when no instance bounds the offset.
    pub bounds_ns: Option<(i64, i64)>,
    /// The offset is the centre of the bounds (else the median).
    pub from_bounds: bool,
    /// Median of the kept end residuals, ns (0 without samples).
    pub median_ns: i64,
    /// Its one-sigma standard error, ns.
    pub median_se_ns: f64,
    /// Residuals kept.
    pub samples: u64,
    /// Residuals rejected as outliers.
    pub rejected: u64,
}

/// Offsets of every node of a job.
#[derive(Debug, Clone, PartialEq)]
pub struct ClockEstimate {
    /// The node of the lowest rank (offset 0 by definition); empty when
    /// there was no input.
    pub reference_node: String,
    /// Every node, by name.
    pub nodes: Vec<NodeOffset>,
    /// Instances with at least two nodes (those that say anything).
    pub instances: u64,
    /// Of those, instances where `max(start) > min(end)` after correction.
    pub inconsistent: u64,
}

impl ClockEstimate {
    /// The offset of `node`, ns (0 for an unknown node or one without an
    /// estimate: its times are left as they are).
    pub fn offset_of(&self, node: &str) -> i64 {
        self.nodes
            .iter()
            .find(|n| n.node == node)
            .and_then(|n| n.offset_ns)
            .unwrap_or(0)
    }

    /// `ts_ns` of `node` on the reference clock.
    pub fn correct(&self, node: &str, ts_ns: u64) -> u64 {
        shift(ts_ns, -self.offset_of(node))
    }
}

/// `ts_ns + delta_ns`, saturating at 0 and `u64::MAX`.
pub fn shift(ts_ns: u64, delta_ns: i64) -> u64 {
    if delta_ns >= 0 {
        ts_ns.saturating_add(delta_ns.unsigned_abs())
    } else {
        ts_ns.saturating_sub(delta_ns.unsigned_abs())
    }
}

/// One instance seen from one node: its end residual against the
/// reference node and the causal bounds on the offset, ns.
#[derive(Debug, Clone, Copy)]
struct Sample {
    residual: f64,
    lo: f64,
    hi: f64,
}

/// The estimate of one node from its samples.
fn robust(node: &str, samples: &[Sample]) -> NodeOffset {
    let residuals: Vec<f64> = samples.iter().map(|s| s.residual).collect();
    let Some(m) = median(&residuals) else {
        return NodeOffset {
            node: node.to_string(),
            offset_ns: None,
            uncertainty_ns: 0.0,
            bounds_ns: None,
            from_bounds: false,
            median_ns: 0,
            median_se_ns: 0.0,
            samples: 0,
            rejected: 0,
        };
    };
    let mad = median_abs_deviation(&residuals, m).unwrap_or(0.0);
    let cut = REJECT_SIGMAS * MAD_TO_SIGMA * mad;
    let kept: Vec<Sample> = samples
        .iter()
        .copied()
        .filter(|s| (s.residual - m).abs() <= cut)
        .collect();
    let kept_r: Vec<f64> = kept.iter().map(|s| s.residual).collect();
    let rejected = (samples.len() - kept.len()) as u64;
    let med = median(&kept_r).unwrap_or(m);
    let sigma = MAD_TO_SIGMA * median_abs_deviation(&kept_r, med).unwrap_or(0.0);
    let n = kept.len().max(1) as f64;
    let se = (std::f64::consts::PI / 2.0).sqrt() * sigma / n.sqrt();
    let bounds = marzullo(&kept);
    let (offset, uncertainty, from_bounds) = match bounds {
        Some((lo, hi)) => ((lo + hi) / 2.0, (hi - lo) / 2.0, true),
        None => (med, se, false),
    };
    NodeOffset {
        node: node.to_string(),
        offset_ns: Some(offset.round() as i64),
        uncertainty_ns: uncertainty,
        bounds_ns: bounds.map(|(lo, hi)| (lo.floor() as i64, hi.ceil() as i64)),
        from_bounds,
        median_ns: med.round() as i64,
        median_se_ns: se,
        samples: kept.len() as u64,
        rejected,
    }
}

/// Marzullo's algorithm: the interval covered by the most `[lo, hi]`
/// sample intervals (closed; an empty one, `lo > hi`, covers nothing).
fn marzullo(samples: &[Sample]) -> Option<(f64, f64)> {
    // (edge, +1 start / -1 end); starts sort before ends at one value.
    let mut edges: Vec<(f64, i32)> = samples
        .iter()
        .filter(|s| s.lo <= s.hi)
        .flat_map(|s| [(s.lo, 1), (s.hi, -1)])
        .collect();
    edges.sort_by(|a, b| a.0.total_cmp(&b.0).then(b.1.cmp(&a.1)));
    let (mut count, mut best, mut out) = (0, 0, None);
    for (i, (x, d)) in edges.iter().enumerate() {
        count += d;
        if *d == 1 && count > best {
            best = count;
            // The region ends at the next edge (an end: count only falls there).
            out = edges.get(i + 1).map(|(y, _)| (*x, *y));
        }
    }
    out
}

/// Estimates every node's offset against the node of the lowest rank.
pub fn estimate(calls: &[NodeCall]) -> ClockEstimate {
    // Instance -> its nodes' calls (one per node: a repeat keeps the first
    // in a total order, so input order does not matter).
    let mut by_instance: BTreeMap<(&str, u64), BTreeMap<&str, &NodeCall>> = BTreeMap::new();
    let mut lowest: BTreeMap<&str, u32> = BTreeMap::new();
    for c in calls {
        let slot = by_instance
            .entry((c.process_group.as_str(), c.seq))
            .or_default();
        let keep = slot
            .get(c.node.as_str())
            .is_none_or(|old| key(c) < key(old));
        if keep {
            slot.insert(&c.node, c);
        }
        let low = lowest.entry(&c.node).or_insert(c.lowest_rank);
        *low = (*low).min(c.lowest_rank);
    }
    let Some(reference) = lowest
        .iter()
        .min_by_key(|(node, rank)| (**rank, **node))
        .map(|(node, _)| *node)
    else {
        return ClockEstimate {
            reference_node: String::new(),
            nodes: Vec::new(),
            instances: 0,
            inconsistent: 0,
        };
    };
    let mut samples: BTreeMap<&str, Vec<Sample>> = lowest.keys().map(|n| (*n, vec![])).collect();
    let mut instances = 0u64;
    for nodes in by_instance.values() {
        if nodes.len() < 2 {
            continue;
        }
        instances += 1;
        let Some(r) = nodes.get(reference) else {
            continue;
        };
        let d = |a: u64, b: u64| (i128::from(a) - i128::from(b)) as f64;
        for (node, c) in nodes {
            // A node whose own ranks contradict each other (one left before
            // another arrived, on one clock) bounds nothing.
            let sane = c.max_start_ns <= c.min_end_ns && r.max_start_ns <= r.min_end_ns;
            let (lo, hi) = if sane {
                (
                    d(c.max_start_ns, r.min_end_ns),
                    d(c.min_end_ns, r.max_start_ns),
                )
            } else {
                (1.0, 0.0)
            };
            samples.entry(node).or_default().push(Sample {
                residual: d(c.end_ns, r.end_ns),
                lo,
                hi,
            });
        }
    }
    let nodes: Vec<NodeOffset> = samples.iter().map(|(node, s)| robust(node, s)).collect();
    let mut est = ClockEstimate {
        reference_node: reference.to_string(),
        nodes,
        instances,
        inconsistent: 0,
    };
    est.inconsistent = by_instance
        .values()
        .filter(|nodes| nodes.len() >= 2)
        .filter(|nodes| {
            let last_start = nodes
                .values()
                .map(|c| est.correct(&c.node, c.max_start_ns))
                .max();
            let first_end = nodes
                .values()
                .map(|c| est.correct(&c.node, c.min_end_ns))
                .min();
            last_start > first_end
        })
        .count() as u64;
    est
}

fn key(c: &NodeCall) -> (u64, u64, u64, u32) {
    (c.end_ns, c.min_end_ns, c.max_start_ns, c.lowest_rank)
}

#[cfg(test)]
#[path = "clocks_tests.rs"]
mod tests;
