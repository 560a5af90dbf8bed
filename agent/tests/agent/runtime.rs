//! The agent binary on a one-thread runtime: `worker_threads = 1` makes
//! `main` build a current-thread runtime, and the agent must still do all of
//! its work there (rank streams over the Unix socket, batching, delivery to
//! a collector, host sampling on its own thread, a flushing shutdown on
//! SIGTERM).

use std::process::{Command, Stdio};
use std::time::Duration;

use rankscope_proto::v1 as proto;

use crate::support::*;
use crate::workload::*;

/// Names of the threads of process `pid`.
fn thread_names(pid: u32) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .expect("/proc/<pid>/task")
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|n| n.trim().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_on_a_one_thread_runtime_delivers_rank_streams() {
    let collector = FakeCollector::start().await;
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("agent.sock");
    let config = dir.path().join("agent.toml");
    std::fs::write(
        &config,
        format!(
            "worker_threads = 1\n\
             listen_addr = \"127.0.0.1:0\"\n\
             metrics_listen_addr = \"127.0.0.1:0\"\n\
             unix_socket_path = {:?}\n\
             collector_url = {:?}\n\
             agent_id = \"one-thread\"\n\
             node = \"one-thread-node\"\n\
             batch_max_delay_ms = 20\n\
             gpu_sample_interval_ms = 0\n\
             host_sample_interval_ms = 100\n",
            socket.display().to_string(),
            collector.url()
        ),
    )
    .unwrap();
    let log = std::fs::File::create(dir.path().join("agent.log")).unwrap();
    let mut child = Reap(
        Command::new(env!("CARGO_BIN_EXE_rankscope-agent"))
            .args(["--config", config.to_str().unwrap()])
            .env_remove("RANKSCOPE_AGENT_CONFIG")
            .env_remove("RANKSCOPE_NVML_LIBRARY")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start rankscope-agent"),
    );
    let pid = child.0.id();
    let log = || std::fs::read_to_string(dir.path().join("agent.log")).unwrap_or_default();
    wait_until("the agent's Unix socket", || {
        assert!(
            child.0.try_wait().unwrap().is_none(),
            "the agent exited:\n{}",
            log()
        );
        // The file appears at bind(), a moment before listen(): wait for a
        // connection to be accepted, not for the file.
        std::os::unix::net::UnixStream::connect(&socket).is_ok()
    })
    .await;

    const RANKS: u32 = 4;
    const STEPS: u64 = 10;
    let mut sent = Vec::new();
    for rank in 0..RANKS {
        let mut r = Rank::over_unix(&socket).await;
        let msgs = step_messages(identity("job-1t", rank, RANKS), STEPS);
        for m in &msgs {
            let ack = r.call(m.clone()).await;
            assert_eq!(ack.code, 0, "{}", ack.message);
            assert_eq!(ack.accepted as usize, m.events.len());
        }
        let events: Vec<proto::Event> = msgs.iter().flat_map(|m| m.events.clone()).collect();
        sent.push((rank, events));
        r.close();
    }
    let total: usize = sent.iter().map(|(_, e)| e.len()).sum();
    let st = &collector.state;
    wait_until("every rank event at the collector", || st.events() == total).await;
    // Host samples went out too (the sampler thread feeds the one-thread runtime).
    wait_until("a host sample at the collector", || {
        st.batches
            .lock()
            .unwrap()
            .iter()
            .any(|b| !b.host_samples.is_empty())
    })
    .await;
    // One thread runs the runtime: no tokio worker threads (the blocking
    // pool, which would share the name, is used only at shutdown).
    let threads = thread_names(pid);
    assert!(
        !threads.iter().any(|t| t.starts_with("tokio-")),
        "a multi-thread runtime: {threads:?}"
    );

    let by_rank = st.events_by_rank();
    for (rank, events) in &sent {
        assert_eq!(
            by_rank.get(&("job-1t".to_owned(), *rank)),
            Some(events),
            "rank {rank}: events in the order sent"
        );
    }
    assert!(st
        .batches
        .lock()
        .unwrap()
        .iter()
        .all(|b| b.agent_id == "one-thread" && b.node == "one-thread-node"));

    // SIGTERM: the agent flushes and exits 0 (non-zero if events were left).
    let killed = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let deadline = std::time::Instant::now() + WAIT;
    let status = loop {
        if let Some(s) = child.0.try_wait().unwrap() {
            break s;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no exit after SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert!(status.success(), "exit {status}:\n{}", log());
    assert!(
        log().contains("signal received, shutting down"),
        "{}",
        log()
    );
}

/// Kills the agent process if the test fails before it exits (an orphan
/// would keep its sockets, e.g. `@dynolog`, for the rest of the run).
struct Reap(std::process::Child);

impl Drop for Reap {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
