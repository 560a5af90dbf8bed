//! The shipped agent configs turn the disk spool on: an agent started as
//! shipped and killed with SIGKILL loses nothing it acknowledged.
//!
//! In: the chart's agent as `kubectl apply -k deploy/kubernetes` runs it (the
//! ConfigMap's `agent.toml` plus the DaemonSet's `RANKSCOPE_AGENT_*`
//! environment, the spool on the DaemonSet's hostPath volume) and the systemd
//! unit's `/etc/rankscope/agent.toml` (the spool in the unit's
//! `StateDirectory`, mutual TLS with certificates from
//! `deploy/tls/gen-certs.sh`). Only paths and addresses are moved into the
//! test's temporary directory, as `tests/deploy/host.rs` does. Out: failures
//! naming what was lost, stored twice or left in the spool.
//!
//! The pattern is `tests/spool.rs`: the collector is away while the first
//! agent (the real `rankscope-agent` binary) acknowledges a rank's events
//! (the Rust SDK), so they exist only in its memory and its spool; the agent
//! is killed with SIGKILL, the collector comes back, a second agent starts
//! from the same config, and every acknowledged event is stored exactly once.

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use common::*;
use rankscope_sdk::{Client, Options};
use serde_json::Value;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("repository root")
        .to_path_buf()
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(repo().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

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

/// An agent as shipped: its config file and the environment it runs with.
struct Shipped {
    config: PathBuf,
    env: BTreeMap<String, String>,
    /// The spool directory, moved into the test's directory.
    spool: PathBuf,
    port: u16,
}

impl Shipped {
    fn start(&self) -> AgentProc {
        let child = Command::new(agent_bin())
            .arg("--config")
            .arg(&self.config)
            .env_remove("RANKSCOPE_AGENT_CONFIG")
            .envs(&self.env)
            .spawn()
            .expect("agent starts");
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(Instant::now() < deadline, "the agent never listened");
            std::thread::sleep(Duration::from_millis(20));
        }
        AgentProc(child)
    }

    fn spooled(&self) -> Vec<String> {
        std::fs::read_dir(&self.spool)
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    }
}

fn yaml_docs(text: &str) -> Vec<Value> {
    serde_yaml_ng::Deserializer::from_str(text)
        .map(|d| serde::Deserialize::deserialize(d).expect("manifest parses"))
        .filter(|v: &Value| !v.is_null())
        .collect()
}

/// `deploy/kubernetes/agent.yaml`'s agent, its spool and addresses moved
/// into `dir`, sending to `collector_url`.
fn kubernetes_agent(dir: &Path, collector_url: &str) -> Shipped {
    let docs = yaml_docs(&read("deploy/kubernetes/agent.yaml"));
    let find = |kind: &str| {
        docs.iter()
            .find(|d| d["kind"] == kind && d["metadata"]["name"] == "rankscope-agent")
            .unwrap_or_else(|| panic!("no {kind} rankscope-agent"))
    };
    let pod = &find("DaemonSet")["spec"]["template"]["spec"];
    let spool_volume = pod["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .find(|v| v["name"] == "spool")
        .expect("a spool volume");
    let host_path = spool_volume["hostPath"]["path"]
        .as_str()
        .expect("the spool is a hostPath");
    let text = find("ConfigMap")["data"]["agent.toml"]
        .as_str()
        .expect("agent.toml");
    let line = format!("spool_dir = \"{host_path}\"");
    assert!(text.contains(&line), "agent.toml lacks {line}:\n{text}");
    let spool = dir.join("hostpath-spool");
    let config = dir.join("agent.toml");
    std::fs::write(
        &config,
        text.replace(host_path, spool.to_str().expect("utf8")),
    )
    .expect("config");
    let container = pod["containers"]
        .as_array()
        .expect("containers")
        .iter()
        .find(|c| c["name"] == "agent")
        .expect("agent container");
    let mut env: BTreeMap<String, String> = container["env"]
        .as_array()
        .expect("env")
        .iter()
        .map(|e| {
            let v = e["value"].as_str().expect("literal env value");
            (e["name"].as_str().expect("name").to_owned(), v.to_owned())
        })
        .collect();
    let port = rankscope_testkit::free_port();
    for (key, shipped, ours) in [
        (
            "RANKSCOPE_AGENT_LISTEN_ADDR",
            "127.0.0.1:7710",
            format!("127.0.0.1:{port}"),
        ),
        (
            "RANKSCOPE_AGENT_UNIX_SOCKET",
            "/run/rankscope/agent.sock",
            dir.join("agent.sock").display().to_string(),
        ),
        (
            "RANKSCOPE_AGENT_COLLECTOR_URL",
            "http://rankscope-collector-headless.rankscope.svc:7700",
            collector_url.to_owned(),
        ),
    ] {
        assert_eq!(env.get(key).map(String::as_str), Some(shipped), "{key}");
        env.insert(key.to_owned(), ours);
    }
    env.insert(
        "RANKSCOPE_AGENT_METRICS_LISTEN_ADDR".into(),
        format!("127.0.0.1:{}", rankscope_testkit::free_port()),
    );
    Shipped {
        config,
        env,
        spool,
        port,
    }
}

/// `deploy/systemd/agent.toml`, its spool (in the unit's StateDirectory),
/// socket, port and TLS files moved into `dir`, sending to `collector_url`.
fn systemd_agent(dir: &Path, tls: &Path, collector_url: &str) -> Shipped {
    let unit = read("deploy/systemd/rankscope-agent.service");
    let state = unit
        .lines()
        .find_map(|l| l.strip_prefix("StateDirectory="))
        .expect("the unit has a StateDirectory");
    let state_dir = format!("/var/lib/{state}");
    let text = read("deploy/systemd/agent.toml");
    let shipped = rankscope_agent::Config::from_toml(&text, Path::new("agent.toml"))
        .expect("agent.toml parses");
    assert!(
        shipped.spool_dir.starts_with(&format!("{state_dir}/")),
        "spool_dir {:?} is not in the unit's StateDirectory {state_dir}",
        shipped.spool_dir
    );
    let state_here = dir.join("state");
    let port = rankscope_testkit::free_port();
    let text = text
        .replace(&state_dir, state_here.to_str().expect("utf8"))
        .replace("/etc/rankscope/tls", tls.to_str().expect("utf8"))
        .replace(
            "\"/run/rankscope/agent.sock\"",
            &format!("{:?}", dir.join("agent.sock").display().to_string()),
        )
        .replace("\"127.0.0.1:7710\"", &format!("\"127.0.0.1:{port}\""))
        .replace(
            "\"https://rankscope-collector:7700\"",
            &format!("{collector_url:?}"),
        );
    let config = dir.join("agent.toml");
    std::fs::write(&config, &text).expect("config");
    let moved = rankscope_agent::Config::from_toml(&text, &config).expect("moved config parses");
    assert_eq!(moved.collector_url, collector_url, "the replacement took");
    let spool = PathBuf::from(&moved.spool_dir);
    assert!(spool.starts_with(&state_here), "{spool:?}");
    let env = BTreeMap::from([(
        "RANKSCOPE_AGENT_METRICS_LISTEN_ADDR".to_owned(),
        format!("127.0.0.1:{}", rankscope_testkit::free_port()),
    )]);
    Shipped {
        config,
        env,
        spool,
        port,
    }
}

fn record(c: &Client, steps: std::ops::Range<u64>) {
    for s in steps {
        let t = rankscope_sdk::now_ns();
        c.step_begin(s, Some(t)).expect("begin");
        c.step_end(s, Some(t + 1000)).expect("end");
    }
}

/// The collector away, `agent` acknowledges 600 events, is killed with
/// SIGKILL; the collector and a new agent from the same config come back;
/// all 800 events the rank sent are stored once and the spool empties.
async fn survives_kill_9(mut stack: Stack, agent: Shipped, job: &'static str) {
    let collector = stack.collector.take().expect("collector");
    collector.shutdown().await;
    let mut first = agent.start();
    let port = agent.port;
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
    .expect("rank thread");
    let before = client.stats();
    assert_eq!(before.sent, 600, "{before:?}");
    first.0.kill().expect("SIGKILL");
    first.0.wait().expect("reaped");
    let left = agent.spooled();
    assert!(
        left.iter().any(|f| f.ends_with(".batch")),
        "the shipped config spooled nothing in {}: {left:?}",
        agent.spool.display()
    );

    stack.collector = Some(
        rankscope_collector::start(stack.collector_cfg.clone())
            .await
            .expect("collector comes back"),
    );
    let second = agent.start();
    let client = tokio::task::spawn_blocking(move || {
        record(&client, 300..400);
        // The SDK reconnects on its own, with backoff; until it has, flush
        // answers false at once (the agent is away) and the events wait in
        // its queue.
        let deadline = Instant::now() + Duration::from_secs(30);
        while !client.flush(Duration::from_secs(5)) {
            assert!(
                Instant::now() < deadline,
                "the rank never reached the new agent: {:?}",
                client.stats()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        client
    })
    .await
    .expect("rank thread");
    let after = client.stats();
    assert!(after.reconnects >= 1, "{after:?}");
    assert_eq!(after.sent, 800, "every event acknowledged: {after:?}");
    eventually(60, "every acknowledged event stored", || {
        stack.rows_now("steps", job) == 800
    })
    .await;
    assert_eq!(stack.counts(job).await.total(), 800);
    assert_eq!(stack.distinct_event_keys(job).await, 800, "stored once");
    // The agent samples the host as shipped, so new batches come and go:
    // what the killed agent left is what must be gone.
    eventually(30, "the killed agent's batches left the spool", || {
        let now = agent.spooled();
        !left.iter().any(|f| now.contains(f))
    })
    .await;
    client.shutdown(Duration::from_secs(5));
    drop(second);
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kubernetes_agent_as_shipped_keeps_acknowledged_events_across_kill_9() {
    let mut stack = Stack::start_without_agent().await;
    // The collector comes back on a port fixed now (the agent's URL).
    let grpc_port = rankscope_testkit::free_port();
    stack.collector_cfg.grpc_listen_addr = format!("127.0.0.1:{grpc_port}");
    let dir = stack.dir.path().to_owned();
    let agent = kubernetes_agent(&dir, &format!("http://127.0.0.1:{grpc_port}"));
    survives_kill_9(stack, agent, "shipped-k8s").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_systemd_agent_as_shipped_keeps_acknowledged_events_across_kill_9() {
    let root = tempfile::tempdir().expect("tempdir");
    let certs = root.path().join("tls");
    gen_certs(&certs, &["agent"]);
    let s = |p: PathBuf| p.to_string_lossy().into_owned();
    let mut stack = Stack::start_without_agent_with(|c| {
        c.tls_cert_path = s(certs.join("collector.pem"));
        c.tls_key_path = s(certs.join("collector-key.pem"));
        c.tls_ca_path = s(certs.join("ca.pem"));
    })
    .await;
    let grpc_port = rankscope_testkit::free_port();
    stack.collector_cfg.grpc_listen_addr = format!("127.0.0.1:{grpc_port}");
    let agent = systemd_agent(
        root.path(),
        &certs,
        &format!("https://localhost:{grpc_port}"),
    );
    survives_kill_9(stack, agent, "shipped-systemd").await;
}
