//! Live memory of a real PyTorch job with no trace: 4 CPU ranks (gloo, DDP)
//! under `rankscope run`, rank 2 holding an extra 192 MiB tensor. The
//! agent's per-rank RSS samples, joined to the step windows, make
//! `rankscope memory --job J` name rank 2 as the maximum with its peak.
//! With a low test share (0.1 % of the host) the `memory_headroom` alert
//! fires for the CPU ranks, measured as RSS against the host's memory.
//!
//! Needs the Python environment `make py` builds (`RANKSCOPE_VENV`) and the
//! `rankscope` binary.

use crate::common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::Stack;

const RANKS: u32 = 4;
const BIG_RANK: u64 = 2;
const BIG_MB: u64 = 192;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rank_holding_a_large_tensor_is_named_with_its_peak() {
    let stack = Stack::start_with(|c| c.alerts.rules.memory_headroom.max_share = 0.001).await;
    let job = "ddp-memory";
    let agent = stack
        .agent
        .as_ref()
        .and_then(|a| a.unix_path.clone())
        .expect("agent unix socket");
    let child = Command::new(rankscope_testkit::bin_path("rankscope"))
        .arg("run")
        .arg("--agent")
        .arg(format!("unix:{}", agent.display()))
        .arg("--job")
        .arg(job)
        .arg("--")
        .arg(rankscope_testkit::venv_python())
        .args(["-m", "torch.distributed.run", "--nproc-per-node"])
        .arg(RANKS.to_string())
        .arg("--master-port")
        .arg(rankscope_testkit::free_port().to_string())
        .arg(rankscope_testkit::workspace_root().join("python/tests/workloads/ddp_train.py"))
        .args(["--steps", "12", "--step-ms", "300", "--big-rank"])
        .arg(BIG_RANK.to_string())
        .arg("--big-mb")
        .arg(BIG_MB.to_string())
        .env("OMP_NUM_THREADS", "1")
        .env("XDG_CACHE_HOME", stack.dir.path().join("cache"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("rankscope run starts");
    let out = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .expect("join")
        .expect("wait");
    let text = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "training failed:\n{text}");

    // Breakdowns and RSS samples are written asynchronously.
    let deadline = Instant::now() + Duration::from_secs(30);
    let v = loop {
        let v = stack.api_get(&format!("/api/v1/jobs/{job}/memory")).await;
        let ranks = v["live"]["ranks"].as_array().map_or(0, Vec::len);
        if ranks == RANKS as usize {
            break v;
        }
        assert!(
            Instant::now() < deadline,
            "no live memory of every rank: {v}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let live = &v["live"];
    assert_eq!(live["max_rank"].as_u64(), Some(BIG_RANK), "{live}");
    let ranks = live["ranks"].as_array().unwrap();
    let peak = |r: u64| {
        ranks.iter().find(|x| x["rank"] == r).unwrap()["peak_bytes"]
            .as_u64()
            .unwrap()
    };
    let others = (0..RANKS as u64)
        .filter(|&r| r != BIG_RANK)
        .map(peak)
        .max()
        .unwrap();
    assert!(
        peak(BIG_RANK) > others + (BIG_MB - 32) * 1048576,
        "rank {BIG_RANK} peak {} vs others' max {others}",
        peak(BIG_RANK)
    );
    assert_eq!(live["max_peak_bytes"].as_u64(), Some(peak(BIG_RANK)));
    assert!(ranks.iter().all(|r| r["source"] == "rss"), "{live}");
    assert!(
        live["imbalance"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["imbalance"].as_f64() > Some(1.2)),
        "{live}"
    );
    // The CLI names it too.
    let cli = Command::new(rankscope_testkit::bin_path("rankscope"))
        .args([
            "--collector",
            &format!("http://{}", stack.http_addr()),
            "memory",
            "--job",
            job,
        ])
        .output()
        .expect("rankscope memory");
    let table = String::from_utf8_lossy(&cli.stdout);
    assert!(cli.status.success(), "{table}");
    assert!(
        table.contains(&format!("largest peak: rank {BIG_RANK}")),
        "{table}"
    );
    // The alert, from the agent's RSS samples against the host's memory.
    let alerts = stack
        .api_poll(&format!("/api/v1/alerts?job={job}"), "alerts", |a| {
            a.iter()
                .any(|x| x["rule"] == "memory_headroom" && x["rank"] == BIG_RANK)
        })
        .await;
    let a = alerts
        .iter()
        .find(|x| x["rule"] == "memory_headroom" && x["rank"] == BIG_RANK)
        .unwrap();
    assert_eq!(a["evidence"]["source"], "rss", "{a}");
    assert_eq!(a["evidence"]["max_share"], 0.001, "{a}");
    assert!(a["evidence"]["total_bytes"].as_u64() > Some(0), "{a}");
    assert!(
        a["summary"].as_str().unwrap().contains("of the host's"),
        "{a}"
    );
    stack.stop().await;
}
