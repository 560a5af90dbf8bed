//! RESULTS.md section 5b: the views of round 3 at scale (issue 38, goal 7).
//!
//! In: the [`Details`] of a run. Out: markdown: the fleet route at 10,000
//! nodes x 90 days ([`crate::fleet`]), then the overview, ops, memory and
//! clocks routes of one job of 1,024 ranks x 100 steps ([`crate::views`]).

use std::fmt::Write as _;

use super::Details;
use crate::stats::{median, min_max};

/// The section, or nothing when neither the fleet nor the views section
/// ran.
pub fn section(d: &Details) -> String {
    let mut s = fleet(d);
    s.push_str(&single_job(d));
    s
}

/// The single-job views, or nothing when that section did not run.
fn single_job(d: &Details) -> String {
    let v = &d.views;
    let mut s = String::new();
    if v.routes.is_empty() {
        return s;
    }
    let _ = writeln!(
        s,
        "### The single-job views at {} ranks x {} steps\n\n\
         One job generated inside ClickHouse through the collector's schema ({} rows in {:.1} \
         s; bench/src/views.rs: per rank and step the simulator's one-layer GPU work, 28 \
         activities with their launch calls and launch figures, a dataloader span, the SDK's \
         device peak and 3 blocking collectives; per rank 40 operators, their memory rows, a \
         100-point memory curve and 100 allocation events). Each route with the query the UI \
         sends; *cold* is the first request after the load, then {} warm requests. Goal (issue \
         38, goal 7): <= 200 ms warm, <= 500 ms cold. Where the time goes: \
         bench/RESULTS-views.md.\n",
        v.ranks,
        v.steps,
        v.rows,
        v.load_s,
        v.routes.first().map_or(0, |r| r.warm_ms.len()),
    );
    let _ = writeln!(
        s,
        "| view | request | cold ms | warm median ms | warm max ms | answer KiB |\n\
         |---|---|---|---|---|---|"
    );
    for r in &v.routes {
        let _ = writeln!(
            s,
            "| {} | `{}` | {:.0} | {:.0} | {:.0} | {} |",
            r.view,
            r.path,
            r.cold_ms,
            median(&r.warm_ms),
            min_max(&r.warm_ms).1,
            r.response_bytes / 1024
        );
    }
    if v.overview_kept_ms > 0.0 {
        let _ = writeln!(
            s,
            "\nThe overview's cold request computed every rank's figures from the stored rows \
             and the collector kept them (`overview_ranks`); restarted on the same database, its \
             first overview request read those instead: **{:.0} ms** \
             (`overview_1024x100_kept_ms`, the same figures, checked).",
            v.overview_kept_ms
        );
    }
    s.push('\n');
    s
}

/// The fleet route, or nothing when its section did not run.
fn fleet(d: &Details) -> String {
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
