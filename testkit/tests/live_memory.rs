//! Live per-step device memory peaks, end to end with real components: the
//! Rust rank SDK (`Client::memory_peak`, what the Python SDK calls at each
//! step end when CUDA is in use) -> the agent -> the collector ->
//! ClickHouse -> `GET /api/v1/jobs/{job}/memory` (`live`, source `cuda`)
//! and the `memory_headroom` alert rule at its default share (0.9).
//!
//! Two 4-rank jobs on simulated 80 GiB devices: a balanced one (every rank
//! peaks at 40 GiB) fires nothing; in the other rank 2 peaks at 76 GiB
//! (95 %): the live view names it with its peak and imbalance, and the alert
//! fires for rank 2 only. No GPU is needed: the numbers are what
//! `torch.cuda.max_memory_allocated` would have returned.

use crate::common;

use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use common::Stack;
use rankscope_sdk::{Client, Options};

const RANKS: u32 = 4;
const STEPS: u64 = 5;
const GIB: u64 = 1 << 30;
const DEVICE: u64 = 80 * GIB;

/// Runs a job whose rank `r` peaks at `peak(r)` bytes every step.
fn run_job(agent: &str, job: &str, peak: impl Fn(u32) -> u64) {
    let clients: Vec<Client> = (0..RANKS)
        .map(|r| {
            let mut o = Options {
                agent: Some(agent.to_owned()),
                ..Default::default()
            };
            o.identity.job_id = Some(job.into());
            o.identity.rank = Some(r);
            o.identity.world_size = Some(RANKS);
            Client::start(o).expect("client starts")
        })
        .collect();
    let t0 = rankscope_sdk::now_ns();
    for s in 0..STEPS {
        let t = t0 + s * 10_000_000;
        for (r, c) in (0u32..).zip(&clients) {
            c.step_begin(s, Some(t)).expect("begin");
            c.step_end(s, Some(t + 9_000_000)).expect("end");
            // Reserved is what the caching allocator holds: >= allocated.
            let p = peak(r) + s * 1_048_576;
            c.memory_peak(s, 0, p, p + GIB, DEVICE).expect("peak");
        }
    }
    for c in &clients {
        assert!(c.flush(Duration::from_secs(20)), "{job}: flush");
        assert_eq!(c.stats().dropped, 0, "{job}: {:?}", c.stats());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn device_peaks_show_live_and_fire_memory_headroom_only_above_the_share() {
    let stack = Stack::start().await;
    let agent = stack.agent_url();

    let balanced = "mem-balanced";
    let a = agent.clone();
    tokio::task::spawn_blocking(move || run_job(&a, balanced, |_| 40 * GIB))
        .await
        .expect("join");
    let v = poll_live(&stack, balanced).await;
    assert!(
        v["live"]["ranks"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["source"] == "cuda"
                && r["total_bytes"] == DEVICE
                && r["headroom_pct"].as_f64().unwrap() > 45.0),
        "{v}"
    );

    let hot = "mem-hot";
    let a = agent.clone();
    tokio::task::spawn_blocking(move || {
        run_job(&a, hot, |r| if r == 2 { 76 * GIB } else { 40 * GIB })
    })
    .await
    .expect("join");
    let v = poll_live(&stack, hot).await;
    let live = &v["live"];
    let last = 76 * GIB + (STEPS - 1) * 1_048_576;
    assert_eq!(live["max_rank"], 2, "{live}");
    assert_eq!(live["max_peak_bytes"], last, "{live}");
    assert_eq!(
        live["steps"].as_array().unwrap().len(),
        (RANKS as u64 * STEPS) as usize,
        "one peak per (step, rank): {live}"
    );
    let imb = &live["imbalance"][0];
    assert_eq!(
        (imb["step"].as_u64(), imb["max_rank"].as_u64()),
        (Some(0), Some(2))
    );
    assert!(
        (imb["imbalance"].as_f64().unwrap() - 76.0 / 40.0).abs() < 1e-9,
        "{imb}"
    );
    let r2 = live["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["rank"] == 2)
        .unwrap();
    let want = 100.0 * (1.0 - last as f64 / DEVICE as f64);
    assert!(
        (r2["headroom_pct"].as_f64().unwrap() - want).abs() < 1e-9,
        "{r2}"
    );

    // The CLI: per-rank table naming rank 2, and per (step, rank) peaks.
    let bin = std::env::current_exe()
        .expect("test exe")
        .parent()
        .and_then(std::path::Path::parent)
        .expect("target dir")
        .join("rankscope");
    let collector = format!("http://{}", stack.http_addr());
    let out = std::process::Command::new(&bin)
        .args(["--collector", &collector, "memory", "--job", hot])
        .output()
        .expect("rankscope memory");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(text.contains("largest peak: rank 2"), "{text}");
    let out = std::process::Command::new(&bin)
        .args([
            "--collector",
            &collector,
            "memory",
            "--job",
            hot,
            "--steps",
            "--format",
            "csv",
        ])
        .output()
        .expect("rankscope memory --steps");
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1 + (RANKS as u64 * STEPS) as usize, "{text}");
    assert!(
        lines.contains(&format!("{},2,cuda,{last}", STEPS - 1).as_str()),
        "{text}"
    );

    // The alert: rank 2 of the hot job, nothing else.
    let alerts = stack
        .api_poll(&format!("/api/v1/alerts?job={hot}"), "alerts", |a| {
            a.iter().any(|x| x["rule"] == "memory_headroom")
        })
        .await;
    let a = alerts
        .iter()
        .find(|x| x["rule"] == "memory_headroom")
        .unwrap();
    assert_eq!(
        (a["rank"].as_i64(), a["state"].as_str()),
        (Some(2), Some("firing")),
        "{a}"
    );
    assert_eq!(a["evidence"]["source"], "cuda", "{a}");
    assert_eq!(a["evidence"]["total_bytes"], DEVICE, "{a}");
    assert_eq!(a["evidence"]["max_share"], 0.9, "{a}");
    assert!(
        a["summary"]
            .as_str()
            .unwrap()
            .contains("95.0% of the device's"),
        "{a}"
    );
    // The alert task takes its inputs in order: every observation of the
    // balanced job and of the hot job's other ranks was evaluated before
    // rank 2's firing, so one firing in all means none of them fired.
    let m = stack.collector.as_ref().unwrap().alerts().metrics();
    assert_eq!(m.inputs_dropped.load(Relaxed), 0);
    assert_eq!(m.fired.load(Relaxed), 1, "only rank 2 of {hot} fired");
    let none = stack
        .api_get(&format!("/api/v1/alerts?job={balanced}"))
        .await;
    assert_eq!(none["alerts"].as_array().map(Vec::len), Some(0), "{none}");

    // advice: the memory rules from the same peaks.
    let adv = stack.api_get(&format!("/api/v1/jobs/{hot}/advice")).await;
    let items = adv["advice"].as_array().unwrap();
    let item = |rule: &str| {
        items
            .iter()
            .find(|i| i["rule"] == rule)
            .unwrap_or_else(|| panic!("no {rule}: {adv}"))
    };
    let near = item("memory_near_capacity");
    assert_eq!(near["ranks"], serde_json::json!([2]), "{near}");
    let want = 100.0 * last as f64 / DEVICE as f64;
    assert!(
        (near["figure"].as_f64().unwrap() - want).abs() < 1e-9,
        "{near}"
    );
    let imb = item("memory_imbalance");
    assert_eq!(imb["ranks"], serde_json::json!([2]), "{imb}");
    let med = (40 * GIB + (STEPS - 1) * 1_048_576) as f64;
    assert!(
        (imb["figure"].as_f64().unwrap() - last as f64 / med).abs() < 1e-9,
        "{imb}"
    );
    let calm = stack
        .api_get(&format!("/api/v1/jobs/{balanced}/advice"))
        .await;
    assert!(
        calm["advice"]
            .as_array()
            .unwrap()
            .iter()
            .all(|i| !i["rule"].as_str().unwrap().starts_with("memory")),
        "{calm}"
    );
    assert!(
        calm["not_evaluated"].as_array().unwrap().is_empty(),
        "{calm}"
    );
    stack.stop().await;
}

/// Polls the job's memory route until every rank has every step's peak.
async fn poll_live(stack: &Stack, job: &str) -> serde_json::Value {
    let url = format!("http://{}/api/v1/jobs/{job}/memory", stack.http_addr());
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        // 404 until the job's first rows are stored.
        let v = rankscope_cli::query::get_json(&url)
            .await
            .unwrap_or(serde_json::Value::Null);
        if v["live"]["steps"].as_array().map_or(0, Vec::len) == (RANKS as u64 * STEPS) as usize {
            return v;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no live peaks of {job}: {v}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
