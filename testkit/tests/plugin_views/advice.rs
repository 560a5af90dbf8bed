//! `advice` on the vendored trace sets (against torch-tb-profiler 0.4.3's
//! recommendations) and on simulated jobs (a planted straggler, a balanced
//! job), and the kernel table's per-call statistics on a live job.

use serde_json::Value;

use super::common::*;
use super::{f, import_set, kineto, SETS};

/// The plugin's low-utilization rule fires for the same GPUs as
/// torch-tb-profiler 0.4.3's recommendations on every vendored set
/// ("GPU N has low utilization"), with the overview's figure; the other
/// plugin rules fire only where their figures pass the thresholds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn advice_on_the_trace_sets_follows_the_plugins_rules() {
    let stack = Stack::start_without_agent().await;
    for (i, set) in SETS.iter().enumerate() {
        let job = format!("adv{i}");
        let ranks = import_set(&stack, set, &job).await;
        let expected: Value = serde_json::from_str(
            &std::fs::read_to_string(kineto(set).join("expected-tbp.json")).unwrap(),
        )
        .unwrap();
        let advice = stack.api_get(&format!("/api/v1/jobs/{job}/advice")).await;
        let overview = stack.api_get(&format!("/api/v1/jobs/{job}/overview")).await;
        let items = advice["advice"]
            .as_array()
            .unwrap_or_else(|| panic!("{advice}"));
        let mut want: Vec<u32> = Vec::new();
        for (file, e) in expected["files"].as_object().unwrap() {
            let low = e["recommendations"]
                .as_array()
                .unwrap()
                .iter()
                .any(|r| r.as_str().unwrap_or("").contains("low utilization"));
            if low {
                want.push(ranks[file]);
            }
        }
        want.sort();
        let mut got: Vec<u32> = items
            .iter()
            .filter(|a| {
                a["rule"] == "low_gpu_utilization" && a["ranks"].as_array().unwrap().len() == 1
            })
            .map(|a| a["ranks"][0].as_u64().unwrap() as u32)
            .collect();
        got.sort();
        assert_eq!(got, want, "{set}: {advice}");
        for a in items {
            let rank = &a["ranks"][0];
            let o = overview["overview"]
                .as_array()
                .unwrap()
                .iter()
                .find(|o| &o["rank"] == rank);
            let (Some(o), true) = (o, a["ranks"].as_array().unwrap().len() == 1) else {
                continue;
            };
            let fig = f(&a["figure"]);
            match a["rule"].as_str().unwrap() {
                "low_gpu_utilization" => {
                    assert!(
                        fig < 50.0 && (fig - f(&o["gpu_util_pct"])).abs() < 1e-9,
                        "{a}"
                    )
                }
                "communication" => assert!(
                    fig > 10.0
                        && (fig - 100.0 * f(&o["communication_us"]) / f(&o["step_us"])).abs()
                            < 1e-9,
                    "{a}"
                ),
                "dataloader" => assert!(fig > 5.0, "{a}"),
                _ => {}
            }
        }
        assert_eq!(advice["not_evaluated"][0]["rule"], "memory_near_capacity");
    }
    stack.stop().await;
}

/// A simulated job: a planted straggler is named with its what-if gain, a
/// balanced job gets no straggler or input-stall item, and the kernel
/// table's statistics are per call (issue 29: they once all equalled the
/// sum).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn advice_on_simulated_jobs_and_per_call_kernel_statistics() {
    let stack = Stack::start().await;
    let mut slow = sim_config("adv-slow", 4, 30);
    slow.stragglers = vec![rankscope_cli::simulate::Straggler {
        rank: 2,
        factor: 1.5,
    }];
    let balanced = sim_config("adv-ok", 4, 30);
    for sim in [&slow, &balanced] {
        rankscope_cli::simulate::run(sim, &stack.agent_url())
            .await
            .expect("simulate");
        stack.analytics_final(&sim.job, 4 * 30).await;
        stack.all_stored(sim).await;
    }
    stack
        .api_poll("/api/v1/jobs/adv-slow/stragglers", "stragglers", |r| {
            r.iter()
                .any(|s| s["rank"] == 2 && s["expected_gain_pct"].is_number())
        })
        .await;
    let a = stack.api_get("/api/v1/jobs/adv-slow/advice").await;
    let s = a["advice"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["rule"] == "straggler")
        .unwrap_or_else(|| panic!("{a}"));
    assert_eq!(s["ranks"], serde_json::json!([2]), "{a}");
    assert!(f(&s["figure"]) > 1.0, "{a}");
    let b = stack.api_get("/api/v1/jobs/adv-ok/advice").await;
    for i in b["advice"].as_array().unwrap() {
        assert!(
            i["rule"] != "straggler" && i["rule"] != "input_stall",
            "balanced job: {i}"
        );
    }
    // exposed_communication: on both jobs each rank's item (if any) has the
    // figure of its breakdown rows (exposed transfer: exposed comm less the
    // wait for other ranks, over step time) and is over 10 %; a rank over
    // 10 % always has an item. No memory rule fires without memory data.
    for job in ["adv-slow", "adv-ok"] {
        let a = stack.api_get(&format!("/api/v1/jobs/{job}/advice")).await;
        let b = stack
            .api_get(&format!("/api/v1/jobs/{job}/breakdown?last=200"))
            .await;
        let mut per: std::collections::BTreeMap<u64, (f64, f64)> = Default::default();
        for r in b["breakdown"].as_array().unwrap() {
            let exposed = f(&r["exposed_comm_ns"]);
            let wait = f(&r["comm_wait_ns"]).min(exposed);
            let e = per.entry(r["rank"].as_u64().unwrap()).or_default();
            e.0 += exposed - wait;
            e.1 += f(&r["step_time_ns"]);
        }
        let items = a["advice"].as_array().unwrap();
        for (rank, (x, t)) in &per {
            let share = 100.0 * x / t;
            let item = items.iter().find(|i| {
                i["rule"] == "exposed_communication" && i["ranks"] == serde_json::json!([rank])
            });
            match item {
                Some(i) => assert!(
                    share > 10.0 && (f(&i["figure"]) - share).abs() < 1e-6,
                    "{job} rank {rank}: {share} vs {i}"
                ),
                None => assert!(share <= 10.0, "{job} rank {rank}: {share}% and no item"),
            }
        }
        assert!(
            items
                .iter()
                .all(|i| i["rule"] != "memory_near_capacity" && i["rule"] != "memory_imbalance"),
            "{a}"
        );
        assert!(
            a["not_evaluated"]
                .as_array()
                .unwrap()
                .iter()
                .any(|n| n["rule"] == "memory_near_capacity"),
            "{a}"
        );
    }
    // Per-call statistics of a kernel with many calls (the simulator's
    // jitter makes calls differ).
    let k = stack.api_get("/api/v1/jobs/adv-ok/kernels?rank=0").await;
    let rows = k["kernels"].as_array().unwrap();
    let many = rows
        .iter()
        .filter(|r| r["name"] != "others" && r["calls"].as_u64() > Some(10))
        .collect::<Vec<_>>();
    assert!(!many.is_empty(), "{k}");
    for r in many {
        let (sum, max, min, mean) = (
            f(&r["sum_ns"]),
            f(&r["max_ns"]),
            f(&r["min_ns"]),
            f(&r["mean_ns"]),
        );
        assert!(max < sum && min <= mean && mean <= max, "{r}");
        assert!((mean - sum / f(&r["calls"])).abs() < 1e-6 * sum, "{r}");
    }
    stack.stop().await;
}
