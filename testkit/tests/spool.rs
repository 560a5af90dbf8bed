//! The agent's disk spool: events the agent acknowledged to a rank survive
//! a kill -9 of the agent process and are stored exactly once after its
//! restart; a full spool drops the newest events and counts them.
//!
//! The rank is the Rust SDK (`rankscope-sdk`), which reconnects on its own;
//! the agent is the real `rankscope-agent` binary, killed with SIGKILL.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use common::*;
use rankscope_sdk::{Client, Options};

fn agent_bin() -> PathBuf {
    let exe = std::env::current_exe().expect("test exe");
    let bin = exe
        .parent()
        .and_then(Path::parent)
        .expect("target dir")
        .join("rankscope-agent");
    assert!(bin.exists(), "{} was not built", bin.display());
    bin
}

/// The agent process, killed when dropped (a failing test leaves no orphan).
struct AgentProc(Child);

impl Drop for AgentProc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_agent(config: &Path, port: u16) -> AgentProc {
    let child = Command::new(agent_bin())
        .arg("--config")
        .arg(config)
        .spawn()
        .expect("agent starts");
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "the agent never listened");
        std::thread::sleep(Duration::from_millis(20));
    }
    AgentProc(child)
}

fn record(c: &Client, steps: std::ops::Range<u64>) {
    for s in steps {
        let t = rankscope_sdk::now_ns();
        c.step_begin(s, Some(t)).expect("begin");
        c.step_end(s, Some(t + 1000)).expect("end");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_events_survive_a_killed_agent_and_are_stored_once() {
    let mut stack = Stack::start_without_agent().await;
    // The collector is away while the first agent runs: everything it
    // acknowledges to the rank exists only in its memory and its spool.
    let grpc_port = rankscope_testkit::free_port();
    stack.collector.take().unwrap().shutdown().await;
    stack.collector_cfg.grpc_listen_addr = format!("127.0.0.1:{grpc_port}");
    let port = rankscope_testkit::free_port();
    let config = stack.dir.path().join("agent.toml");
    std::fs::write(
        &config,
        format!(
            "listen_addr = \"127.0.0.1:{port}\"\nmetrics_listen_addr = \"\"\nunix_socket_path = \"\"\n\
             collector_url = \"http://127.0.0.1:{grpc_port}\"\nagent_id = \"spool-agent\"\nnode = \"spool-node\"\n\
             gpu_sample_interval_ms = 0\nhost_sample_interval_ms = 0\nkineto_daemon_name = \"\"\n\
             retry_initial_ms = 10\nretry_max_ms = 200\nspool_dir = \"{}\"\n",
            stack.dir.path().join("spool").display()
        ),
    )
    .unwrap();
    let mut agent = start_agent(&config, port);
    let job = "spooled";
    let client = tokio::task::spawn_blocking(move || {
        let mut o = Options {
            agent: Some(format!("http://127.0.0.1:{port}")),
            ..Default::default()
        };
        o.identity.job_id = Some(job.into());
        o.identity.rank = Some(0);
        o.identity.world_size = Some(1);
        let c = Client::start(o).expect("client");
        record(&c, 0..300);
        assert!(c.flush(Duration::from_secs(30)), "{:?}", c.stats());
        c
    })
    .await
    .unwrap();
    let before = client.stats();
    assert_eq!(before.sent, 600, "{before:?}");
    // kill -9 with 600 acknowledged, undelivered events.
    agent.0.kill().expect("SIGKILL");
    agent.0.wait().unwrap();
    let spooled = std::fs::read_dir(stack.dir.path().join("spool"))
        .unwrap()
        .count();
    assert!(spooled > 0, "nothing spooled");
    stack.collector = Some(
        rankscope_collector::start(stack.collector_cfg.clone())
            .await
            .expect("collector"),
    );
    let agent = start_agent(&config, port);
    // The rank goes on; the SDK reconnects to the new agent.
    let client = tokio::task::spawn_blocking(move || {
        record(&client, 300..400);
        assert!(
            client.flush(Duration::from_secs(30)),
            "{:?}",
            client.stats()
        );
        client
    })
    .await
    .unwrap();
    let after = client.stats();
    assert!(after.reconnects >= 1, "{after:?}");
    let want = after.sent;
    assert_eq!(want, 800, "every event acknowledged: {after:?}");
    eventually(60, "every acknowledged event stored", || {
        let n = stack
            .clickhouse
            .query(&format!(
                "SELECT count() FROM {}.steps WHERE job_id = '{job}'",
                stack.database
            ))
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok());
        n == Some(want)
    })
    .await;
    assert_eq!(stack.counts(job).await.total(), want);
    assert_eq!(stack.distinct_event_keys(job).await, want, "stored once");
    // Delivered batches leave the spool.
    eventually(30, "the spool emptied", || {
        std::fs::read_dir(stack.dir.path().join("spool"))
            .map(|d| d.count() == 0)
            .unwrap_or(false)
    })
    .await;
    client.shutdown(Duration::from_secs(5));
    drop(agent);
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_spool_drops_the_newest_events_and_counts_them() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = agent_config("http://127.0.0.1:9", dir.path());
    cfg.spool_dir = dir.path().join("spool").to_string_lossy().into_owned();
    cfg.spool_max_bytes = 1; // the first spooled batch fills it
    cfg.gpu_sample_interval_ms = 0;
    cfg.host_sample_interval_ms = 0;
    cfg.kineto_daemon_name = String::new();
    let agent = rankscope_agent::start(cfg).await.expect("agent");
    let url = format!("http://{}", agent.tcp_addr);
    let stats = tokio::task::spawn_blocking(move || {
        let mut o = Options {
            agent: Some(url),
            ..Default::default()
        };
        o.identity.job_id = Some("full".into());
        o.identity.rank = Some(0);
        o.identity.world_size = Some(1);
        let c = Client::start(o).expect("client");
        for chunk in 0..20u64 {
            record(&c, chunk * 10..chunk * 10 + 10);
            c.flush(Duration::from_secs(10));
        }
        c.stats()
    })
    .await
    .unwrap();
    assert!(stats.dropped_by_agent > 0, "{stats:?}");
    assert!(stats.sent > 0, "{stats:?}");
    let m = agent.metrics();
    assert_eq!(m.dropped("spool_full"), stats.dropped_by_agent, "{m:?}");
    agent.shutdown().await;
}

/// `rankscope simulate` goes on across a kill -9 and restart of the agent:
/// the messages in flight at the kill are counted as lost on the rank side,
/// the ranks reconnect, and everything the agents acknowledged is stored
/// exactly once (the spool keeps what the killed agent had accepted).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simulated_ranks_reconnect_after_the_agent_is_killed() {
    let stack = Stack::start_without_agent().await;
    let port = rankscope_testkit::free_port();
    let config = stack.dir.path().join("agent.toml");
    std::fs::write(
        &config,
        format!(
            "listen_addr = \"127.0.0.1:{port}\"\nmetrics_listen_addr = \"\"\nunix_socket_path = \"\"\n\
             collector_url = \"http://{}\"\nagent_id = \"sim-agent\"\nnode = \"sim-node\"\n\
             gpu_sample_interval_ms = 0\nhost_sample_interval_ms = 0\nkineto_daemon_name = \"\"\n\
             retry_initial_ms = 10\nretry_max_ms = 200\nspool_dir = \"{}\"\n",
            stack.grpc_addr(),
            stack.dir.path().join("spool").display()
        ),
    )
    .unwrap();
    let mut agent = start_agent(&config, port);
    let job = "sim-reconnect";
    let mut sim = sim_config(job, 8, 60);
    sim.layers = 4;
    let total = rankscope_cli::simulate::plan(&sim).event_counts().total();
    // About 6 s of sending, so the kill lands mid-job.
    sim.rate_events_per_s = Some(total as f64 / 6.0);
    let url = format!("http://127.0.0.1:{port}");
    let ranks = tokio::spawn(async move { rankscope_cli::simulate::run(&sim, &url).await });
    eventually(60, "a quarter of the job stored", || {
        stack.rows_now("steps", job) >= 8 * 2 * 60 / 4
    })
    .await;
    agent.0.kill().expect("SIGKILL");
    agent.0.wait().unwrap();
    let agent = start_agent(&config, port);
    let s = ranks.await.unwrap().expect("the ranks went on");
    assert!(s.disconnects >= 8, "every rank's stream broke: {s:?}");
    assert_eq!(s.dropped, 0, "{s:?}");
    assert_eq!(s.messages_rejected, 0, "{s:?}");
    assert_eq!(s.events_sent, total, "{s:?}");
    assert_eq!(
        s.accepted + s.lost_disconnected,
        s.events_sent,
        "every event acknowledged or counted as lost: {s:?}"
    );
    // Acknowledged events are stored; a lost message may have been spooled
    // by the agent just before the kill, so it may be stored too.
    eventually(60, "every acknowledged event stored", || {
        stack.events_now(job) >= s.accepted
    })
    .await;
    let spool = stack.dir.path().join("spool");
    let left = || -> Vec<String> {
        std::fs::read_dir(&spool)
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !left().is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the spool did not empty: {:?}",
            left()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let n = stack.events_now(job);
    assert!(n <= s.events_sent, "{n} stored of {} sent", s.events_sent);
    assert_eq!(stack.distinct_event_keys(job).await, n, "stored once");
    drop(agent);
    stack.stop().await;
}
