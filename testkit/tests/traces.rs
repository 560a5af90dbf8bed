//! Kineto traces on request, end to end: a plain torchrun job (no rankscope
//! code, no profiler code, `KINETO_USE_DAEMON=1`) next to a real agent,
//! collector and ClickHouse; `rankscope trace` asks the collector, the
//! collector's control stream carries the request to the agent, libkineto
//! writes the trace, the agent parses it and sends it through the uplink,
//! and the collector stores it and marks the rank `imported`.
//!
//! These tests serve libkineto's fixed abstract socket name `dynolog`, so
//! they run one at a time (`common::SERIAL`, shared with every module that
//! serves it). Needs the venv of `make py` and the `rankscope` binary.

use crate::common;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::kineto_client::FakeClient;
use common::{Group, Stack};

/// A stack whose agent serves `@dynolog` and writes traces under its dir.
async fn stack() -> Stack {
    stack_with(|_| {}).await
}

async fn stack_with(tweak: impl FnOnce(&mut rankscope_collector::Config)) -> Stack {
    let mut s = Stack::start_without_agent_with(tweak).await;
    let mut cfg = common::agent_config(&format!("http://{}", s.grpc_addr()), s.dir.path());
    cfg.trace_dir = s.dir.path().join("traces").to_string_lossy().into_owned();
    cfg.kineto_daemon_name = "dynolog".into();
    s.agent = Some(common::start_dynolog_agent(cfg).await);
    s
}

/// A plain 2-rank torchrun DDP job on gloo, `KINETO_USE_DAEMON=1`.
fn launch(job: &str, steps: u32) -> Group {
    launch_with(job, steps, &[])
}

fn launch_with(job: &str, steps: u32, extra: &[&str]) -> Group {
    Group::spawn(
        Command::new(rankscope_testkit::venv_python())
            .args([
                "-m",
                "torch.distributed.run",
                "--nproc-per-node",
                "2",
                "--master-port",
            ])
            .arg(rankscope_testkit::free_port().to_string())
            .arg(rankscope_testkit::workspace_root().join("python/tests/workloads/ddp_train.py"))
            .args(["--steps", &steps.to_string(), "--step-ms", "30"])
            .args(extra)
            .env("KINETO_USE_DAEMON", "1")
            .env("RANKSCOPE_JOB_ID", job)
            .env("OMP_NUM_THREADS", "1")
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    )
}

/// Waits until the agent attributed `n` libkineto processes to `job` and
/// the collector knows them (a request no longer answers 404).
async fn wait_for_processes(stack: &Stack, job: &str, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let agent = stack.agent.as_ref().expect("agent");
    while agent
        .kineto_processes()
        .iter()
        .filter(|(_, id)| id.job_id == job)
        .count()
        < n
    {
        assert!(
            Instant::now() < deadline,
            "the ranks never polled the agent"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn cli(stack: &Stack, args: &[&str]) -> std::process::Output {
    Command::new(rankscope_testkit::bin_path("rankscope"))
        .arg("--collector")
        .arg(format!("http://{}", stack.http_addr()))
        .args(args)
        .output()
        .expect("rankscope runs")
}

/// Runs `rankscope trace ...` until the collector knows the job's
/// processes (their first report follows the agent's next tick).
fn trace_cli(stack: &Stack, args: &[&str]) -> std::process::Output {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = cli(stack, args);
        let err = String::from_utf8_lossy(&out.stderr);
        if out.status.success() || !err.contains("not found") || Instant::now() > deadline {
            return out;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn query(stack: &Stack, sql: &str) -> String {
    stack
        .clickhouse
        .query(&sql.replace("{db}", &stack.database))
        .expect("query")
}

/// (step, end_ns) of every complete step of `rank`.
fn step_ends(stack: &Stack, job: &str, rank: u32) -> Vec<(u64, u64)> {
    query(
        stack,
        &format!(
            "SELECT step, max(ts_ns) FROM {{db}}.steps WHERE job_id = '{job}' AND rank = {rank} \
             GROUP BY step HAVING countIf(kind = 'begin') = 1 AND countIf(kind = 'end') = 1 ORDER BY step"
        ),
    )
    .lines()
    .map(|l| {
        let mut it = l.split('\t').map(|x| x.parse::<u64>().expect("number"));
        (it.next().unwrap(), it.next().unwrap())
    })
    .collect()
}

fn kill(group: Group) {
    drop(group);
}

/// A job id of this run (stale processes of an earlier run never match).
fn job_id(name: &str) -> String {
    format!("{name}-{}", std::process::id())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_rank_of_a_plain_torch_job_is_traced_on_the_same_iterations_and_imported() {
    let _serial = common::SERIAL.lock().await;
    // Each process picks the request up at its own libkineto poll; both
    // start at the next multiple of the roundup, so they trace the same
    // iterations unless a multiple falls between their polls. 50 iterations
    // (about 3 s here) instead of 10 makes that rare: with 10 it happened
    // once in a loaded full run (rank 1 traced 9 iterations after rank 0).
    let stack = stack_with(|c| c.traces.iteration_roundup = 50).await;
    let job = job_id("traced-plain");
    let job = job.as_str();

    // Bad input first: clear 4xx messages.
    let out = cli(&stack, &["trace", "--job", "nobody", "--iterations", "2"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("404") && err.contains("not found"), "{err}");
    let out = cli(&stack, &["trace", "--job", job]);
    assert!(
        !out.status.success(),
        "neither --duration-ms nor --iterations"
    );

    let child = launch(job, 600);
    wait_for_processes(&stack, job, 2).await;
    let out = trace_cli(
        &stack,
        &["trace", "--job", job, "--rank", "7", "--iterations", "2"],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("rank 7 is out of range"), "{err}");

    let out = trace_cli(
        &stack,
        &[
            "trace",
            "--job",
            job,
            "--iterations",
            "2",
            "--wait",
            "90",
            "--format",
            "json",
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<serde_json::Value> = serde_json::from_str(&text).expect("json rows");
    assert_eq!(rows.len(), 2, "{text}");
    for r in &rows {
        assert_eq!(r["state"], "imported", "{r}");
        assert_eq!(r["node"], "e2e-node", "{r}");
        assert_eq!(r["iterations"], 2, "{r}");
        assert!(r["events"].as_u64().unwrap() > 0, "{r}");
    }
    kill(child);

    // Both ranks hold the same two iterations, under the same step numbers:
    // the same iteration ends at (nearly) the same time on both ranks (the
    // gradient all-reduce joins them), far closer than one iteration apart.
    let r0 = step_ends(&stack, job, 0);
    let r1 = step_ends(&stack, job, 1);
    let all = query(
        &stack,
        &format!("SELECT rank, step, kind, ts_ns FROM {{db}}.steps WHERE job_id = '{job}' ORDER BY rank, ts_ns"),
    );
    assert_eq!(
        r0.len(),
        2,
        "rank 0 steps {r0:?}, rank 1 {r1:?}\n{rows:?}\n{all}"
    );
    let steps0: Vec<u64> = r0.iter().map(|s| s.0).collect();
    let steps1: Vec<u64> = r1.iter().map(|s| s.0).collect();
    assert_eq!(steps0, steps1, "same steps on both ranks");
    let period = r0[1].1.abs_diff(r0[0].1);
    for (a, b) in r0.iter().zip(&r1) {
        assert!(
            a.1.abs_diff(b.1) < period / 2,
            "step {}: ends {} ns apart, an iteration is {period} ns",
            a.0,
            a.1.abs_diff(b.1)
        );
    }
    // The imported events are queryable by job and rank.
    for rank in [0, 1] {
        let n: u64 = query(
            &stack,
            &format!(
                "SELECT count() FROM {{db}}.collectives WHERE job_id = '{job}' AND rank = {rank}"
            ),
        )
        .trim()
        .parse()
        .unwrap();
        assert!(n > 0, "rank {rank}: no collectives");
        // The daemon trace went through the same import: its operators too.
        let ops = stack
            .api_get(&format!("/api/v1/jobs/{job}/ops?rank={rank}"))
            .await;
        assert!(
            ops["rows"].as_array().is_some_and(|r| r
                .iter()
                .any(|o| o["name"] == "aten::mm" || o["name"] == "aten::addmm")),
            "rank {rank}: no operator rows: {ops}"
        );
    }
    let steps = stack
        .api_poll(&format!("/api/v1/jobs/{job}/steps"), "steps", |r| {
            r.len() >= 4
        })
        .await;
    assert!(steps.len() >= 4, "{steps:?}");

    // `rankscope traces` lists them, and the API says the same per trace.
    let out = cli(&stack, &["traces", "--job", job]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && table.matches("imported").count() == 2,
        "{table}"
    );
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duration_request_for_one_rank_traces_only_that_rank() {
    let _serial = common::SERIAL.lock().await;
    let stack = stack().await;
    let job = job_id("traced-one");
    let job = job.as_str();
    // Asked once the job trains: a window from a poll during start-up may
    // hold no step.
    let progress = stack.dir.path().join("traced-one.progress");
    let child = launch_with(
        job,
        600,
        &["--progress", progress.to_str().expect("utf-8 path")],
    );
    wait_for_processes(&stack, job, 2).await;
    common::wait_progress(&progress, 3).await;
    let out = trace_cli(
        &stack,
        &[
            "trace",
            "--job",
            job,
            "--rank",
            "1",
            "--duration-ms",
            "1000",
            "--wait",
            "90",
            "--format",
            "json",
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<serde_json::Value> = serde_json::from_str(&text).expect("json rows");
    assert_eq!(rows.len(), 1, "{text}");
    assert_eq!(
        (rows[0]["rank"].as_u64(), rows[0]["state"].as_str()),
        (Some(1), Some("imported"))
    );
    kill(child);
    assert!(
        step_ends(&stack, job, 0).is_empty(),
        "rank 0 was not traced"
    );
    assert!(!step_ends(&stack, job, 1).is_empty(), "rank 1 was");
    let traced = stack.agent.as_ref().unwrap().traces();
    assert_eq!(traced.len(), 1, "{traced:?}");
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rank_whose_process_exits_before_capturing_is_failed_with_the_reason() {
    let _serial = common::SERIAL.lock().await;
    let stack = stack().await;
    let job = job_id("traced-exit");
    let job = job.as_str();
    let mut child = launch(job, 100);
    wait_for_processes(&stack, job, 2).await;
    // A one-minute trace of a job that ends within seconds.
    let out = trace_cli(
        &stack,
        &[
            "trace",
            "--job",
            job,
            "--rank",
            "0",
            "--duration-ms",
            "60000",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // libkineto (torch 2.15, CPU build) may crash the process at exit while
    // an on-demand trace runs: gone either way.
    let _ = child.0.wait();
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let v = stack.api_get(&format!("/api/v1/jobs/{job}/traces")).await;
        let r = &v["traces"][0];
        if r["state"] == "failed" {
            let reason = r["reason"].as_str().unwrap_or_default();
            assert!(
                reason.contains("exited before") || reason.contains("ended before"),
                "{reason}"
            );
            break;
        }
        assert!(Instant::now() < deadline, "never failed: {v}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_straggler_gets_one_automatic_trace_and_trace_diff_puts_its_extra_compute_first() {
    let _serial = common::SERIAL.lock().await;
    let stack = stack_with(|c| {
        c.traces.auto.enabled = true;
        c.traces.auto.iterations = 3;
        c.traces.auto.cooldown_secs = 3600;
    })
    .await;
    let job = job_id("traced-straggler");
    let job = job.as_str();
    let agent = stack
        .agent
        .as_ref()
        .and_then(|a| a.unix_path.clone())
        .expect("agent unix socket");
    // Live SDK streams (rankscope run) and libkineto's daemon mode at once;
    // rank 2 runs 32 extra forward passes per step.
    let child = Group::spawn(
        Command::new(rankscope_testkit::bin_path("rankscope"))
            .arg("run")
            .arg("--agent")
            .arg(format!("unix:{}", agent.display()))
            .args(["--job", job, "--"])
            .arg(rankscope_testkit::venv_python())
            .args([
                "-m",
                "torch.distributed.run",
                "--nproc-per-node",
                "4",
                "--master-port",
            ])
            .arg(rankscope_testkit::free_port().to_string())
            .arg(rankscope_testkit::workspace_root().join("python/tests/workloads/ddp_train.py"))
            .args([
                "--steps",
                "400",
                "--slow-rank",
                "2",
                "--slow-kind",
                "compute",
            ])
            .env("KINETO_USE_DAEMON", "1")
            .env("OMP_NUM_THREADS", "1")
            .env("XDG_CACHE_HOME", stack.dir.path().join("cache"))
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    // The verdict links its automatic trace.
    let rows = stack
        .api_poll(
            &format!("/api/v1/jobs/{job}/stragglers"),
            "stragglers",
            |r| r.iter().any(|s| s["trace_id"].is_string()),
        )
        .await;
    let s = rows.iter().find(|s| s["trace_id"].is_string()).unwrap();
    assert_eq!(s["rank"], 2, "{s}");
    let trace = s["trace_id"].as_str().unwrap().to_owned();
    // It covers the straggler and its two nearest healthy peers, and ends imported.
    let deadline = Instant::now() + Duration::from_secs(120);
    let ranks = loop {
        let v = stack
            .api_get(&format!("/api/v1/jobs/{job}/traces?trace_id={trace}"))
            .await;
        let ranks = v["traces"].as_array().cloned().unwrap_or_default();
        if ranks.len() == 3
            && ranks
                .iter()
                .all(|r| r["state"] == "imported" || r["state"] == "failed")
        {
            break ranks;
        }
        assert!(Instant::now() < deadline, "trace never finished: {v}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    kill(child);
    let got: Vec<u64> = ranks.iter().map(|r| r["rank"].as_u64().unwrap()).collect();
    assert_eq!(got, [1, 2, 3]);
    for r in &ranks {
        assert_eq!(r["state"], "imported", "{r}");
        assert_eq!(r["origin"], "auto:straggler", "{r}");
        assert_eq!(r["subject"], 2, "{r}");
    }
    // One automatic trace per cooldown, however often the verdict changes.
    let all = stack.api_get(&format!("/api/v1/jobs/{job}/traces")).await;
    let ids: std::collections::BTreeSet<&str> = all["traces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["trace_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 1, "{all}");
    // trace-diff: the straggler's extra matrix multiplications come first.
    let out = cli(
        &stack,
        &[
            "trace-diff",
            "--job",
            job,
            "--trace",
            &trace,
            "--format",
            "json",
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<serde_json::Value> = serde_json::from_str(&text).expect("json");
    let first_op = rows.iter().find(|r| r["level"] == "op").expect("an op row");
    assert!(
        matches!(first_op["name"].as_str(), Some("aten::addmm" | "aten::mm")),
        "{first_op}\n{text}"
    );
    assert!(
        first_op["diff_ns_per_iter"].as_f64().unwrap() > 0.0,
        "{first_op}"
    );
    assert!(
        first_op["subject_calls_per_iter"].as_f64().unwrap()
            > first_op["peers_calls_per_iter"].as_f64().unwrap(),
        "{first_op}"
    );
    stack.stop().await;
}

fn log_file(config: &str) -> Option<PathBuf> {
    config
        .lines()
        .find_map(|l| l.strip_prefix("ACTIVITIES_LOG_FILE="))
        .map(PathBuf::from)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_truncated_trace_file_fails_its_rank_and_the_other_rank_is_imported() {
    let _serial = common::SERIAL.lock().await;
    let stack = stack().await;
    let job = job_id("traced-faults");
    let job = job.as_str();
    // Two "ranks": long-lived processes the agent attributes by their environ.
    let ranks: Vec<Group> = (0..2)
        .map(|r| {
            Group::spawn(
                Command::new("sleep")
                    .arg("300")
                    .env("RANKSCOPE_JOB_ID", job)
                    .env("RANK", r.to_string())
                    .env("WORLD_SIZE", "2"),
            )
        })
        .collect();
    let client = FakeClient::new("faults", "dynolog");
    let pids: Vec<u32> = ranks.iter().map(|g| g.0.id()).collect();
    // Poll until the collector knows both processes and a request is accepted
    // (a deadline, not a wait: generous for a loaded machine).
    let deadline = Instant::now() + Duration::from_secs(90);
    let http = rankscope_cli::query::http::HttpClient::new(Duration::from_secs(5));
    let url = format!("http://{}", stack.http_addr());
    let trace = loop {
        for p in &pids {
            assert_eq!(client.poll(*p), "", "nothing requested yet");
        }
        // A poll that came before a child exec'd `sleep` read the test's own
        // environ (no job): poll again, as libkineto does, until both are
        // attributed (stop 22's checks saw that race under load).
        let attributed = stack
            .agent
            .as_ref()
            .expect("agent")
            .kineto_processes()
            .iter()
            .filter(|(_, id)| id.job_id == job)
            .count();
        if attributed < 2 {
            assert!(
                Instant::now() < deadline,
                "the agent attributed {attributed} of 2 polling processes to {job}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        }
        match rankscope_cli::query::traces::request(
            &http,
            &url,
            job,
            &[],
            rankscope_cli::query::traces::TraceSpan::DurationMs(100),
        )
        .await
        {
            Ok((id, rows)) => {
                assert_eq!(rows.len(), 2);
                break id;
            }
            Err(e) => assert!(
                e.to_string().contains("not found") && Instant::now() < deadline,
                "{e}"
            ),
        }
    };
    // Each "rank" receives its config at its next poll.
    let mut files = Vec::new();
    for p in &pids {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(f) = log_file(&client.poll(*p)) {
                files.push(f);
                break;
            }
            assert!(Instant::now() < deadline, "no config for pid {p}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    // Rank 0 writes a real trace, rank 1 a truncated one.
    let fixture = rankscope_testkit::workspace_root()
        .join("kineto/tests/fixtures/daemon_cpu_2rank/rank0.json.gz");
    let mut json = Vec::new();
    std::io::Read::read_to_end(
        &mut flate2::read::MultiGzDecoder::new(std::fs::File::open(fixture).unwrap()),
        &mut json,
    )
    .unwrap();
    std::fs::write(&files[1], &json[..json.len() / 2]).unwrap();
    std::fs::write(&files[0], &json).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let rows = loop {
        let v = stack
            .api_get(&format!("/api/v1/jobs/{job}/traces?trace_id={trace}"))
            .await;
        let rows = v["traces"].as_array().cloned().unwrap_or_default();
        if rows
            .iter()
            .all(|r| r["state"] == "imported" || r["state"] == "failed")
        {
            break rows;
        }
        assert!(Instant::now() < deadline, "never finished: {v}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    drop(ranks);
    assert_eq!(rows[0]["state"], "imported", "{rows:?}");
    assert_eq!(rows[1]["state"], "failed", "{rows:?}");
    let reason = rows[1]["reason"].as_str().unwrap();
    assert!(
        reason.contains("JSON") || reason.contains("truncated"),
        "{reason}"
    );
    assert!(
        !step_ends(&stack, job, 0).is_empty(),
        "rank 0's iterations are stored"
    );
    assert!(step_ends(&stack, job, 1).is_empty());
    stack.stop().await;
}
