//! RESULTS.md section 5b: the views of round 3 at scale (issue 38, goal 7).
//!
//! In: the [`Details`] of a run. Out: markdown. Today the fleet route only:
//! the overview, ops and memory views (1,024 ranks x 100 steps) and the
//! clocks view have no generator yet (TODO(issue 38): a `views` section that
//! loads `operator_stats`, `memory_stats` and the kernels of 1,024 ranks x
//! 100 steps; clocks once its view lands).

use std::fmt::Write as _;

use super::Details;
use crate::stats::{median, min_max};

/// The section, or nothing when the fleet section did not run.
pub fn section(d: &Details) -> String {
    let f = &d.fleet;
    let mut s = String::new();
    if f.node_ms.is_empty() {
        return s;
    }
    let _ = writeln!(
        s,
        "## 5b. Views at scale: the fleet route\n\n\
         `GET /api/v1/fleet?since={}d` over a generated history of {} nodes x {} days (8 GPUs \
         per node, jobs of 64 ranks lasting 3 days: {} rank placements, each stored twice in \
         `ranks`; {} verdicts in three versions each, evidence, hang suspects), written in {:.1} \
         s through the collector's schema (the `ranks` INSERTs feed the rollup of migration \
         0014). Round trip on a kept-alive connection; *cold* is the first request after the \
         load, then {} warm requests. The answer holds every unit ({} rows by node, {} KiB).\n",
        f.days,
        f.nodes,
        f.days,
        f.placements,
        f.verdicts,
        f.load_s,
        f.node_ms.len(),
        f.node_rows,
        f.node_response_bytes / 1024
    );
    let _ = writeln!(
        s,
        "| by | rows | cold ms | warm median ms | warm max ms |\n|---|---|---|---|---|"
    );
    for (by, rows, cold, warm) in [
        ("node", f.node_rows, f.node_cold_ms, &f.node_ms),
        ("gpu", f.gpu_rows, f.gpu_cold_ms, &f.gpu_ms),
    ] {
        let _ = writeln!(
            s,
            "| {by} | {rows} | {cold:.0} | {:.0} | {:.0} |",
            median(warm),
            min_max(warm).1
        );
    }
    s.push('\n');
    s
}
