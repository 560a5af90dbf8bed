//! Real PyTorch (CPU, gloo, 4 processes under torchrun) streaming live
//! through `rankscope run` — no rankscope code in the training scripts —
//! into a real agent, collector and ClickHouse.
//!
//! Needs the Python environment `make py` builds (`.venv/`, or
//! `RANKSCOPE_VENV`) and the `rankscope` binary `cargo test --workspace`
//! builds. The tests run one at a time: each starts 4 training processes on
//! a 2-core machine.

use crate::common;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{eventually, Stack};

const RANKS: u32 = 4;

fn repo() -> PathBuf {
    rankscope_testkit::workspace_root()
}

fn python() -> PathBuf {
    rankscope_testkit::venv_python()
}

/// Starts `rankscope run --agent <unix> --job <job> -- python -m
/// torch.distributed.run --nproc-per-node 4 <script> <args>`.
fn launch(stack: &Stack, job: &str, script: &str, args: &[&str], env: &[(&str, &str)]) -> Child {
    let agent = stack
        .agent
        .as_ref()
        .and_then(|a| a.unix_path.clone())
        .expect("agent unix socket");
    let mut cmd = Command::new(rankscope_testkit::bin_path("rankscope"));
    cmd.arg("run")
        .arg("--agent")
        .arg(format!("unix:{}", agent.display()))
        .arg("--job")
        .arg(job)
        .arg("--")
        .arg(python())
        .args(["-m", "torch.distributed.run", "--nproc-per-node"])
        .arg(RANKS.to_string())
        .arg("--master-port")
        .arg(rankscope_testkit::free_port().to_string())
        .arg(repo().join("python/tests/workloads").join(script))
        .args(args)
        .env("OMP_NUM_THREADS", "1")
        .env("XDG_CACHE_HOME", stack.dir.path().join("cache"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.spawn().expect("rankscope run starts")
}

/// Waits for the job; fails with its output unless it exited 0 without a traceback.
async fn finish(child: Child) -> String {
    let out = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .expect("join")
        .expect("wait");
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "training failed:\n{text}");
    assert!(
        !text.contains("Traceback"),
        "an exception in training:\n{text}"
    );
    text
}

fn query(stack: &Stack, sql: &str) -> String {
    let sql = sql.replace("{db}", &stack.database);
    stack
        .clickhouse
        .query(&sql)
        .expect("query")
        .trim()
        .to_owned()
}

/// Rows of unsigned integers, tab-separated.
fn rows_of(stack: &Stack, sql: &str) -> Vec<Vec<u64>> {
    query(stack, sql)
        .lines()
        .map(|l| {
            l.split('\t')
                .map(|x| x.parse().unwrap_or_else(|_| panic!("{sql}: {l:?}")))
                .collect()
        })
        .collect()
}

fn num(stack: &Stack, sql: &str) -> u64 {
    let out = query(stack, sql);
    out.parse()
        .unwrap_or_else(|_| panic!("{sql}: not a number: {out:?}"))
}

/// Every (step, rank) of steps 0..steps ended and was stored.
/// The ranks' last batches may still be on their way through the agent and
/// the collector's writer when the processes exit: wait for them.
async fn assert_every_step_stored(stack: &Stack, job: &str, steps: u64) {
    let want = steps * u64::from(RANKS);
    let sql = format!(
        "SELECT count() FROM (SELECT DISTINCT rank, step FROM {{db}}.steps \
         WHERE job_id = '{job}' AND kind = 'end')"
    );
    eventually(60, &format!("{want} (rank, step) pairs stored"), || {
        num(stack, &sql) >= want
    })
    .await;
    let pairs = num(stack, &sql);
    assert_eq!(pairs, want, "(rank, step) pairs stored");
    let max = num(
        stack,
        &format!("SELECT max(step) FROM {{db}}.steps WHERE job_id = '{job}'"),
    );
    assert_eq!(max, steps - 1, "no step beyond the last optimizer step");
}

async fn straggler(stack: &Stack, job: &str) -> serde_json::Value {
    let rows = stack
        .api_poll(
            &format!("/api/v1/jobs/{job}/stragglers"),
            "stragglers",
            |rows| !rows.is_empty(),
        )
        .await;
    assert_eq!(rows.len(), 1, "one straggler: {rows:?}");
    rows[0].clone()
}

async fn slowed_ddp_job(kind: &str) -> (Stack, String, serde_json::Value) {
    let stack = Stack::start().await;
    let job = format!("ddp-{kind}");
    let info = stack.dir.path().join("info.json");
    let child = launch(
        &stack,
        &job,
        "ddp_train.py",
        &[
            "--steps",
            "16",
            "--slow-rank",
            "2",
            "--slow-kind",
            kind,
            "--info",
            info.to_str().expect("utf-8 path"),
        ],
        &[],
    );
    finish(child).await;
    let info: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&info).expect("info file")).expect("json");
    (stack, job, info)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ddp_with_a_slow_compute_rank_is_named_with_cause_compute() {
    let _serial = common::SERIAL.lock().await;
    let (stack, job, info) = slowed_ddp_job("compute").await;
    assert_every_step_stored(&stack, &job, 16).await;
    let s = straggler(&stack, &job).await;
    assert_eq!(s["rank"], 2, "{s}");
    assert_eq!(s["cause"], "compute", "{s}");
    // Flagged from the first steps on: the verdict (3 of 5 flagged) stood by step 5.
    assert!(s["first_step"].as_u64().expect("first_step") <= 2, "{s}");

    // All-reduces matched across the 4 ranks, sized as DDP's gradient buckets.
    let rows = stack
        .api_poll(
            &format!("/api/v1/jobs/{job}/collectives"),
            "collectives",
            // A flush writes its tables side by side: the last
            // collectives may land just after the steps (multinode.rs).
            |rows| {
                let mut ar = rows.iter().filter(|r| r["op"] == "all_reduce").peekable();
                ar.peek().is_some()
                    && ar.all(|r| {
                        r["calls"] == u64::from(RANKS) * r["collectives"].as_u64().unwrap_or(0)
                    })
            },
        )
        .await;
    let ar: Vec<_> = rows.iter().filter(|r| r["op"] == "all_reduce").collect();
    assert!(!ar.is_empty(), "{rows:?}");
    for r in &ar {
        assert_eq!(r["process_group"], "0");
        let (calls, colls) = (
            r["calls"].as_u64().unwrap(),
            r["collectives"].as_u64().unwrap(),
        );
        assert_eq!(
            calls,
            u64::from(RANKS) * colls,
            "matched on every rank: {r}"
        );
    }
    let wait: u64 = ar.iter().map(|r| r["wait_ns"].as_u64().unwrap()).sum();
    let transfer: u64 = ar.iter().map(|r| r["transfer_ns"].as_u64().unwrap()).sum();
    assert!(wait > 0 && transfer > 0, "wait {wait} transfer {transfer}");
    // After DDP's bucket rebuild (first iteration), every step all-reduces
    // exactly its buckets.
    let buckets: Vec<u64> = info["bucket_bytes"]
        .as_array()
        .expect("bucket_bytes")
        .iter()
        .map(|b| b.as_u64().unwrap())
        .collect();
    let mut want = buckets.clone();
    want.sort_unstable();
    let steps = rows_of(
        &stack,
        &format!(
            "SELECT step, minIf(ts_ns, kind = 'begin'), maxIf(ts_ns, kind = 'end') \
             FROM {{db}}.steps WHERE job_id = '{job}' AND rank = 0 GROUP BY step ORDER BY step"
        ),
    );
    let calls_sql = format!(
        "SELECT start_ns, bytes FROM {{db}}.collectives WHERE job_id = '{job}' \
         AND rank = 0 AND op = 'all_reduce' ORDER BY start_ns"
    );
    // Every step from 2 on holds its buckets once rank 0's last collectives
    // are stored (they may land after its steps).
    let from_2: Vec<&Vec<u64>> = steps.iter().filter(|s| s[0] >= 2).collect();
    let in_steps = |calls: &[Vec<u64>]| {
        calls
            .iter()
            .filter(|c| from_2.iter().any(|s| c[0] >= s[1] && c[0] < s[2]))
            .count()
    };
    eventually(60, "rank 0's all-reduces of every step stored", || {
        in_steps(&rows_of(&stack, &calls_sql)) >= want.len() * from_2.len()
    })
    .await;
    let calls = rows_of(&stack, &calls_sql);
    for s in steps.iter().filter(|s| s[0] >= 2) {
        let mut sizes: Vec<u64> = calls
            .iter()
            .filter(|c| c[0] >= s[1] && c[0] < s[2])
            .map(|c| c[1])
            .collect();
        sizes.sort_unstable();
        assert_eq!(
            sizes, want,
            "step {}: all-reduce sizes vs DDP's buckets",
            s[0]
        );
    }
    let total: u64 = buckets.iter().sum();
    assert_eq!(total, info["grad_bytes"].as_u64().unwrap());
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ddp_with_a_slow_input_rank_is_named_with_cause_input() {
    let _serial = common::SERIAL.lock().await;
    let (stack, job, _) = slowed_ddp_job("input").await;
    assert_every_step_stored(&stack, &job, 16).await;
    let s = straggler(&stack, &job).await;
    assert_eq!(s["rank"], 2, "{s}");
    assert_eq!(s["cause"], "input", "{s}");
    assert!(s["first_step"].as_u64().expect("first_step") <= 5, "{s}");
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_torch_distributed_ops_are_recorded_with_op_bytes_and_group_size() {
    let _serial = common::SERIAL.lock().await;
    let stack = Stack::start().await;
    let out = stack.dir.path().join("ran.jsonl");
    let child = launch(
        &stack,
        "plain-dist",
        "collectives.py",
        &["--out", out.to_str().unwrap()],
        &[],
    );
    finish(child).await;
    // What rank 0 ran, in order: (op, bytes, group size).
    let ran: Vec<serde_json::Value> = std::fs::read_to_string(&out)
        .expect("ran file")
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect();
    assert!(
        ran.iter().all(|r| r.get("unsupported").is_none()),
        "every op ran on gloo: {ran:?}"
    );
    let expected: Vec<String> = ran
        .iter()
        .map(|r| {
            format!(
                "{}\t{}\t{}",
                r["op"].as_str().unwrap(),
                r["bytes"],
                r["group_size"]
            )
        })
        .collect();
    let rank0 = || -> Vec<String> {
        query(
            &stack,
            "SELECT op, bytes, group_size FROM {db}.collectives WHERE job_id = 'plain-dist' \
             AND rank = 0 ORDER BY start_ns, op",
        )
        .lines()
        .map(str::to_owned)
        .collect()
    };
    // Each rank's last batch comes through its own stream: wait for rank 0's
    // ops and for the world group's calls on all 4 ranks.
    let world = |rank0_only: bool| {
        num(
            &stack,
            &format!(
                "SELECT count() FROM {{db}}.collectives WHERE job_id = 'plain-dist' \
                 AND process_group = '0'{}",
                if rank0_only { " AND rank = 0" } else { "" }
            ),
        )
    };
    eventually(60, "rank 0's ops and the world group on every rank", || {
        rank0().len() >= expected.len() && world(false) == u64::from(RANKS) * world(true)
    })
    .await;
    let stored = rank0();
    let mut want = expected.clone();
    let mut have = stored.clone();
    want.sort();
    have.sort();
    assert_eq!(have, want, "rank 0's ops as stored");
    for op in [
        "all_reduce",
        "all_gather",
        "reduce_scatter",
        "broadcast",
        "reduce",
        "all_to_all",
        "barrier",
        "send",
        "recv",
    ] {
        assert!(have.iter().any(|l| l.starts_with(op)), "{op} recorded");
    }
    // Each collective of the world group is on all 4 ranks with the same seq.
    let unmatched = num(
        &stack,
        "SELECT count() FROM (SELECT process_group, seq, count() AS n FROM {db}.collectives \
         WHERE job_id = 'plain-dist' AND process_group = '0' GROUP BY process_group, seq \
         HAVING n != 4)",
    );
    assert_eq!(unmatched, 0);
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn training_goes_on_while_the_agent_is_away_and_the_stream_resumes() {
    let _serial = common::SERIAL.lock().await;
    let mut stack = Stack::start().await;
    let job = "ddp-agent-restart";
    let progress = stack.dir.path().join("progress");
    let stats = stack.dir.path().join("stats-{rank}.json");
    let steps = 80u64;
    // Gates, not clocks: the ranks wait before step 8 until the agent is
    // stopped, and before step 40 until the new agent has every rank back.
    let (away, back) = (
        stack.dir.path().join("agent-away"),
        stack.dir.path().join("agent-back"),
    );
    let hold_away = format!("8:{}", away.display());
    let hold_back = format!("40:{}", back.display());
    let child = launch(
        &stack,
        job,
        "ddp_train.py",
        &[
            "--steps",
            &steps.to_string(),
            "--progress",
            progress.to_str().unwrap(),
            "--hold",
            &hold_away,
            "--hold",
            &hold_back,
        ],
        &[
            ("RANKSCOPE_STATS_FILE", stats.to_str().unwrap()),
            ("RANKSCOPE_QUEUE_EVENTS", "64"),
        ],
    );
    let progress_now = || -> u64 {
        std::fs::read_to_string(&progress)
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0)
    };
    let deadline = Instant::now() + Duration::from_secs(120);
    // The job is flowing through the agent.
    while num(
        &stack,
        &format!("SELECT count() FROM {{db}}.steps WHERE job_id = '{job}' AND kind = 'end'"),
    ) < 4
    {
        assert!(Instant::now() < deadline, "no steps stored");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stack.stop_agent().await;
    let stopped_at = progress_now();
    std::fs::write(&away, b"").expect("gate file");
    // Training goes on without the agent for 15 steps.
    while progress_now() < stopped_at + 15 {
        assert!(
            Instant::now() < deadline,
            "training stalled without the agent"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let collector = format!("http://{}", stack.grpc_addr());
    stack.start_agent(&collector).await;
    eventually(120, "every rank's stream back on the new agent", || {
        stack
            .agent
            .as_ref()
            .expect("agent")
            .metrics()
            .streams_active
            >= u64::from(RANKS)
    })
    .await;
    std::fs::write(&back, b"").expect("gate file");
    finish(child).await;
    let mut reconnected = 0;
    for rank in 0..RANKS {
        let path = stats.to_str().unwrap().replace("{rank}", &rank.to_string());
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).expect("stats file"))
                .expect("json");
        let s = &v["stats"];
        assert!(s["dropped"].as_u64().unwrap() > 0, "rank {rank}: {s}");
        assert_eq!(
            s["dropped"].as_u64().unwrap(),
            s["dropped_queue_full"].as_u64().unwrap()
                + s["dropped_by_agent"].as_u64().unwrap()
                + s["dropped_disconnected"].as_u64().unwrap()
                + s["dropped_unpaired"].as_u64().unwrap()
        );
        // Drops never made the agent reject a message.
        assert_eq!(s["rejected"], 0, "rank {rank}: {s}");
        assert!(s["sent"].as_u64().unwrap() > 0);
        if s["reconnects"].as_u64().unwrap() >= 1 {
            reconnected += 1;
        }
    }
    assert_eq!(reconnected, RANKS, "every rank reconnected");
    // The stream resumed: the last step of every rank is stored.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let last = num(
            &stack,
            &format!(
                "SELECT count() FROM {{db}}.steps WHERE job_id = '{job}' AND kind = 'end' \
                 AND step = {}",
                steps - 1
            ),
        );
        if last == u64::from(RANKS) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the last step was not stored: {}\n{}",
            query(
                &stack,
                &format!(
                    "SELECT rank, min(step), max(step), count() FROM {{db}}.steps \
                     WHERE job_id = '{job}' AND kind = 'end' GROUP BY rank ORDER BY rank"
                )
            ),
            std::fs::read_to_string(stats.to_str().unwrap().replace("{rank}", "0"))
                .unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stack.stop().await;
}
