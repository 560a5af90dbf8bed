//! Puts every rank's events of a timeline on one clock: the reference
//! node's (`rankscope_analysis::clocks`). In: the job's clock estimate, its
//! ranks' nodes, the rows the export read. Out: the same rows with each
//! rank's times minus its node's offset (a rank whose node has no estimate
//! is left as it is), and the `rankscopeClocks` object naming what was
//! applied.

use std::collections::BTreeMap;

use rankscope_analysis::clocks::{shift, ClockEstimate};
use serde_json::{json, Value};

use crate::store::gpu_ops::RankOps;
use crate::store::timeline::{TimelineCollective, TimelineSpan};
use crate::store::traces::JobRank;
use crate::store::StepTimeRow;

/// Corrects the rows in place.
pub(super) fn correct(
    e: &ClockEstimate,
    ranks: &[JobRank],
    steps: &mut [StepTimeRow],
    ops: &mut [RankOps],
    spans: &mut [TimelineSpan],
    colls: &mut [TimelineCollective],
) {
    let mut node_of: BTreeMap<u32, &str> = ranks.iter().map(|r| (r.rank, &*r.node)).collect();
    for s in steps.iter() {
        node_of.entry(s.rank).or_insert(&s.node);
    }
    let delta: BTreeMap<u32, i64> = node_of
        .iter()
        .map(|(rank, node)| (*rank, -e.offset_of(node)))
        .filter(|(_, d)| *d != 0)
        .collect();
    if delta.is_empty() {
        return;
    }
    let d = |rank: u32| delta.get(&rank).copied().unwrap_or(0);
    for s in steps {
        let d = -e.offset_of(&s.node);
        (s.start_ns, s.end_ns) = (shift(s.start_ns, d), shift(s.end_ns, d));
    }
    for r in ops {
        let d = d(r.rank);
        for o in &mut r.ops {
            (o.start_ns, o.end_ns) = (shift(o.start_ns, d), shift(o.end_ns, d));
            if let Some((call, _)) = &mut o.launch {
                (call.start_ns, call.end_ns) = (shift(call.start_ns, d), shift(call.end_ns, d));
            }
        }
    }
    for s in spans {
        let d = d(s.rank);
        (s.start_ns, s.end_ns) = (shift(s.start_ns, d), shift(s.end_ns, d));
    }
    for c in colls {
        let d = d(c.rank);
        (c.start_ns, c.end_ns) = (shift(c.start_ns, d), shift(c.end_ns, d));
    }
}

/// What was applied: `{"reference_node", "offsets_ns": {node: offset}}`
/// (nodes with an estimate).
pub(super) fn describe(e: &ClockEstimate) -> Value {
    let offsets: serde_json::Map<String, Value> = e
        .nodes
        .iter()
        .filter_map(|n| n.offset_ns.map(|o| (n.node.clone(), json!(o))))
        .collect();
    json!({"reference_node": e.reference_node, "offsets_ns": offsets})
}
