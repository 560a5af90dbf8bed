//! Fleet memory end to end: 30 simulated jobs over a 16-node fleet (4 GPUs
//! each) with seeded random placement (`simulate --placement`), through the
//! agent and collector into ClickHouse. One GPU is 1.3x slow in every job it
//! lands in; one other node has a single one-off straggler; one node runs
//! in every job and is never slow; one node runs a single job.
//! `GET /api/v1/fleet?by=gpu` (and the CLI's fetch/render) must rank the
//! slow GPU first with a score over the `repeat_offender` threshold, the
//! one-off below it; the busy node scores 0, the single-job node is low
//! exposure; the `repeat_offender` alert fires exactly once, for the slow
//! GPU's node, naming its GPU and jobs; the rule's round exports the same
//! scores on `/metrics` (`rankscope_fleet_score`, the query of the Grafana
//! fleet dashboard's score panel). By link (each GPU pair shares a NIC
//! label) the slow GPU's link comes first. Bad parameters answer 400. The
//! Fleet page (headless Chromium, as in ui.rs; skipped without it unless
//! CI=true) shows the same ranking and one timeline mark per verdict.

// Only some of the DevTools helpers are used here.
#[allow(dead_code)]
use crate::cdp;
use crate::common;
#[path = "fleet/metrics.rs"]
mod metrics;

use std::collections::BTreeSet;
use std::sync::atomic::Ordering::Relaxed;

use common::*;
use rankscope_cli::simulate::{Placement, Straggler};
use serde_json::Value;

const JOBS: usize = 30;
const RANKS: u32 = 8;
const STEPS: u64 = 12;
const SLOW: (usize, usize) = (5, 2); // node 05, GPU 2
const BUSY: (usize, usize) = (0, 0);
const ONCE_NODE: usize = 15;
const ONE_OFF_NODE: usize = 9;

fn node(n: usize) -> String {
    format!("fleet-node-{n:02}")
}

fn gpu(n: usize, g: usize) -> String {
    format!("GPU-fleet-{n:02}-{g}")
}

/// The NIC label of GPU `g` of a node: GPUs 0-1 share `mlx5_0`, 2-3 `mlx5_1`.
fn link(g: usize) -> String {
    format!("mlx5_{}", g / 2)
}

/// xorshift64*: the test's seeded placement.
struct Rng(u64);
impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 33) as usize % n
    }
}

/// One job: the (node, gpu) of each rank, and the rank that is slow.
type PlacedJob = (Vec<(usize, usize)>, Option<u32>);

fn plan_fleet() -> Vec<PlacedJob> {
    let mut rng = Rng(0x37_F1EE7);
    let mut one_off_done = false;
    (0..JOBS)
        .map(|j| {
            let mut slots: Vec<(usize, usize)> = vec![BUSY];
            if rng.below(2) == 0 {
                slots.push(SLOW);
            }
            if j == 0 {
                slots.push((ONCE_NODE, 0));
            }
            // The one-off node runs in every fifth job (exposure), slow once.
            if j % 5 == 1 {
                slots.push((ONE_OFF_NODE, rng.below(4)));
            }
            while slots.len() < RANKS as usize {
                let n = 1 + rng.below(14); // nodes 01..=14
                let s = (n, rng.below(4));
                if n != ONE_OFF_NODE && s != SLOW && !slots.contains(&s) {
                    slots.push(s);
                }
            }
            // Random rank order.
            for i in (1..slots.len()).rev() {
                slots.swap(i, rng.below(i + 1));
            }
            let at = |want: (usize, usize)| slots.iter().position(|s| *s == want);
            let mut slow = at(SLOW).map(|r| r as u32);
            if slow.is_none() && !one_off_done {
                if let Some(r) = slots.iter().position(|s| s.0 == ONE_OFF_NODE) {
                    one_off_done = true;
                    slow = Some(r as u32);
                }
            }
            (slots, slow)
        })
        .collect()
}

fn row<'a>(rows: &'a [Value], gpu_uuid: &str) -> &'a Value {
    rows.iter()
        .find(|r| r["gpu_uuid"] == gpu_uuid)
        .unwrap_or_else(|| panic!("no fleet row for {gpu_uuid}: {rows:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gpu_that_slows_every_job_it_lands_in_is_ranked_first_and_alerted_once() {
    let stack = Stack::start_with(|c| {
        // Only the fleet rule alerts here, so every firing counted is its own.
        let r = &mut c.alerts.rules;
        r.straggler.enabled = false;
        r.hang.enabled = false;
        r.low_gpu_utilization.enabled = false;
        r.collective_slowdown.enabled = false;
        r.repeat_offender.evaluate_interval_ms = 100;
    })
    .await;
    let plans = plan_fleet();
    let slow_jobs: BTreeSet<String> = plans
        .iter()
        .enumerate()
        .filter(|(_, (slots, _))| slots.contains(&SLOW))
        .map(|(j, _)| format!("fleet-{j:02}"))
        .collect();
    assert!(
        slow_jobs.len() >= 8,
        "the seed lands the slow GPU in enough jobs: {slow_jobs:?}"
    );
    let now = rankscope_collector::service::now_ns();
    for (j, (slots, slow)) in plans.iter().enumerate() {
        let job = format!("fleet-{j:02}");
        let mut sim = sim_config(&job, RANKS, STEPS);
        sim.layers = 2;
        sim.seed = j as u64 + 1;
        sim.start_ns = now - (JOBS - j) as u64 * 60_000_000_000;
        sim.stragglers = slow
            .map(|rank| Straggler { rank, factor: 1.3 })
            .into_iter()
            .collect();
        sim.placement = slots
            .iter()
            .enumerate()
            .map(|(r, &(n, g))| Placement {
                rank: r as u32,
                node: node(n),
                gpu_uuid: gpu(n, g),
                link: link(g),
            })
            .collect();
        rankscope_cli::simulate::run(&sim, &stack.agent_url())
            .await
            .expect("simulate");
    }
    for j in 0..JOBS {
        stack
            .analytics_final(&format!("fleet-{j:02}"), u64::from(RANKS) * STEPS)
            .await;
    }
    // Verdicts reach ClickHouse through the results writer and placements
    // through the samples' writer, each on its own flush: poll until the
    // slow GPU's and the one-off's verdicts and every job's placement on
    // the busy GPU are all stored (CI once read 29 of its 30 jobs).
    let n_slow = slow_jobs.len() as u64;
    let rows = stack
        .api_poll("/api/v1/fleet?since=1d&by=gpu", "rows", |rows| {
            let field = |g: &str, f: &str| {
                rows.iter()
                    .find(|r| r["gpu_uuid"] == g)
                    .and_then(|r| r[f].as_u64())
            };
            let flagged = |g: &str| field(g, "flagged_placements");
            let one_off: u64 = rows
                .iter()
                .filter(|r| r["node"] == node(ONE_OFF_NODE).as_str())
                .filter_map(|r| r["flagged_placements"].as_u64())
                .sum();
            flagged(&gpu(SLOW.0, SLOW.1)) == Some(n_slow)
                && one_off == 1
                && field(&gpu(BUSY.0, BUSY.1), "jobs") == Some(JOBS as u64)
                && field(&gpu(ONCE_NODE, 0), "jobs") == Some(1)
        })
        .await;

    // The CLI's path: the same route, fetched and rendered.
    let url = format!("http://{}", stack.http_addr());
    let client = rankscope_cli::query::http::HttpClient::new(std::time::Duration::from_secs(30));
    let body = rankscope_cli::query::fleet::fetch(&client, &url, "1d", "gpu", None)
        .await
        .expect("fleet");
    let json = rankscope_cli::query::fleet::render(&body, rankscope_cli::query::OutputFormat::Json);
    let cli_rows: Vec<Value> = serde_json::from_str(&json).unwrap();
    assert_eq!(cli_rows[0]["gpu_uuid"], gpu(SLOW.0, SLOW.1).as_str());

    let threshold = stack.collector_cfg.alerts.rules.repeat_offender.min_score;
    let slow = &rows[0];
    assert_eq!(slow["gpu_uuid"], gpu(SLOW.0, SLOW.1).as_str(), "{rows:#?}");
    assert_eq!(slow["node"], node(SLOW.0).as_str());
    assert_eq!(
        (slow["place"].as_u64(), slow["jobs"].as_u64()),
        (Some(1), Some(n_slow))
    );
    assert!(slow["score"].as_f64().unwrap() > threshold, "{slow:#}");
    // The cost is the verdicts' active wall time x (1 - 1/slowdown) x GPUs
    // (unit-tested in collector::fleet): a replay this fast shows ~0.
    assert!(slow["cost_gpu_hours"].as_f64().unwrap() >= 0.0, "{slow:#}");
    let one_off = rows
        .iter()
        .find(|r| r["node"] == node(ONE_OFF_NODE).as_str() && r["flagged_placements"] == 1)
        .expect("one-off row");
    assert!(
        one_off["score"].as_f64().unwrap() < threshold,
        "{one_off:#}"
    );
    assert!(one_off["place"].as_u64().unwrap() > 1, "{one_off:#}");
    let busy = row(&rows, &gpu(BUSY.0, BUSY.1));
    assert_eq!(busy["jobs"].as_u64(), Some(JOBS as u64));
    assert_eq!(
        (busy["flagged_placements"].as_u64(), busy["score"].as_f64()),
        (Some(0), Some(0.0))
    );
    assert_eq!(busy["low_exposure"], false);
    let once = row(&rows, &gpu(ONCE_NODE, 0));
    assert_eq!(
        (once["jobs"].as_u64(), once["low_exposure"].as_bool()),
        (Some(1), Some(true))
    );
    assert!(once["place"].is_null());

    // By node: the one-job node is low exposure there too; the busy node healthy.
    let by_node = stack.api_get("/api/v1/fleet?since=1d&by=node").await;
    let nodes = by_node["rows"].as_array().unwrap();
    assert_eq!(nodes[0]["node"], node(SLOW.0).as_str(), "{nodes:#?}");
    let once_node = nodes
        .iter()
        .find(|r| r["node"] == node(ONCE_NODE).as_str())
        .unwrap();
    assert_eq!(once_node["low_exposure"], true);
    let busy_node = nodes
        .iter()
        .find(|r| r["node"] == node(BUSY.0).as_str())
        .unwrap();
    assert_eq!(
        busy_node["jobs"].as_u64(),
        Some(JOBS as u64),
        "{busy_node:#}"
    );
    assert_eq!(
        (
            busy_node["flagged_placements"].as_u64(),
            busy_node["score"].as_f64(),
            busy_node["low_exposure"].as_bool()
        ),
        (Some(0), Some(0.0), Some(false)),
        "{busy_node:#}"
    );

    // By link: the slow GPU's NIC first (it shares it with one healthy GPU).
    let by_link = stack.api_get("/api/v1/fleet?since=1d&by=link").await;
    let links = by_link["rows"].as_array().unwrap();
    assert_eq!(by_link["by"], "link");
    assert_eq!(
        (&links[0]["node"], &links[0]["link"]),
        (&Value::from(node(SLOW.0)), &Value::from(link(SLOW.1))),
        "{links:#?}"
    );
    assert_eq!(links[0]["flagged_placements"].as_u64(), Some(n_slow));
    assert!(links
        .iter()
        .all(|r| r["gpu_uuid"].is_null() && r["link"].is_string()));

    // The alert: fired, for the slow GPU's node, naming its GPU and jobs ...
    let alerts = stack
        .api_poll("/api/v1/alerts", "alerts", |a| {
            a.iter().any(|a| a["rule"] == "repeat_offender")
        })
        .await;
    let metrics = stack.collector.as_ref().unwrap().alerts().metrics();
    // ... and only once: two more complete rounds change nothing.
    let r0 = metrics.fleet_rounds.load(Relaxed);
    eventually(30, "two more fleet rounds", || {
        metrics.fleet_rounds.load(Relaxed) >= r0 + 2
    })
    .await;
    assert_eq!(metrics.fired.load(Relaxed), 1, "{alerts:#?}");
    assert_eq!(metrics.resolved.load(Relaxed), 0, "{alerts:#?}");
    assert_eq!(metrics.fleet_round_failures.load(Relaxed), 0);
    let a = alerts
        .iter()
        .find(|a| a["rule"] == "repeat_offender")
        .unwrap();
    assert_eq!(a["node"], node(SLOW.0).as_str(), "{a:#}");
    assert_eq!(a["job"], format!("fleet:{}", node(SLOW.0)).as_str());
    assert_eq!(
        a["evidence"]["gpu_uuids"],
        serde_json::json!([gpu(SLOW.0, SLOW.1)])
    );
    let jobs: BTreeSet<String> = a["evidence"]["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j.as_str().unwrap().to_owned())
        .collect();
    // The jobs known when it fired (the stored firing row): slow jobs only,
    // at least `min_jobs` of them.
    assert!(jobs.is_subset(&slow_jobs), "{jobs:?} vs {slow_jobs:?}");
    let min_jobs = stack.collector_cfg.alerts.rules.repeat_offender.min_jobs;
    assert!(jobs.len() as u64 >= min_jobs, "{jobs:?}");

    // Grafana: the fleet dashboard's score panel queries the gauges the
    // rule's rounds export, and they hold the API's scores.
    let rule = &stack.collector_cfg.alerts.rules.repeat_offender;
    metrics::scores_on_metrics_are_the_apis(
        &stack,
        rule.window_secs,
        min_jobs,
        &gpu(SLOW.0, SLOW.1),
    )
    .await;

    // The Fleet page, linked from the jobs list.
    if let Some(chromium) = cdp::chromium_or_skip("the Fleet page check") {
        let (first, marks) = (gpu(SLOW.0, SLOW.1), slow["verdicts"].as_u64().unwrap());
        let base = url.clone();
        tokio::task::spawn_blocking(move || browse_fleet(&chromium, &base, &first, marks))
            .await
            .expect("browser");
    }

    // Bad input: 400 with a message naming the parameter.
    for (query, want) in [
        ("since=7x", "malformed"),
        ("since=-1d", "future"),
        ("since=9999999999999999999", "future"),
        ("by=rack", "node, gpu or link"),
        ("min_jobs=0", "min_jobs"),
    ] {
        let u = format!("{url}/api/v1/fleet?{query}");
        match client.get_json::<Value>(&u).await {
            Err(rankscope_cli::query::http::HttpError::Status {
                status, message, ..
            }) => {
                assert_eq!(status, 400, "{query}");
                assert!(message.contains(want), "{query}: {message}");
            }
            other => panic!("{query}: {other:?}"),
        }
    }
    stack.stop().await;
}

/// Jobs list -> Fleet link -> by GPU: the slow GPU first, one mark per verdict.
fn browse_fleet(chromium: &std::path::Path, base: &str, first: &str, marks: u64) {
    let mut browser = cdp::Browser::launch(chromium);
    let mut page = browser.new_page(1600, 1000);
    page.navigate(&format!("{base}/"));
    page.wait_for(30, "document.querySelector('a[data-link=\"fleet\"]')?.href");
    page.eval("document.querySelector('a[data-link=\"fleet\"]').click()");
    page.wait_for(
        30,
        "document.querySelector('table.fleet[data-by=\"node\"] tbody tr') ? 1 : null",
    );
    page.eval("location.hash = '#/fleet?by=gpu&since=1d'");
    let top = page.wait_for(
        30,
        "(() => { const r = document.querySelector('table.fleet[data-by=\"gpu\"] tbody tr'); \
              return r && { unit: r.dataset.unit, place: r.dataset.place, \
                            marks: r.querySelectorAll('.fleet-timeline .mark').length }; })()",
    );
    assert_eq!(top["unit"], first, "{top}");
    assert_eq!(top["place"], "1", "{top}");
    assert_eq!(top["marks"].as_u64(), Some(marks), "{top}");
    let low = page.eval(
        "[...document.querySelectorAll('table.fleet tbody tr')].filter(r => r.dataset.lowExposure === 'true').every(r => r.dataset.place === '')",
    );
    assert_eq!(low, true, "low-exposure rows are unranked");
    let shots =
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/ui-screenshots");
    let _ = std::fs::create_dir_all(&shots);
    page.screenshot(&shots.join("fleet.png"));
    let errors = page.take_errors();
    assert!(errors.is_empty(), "console errors: {errors:?}");
}
