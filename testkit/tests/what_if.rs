//! What-if gain of a straggler (`expected_gain_pct`) against the
//! simulator's truth: the same seed simulated with and without the slow
//! rank gives the step time the job would have without it.

use crate::common;

use common::*;
use rankscope_cli::simulate::{plan, SimConfig, Straggler};

/// Mean over steps of the step's wall time (first begin to last end).
fn mean_step_ns(cfg: &SimConfig) -> f64 {
    let mut by_step: std::collections::BTreeMap<u64, (u64, u64)> = Default::default();
    for (step, _, start, end) in plan(cfg).step_times() {
        let e = by_step.entry(step).or_insert((u64::MAX, 0));
        e.0 = e.0.min(start);
        e.1 = e.1.max(end);
    }
    by_step.values().map(|(a, b)| (b - a) as f64).sum::<f64>() / by_step.len() as f64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_expected_gain_of_a_planted_straggler_matches_the_simulators_truth() {
    let mut stack = Stack::start().await;
    // (job, rank 5's verdict as served live: first step, gain).
    let mut served = Vec::new();
    for (job, factor) in [("what-if-13", 1.3), ("what-if-16", 1.6)] {
        let mut sim = sim_config(job, 8, 30);
        sim.stragglers = vec![Straggler { rank: 5, factor }];
        let mut healthy = sim.clone();
        healthy.stragglers.clear();
        let (with, without) = (mean_step_ns(&sim), mean_step_ns(&healthy));
        let truth = 100.0 * (with - without) / with;
        assert!(truth > 1.0, "the plant costs something: {truth}");
        rankscope_cli::simulate::run(&sim, &stack.agent_url())
            .await
            .expect("simulate");
        // Every (step, rank) breakdown final before the route and the stored
        // rows are compared: both then read the same rows (stop 21's CI run
        // compared a route answer with rows stored after it).
        stack.analytics_final(job, 8 * 30).await;
        // The goodput and diff views below read raw events too.
        stack.all_stored(&sim).await;
        let rows = stack
            .api_poll(
                &format!("/api/v1/jobs/{job}/stragglers"),
                "stragglers",
                |r| {
                    // The verdict over (nearly) the whole run.
                    r.iter().any(|s| {
                        s["expected_gain_pct"].is_number() && s["last_step"].as_u64() >= Some(25)
                    })
                },
            )
            .await;
        let s = rows
            .iter()
            .find(|s| s["rank"] == 5)
            .expect("rank 5 flagged");
        let got = s["expected_gain_pct"].as_f64().unwrap();
        // The gain the stream summed as the verdict's versions came
        // (stream::recent) is the definition's figure over the verdict's
        // steps of the stored rows (after the restart below: the route's
        // per-step aggregates in SQL, step_peers.sql).
        let (first, last) = (
            s["first_step"].as_u64().unwrap(),
            s["last_step"].as_u64().unwrap(),
        );
        let stored: Vec<rankscope_analysis::RankStepWait> = stack
            .api_get(&format!("/api/v1/jobs/{job}/breakdown?last=1000"))
            .await["breakdown"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| {
                let n = |k: &str| b[k].as_u64().unwrap();
                rankscope_analysis::RankStepWait {
                    step: n("step"),
                    rank: n("rank") as u32,
                    step_time_ns: n("step_time_ns"),
                    work_ns: n("compute_ns") + n("dataloader_ns"),
                    wait_ns: n("comm_wait_ns").min(n("comm_ns")),
                }
            })
            .filter(|r| (first..=last).contains(&r.step))
            .collect();
        let defined = rankscope_analysis::expected_gain_pct(&stored, 5).unwrap();
        assert!(
            (got - defined).abs() < 1e-9,
            "{job}: the route says {got}, the definition over the stored rows {defined}"
        );
        assert!(
            (got - truth).abs() <= 0.1 * truth,
            "{job}: expected_gain_pct {got:.2} vs the simulator's {truth:.2}"
        );
        eprintln!("{job}: expected_gain_pct {got:.2}%, simulator truth {truth:.2}%");
        served.push((job, first, got));
        // The alert says it too.
        let alerts = stack
            .api_poll(&format!("/api/v1/alerts?job={job}"), "alerts", |r| {
                r.iter().any(|a| a["rule"] == "straggler")
            })
            .await;
        let a = alerts.iter().find(|a| a["rule"] == "straggler").unwrap();
        let text = a["summary"].as_str().unwrap_or_default();
        let said: f64 = text
            .split("job ~")
            .nth(1)
            .and_then(|t| t.split('%').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no gain in the alert: {text}"));
        assert!(text.contains("faster without rank 5"), "{text}");
        // Rounded to a whole percent, over the first steps of the verdict.
        assert!((said - truth).abs() <= 0.1 * truth + 0.5, "{text}");
    }
    // The terminal view names the rank the others wait for (not a random
    // "slowest" step time: every rank's step takes as long).
    let exe = std::env::current_exe().unwrap();
    let bin = exe
        .parent()
        .and_then(std::path::Path::parent)
        .unwrap()
        .join("rankscope");
    let out = std::process::Command::new(bin)
        .args(["--collector", &format!("http://{}", stack.http_addr())])
        .args(["steps", "--job", "what-if-13", "--last", "10"])
        .output()
        .expect("rankscope steps");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("the others waited for r5 in 10 of 10 steps"),
        "{text}"
    );
    // Goodput: the parts add up to the wall time; the straggler's share is there.
    let g = stack
        .api_get("/api/v1/jobs/what-if-13/goodput?flops_per_step=1e12")
        .await;
    let wall = g["wall_ns"].as_f64().unwrap();
    let parts = g["parts"].as_array().unwrap();
    let sum: f64 = parts.iter().map(|p| p["ns"].as_f64().unwrap()).sum();
    assert!(wall > 0.0 && (sum - wall).abs() <= 1.0, "{g}");
    let part = |name: &str| {
        parts
            .iter()
            .find(|p| p["part"] == name)
            .map(|p| p["pct"].as_f64().unwrap())
            .unwrap_or_else(|| panic!("no {name}: {g}"))
    };
    assert!(part("compute") > 30.0, "{g}");
    assert!(
        part("straggler_wait") > 5.0,
        "the straggler's cost shows: {g}"
    );
    assert!(
        g["mfu_pct"].is_null() && g["mfu_note"].is_string(),
        "no GPU model: {g}"
    );
    // diff: the straggler's slowed compute kernels come first.
    let d = stack
        .api_get("/api/v1/jobs/what-if-13/diff?rank=5&vs_rank=0&from_step=5&to_step=25")
        .await;
    let rows = d["rows"].as_array().unwrap();
    assert!(rows.len() > 3, "{d}");
    for r in &rows[..3] {
        assert_eq!(r["category"], "computation", "{r}");
        assert!(r["diff_ns_per_step"].as_f64().unwrap() > 0.0, "{r}");
        assert_eq!(r["only_on"], "", "{r}");
    }
    assert_eq!(
        (d["steps_a"].as_u64(), d["steps_b"].as_u64()),
        (Some(21), Some(21))
    );
    // Across jobs: rank 5 at 1.6x against rank 5 at 1.3x.
    let d = stack
        .api_get("/api/v1/jobs/what-if-16/diff?rank=5&vs_job=what-if-13")
        .await;
    let first = &d["rows"][0];
    assert!(first["diff_ns_per_step"].as_f64().unwrap() > 0.0, "{d}");
    // Bad input.
    let url = format!("http://{}", stack.http_addr());
    for (path, want) in [
        (
            "/api/v1/jobs/what-if-13/diff?rank=5&vs_rank=0&from_step=9&to_step=3",
            "empty step range",
        ),
        (
            "/api/v1/jobs/what-if-13/diff?rank=42&vs_rank=0",
            "rank 42 of job \"what-if-13\" has no complete step",
        ),
        (
            "/api/v1/jobs/what-if-13/diff?rank=5",
            "give vs_rank, vs_job or both",
        ),
        (
            "/api/v1/jobs/nobody/diff?rank=5&vs_rank=0",
            "job \"nobody\" not found",
        ),
        (
            "/api/v1/jobs/what-if-13/goodput?flops_per_step=-1",
            "flops_per_step must be a positive number",
        ),
        ("/api/v1/jobs/nobody/goodput", "not found"),
    ] {
        let err = rankscope_cli::query::get_json::<serde_json::Value>(&format!("{url}{path}"))
            .await
            .expect_err(path);
        assert!(err.to_string().contains(want), "{path}: {err}");
    }
    // A restarted collector holds no live verdict: the gains come from the
    // ones stored with the versions (straggler_gains, migration 0017), and
    // are the same; without them (versions stored before the migration)
    // from the stored breakdowns, the same again.
    stack.restart_collector().await;
    let rank5 = |rows: &serde_json::Value, job: &str, first: u64| {
        rows["stragglers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["rank"] == 5 && s["first_step"].as_u64() == Some(first))
            .cloned()
            .unwrap_or_else(|| panic!("{job}: rank 5's verdict stored: {rows}"))
    };
    for &(job, first, live) in &served {
        let rows = stack
            .api_get(&format!("/api/v1/jobs/{job}/stragglers"))
            .await;
        let s = rank5(&rows, job, first);
        let stored = s["expected_gain_pct"].as_f64().unwrap();
        assert!(
            (stored - live).abs() < 1e-9,
            "{job}: {stored} from the stored gain, {live} from memory"
        );
        // The version served has its gain stored with it.
        let row = stack
            .clickhouse
            .query(&format!(
                "SELECT expected_gain_pct FROM {}.straggler_gains FINAL \
                 WHERE job_id = '{job}' AND rank = 5 AND first_step = {first} \
                 AND updated_ns = {} AND last_step = {}",
                stack.database, s["updated_ns"], s["last_step"]
            ))
            .unwrap();
        let row: f64 = row
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{job}: no stored gain of the version served: {row:?}"));
        assert!(
            (row - stored).abs() < 1e-9,
            "{job}: stored {row}, served {stored}"
        );
    }
    stack
        .clickhouse
        .query(&format!(
            "TRUNCATE TABLE {}.straggler_gains",
            stack.database
        ))
        .unwrap();
    for &(job, first, live) in &served {
        let rows = stack
            .api_get(&format!("/api/v1/jobs/{job}/stragglers"))
            .await;
        let computed = rank5(&rows, job, first)["expected_gain_pct"]
            .as_f64()
            .unwrap();
        assert!(
            (computed - live).abs() < 1e-9,
            "{job}: {computed} from the stored breakdowns, {live} from memory"
        );
    }
    stack.stop().await;
}
