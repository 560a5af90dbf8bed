//! Node clocks (issue 36 item 4): a simulated job with one node's clock
//! shifted (`rankscope simulate --node-clock-offset`) is estimated by
//! `GET /api/v1/jobs/{job}/clocks` and `rankscope clocks`, and the timeline
//! export puts every node's end of one all-reduce on one clock. The real
//! 2-node torch job under libfaketime is `clocks_torch.rs`.

use crate::common;

use std::collections::BTreeMap;
use std::process::Command;

use common::*;
use rankscope_cli::simulate::SimConfig;
use serde_json::Value;

fn cli(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(rankscope_testkit::bin_path("rankscope"))
        .args(args)
        .env_remove("RANKSCOPE_AGENT")
        .output()
        .expect("rankscope runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Each call's end of collectives `ops` on the timeline, µs: (pg, seq) ->
/// rank -> end.
pub fn collective_ends(doc: &Value, ops: &[&str]) -> BTreeMap<(String, u64), BTreeMap<u64, f64>> {
    let mut ends: BTreeMap<(String, u64), BTreeMap<u64, f64>> = BTreeMap::new();
    for e in doc["traceEvents"].as_array().expect("traceEvents") {
        if e["ph"] == "X" && e["cat"] == "collective" && ops.iter().any(|op| e["args"]["op"] == *op)
        {
            let key = (
                e["args"]["process_group"].as_str().unwrap().to_string(),
                e["args"]["seq"].as_u64().unwrap(),
            );
            let end = e["ts"].as_f64().unwrap() + e["dur"].as_f64().unwrap();
            ends.entry(key)
                .or_default()
                .insert(e["pid"].as_u64().unwrap(), end);
        }
    }
    ends
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_simulated_node_shifted_by_3ms_is_estimated_within_50us() {
    // The clock_skew rule on a fast tick, over jobs of any age (the
    // simulated job's times are from 2023).
    let stack = Stack::start_with(|c| {
        let r = &mut c.alerts.rules.clock_skew;
        r.evaluate_interval_ms = 100;
        r.window_secs = 20 * 365 * 86_400;
    })
    .await;
    let job = "clock-sim";
    let start_ns = 1_700_000_000_000_000_000u64;
    let (ok, out, err) = cli(&[
        "simulate",
        "--agent",
        &stack.agent_url(),
        "--job",
        job,
        "--ranks",
        "24",
        "--ranks-per-node",
        "8",
        "--steps",
        "6",
        "--layers",
        "2",
        "--seed",
        "5",
        "--start-ns",
        &start_ns.to_string(),
        "--node-clock-offset",
        "2:+3ms",
    ]);
    assert!(ok, "simulate failed:\n{out}\n{err}");
    let sim = SimConfig {
        ranks: 24,
        ranks_per_node: 8,
        steps: 6,
        layers: 2,
        seed: 5,
        start_ns,
        node_clock_offsets: vec!["2:+3ms".parse().unwrap()],
        ..common::sim_config(job, 24, 6)
    };
    stack.all_stored(&sim).await;

    let v = stack.api_get(&format!("/api/v1/jobs/{job}/clocks")).await;
    eprintln!("clocks: {v}");
    assert_eq!(v["reference_node"], "sim-node-0", "{v}");
    let nodes = v["nodes"].as_array().expect("nodes");
    assert_eq!(nodes.len(), 3, "{v}");
    let node = |name: &str| nodes.iter().find(|n| n["node"] == name).expect(name);
    let n2 = node("sim-node-2");
    let off = n2["offset_us"].as_f64().expect("an offset");
    assert!((off - 3000.0).abs() <= 50.0, "sim-node-2: {n2}");
    // 6 steps x (2 * 2 + 1) all-reduces, one residual each.
    assert_eq!(n2["samples"], 30, "{n2}");
    for other in ["sim-node-0", "sim-node-1"] {
        let o = node(other)["offset_us"].as_f64().unwrap();
        assert!(o.abs() <= 50.0, "{other}: {o}");
    }
    assert_eq!(v["inconsistent"], 0, "{v}");

    // The CLI: table, JSON, CSV.
    let url = format!("http://{}", stack.http_addr());
    let (ok, table, err) = cli(&["clocks", "--collector", &url, "--job", job]);
    assert!(ok, "{err}");
    assert!(
        table.contains("reference node sim-node-0") && table.contains("sim-node-2"),
        "{table}"
    );
    let (ok, json, _) = cli(&[
        "clocks",
        "--collector",
        &url,
        "--job",
        job,
        "--format",
        "json",
    ]);
    assert!(ok);
    let json: Value = serde_json::from_str(&json).expect("json");
    assert_eq!(json["nodes"], v["nodes"]);
    let (ok, csv, _) = cli(&[
        "clocks",
        "--collector",
        &url,
        "--job",
        job,
        "--format",
        "csv",
    ]);
    assert!(ok);
    let row = csv
        .lines()
        .find(|l| l.starts_with("sim-node-2,"))
        .expect(&csv);
    let off: f64 = row.split(',').nth(1).unwrap().parse().expect("offset_us");
    assert!((off - 3000.0).abs() <= 50.0, "{csv}");

    // Unknown job: 404 from the route, a non-zero exit naming it from the CLI.
    let (ok, _, err) = cli(&["clocks", "--collector", &url, "--job", "no-such-job"]);
    assert!(
        !ok && err.contains("no-such-job") && err.contains("not found"),
        "{err}"
    );

    // Timeline: corrected, every rank leaves an all-reduce at the same time
    // (the simulator's ends of a call are equal); raw, node 2 is 3 ms late.
    let t = stack
        .api_get(&format!(
            "/api/v1/jobs/{job}/timeline?from_step=2&to_step=3"
        ))
        .await;
    let applied = t["rankscopeClocks"]["offsets_ns"]["sim-node-2"]
        .as_i64()
        .expect("applied");
    assert!(
        (applied - 3_000_000).abs() <= 50_000,
        "{}",
        t["rankscopeClocks"]
    );
    let blocking = rankscope_analysis::clocks::BLOCKING_OPS;
    let ends = collective_ends(&t, blocking);
    // The window is read on each node's own clock, so a call at its edge may
    // be there for some ranks only: compare the calls of all 24.
    let whole: Vec<_> = ends.iter().filter(|(_, r)| r.len() == 24).collect();
    assert!(
        whole.len() >= 10,
        "two steps of 5 blocking collectives: {}",
        whole.len()
    );
    for (call, by_rank) in whole {
        let (lo, hi) = by_rank
            .values()
            .fold((f64::MAX, f64::MIN), |(a, b), e| (a.min(*e), b.max(*e)));
        assert!(hi - lo <= 50.0, "{call:?}: ends spread {} us", hi - lo);
    }
    let raw = stack
        .api_get(&format!(
            "/api/v1/jobs/{job}/timeline?from_step=2&to_step=3&raw_clocks=true"
        ))
        .await;
    assert!(raw.get("rankscopeClocks").is_none());
    for by_rank in collective_ends(&raw, blocking)
        .values()
        .filter(|r| r.len() == 24)
    {
        let d = by_rank[&16] - by_rank[&0];
        assert!(
            (d - 3000.0).abs() < 1e-3,
            "raw: node 2 is 3 ms late, got {d} us"
        );
    }

    // The clock_skew alert: node 2 is 3 ms off, over the 1 ms default.
    let alerts = stack
        .api_poll(&format!("/api/v1/alerts?job={job}"), "alerts", |rows| {
            rows.iter().any(|r| r["rule"] == "clock_skew")
        })
        .await;
    let a = alerts.iter().find(|r| r["rule"] == "clock_skew").unwrap();
    let text = a.to_string();
    assert!(
        text.contains("sim-node-2 +3000 us") && !text.contains("sim-node-1 "),
        "{a}"
    );
    stack.stop().await;
}
