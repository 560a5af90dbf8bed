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
//! - offset = median of the kept residuals;
//! - uncertainty = the standard error of that median for normal noise,
//!   `sqrt(π/2) * σ / sqrt(n)` with `σ = 1.4826 * MAD` of the kept residuals
//!   (the sample median's asymptotic variance is `π σ² / (2 n)`). It is a
//!   one-sigma statistical error: a systematic bias (one node always leaving
//!   later, e.g. the last hop of a ring) is not in it.
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
    /// One-sigma standard error of the offset, ns.
    pub uncertainty_ns: f64,
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

/// Robust offset of one node from its residuals (ns).
fn robust(residuals: &[f64]) -> (f64, f64, u64, u64) {
    let Some(m) = median(residuals) else {
        return (0.0, 0.0, 0, 0);
    };
    let mad = median_abs_deviation(residuals, m).unwrap_or(0.0);
    let cut = REJECT_SIGMAS * MAD_TO_SIGMA * mad;
    let kept: Vec<f64> = residuals
        .iter()
        .copied()
        .filter(|r| (r - m).abs() <= cut)
        .collect();
    let rejected = (residuals.len() - kept.len()) as u64;
    let offset = median(&kept).unwrap_or(m);
    let sigma = MAD_TO_SIGMA * median_abs_deviation(&kept, offset).unwrap_or(0.0);
    let n = kept.len().max(1) as f64;
    let se = (std::f64::consts::PI / 2.0).sqrt() * sigma / n.sqrt();
    (offset, se, kept.len() as u64, rejected)
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
    let mut residuals: BTreeMap<&str, Vec<f64>> = lowest.keys().map(|n| (*n, vec![])).collect();
    let mut instances = 0u64;
    for nodes in by_instance.values() {
        if nodes.len() < 2 {
            continue;
        }
        instances += 1;
        let Some(r) = nodes.get(reference) else {
            continue;
        };
        for (node, c) in nodes {
            residuals
                .entry(node)
                .or_default()
                .push((i128::from(c.end_ns) - i128::from(r.end_ns)) as f64);
        }
    }
    let nodes: Vec<NodeOffset> = residuals
        .iter()
        .map(|(node, res)| {
            let (offset, se, samples, rejected) = robust(res);
            NodeOffset {
                node: (*node).to_string(),
                offset_ns: (samples > 0).then(|| offset.round() as i64),
                uncertainty_ns: se,
                samples,
                rejected,
            }
        })
        .collect();
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
