//! The job-wide memory answer is bounded to what the UI shows (issue 38),
//! with real ClickHouse and the real collector: a job of [`RANKS`] ranks x
//! [`POINTS`] curve samples, operator rows and per-step SDK peaks (3,000
//! each, over the 2,000 bound), written into `memory_stats` as the importer
//! and the ingest path store them. Job-wide: the curve of the 8 ranks with
//! the largest peaks, every point a stored one and every peak kept; the
//! 2,000 operator rows with the largest size increase; no (step, rank)
//! peaks but their count; each rank's peak and its step. `rank=R`: all of
//! that rank's; `full=true`: everything, as before the bound.

use crate::common;

use std::collections::BTreeSet;

use common::Stack;
use serde_json::Value;

const RANKS: u64 = 30;
const POINTS: u64 = 100;
const JOB: &str = "bigmem";

/// Rank r's curve at sample t: a ramp with one spike at t = 37 whose height
/// grows with r, so ranks 22..=29 have the largest peaks.
fn allocated(r: u64, t: u64) -> u64 {
    1_000_000 + 1_000 * t + if t == 37 { 10_000_000 * (r + 1) } else { 0 }
}

fn load(stack: &Stack) {
    let db = &stack.database;
    let q = |sql: String| stack.clickhouse.query(&sql).expect("insert");
    let cols = format!(
        "intDiv(number, {POINTS}) AS r, number % {POINTS} AS t, concat('n', toString(intDiv(r, 8))) AS nd"
    );
    let n = RANKS * POINTS;
    q(format!(
        "INSERT INTO {db}.memory_stats (job_id, rank, node, kind, device, allocated_bytes, \
         reserved_bytes, ts_ns) SELECT '{JOB}', toUInt32(r), nd, 'sample', toInt32(0), \
         toInt64(1000000 + 1000 * t + if(t = 37, 10000000 * (r + 1), 0)), toInt64(900000000), \
         1000000000 * t FROM (SELECT {cols} FROM numbers({n}))"
    ));
    q(format!(
        "INSERT INTO {db}.memory_stats (job_id, rank, node, kind, device, name, calls, \
         size_increase_bytes, self_size_increase_bytes, ts_ns) SELECT '{JOB}', toUInt32(r), nd, \
         'op', toInt32(0), concat('aten::op_', toString(t)), 1, toInt64(r * 100 + t), \
         toInt64(t), 0 FROM (SELECT {cols} FROM numbers({n}))"
    ));
    // Per-step SDK peaks: rank r peaks in step (r + 5) % 100.
    q(format!(
        "INSERT INTO {db}.memory_stats (job_id, rank, node, kind, device, allocated_bytes, \
         reserved_bytes, device_total_bytes, step, per_step, ts_ns) SELECT '{JOB}', \
         toUInt32(r), nd, 'peak', toInt32(0), toInt64(if(t = (r + 5) % 100, 5000000, 1000000)), \
         toInt64(6000000), 10000000, t, 1, 1000000000 * t FROM (SELECT {cols} FROM numbers({n}))"
    ));
    // One trace peak per rank.
    q(format!(
        "INSERT INTO {db}.memory_stats (job_id, rank, node, kind, device, allocated_bytes, \
         reserved_bytes, ts_ns) SELECT '{JOB}', toUInt32(number), 'n', 'peak', toInt32(0), \
         toInt64(2000000), toInt64(3000000), 0 FROM numbers({RANKS})"
    ));
}

fn arr(v: &Value, k: &str) -> Vec<Value> {
    v[k].as_array()
        .unwrap_or_else(|| panic!("{k}: {v}"))
        .clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_jobs_memory_answer_is_bounded_and_rank_or_full_gives_everything() {
    let stack = Stack::start_without_agent().await;
    load(&stack);
    let base = format!("/api/v1/jobs/{JOB}/memory");

    let v = stack.api_get(&format!("{base}?ops=true&curve=true")).await;
    let curve = arr(&v, "curve");
    assert_eq!(v["curve_points_total"], RANKS * POINTS, "{}", v["notes"]);
    assert!(curve.len() <= 2_000);
    let ranks: BTreeSet<u64> = curve.iter().map(|p| p["rank"].as_u64().unwrap()).collect();
    assert_eq!(ranks, (22..30).collect(), "the 8 largest peaks");
    for p in &curve {
        let (r, t) = (
            p["rank"].as_u64().unwrap(),
            p["ts_ns"].as_u64().unwrap() / 1_000_000_000,
        );
        assert_eq!(p["allocated_bytes"].as_u64(), Some(allocated(r, t)), "{p}");
    }
    for r in 22..30 {
        assert!(
            curve
                .iter()
                .any(|p| p["rank"] == r && p["allocated_bytes"] == allocated(r, 37)),
            "rank {r}'s peak kept"
        );
    }
    let ops = arr(&v, "ops");
    assert_eq!(ops.len(), 2_000);
    assert_eq!(v["ops_total"], RANKS * POINTS);
    let smallest = ops
        .iter()
        .filter_map(|o| o["size_increase_bytes"].as_u64())
        .min();
    assert_eq!(smallest, Some(1_000), "the 2,000 largest of 0..=2,999");
    let order: Vec<(u64, String)> = ops
        .iter()
        .map(|o| {
            (
                o["rank"].as_u64().unwrap(),
                o["name"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert!(
        order.windows(2).all(|w| w[0] <= w[1]),
        "stored (rank, name) order"
    );
    let live = &v["live"];
    assert_eq!(live["steps"].as_array().map(Vec::len), Some(0), "{live}");
    assert_eq!(live["steps_total"], RANKS * POINTS);
    assert_eq!(
        live["imbalance"].as_array().map(Vec::len),
        Some(POINTS as usize)
    );
    let lr = arr(live, "ranks");
    assert_eq!(lr.len(), RANKS as usize);
    for r in &lr {
        let rank = r["rank"].as_u64().unwrap();
        assert_eq!(r["peak_bytes"], 5_000_000, "{r}");
        assert_eq!(r["peak_step"], (rank + 5) % 100, "{r}");
    }
    assert_eq!(arr(&v, "peaks").len(), RANKS as usize);
    let notes = arr(&v, "notes");
    assert!(
        notes
            .iter()
            .any(|n| n.as_str().unwrap().starts_with("curve: the 8 ranks")),
        "{notes:?}"
    );

    // One rank: all of it.
    let one = stack
        .api_get(&format!("{base}?rank=3&ops=true&curve=true"))
        .await;
    let c = arr(&one, "curve");
    assert_eq!(c.len(), POINTS as usize);
    assert!(c.iter().all(|p| p["rank"] == 3));
    assert_eq!(arr(&one, "ops").len(), POINTS as usize);
    assert_eq!(
        one["live"]["steps"].as_array().map(Vec::len),
        Some(POINTS as usize)
    );

    // full=true: the unbounded answer.
    let all = stack
        .api_get(&format!("{base}?ops=true&curve=true&full=true"))
        .await;
    assert_eq!(arr(&all, "curve").len(), (RANKS * POINTS) as usize);
    assert_eq!(arr(&all, "ops").len(), (RANKS * POINTS) as usize);
    assert_eq!(
        all["live"]["steps"].as_array().map(Vec::len),
        Some((RANKS * POINTS) as usize)
    );
    stack.stop().await;
}
