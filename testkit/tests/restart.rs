//! kill -9 of the collector in the middle of a 16-rank job: every event the
//! agent accepted is stored exactly once, and the per-step breakdowns, the
//! straggler verdicts and the alerts equal those of a fault-free run of the
//! same seed (issue 14 item 2: the live state of unfinalized steps and the
//! straggler window are rebuilt from ClickHouse at start-up).
//!
//! The collector is the real `rankscope-collector` binary, killed with
//! SIGKILL; the agent and the simulated ranks run in the test process.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use common::*;
use rankscope_cli::simulate::{plan, run, SimConfig, Straggler};

fn collector_bin() -> PathBuf {
    let exe = std::env::current_exe().expect("test exe");
    let bin = exe
        .parent()
        .and_then(Path::parent)
        .expect("target dir")
        .join("rankscope-collector");
    assert!(bin.exists(), "{} was not built", bin.display());
    bin
}

/// The collector process, killed when dropped (a failing test leaves no orphan).
struct CollectorProc(Child);

impl Drop for CollectorProc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_collector(config: &Path, port: u16) -> CollectorProc {
    let mut child = Command::new(collector_bin())
        .arg("--config")
        .arg(config)
        .env("RUST_LOG", "rankscope_collector=info")
        .spawn()
        .expect("collector starts");
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("the collector exited: {status}");
        }
        assert!(Instant::now() < deadline, "the collector never listened");
        std::thread::sleep(Duration::from_millis(20));
    }
    CollectorProc(child)
}

fn sim(job: &str, start_ns: u64) -> SimConfig {
    SimConfig {
        job: job.into(),
        ranks: 16,
        steps: 60,
        layers: 4,
        seed: 42,
        start_ns,
        stragglers: vec![Straggler {
            rank: 5,
            factor: 1.3,
        }],
        ..Default::default()
    }
}

/// The job's per-(step, rank) breakdowns as ClickHouse returns them (TSV),
/// every computed column, no job id or computation time.
fn breakdowns(stack: &Stack, job: &str) -> String {
    stack
        .clickhouse
        .query(&format!(
            "SELECT step, rank, node, step_start_ns, step_time_ns, gpu_span_ns, gpu_busy_ns, \
             idle_ns, compute_ns, comm_ns, memory_ns, overlap_ns, exposed_comm_ns, \
             non_compute_ns, dataloader_ns, comm_wait_ns, comm_transfer_ns, gpu_events \
             FROM {}.step_breakdown FINAL WHERE job_id = '{job}' ORDER BY step, rank",
            stack.database
        ))
        .expect("breakdowns")
}

fn verdicts(stack: &Stack, job: &str) -> String {
    stack
        .clickhouse
        .query(&format!(
            "SELECT rank, node, first_step, last_step, steps_flagged, slowdown, score, cause, \
             active FROM {}.straggler_verdicts FINAL WHERE job_id = '{job}' \
             ORDER BY rank, first_step",
            stack.database
        ))
        .expect("verdicts")
}

/// Alert transitions of the job: (rule, rank, state) and how often.
fn alerts(stack: &Stack, job: &str) -> String {
    stack
        .clickhouse
        .query(&format!(
            "SELECT rule, rank, toString(state), count() FROM {}.alerts WHERE job_id = '{job}' \
             GROUP BY rule, rank, state ORDER BY rule, rank, state",
            stack.database
        ))
        .expect("alerts")
}

fn rows(stack: &Stack, sql: &str) -> u64 {
    stack
        .clickhouse
        .query(sql)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_collector_rebuilds_live_state_and_matches_a_fault_free_run() {
    let mut stack = Stack::start_without_agent().await;
    stack.collector.take().unwrap().shutdown().await;
    let grpc = rankscope_testkit::free_port();
    let http = rankscope_testkit::free_port();
    let config = stack.dir.path().join("collector.toml");
    std::fs::write(
        &config,
        format!(
            "grpc_listen_addr = \"127.0.0.1:{grpc}\"\nhttp_listen_addr = \"127.0.0.1:{http}\"\n\
             [clickhouse]\nurl = \"{}\"\ndatabase = \"{}\"\n[writer]\nflush_interval_ms = 50\n",
            stack.collector_cfg.clickhouse.url, stack.database
        ),
    )
    .unwrap();
    let mut collector = start_collector(&config, grpc);
    stack.start_agent(&format!("http://127.0.0.1:{grpc}")).await;
    let db = stack.database.clone();
    let start_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let steps = 60u64;
    let want_breakdowns = 16 * steps;
    let complete = |stack: &Stack, job: &str| {
        rows(
            stack,
            &format!("SELECT count() FROM {db}.step_breakdown FINAL WHERE job_id = '{job}'"),
        ) == want_breakdowns
    };

    // The fault-free reference.
    let reference = sim("restart-ref", start_ns);
    let sent = run(&reference, &stack.agent_url()).await.expect("simulate");
    assert_eq!(sent.dropped, 0);
    eventually(120, "reference analytics final", || {
        complete(&stack, "restart-ref")
    })
    .await;

    // The same job, and the collector killed in its middle.
    let mut faulty = sim("restart-kill", start_ns);
    let total = plan(&faulty).event_counts().total();
    // About 6 s of sending, so the kill lands mid-job.
    faulty.rate_events_per_s = Some(total as f64 / 6.0);
    let agent_url = stack.agent_url();
    let job = tokio::spawn(async move { run(&faulty, &agent_url).await });
    eventually(60, "a third of the job's step markers stored", || {
        rows(
            &stack,
            &format!("SELECT count() FROM {db}.steps WHERE job_id = 'restart-kill'"),
        ) >= 16 * 2 * steps / 3
    })
    .await;
    let finalized_before = rows(
        &stack,
        &format!("SELECT count() FROM {db}.step_breakdown WHERE job_id = 'restart-kill'"),
    );
    // A trace the collector knows about: its state comes back after the
    // restart (trace states are reloaded from `trace_ranks`).
    stack
        .clickhouse
        .query(&format!(
            "INSERT INTO {db}.trace_ranks VALUES \
             ('restart-kill', 't-reload', 0, 'sim-node-0', 'requested', '', 'manual', {start_ns}, {start_ns}, 2000, 0, -1, 0, 0, 0, -1), \
             ('restart-kill', 't-reload', 0, 'sim-node-0', 'imported', '', 'manual', {start_ns}, {}, 2000, 0, 3, 2, 100, 4242, -1)",
            start_ns + 1
        ))
        .expect("insert trace states");
    collector.0.kill().expect("SIGKILL");
    collector.0.wait().unwrap();
    assert!(
        finalized_before < want_breakdowns,
        "the job had ended before the kill"
    );
    drop(collector);
    let collector = start_collector(&config, grpc);
    let sent = job.await.unwrap().expect("simulate");
    assert_eq!(sent.dropped, 0, "the agent accepted every event");
    eventually(120, "analytics final after the restart", || {
        complete(&stack, "restart-kill")
    })
    .await;
    let report = stack.stop_agent().await;
    assert_eq!(report.undelivered_events, 0);

    // Every accepted event stored exactly once.
    let expected = plan(&sim("x", start_ns)).event_counts();
    let counts = stack.counts("restart-kill").await;
    assert_eq!(counts.total(), expected.total(), "{counts:?}");
    assert_eq!(
        stack.distinct_event_keys("restart-kill").await,
        expected.total(),
        "no event stored twice"
    );
    // Breakdowns of every step, verdicts and alerts equal the reference.
    let (want, got) = (
        breakdowns(&stack, "restart-ref"),
        breakdowns(&stack, "restart-kill"),
    );
    assert_eq!(got.lines().count() as u64, want_breakdowns);
    assert_eq!(
        got, want,
        "per-step breakdowns differ from the fault-free run"
    );
    let want = verdicts(&stack, "restart-ref");
    assert!(
        want.lines().any(|l| l.starts_with("5\t")),
        "the reference found no straggler: {want}"
    );
    eventually(30, "the straggler verdict", || {
        verdicts(&stack, "restart-kill") == want
    })
    .await;
    let want = alerts(&stack, "restart-ref");
    assert!(want.contains("straggler\t5\tfiring"), "{want}");
    eventually(30, "the alerts", || alerts(&stack, "restart-kill") == want).await;
    // No duplicate in an API answer: one row per (step, rank).
    let url = format!("http://127.0.0.1:{http}/api/v1/jobs/restart-kill/breakdown?last={steps}");
    let body: serde_json::Value = rankscope_cli::query::get_json(&url).await.expect("API");
    let api_rows = body["breakdown"].as_array().expect("rows").len() as u64;
    assert_eq!(api_rows, want_breakdowns, "{url}");
    let url = format!("http://127.0.0.1:{http}/api/v1/jobs/restart-kill/traces");
    let body: serde_json::Value = rankscope_cli::query::get_json(&url).await.expect("API");
    let traces = body["traces"].as_array().expect("traces");
    assert_eq!(traces.len(), 1, "{body}");
    assert_eq!(traces[0]["trace_id"], "t-reload", "{body}");
    assert_eq!(traces[0]["state"], "imported", "{body}");
    drop(collector);
}
