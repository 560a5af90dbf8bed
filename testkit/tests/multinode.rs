//! One job id for every rank of a multi-node launch (issue 35), with real
//! torchrun processes (CPU, gloo) under `rankscope run`, no `--job`.
//!
//! A 2-node launch is two `rankscope run -- python -m torch.distributed.run
//! --nnodes 2 --node-rank {0,1} --nproc-per-node 2 --rdzv-backend c10d ...`
//! groups on this machine, as two nodes would run them, both streaming to
//! one agent. Needs the venv of `make py` (or `RANKSCOPE_VENV`) and the
//! `rankscope` binary. Serial: each test starts 4 training processes on a
//! 2-core machine. Run inside `unshare -n` to keep the ports private.

use crate::common;

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

use common::{eventually, Stack};

const STEPS: u64 = 6;

fn rankscope(cache: &Path) -> Command {
    let mut cmd = Command::new(rankscope_testkit::bin_path("rankscope"));
    for v in rankscope_testkit::SCHEDULER_VARS {
        cmd.env_remove(v);
    }
    cmd.env("OMP_NUM_THREADS", "1")
        .env("XDG_CACHE_HOME", cache)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// One node of a 2-node, 2-process-per-node torchrun launch of the DDP
/// workload, under `rankscope run` (with `--job` only when given).
fn node(stack: &Stack, job: Option<&str>, node_rank: u32, rdzv_port: u16, rdzv_id: &str) -> Child {
    let agent = stack
        .agent
        .as_ref()
        .and_then(|a| a.unix_path.clone())
        .expect("agent unix socket");
    let mut cmd = rankscope(&stack.dir.path().join("cache"));
    cmd.arg("run")
        .arg("--agent")
        .arg(format!("unix:{}", agent.display()));
    if let Some(job) = job {
        cmd.args(["--job", job]);
    }
    cmd.arg("--").args(rankscope_testkit::torchrun_node_group(
        node_rank,
        rdzv_port,
        rdzv_id,
        "ddp_train.py",
        STEPS,
    ));
    cmd.spawn().expect("rankscope run starts")
}

/// Waits for a process; fails with its output unless it exited 0 without a traceback.
async fn finish(child: Child) -> String {
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
    text
}

/// Both nodes of one launch, to the end.
async fn two_nodes(stack: &Stack, jobs: [Option<&str>; 2], rdzv_id: &str) {
    let port = rankscope_testkit::free_port();
    let a = node(stack, jobs[0], 0, port, rdzv_id);
    let b = node(stack, jobs[1], 1, port, rdzv_id);
    finish(a).await;
    finish(b).await;
}

/// The collector's job list, once `want` jobs each saw every step end on their ranks.
async fn jobs_when(stack: &Stack, want: usize, ranks: u64) -> Vec<serde_json::Value> {
    stack
        .api_poll("/api/v1/jobs", "jobs", |jobs| {
            jobs.len() == want
                && jobs.iter().all(|j| {
                    j["ranks_seen"].as_u64() == Some(ranks)
                        && j["last_step"].as_u64() == Some(STEPS - 1)
                })
        })
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_of_one_torchrun_launch_are_one_job_without_flags() {
    let _serial = common::SERIAL.lock().await;
    let stack = Stack::start().await;
    two_nodes(&stack, [None, None], "mn-one-job").await;

    let jobs = jobs_when(&stack, 1, 4).await;
    let j = &jobs[0];
    assert_eq!(
        j["job"], "mn-one-job",
        "torchrun's --rdzv-id names the job: {j}"
    );
    assert_eq!(
        (j["world_size"].as_u64(), j["run_id"].as_str()),
        (Some(4), Some("mn-one-job"))
    );
    assert_eq!(j["warnings"], serde_json::json!([]), "{j}");

    // `last_step` is the job's highest: wait until every rank's last step
    // (and so its collectives, sent before it) is stored.
    let last_ends = format!(
        "SELECT uniqExact(rank) FROM {}.steps WHERE job_id = 'mn-one-job' \
         AND kind = 'end' AND step = {}",
        stack.database,
        STEPS - 1
    );
    eventually(60, "every rank's last step stored", || {
        stack
            .clickhouse
            .query(&last_ends)
            .is_ok_and(|n| n.trim() == "4")
    })
    .await;

    // Its all-reduces matched across the ranks of both nodes.
    let rows = stack
        .api_poll(
            "/api/v1/jobs/mn-one-job/collectives",
            "collectives",
            // A flush writes its tables side by side: the last
            // collectives may land just after the step ends.
            |rows| {
                let ar = rows.iter().filter(|r| r["op"] == "all_reduce");
                rows.iter().any(|r| r["op"] == "all_reduce")
                    && ar
                        .clone()
                        .all(|r| r["calls"] == 4 * r["collectives"].as_u64().unwrap_or(0))
            },
        )
        .await;
    let ar: Vec<_> = rows.iter().filter(|r| r["op"] == "all_reduce").collect();
    for r in &ar {
        let (calls, colls) = (
            r["calls"].as_u64().unwrap(),
            r["collectives"].as_u64().unwrap(),
        );
        assert!(colls > 0, "{r}");
        assert_eq!(
            calls,
            4 * colls,
            "each all-reduce matched on all 4 ranks: {r}"
        );
    }
    let ranks_per_step = stack
        .clickhouse
        .query(&format!(
            "SELECT groupUniqArray(toUInt32(c)) FROM (SELECT seq, uniqExact(rank) AS c \
             FROM {}.collectives WHERE job_id = 'mn-one-job' AND op = 'all_reduce' \
             AND process_group = '0' GROUP BY seq)",
            stack.database
        ))
        .expect("query");
    assert_eq!(
        ranks_per_step.trim(),
        "[4]",
        "every matched all-reduce has 4 ranks"
    );
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_world_forced_into_two_job_ids_is_warned() {
    let _serial = common::SERIAL.lock().await;
    let stack = Stack::start().await;
    two_nodes(&stack, [Some("half-a"), Some("half-b")], "mn-split").await;

    let jobs = jobs_when(&stack, 2, 2).await;
    for (me, other) in [("half-a", "half-b"), ("half-b", "half-a")] {
        let j = jobs.iter().find(|j| j["job"] == me).expect(me);
        let w = j["warnings"].as_array().expect("warnings");
        assert_eq!(w.len(), 1, "{j}");
        let w = w[0].as_str().unwrap();
        assert!(
            w.contains("2 of the 4 ranks of run mn-split")
                && w.contains(&format!("{other} (2 ranks)")),
            "{w}"
        );
    }
    // `rankscope jobs` shows it, as a table and as JSON.
    let cli = |format: &str| {
        let out = rankscope(&stack.dir.path().join("cache"))
            .args([
                "jobs",
                "--collector",
                &format!("http://{}", stack.http_addr()),
            ])
            .args(["--format", format])
            .output()
            .expect("rankscope jobs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("utf-8")
    };
    let table = cli("table");
    assert!(
        table.contains("warning: job half-a: world split across job ids")
            && table.contains("warning: job half-b: world split across job ids"),
        "{table}"
    );
    let json: serde_json::Value = serde_json::from_str(&cli("json")).expect("json");
    let warned = json
        .as_array()
        .expect("array")
        .iter()
        .filter(|j| j["warnings"].as_array().is_some_and(|w| w.len() == 1))
        .count();
    assert_eq!(warned, 2, "{json}");
    stack.stop().await;
}

/// A single-node torchrun with no `--rdzv-id` under `rankscope run`: each
/// launch gets its own job id (torchrun's per-launch uuid; see
/// `rankscope_proto::attribution::job`). One process each, no agent needed:
/// the SDK resolves its identity before it connects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_node_launches_without_a_rdzv_id_get_fresh_job_ids() {
    let _serial = common::SERIAL.lock().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let script = dir.path().join("who.py");
    std::fs::write(
        &script,
        "import rankscope\nprint('JOB', rankscope.init().identity()['job_id'])\n",
    )
    .expect("script");
    let launch = || {
        let cmd = rankscope(&dir.path().join("cache"))
            .args(["run", "--agent", "unix:/nonexistent/agent.sock", "--"])
            .arg(rankscope_testkit::venv_python())
            .args(["-m", "torch.distributed.run", "--nproc-per-node", "1"])
            .arg(&script)
            .spawn()
            .expect("rankscope run starts");
        finish(cmd)
    };
    let job = |out: &str| {
        out.lines()
            .find_map(|l| l.strip_prefix("JOB "))
            .unwrap_or_else(|| panic!("no job id printed:\n{out}"))
            .trim()
            .to_owned()
    };
    let (first, second) = (job(&launch().await), job(&launch().await));
    assert_ne!(first, second, "two launches never share a job id");
    for j in [&first, &second] {
        assert!(
            j != "none" && j.len() == 36,
            "torchrun's generated uuid: {j}"
        );
    }
}
