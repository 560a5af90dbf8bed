//! Node clocks with real torch (issue 36 item 4, "Clocks:" of "Done when"):
//! a 2-node torchrun launch on this machine, each node group with its own
//! agent, one group (its `rankscope-agent` and its `rankscope run --
//! torchrun`) under libfaketime at +3 ms of CLOCK_REALTIME
//! (`FAKETIME=+0.003`, `FAKETIME_DONT_FAKE_MONOTONIC=1`: Debian's `faketime`
//! package, installed by `make deps`). The ranks stamp their collectives
//! with `time.time_ns()`, so the faked node's times are 3 ms ahead; the
//! estimate must find that within 300 us, and the timeline export must put
//! both nodes' ends of one all-reduce within that bound.
//!
//! The workload (`python/tests/workloads/sync_allreduce.py`) averages its
//! gradients with blocking `dist.all_reduce` calls and a barrier per step.
//! Needs the venv of `make py` (or `RANKSCOPE_VENV`) and the `rankscope`
//! and `rankscope-agent` binaries. Run inside `unshare -n`.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::Stack;
use serde_json::Value;

const STEPS: u64 = 40;
const FAKETIME_LIB: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";
/// Variables of the test's own environment that would name the job.
const SCHEDULER_VARS: &[&str] = &[
    "RANKSCOPE_JOB_ID",
    "RANKSCOPE_LAUNCH_ID",
    "SLURM_JOB_ID",
    "TORCHELASTIC_RUN_ID",
    "JOBSET_NAME",
    "POD_NAME",
    "MASTER_ADDR",
    "MASTER_PORT",
    "WORLD_SIZE",
    "RANK",
];

fn bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test exe");
    let bin = exe
        .parent()
        .and_then(Path::parent)
        .expect("target dir")
        .join(name);
    assert!(bin.exists(), "{} was not built", bin.display());
    bin
}

/// Puts `cmd` under libfaketime, +3 ms of CLOCK_REALTIME.
fn faked(cmd: &mut Command) {
    assert!(
        Path::new(FAKETIME_LIB).exists(),
        "{FAKETIME_LIB} is missing: install Debian's faketime package (`make deps` does)"
    );
    cmd.env("LD_PRELOAD", FAKETIME_LIB)
        .env("FAKETIME", "+0.003")
        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
}

/// A child killed when dropped (a failing test leaves no orphan).
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The second node's agent: the real binary, under libfaketime.
fn faked_agent(stack: &Stack, sock: &Path) -> Proc {
    let port = rankscope_testkit::free_port();
    let config = stack.dir.path().join("faked-agent.toml");
    std::fs::write(
        &config,
        format!(
            "listen_addr = \"127.0.0.1:{port}\"\nmetrics_listen_addr = \"\"\nunix_socket_path = \"{}\"\n\
             collector_url = \"http://{}\"\nagent_id = \"faked-agent\"\nnode = \"faked-node\"\n\
             gpu_sample_interval_ms = 0\nhost_sample_interval_ms = 0\nkineto_daemon_name = \"\"\n\
             batch_max_delay_ms = 20\nretry_initial_ms = 10\nretry_max_ms = 200\n",
            sock.display(),
            stack.grpc_addr()
        ),
    )
    .expect("agent config");
    let mut cmd = Command::new(bin("rankscope-agent"));
    cmd.arg("--config").arg(&config);
    faked(&mut cmd);
    let agent = Proc(cmd.spawn().expect("agent starts"));
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() || !sock.exists() {
        assert!(Instant::now() < deadline, "the faked agent never listened");
        std::thread::sleep(Duration::from_millis(20));
    }
    agent
}

/// One node group: `rankscope run -- torchrun --nnodes 2 --node-rank N`.
fn node(stack: &Stack, agent_sock: &Path, node_rank: u32, port: u16, fake: bool) -> Child {
    let mut cmd = Command::new(bin("rankscope"));
    for v in SCHEDULER_VARS {
        cmd.env_remove(v);
    }
    cmd.env("OMP_NUM_THREADS", "1")
        .env("XDG_CACHE_HOME", stack.dir.path().join("cache"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .arg("run")
        .arg("--agent")
        .arg(format!("unix:{}", agent_sock.display()))
        .arg("--")
        .arg(rankscope_testkit::venv_python())
        .args([
            "-m",
            "torch.distributed.run",
            "--nnodes",
            "2",
            "--node-rank",
        ])
        .arg(node_rank.to_string())
        .args(["--nproc-per-node", "2", "--rdzv-backend", "c10d"])
        .arg("--rdzv-endpoint")
        .arg(format!("127.0.0.1:{port}"))
        .args(["--rdzv-id", "clock-torch"])
        .arg(rankscope_testkit::workspace_root().join("python/tests/workloads/sync_allreduce.py"))
        .args(["--steps", &STEPS.to_string()]);
    if fake {
        faked(&mut cmd);
    }
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

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    assert!(n > 0, "no samples");
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Per all-reduce call seen on all 4 ranks: the faked node's end minus the
/// other node's end (each node's mean over its two ranks), µs.
fn node_end_gaps(doc: &Value, faked_ranks: &[u64]) -> Vec<f64> {
    let ends = clock_ends(doc);
    ends.values()
        .filter(|r| r.len() == 4)
        .map(|r| {
            let (mut f, mut o) = (Vec::new(), Vec::new());
            for (rank, end) in r {
                if faked_ranks.contains(rank) {
                    f.push(*end)
                } else {
                    o.push(*end)
                }
            }
            f.iter().sum::<f64>() / f.len() as f64 - o.iter().sum::<f64>() / o.len() as f64
        })
        .collect()
}

fn clock_ends(
    doc: &Value,
) -> std::collections::BTreeMap<(String, u64), std::collections::BTreeMap<u64, f64>> {
    let mut ends: std::collections::BTreeMap<_, std::collections::BTreeMap<u64, f64>> =
        std::collections::BTreeMap::new();
    for e in doc["traceEvents"].as_array().expect("traceEvents") {
        if e["ph"] == "X" && e["cat"] == "collective" && e["args"]["op"] == "all_reduce" {
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
async fn a_node_3ms_ahead_under_libfaketime_is_estimated_within_300us() {
    let stack = Stack::start().await;
    let plain_sock = stack
        .agent
        .as_ref()
        .and_then(|a| a.unix_path.clone())
        .expect("agent unix socket");
    let faked_sock = stack.dir.path().join("faked-agent.sock");
    let _agent = faked_agent(&stack, &faked_sock);
    let port = rankscope_testkit::free_port();
    let a = node(&stack, &plain_sock, 0, port, false);
    let b = node(&stack, &faked_sock, 1, port, true);
    finish(a).await;
    finish(b).await;

    // Every call's residual is in: 2 all-reduces and a barrier per step.
    let job = "clock-torch";
    let nodes = stack
        .api_poll(&format!("/api/v1/jobs/{job}/clocks"), "nodes", |n| {
            n.len() == 2
                && n.iter().all(|x| {
                    x["samples"].as_u64().unwrap_or(0) + x["rejected"].as_u64().unwrap_or(0)
                        >= 3 * STEPS
                })
        })
        .await;
    let v = stack.api_get(&format!("/api/v1/jobs/{job}/clocks")).await;
    eprintln!("clocks: {v}");
    let reference = v["reference_node"].as_str().expect("reference").to_string();
    // torchrun's c10d rendezvous gives ranks in join order: either node may
    // hold rank 0, and the offset's sign follows.
    let (other, want) = if reference == "faked-node" {
        ("e2e-node", -3000.0)
    } else {
        assert_eq!(reference, "e2e-node", "{v}");
        ("faked-node", 3000.0)
    };
    let n = nodes
        .iter()
        .find(|n| n["node"] == other)
        .expect("other node");
    let off = n["offset_us"].as_f64().expect("an offset");
    assert!(
        (off - want).abs() <= 300.0,
        "estimated {off} us, want {want} +- 300: {v}"
    );

    // The exported timeline: corrected, the faked node's end of each
    // all-reduce is within 300 us of the other's; raw, 3 ms apart.
    let ranks = stack
        .api_get(&format!("/api/v1/jobs/{job}/steps?last=1"))
        .await;
    let faked_ranks: Vec<u64> = ranks["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .filter(|s| s["node"] == "faked-node")
        .map(|s| s["rank"].as_u64().unwrap())
        .collect();
    assert_eq!(faked_ranks.len(), 2, "{ranks}");
    let t = stack.api_get(&format!("/api/v1/jobs/{job}/timeline")).await;
    let raw = stack
        .api_get(&format!("/api/v1/jobs/{job}/timeline?raw_clocks=true"))
        .await;
    let (gaps, raw_gaps) = (
        node_end_gaps(&t, &faked_ranks),
        node_end_gaps(&raw, &faked_ranks),
    );
    assert!(
        gaps.len() as u64 >= 2 * STEPS,
        "{} all-reduces on 4 ranks",
        gaps.len()
    );
    let (m, raw_m) = (median(gaps.clone()), median(raw_gaps.clone()));
    let within = gaps.iter().filter(|g| g.abs() <= 300.0).count();
    eprintln!(
        "corrected gap median {m:.1} us ({within} of {} within 300 us), raw median {raw_m:.1} us",
        gaps.len()
    );
    assert!(
        (raw_m - 3000.0).abs() <= 300.0,
        "raw: the faked node is 3 ms ahead: {raw_m}"
    );
    assert!(m.abs() <= 300.0, "corrected median gap {m} us");
    assert!(
        within * 10 >= gaps.len() * 9,
        "{within} of {} all-reduces end within 300 us across nodes: {gaps:?}",
        gaps.len()
    );
    stack.stop().await;
}
