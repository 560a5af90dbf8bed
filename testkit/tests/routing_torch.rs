//! A real 2-node torchrun job over two collectors (issue 36): two
//! `rankscope run -- torchrun --nnodes 2` groups on this machine, each with
//! its own agent, the agents listing the collectors in opposite orders (a
//! different first collector). It is one job, and all its ranks reach one
//! owner: that collector alone took the job (`job_owners`) and assembled
//! every step of all four ranks.
//!
//! Needs the venv of `make py` (or `RANKSCOPE_VENV`) and the `rankscope`
//! binary; run inside `unshare -n` (ports private).

use crate::common;

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

use common::eventually;

const STEPS: u64 = 6;

/// One node of a 2-node, 2-process-per-node torchrun launch of the DDP
/// workload under `rankscope run`, streaming to the agent at `agent`.
fn node(agent: &Path, cache: &Path, node_rank: u32, rdzv_port: u16, rdzv_id: &str) -> Child {
    let mut cmd = Command::new(rankscope_testkit::bin_path("rankscope"));
    for v in rankscope_testkit::SCHEDULER_VARS {
        cmd.env_remove(v);
    }
    cmd.env("OMP_NUM_THREADS", "1")
        .env("XDG_CACHE_HOME", cache)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd.arg("run")
        .arg("--agent")
        .arg(format!("unix:{}", agent.display()))
        .arg("--")
        .args(rankscope_testkit::torchrun_node_group(
            node_rank,
            rdzv_port,
            rdzv_id,
            "ddp_train.py",
            STEPS,
        ));
    cmd.spawn().expect("rankscope run starts")
}

/// Waits for a process; fails with its output unless it exited 0 without a traceback.
async fn finish(child: Child) {
    let out: Output = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .expect("join")
        .expect("wait");
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "failed:\n{text}");
    assert!(!text.contains("Traceback"), "an exception:\n{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_two_node_torchrun_job_is_one_job_on_one_owner_collector() {
    let ch = rankscope_testkit::ClickHouse::start().expect("ClickHouse");
    let db = ch.fresh_database("route_torch").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut collectors = Vec::new();
    for _ in 0..2 {
        let mut cfg = common::collector_config(&ch.http_url, &db);
        cfg.ownership.refresh_interval_ms = 300;
        collectors.push(rankscope_collector::start(cfg).await.expect("collector"));
    }
    let keys: Vec<String> = collectors.iter().map(|c| c.grpc_addr.to_string()).collect();
    let mut agents = Vec::new();
    for n in 0..2usize {
        // Each agent lists the collectors in its own order.
        let list = format!("http://{},http://{}", keys[n], keys[1 - n]);
        let mut cfg = common::agent_config(&list, dir.path());
        cfg.agent_id = format!("route-torch-{n}");
        cfg.node = format!("route-torch-node-{n}");
        cfg.unix_socket_path = dir
            .path()
            .join(format!("agent-{n}.sock"))
            .to_string_lossy()
            .into_owned();
        cfg.collector_resolve_interval_ms = 200;
        agents.push(rankscope_agent::start(cfg).await.expect("agent"));
    }
    let job = "route-torch";
    let owner = rankscope_agent::route::rendezvous_order(job, keys.iter().map(String::as_str))[0]
        .to_owned();

    let port = rankscope_testkit::free_port();
    let cache = dir.path().join("cache");
    let sock = |n: usize| agents[n].unix_path.clone().expect("agent unix socket");
    let a = node(&sock(0), &cache, 0, port, job);
    let b = node(&sock(1), &cache, 1, port, job);
    finish(a).await;
    finish(b).await;

    // Every step of all 4 ranks assembled: possible only where all ranks'
    // events met, on the one owner.
    let rows = || {
        ch.query(&format!(
            "SELECT count() FROM {db}.step_breakdown FINAL WHERE job_id = '{job}'"
        ))
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .unwrap_or(0)
    };
    eventually(120, "4 ranks x every step assembled", || {
        rows() == 4 * STEPS
    })
    .await;
    let owners = ch
        .query(&format!(
            "SELECT DISTINCT collector FROM {db}.job_owners WHERE job_id = '{job}'"
        ))
        .expect("owners");
    assert_eq!(owners.trim(), owner, "one collector took the job");
    let ranks = ch
        .query(&format!(
            "SELECT uniqExact(rank), uniqExact(node) FROM {db}.ranks WHERE job_id = '{job}'"
        ))
        .expect("ranks");
    assert_eq!(ranks.trim(), "4\t2", "4 ranks on 2 nodes, one job");
    for a in &agents {
        let status = a.route_status();
        assert!(status.contains(&format!("{job} -> {owner}")), "{status}");
    }
    for a in agents {
        assert_eq!(a.shutdown().await.undelivered_events, 0);
    }
    for c in collectors {
        c.shutdown().await;
    }
}
