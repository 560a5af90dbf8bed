//! Agent telemetry end to end: an agent sampling 8 stand-in GPUs (the real
//! nvml-wrapper path against `agent/tests/nvml_stub`) and the host, 8
//! simulated ranks whose pids are on the stand-in's process lists, a
//! collector and a private ClickHouse. Checks the exact sampled values in
//! ClickHouse, `rankscope gpus` JSON, the breakdown's GPU fields, empty
//! unsupported metrics, a throttled GPU's evidence on a planted straggler's
//! verdict, that GPU's error counters (ECC, PCIe replays, Xid) in the fleet
//! view's hardware evidence, and host-only operation when NVML fails to
//! initialise.

use crate::common;
use crate::stub;

use common::*;
use rankscope_cli::query::analytics::View;
use rankscope_cli::query::http::HttpClient;
use rankscope_cli::query::{columns, gpus, OutputFormat};
use rankscope_cli::simulate::{self, Straggler};
use serde_json::Value;
use stub::Stub;

/// 8 GPUs; GPU r runs simulated rank r (pid 10000 + r). GPU 5 is thermally
/// throttled at 1200 MHz, with 10 corrected ECC errors and 100 PCIe replays
/// since its driver loaded; GPU 3 reports neither power, temperature nor GPM.
fn eight_gpus() -> String {
    let mut c = String::from("device_count 8\n");
    for g in 0..8 {
        c.push_str(&format!(
            "gpu {g} process {} 1073741824\ngpu {g} util_gpu 90\n",
            10_000 + g
        ));
        if g != 3 {
            let sm = if g == 5 { 71.5 } else { 92.5 };
            c.push_str(&format!("gpu {g} gpm 1\ngpu {g} gpm_sm_active {sm}\n"));
        }
    }
    c.push_str(
        "gpu 5 clock_sm 1200\ngpu 5 throttle 0x60\ngpu 5 temp_c 88\ngpu 5 power_mw 280000\n\
         gpu 3 unsupported power\ngpu 3 unsupported temp\n\
         gpu 5 ecc_corrected 10\ngpu 5 pcie_replays 100\n",
    );
    c
}

async fn start_agent(stack: &mut Stack, library: &str) {
    let mut cfg = agent_config(&format!("http://{}", stack.grpc_addr()), stack.dir.path());
    cfg.gpu_sample_interval_ms = 100;
    cfg.host_sample_interval_ms = 100;
    cfg.nvml_library_path = library.to_owned();
    stack.agent = Some(rankscope_agent::start(cfg).await.expect("agent starts"));
}

fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

fn f(v: &Value, k: &str) -> Option<f64> {
    v[k].as_f64()
}

fn count(stack: &Stack, table: &str) -> u64 {
    let db = &stack.database;
    let out = stack
        .clickhouse
        .query(&format!("SELECT count() FROM {db}.{table}"))
        .expect("count");
    out.trim().parse().expect("a number")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gpu_telemetry_reaches_clickhouse_the_breakdown_and_the_verdict() {
    let stub = Stub::new(&eight_gpus());
    // Fleet answers are kept for one repeat_offender tick: a short tick, so
    // the polled answer follows the errors as they arrive.
    let mut stack = Stack::start_without_agent_with(|c| {
        c.alerts.rules.repeat_offender.evaluate_interval_ms = 100;
    })
    .await;
    start_agent(&mut stack, &stub.path()).await;
    let job = "e2e-telemetry";
    let mut sim = sim_config(job, 8, 14);
    sim.layers = 2;
    sim.realtime = true;
    sim.start_ns = now_ns();
    sim.stragglers = vec![Straggler {
        rank: 5,
        factor: 1.3,
    }];
    // The ranks run on the agent's node, on the GPUs their pids are on.
    sim.placement = (0..8)
        .map(|r| simulate::Placement {
            rank: r,
            node: "e2e-node".into(),
            gpu_uuid: format!("GPU-00000000-0000-0000-0000-00000000000{r}"),
            link: String::new(),
        })
        .collect();
    simulate::run(&sim, &stack.agent_url())
        .await
        .expect("simulate");

    // The straggler's verdict carries its GPU's evidence.
    let stragglers = stack
        .api_poll(
            &format!("/api/v1/jobs/{job}/stragglers"),
            "stragglers",
            |v| v.iter().any(|s| s["evidence"].is_string()),
        )
        .await;
    let v = stragglers
        .iter()
        .find(|s| s["evidence"].is_string())
        .unwrap();
    assert_eq!(v["rank"], 5, "{v}");
    assert_eq!(v["cause"], "compute");
    let text = v["evidence"].as_str().unwrap();
    assert!(
        text.starts_with("GPU 5 (GPU-00000000-0000-0000-0000-000000000005) on e2e-node: SM clock 1200 MHz vs 1980 MHz median of 7 peer GPUs (-39.4%)"),
        "{text}"
    );
    assert!(
        text.contains("throttle reasons: hw_thermal_slowdown, sw_thermal_slowdown"),
        "{text}"
    );
    assert_eq!(f(v, "sm_clock_mhz"), Some(1200.0));
    assert_eq!(f(v, "peer_sm_clock_mhz"), Some(1980.0));
    assert_eq!(v["evidence_gpus"], serde_json::json!([5]));
    assert_eq!(f(v, "temp_c"), Some(88.0));
    let table = columns::render(&stragglers, View::Stragglers.columns(), OutputFormat::Table);
    assert!(table.contains("SM clock 1200 MHz vs 1980 MHz"), "{table}");

    // GPU 5's error counters grow and it reports a critical Xid (read through
    // nvml-wrapper from the stand-in): the fleet rows' hardware evidence
    // shows the window's increase, from the daily rollup (migration 0016).
    stub.set(&format!(
        "{}gpu 5 ecc_corrected 13\ngpu 5 ecc_uncorrected 1\ngpu 5 pcie_replays 107\ngpu 5 xid 79\n",
        eight_gpus()
    ));
    let counters = |r: &Value| {
        let h = &r["hardware"];
        [
            "xid_errors",
            "ecc_corrected_errors",
            "ecc_uncorrected_errors",
            "pcie_replays",
        ]
        .map(|k| h[k].as_u64().unwrap_or(u64::MAX))
    };
    let uuid = |g: u32| format!("GPU-00000000-0000-0000-0000-00000000000{g}");
    let fleet = stack
        .api_poll("/api/v1/fleet?since=1d&by=gpu", "rows", |rows| {
            rows.iter()
                .any(|r| r["gpu_uuid"] == uuid(5).as_str() && counters(r) == [1, 3, 1, 7])
        })
        .await;
    assert_eq!(fleet.len(), 8, "{fleet:#?}");
    for r in &fleet {
        if r["gpu_uuid"] != uuid(5).as_str() {
            assert_eq!(counters(r), [0, 0, 0, 0], "{r:#}");
        }
    }
    let by_node = stack.api_get("/api/v1/fleet?since=1d&by=node").await;
    assert_eq!(counters(&by_node["rows"][0]), [1, 3, 1, 7], "{by_node:#}");
    let http = HttpClient::new(std::time::Duration::from_secs(10));
    let body = rankscope_cli::query::fleet::fetch(
        &http,
        &format!("http://{}", stack.http_addr()),
        "1d",
        "gpu",
        None,
    )
    .await
    .expect("fleet");
    let text = rankscope_cli::query::fleet::render(&body, OutputFormat::Csv);
    assert!(
        text.contains("Xid x1;ECC uncorrected x1;ECC corrected x3;PCIe replays x7"),
        "{text}"
    );

    let report = stack.stop_agent().await;
    assert_eq!(report.undelivered_events, 0);
    assert_eq!(report.metrics.nvml_state, rankscope_agent::NvmlState::Ok);
    assert_eq!(report.metrics.dropped_samples["queue_full"], 0);

    // Exact values in ClickHouse; unsupported metrics are NULL.
    let db = &stack.database;
    let q = |sql: String| stack.clickhouse.query(&sql).expect("query");
    let gpu0 = q(format!(
        "SELECT name, uuid, toString(state), gpu_util_pct, mem_util_pct, mem_used_bytes, \
         mem_total_bytes, power_w, power_limit_w, temp_c, sm_clock_mhz, sm_clock_max_mhz, \
         mem_clock_mhz, throttle_mask, throttle_reasons, process_pids, process_mem_bytes, \
         rank_jobs, rank_ids, sm_active_pct FROM {db}.gpu_samples \
         WHERE gpu_index = 0 AND length(rank_ids) = 1 AND isNotNull(sm_active_pct) LIMIT 1"
    ));
    assert_eq!(
        gpu0.trim(),
        format!(
            "NVIDIA H100 80GB HBM3\tGPU-00000000-0000-0000-0000-000000000000\tok\t90\t20\t\
             1073741824\t85899345920\t300\t700\t60\t1980\t1980\t2619\t0\t[]\t[10000]\t\
             [1073741824]\t['{job}']\t[0]\t92.5"
        )
    );
    let gpu5 = q(format!(
        "SELECT sm_clock_mhz, throttle_mask, throttle_reasons, temp_c, power_w FROM {db}.gpu_samples \
         WHERE gpu_index = 5 LIMIT 1"
    ));
    assert_eq!(
        gpu5.trim(),
        "1200\t96\t['sw_thermal_slowdown','hw_thermal_slowdown']\t88\t280"
    );
    let nulls = q(format!(
        "SELECT count(), countIf(isNull(power_w) AND isNull(temp_c) AND isNull(sm_active_pct) \
         AND isNotNull(gpu_util_pct)) FROM {db}.gpu_samples WHERE gpu_index = 3"
    ));
    let (n, null) = nulls.trim().split_once('\t').unwrap();
    assert_eq!(
        n, null,
        "every GPU 3 sample lacks power/temp/GPM and has utilisation"
    );
    let host = q(format!(
        "SELECT count() > 0, countIf(mem_used_bytes > mem_total_bytes OR cpu_util_pct > 100) \
         FROM {db}.host_samples WHERE node = 'e2e-node'"
    ));
    assert_eq!(host.trim(), "1\t0");

    // `rankscope gpus --job J --format json`.
    let http = HttpClient::new(std::time::Duration::from_secs(10));
    let collector = format!("http://{}", stack.http_addr());
    let rows = gpus::fetch_gpus(&http, &collector, Some("e2e-node"), Some(job))
        .await
        .expect("gpus");
    let json: Vec<Value> = serde_json::from_str(&gpus::render(&rows, OutputFormat::Json)).unwrap();
    assert_eq!(json.len(), 8);
    for (i, g) in json.iter().enumerate() {
        assert_eq!(g["node"], "e2e-node");
        assert_eq!(g["gpu_index"], i);
        assert_eq!(
            g["uuid"],
            format!("GPU-00000000-0000-0000-0000-00000000000{i}")
        );
        assert_eq!(g["name"], "NVIDIA H100 80GB HBM3");
        assert_eq!(g["state"], "ok");
        assert_eq!(g["ranks"], serde_json::json!([{"job": job, "rank": i}]));
        assert_eq!(f(g, "gpu_util_pct"), Some(90.0));
        assert_eq!(f(g, "mem_util_pct"), Some(20.0));
        assert_eq!(g["mem_used_bytes"], 1_073_741_824u64);
        assert_eq!(g["mem_total_bytes"], 85_899_345_920u64);
        let occupancy = if i == 3 { None } else { Some(0.0) };
        assert_eq!(
            f(g, "sm_occupancy_pct"),
            occupancy,
            "GPM only where supported"
        );
    }
    assert_eq!(f(&json[5], "sm_clock_mhz"), Some(1200.0));
    assert_eq!(f(&json[5], "temp_c"), Some(88.0));
    assert_eq!(f(&json[5], "power_w"), Some(280.0));
    assert_eq!(f(&json[5], "sm_active_pct"), Some(71.5));
    assert_eq!(
        json[5]["throttle_reasons"],
        serde_json::json!(["sw_thermal_slowdown", "hw_thermal_slowdown"])
    );
    assert_eq!(json[0]["throttle_reasons"], serde_json::json!([]));
    for k in ["power_w", "temp_c", "sm_active_pct"] {
        assert!(json[3][k].is_null(), "GPU 3 {k}: {}", json[3]);
    }
    let table = gpus::render(&rows, OutputFormat::Table);
    assert!(
        table.contains("sw_thermal_slowdown;hw_thermal_slowdown"),
        "{table}"
    );

    // The breakdown carries the GPU telemetry of each rank's GPU per step.
    let rows = stack
        .api_poll(&format!("/api/v1/jobs/{job}/breakdown"), "breakdown", |v| {
            v.len() == 8 * 14
        })
        .await;
    let mut joined = 0;
    for r in &rows {
        let (step, rank) = (r["step"].as_u64().unwrap(), r["rank"].as_u64().unwrap());
        let samples = r["gpu_samples"].as_u64().unwrap();
        if samples == 0 {
            assert!(
                r["sm_clock_mhz"].is_null() && r["throttle_reasons"].is_null(),
                "{r}"
            );
            assert!(
                !(2..=11).contains(&step),
                "step {step} rank {rank} has no GPU samples"
            );
            continue;
        }
        joined += 1;
        assert_eq!(f(r, "gpu_util_pct"), Some(90.0), "{r}");
        let (clock, sm, reasons) = match rank {
            5 => (
                1200.0,
                Some(71.5),
                serde_json::json!(["hw_thermal_slowdown", "sw_thermal_slowdown"]),
            ),
            3 => (1980.0, None, serde_json::json!([])),
            _ => (1980.0, Some(92.5), serde_json::json!([])),
        };
        assert_eq!(f(r, "sm_clock_mhz"), Some(clock), "{r}");
        assert_eq!(f(r, "sm_active_pct"), sm, "{r}");
        assert_eq!(r["throttle_reasons"], reasons, "{r}");
        match rank {
            3 => assert!(r["power_w"].is_null() && r["temp_c"].is_null(), "{r}"),
            5 => assert_eq!((f(r, "power_w"), f(r, "temp_c")), (Some(280.0), Some(88.0))),
            _ => assert_eq!((f(r, "power_w"), f(r, "temp_c")), (Some(300.0), Some(60.0))),
        }
    }
    assert!(
        joined >= 8 * 10,
        "only {joined} of {} rows joined",
        rows.len()
    );
    stack.stop().await;
}

/// NVML fails to initialise: the agent says so, samples the host only, and
/// the pipeline carries on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nvml_init_failure_degrades_to_host_only() {
    let stub = Stub::new("init_error 9\ndevice_count 8");
    let mut stack = Stack::start_without_agent().await;
    start_agent(&mut stack, &stub.path()).await;
    let job = "e2e-host-only";
    simulate::run(&sim_config(job, 2, 3), &stack.agent_url())
        .await
        .expect("simulate");
    eventually(30, "host samples stored", || {
        count(&stack, "host_samples") >= 2
    })
    .await;
    let report = stack.stop_agent().await;
    assert_eq!(
        report.metrics.nvml_state,
        rankscope_agent::NvmlState::Unavailable
    );
    assert_eq!(report.metrics.gpu_samples, 0);
    assert_eq!(count(&stack, "gpu_samples"), 0);
    assert_eq!(
        stack.counts(job).await.steps,
        2 * 3 * 2,
        "events still flow"
    );
    let gpus = stack.api_get("/api/v1/gpus?node=e2e-node").await;
    assert_eq!(gpus["gpus"], serde_json::json!([]));
    stack.stop().await;
}
