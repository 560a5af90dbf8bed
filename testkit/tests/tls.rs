//! Secure transport: TLS and mutual TLS between agent and collector with
//! certificates made by `deploy/tls/gen-certs.sh` (openssl), the HTTP API
//! over TLS with the bearer token, agents without a valid certificate
//! rejected and counted on both sides, certificate reload without dropping
//! connections (file change and SIGHUP), and the refusal to serve plaintext
//! off loopback.
//!
//! Only `collector_reloads_certificates_without_dropping_connections` sends
//! SIGHUP, and only after its connection-count assertions: every agent and
//! collector in this process reloads on it.

use crate::common;

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use common::*;
use rankscope_cli::query::http::HttpClient;
use rankscope_cli::simulate;
use rankscope_proto::tls::{self, TlsPaths};

const TOKEN: &str = "s3cret";

/// Copies `names` from `from` to `to`, each replaced atomically.
fn install(from: &Path, to: &Path, names: &[&str]) {
    std::fs::create_dir_all(to).unwrap();
    for n in names {
        let tmp = to.join(format!(".{n}.tmp"));
        std::fs::copy(from.join(n), &tmp).unwrap();
        std::fs::rename(&tmp, to.join(n)).unwrap();
    }
}

fn s(p: PathBuf) -> String {
    p.to_string_lossy().into_owned()
}

/// A collector serving TLS from `<root>/collector`, requiring client
/// certificates signed by the CA in `<root>/certs`, and the bearer token.
async fn tls_stack(root: &Path) -> Stack {
    let certs = root.join("certs");
    gen_certs(&certs, &["agent"]);
    let dir = root.join("collector");
    install(
        &certs,
        &dir,
        &["collector.pem", "collector-key.pem", "ca.pem"],
    );
    Stack::start_without_agent_with(|c| {
        c.tls_cert_path = s(dir.join("collector.pem"));
        c.tls_key_path = s(dir.join("collector-key.pem"));
        c.tls_ca_path = s(dir.join("ca.pem"));
        c.tls_reload_interval_secs = 1;
        c.auth_token = TOKEN.into();
    })
    .await
}

fn tls_agent_config(stack: &Stack, agent_dir: &Path, with_cert: bool) -> rankscope_agent::Config {
    let url = format!("https://localhost:{}", stack.grpc_addr().port());
    let mut cfg = agent_config(&url, agent_dir);
    cfg.collector_token = TOKEN.into();
    cfg.tls_ca_path = s(agent_dir.join("ca.pem"));
    if with_cert {
        cfg.tls_cert_path = s(agent_dir.join("agent.pem"));
        cfg.tls_key_path = s(agent_dir.join("agent-key.pem"));
    }
    cfg.tls_reload_interval_secs = 1;
    cfg
}

fn collector_tls(stack: &Stack) -> &rankscope_collector::tls::TlsCounters {
    &stack
        .collector
        .as_ref()
        .unwrap()
        .tls()
        .expect("TLS on")
        .counters
}

async fn simulate_job(stack: &Stack, job: &str) -> u64 {
    let mut sim = sim_config(job, 2, 3);
    sim.layers = 1;
    simulate::run(&sim, &stack.agent_url())
        .await
        .expect("simulate");
    simulate::plan(&sim).event_counts().total()
}

/// The DER of the certificate the collector's HTTP listener presents to a
/// new connection.
async fn served_certificate(stack: &Stack, ca: &Path) -> Vec<u8> {
    let paths = TlsPaths::from_config("", "", &s(ca.to_owned()));
    let cfg = tls::client_config(&paths, &[tls::ALPN_HTTP1]).unwrap();
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(cfg));
    let tcp = tokio::net::TcpStream::connect(stack.http_addr())
        .await
        .unwrap();
    let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
    let conn = connector.connect(name, tcp).await.expect("TLS handshake");
    conn.get_ref().1.peer_certificates().unwrap()[0].to_vec()
}

fn certificate_in(path: &Path) -> Vec<u8> {
    tls::load_certs("test", path).unwrap()[0].to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_delivers_and_the_api_needs_ca_and_token() {
    let root = tempfile::tempdir().unwrap();
    let mut stack = tls_stack(root.path()).await;
    let agent_dir = root.path().join("agent");
    install(
        &root.path().join("certs"),
        &agent_dir,
        &["ca.pem", "agent.pem", "agent-key.pem"],
    );
    let cfg = tls_agent_config(&stack, &agent_dir, true);
    stack.agent = Some(rankscope_agent::start(cfg).await.expect("agent"));
    let expected = simulate_job(&stack, "tls-ok").await;
    let report = stack.stop_agent().await;
    assert_eq!(report.undelivered_events, 0, "{report:?}");
    assert_eq!(report.metrics.collector_tls_failures, 0);
    assert_eq!(stack.counts("tls-ok").await.total(), expected);
    assert!(collector_tls(&stack).handshakes_grpc.load(Relaxed) >= 1);

    // The API over TLS: the CA and the token are both needed.
    let base = format!("https://localhost:{}", stack.http_addr().port());
    let ca_only = TlsPaths::from_config("", "", &s(agent_dir.join("ca.pem")));
    let client = HttpClient::with_tls(Duration::from_secs(10), &ca_only).unwrap();
    let status = |c: HttpClient, path: &str| {
        let url = format!("{base}{path}");
        async move { c.get(&url).await.map(|r| r.0.as_u16()) }
    };
    assert_eq!(
        status(client.clone().with_token(TOKEN), "/api/v1/jobs")
            .await
            .unwrap(),
        200
    );
    assert_eq!(status(client.clone(), "/api/v1/jobs").await.unwrap(), 401);
    assert_eq!(
        status(client.clone().with_token("wrong"), "/api/v1/jobs")
            .await
            .unwrap(),
        401
    );
    assert_eq!(status(client.clone(), "/healthz").await.unwrap(), 200);
    // A client that does not trust the CA, and a plaintext one, get nowhere.
    let untrusting = HttpClient::new(Duration::from_secs(10)).with_token(TOKEN);
    let err = status(untrusting.clone(), "/api/v1/jobs")
        .await
        .unwrap_err();
    assert!(err.to_string().contains("certificate"), "{err}");
    let plain = format!("http://localhost:{}/api/v1/jobs", stack.http_addr().port());
    assert!(untrusting.get(&plain).await.is_err());
    let metrics = client.get(&format!("{base}/metrics")).await.unwrap().1;
    let metrics = String::from_utf8_lossy(&metrics);
    assert!(
        metrics.contains("rankscope_collector_tls_handshake_failures_total{listener=\"http\"}"),
        "{metrics}"
    );
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_without_a_valid_certificate_are_rejected_counted_and_recover() {
    let root = tempfile::tempdir().unwrap();
    let mut stack = tls_stack(root.path()).await;

    // An agent configuration without a client certificate: gRPC only says
    // "connection closed"; the agent's TLS probe (run by the uplink once per
    // outage and by `rankscope-agent --check`) names the cause.
    let agent_dir = root.path().join("agent");
    install(&root.path().join("certs"), &agent_dir, &["ca.pem"]);
    let no_cert = tls_agent_config(&stack, &agent_dir, false);
    match rankscope_agent::probe_tls(&no_cert).await {
        Err(rankscope_agent::ProbeError::Tls(msg)) => {
            assert!(msg.contains("CertificateRequired"), "{msg}")
        }
        other => panic!("expected a TLS error, got {other:?}"),
    }
    // `rankscope import` without a client certificate stops at the first
    // chunk with the same cause instead of retrying.
    let trace = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(
        "../cli/tests/fixtures/kineto/param_dlrm_8rank_v100/worker0_step_12.1694128201545.pt.trace.json.gz",
    );
    let send = rankscope_cli::import::send::SendOptions {
        ingest_url: format!("https://localhost:{}", stack.grpc_addr().port()),
        max_attempts: 20,
        parallel_files: 1,
        parse_threads: 1,
        progress: false,
        token: TOKEN.into(),
        tls: Some(TlsPaths::from_config("", "", &no_cert.tls_ca_path)),
    };
    let opts = rankscope_cli::import::ImportOptions::new("tls-import".to_owned());
    let err = rankscope_cli::import::send::import_and_send(vec![trace], &opts, &send)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("CertificateRequired"), "{err}");
    assert!(collector_tls(&stack).handshake_failures_grpc.load(Relaxed) >= 1);

    // An agent whose certificate comes from another CA: rejected, counted,
    // and its batches are held (not lost) while it cannot connect.
    let rogue = root.path().join("rogue");
    gen_certs(&rogue, &["agent"]);
    install(&rogue, &agent_dir, &["agent.pem", "agent-key.pem"]);
    let before = collector_tls(&stack).handshake_failures_grpc.load(Relaxed);
    let cfg = tls_agent_config(&stack, &agent_dir, true);
    stack.agent = Some(rankscope_agent::start(cfg).await.expect("agent"));
    let expected = simulate_job(&stack, "tls-rogue").await;
    let agent = stack.agent.as_ref().unwrap();
    eventually(30, "the agent counts TLS failures", || {
        agent.metrics().collector_tls_failures > 0
    })
    .await;
    assert!(collector_tls(&stack).handshake_failures_grpc.load(Relaxed) > before);
    assert_eq!(agent.metrics().delivered_events, 0);
    assert_eq!(
        agent.metrics().batches_rejected,
        0,
        "held for retry, not dropped"
    );

    // The operator installs a certificate from the right CA: the agent reloads
    // it (file change) and delivers what it held.
    install(
        &root.path().join("certs"),
        &agent_dir,
        &["agent.pem", "agent-key.pem"],
    );
    eventually(30, "the agent delivers after the certificate fix", || {
        agent.metrics().delivered_events == expected
    })
    .await;
    assert!(agent.metrics().tls_reloads >= 1);
    let report = stack.stop_agent().await;
    assert_eq!(report.undelivered_events, 0);
    assert_eq!(stack.counts("tls-rogue").await.total(), expected);
    assert_eq!(stack.counts("tls-direct").await.total(), 0);
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn collector_reloads_certificates_without_dropping_connections() {
    let root = tempfile::tempdir().unwrap();
    let mut stack = tls_stack(root.path()).await;
    let certs = root.path().join("certs");
    let agent_dir = root.path().join("agent");
    install(
        &certs,
        &agent_dir,
        &["ca.pem", "agent.pem", "agent-key.pem"],
    );
    let cfg = tls_agent_config(&stack, &agent_dir, true);
    stack.agent = Some(rankscope_agent::start(cfg).await.expect("agent"));
    let first = simulate_job(&stack, "tls-reload-1").await;
    let agent = stack.agent.as_ref().unwrap();
    eventually(30, "first job delivered", || {
        agent.metrics().delivered_events == first
    })
    .await;
    let grpc_handshakes = collector_tls(&stack).handshakes_grpc.load(Relaxed);
    let old = certificate_in(&root.path().join("collector/collector.pem"));
    assert_eq!(
        served_certificate(&stack, &agent_dir.join("ca.pem")).await,
        old
    );

    // Rotate: a new collector certificate from the same CA, swapped in on disk.
    gen_certs(&certs, &["agent"]);
    let new = certificate_in(&certs.join("collector.pem"));
    assert_ne!(new, old);
    install(
        &certs,
        &root.path().join("collector"),
        &["collector-key.pem", "collector.pem"],
    );
    let counters = collector_tls(&stack);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while served_certificate(&stack, &agent_dir.join("ca.pem")).await != new {
        assert!(
            std::time::Instant::now() < deadline,
            "new certificate not served"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(counters.reloads.load(Relaxed) >= 1);

    // The agent's connection from before the rotation carries the next job:
    // no new gRPC handshake, nothing retried.
    let second = simulate_job(&stack, "tls-reload-2").await;
    eventually(30, "second job delivered", || {
        agent.metrics().delivered_events == first + second
    })
    .await;
    assert_eq!(counters.handshakes_grpc.load(Relaxed), grpc_handshakes);
    assert_eq!(agent.metrics().batches_retried, 0);

    // SIGHUP reloads at once (the files are unchanged, so only the signal can).
    let reloads = counters.reloads.load(Relaxed);
    // SAFETY: kill(2) on our own pid; the collector and agent of this process
    // registered SIGHUP listeners when they started.
    assert_eq!(unsafe { libc::kill(libc::getpid(), libc::SIGHUP) }, 0);
    eventually(30, "SIGHUP reload", || {
        counters.reloads.load(Relaxed) > reloads
    })
    .await;
    let report = stack.stop_agent().await;
    assert_eq!(report.undelivered_events, 0);
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plaintext_off_loopback_needs_allow_insecure_and_bad_files_are_named() {
    let ch = rankscope_testkit::ClickHouse::start().expect("ClickHouse");
    let db = ch.fresh_database("tls").unwrap();
    let mut cfg = collector_config(&ch.http_url, &db);
    cfg.grpc_listen_addr = "0.0.0.0:0".into();
    let err = rankscope_collector::start(cfg.clone()).await.err().unwrap();
    assert!(err.to_string().contains("allow_insecure"), "{err}");

    cfg.tls_cert_path = "/nonexistent/collector.pem".into();
    cfg.tls_key_path = "/nonexistent/collector-key.pem".into();
    let err = rankscope_collector::start(cfg.clone()).await.err().unwrap();
    let msg = err.to_string();
    assert!(
        msg.contains("tls_cert_path /nonexistent/collector.pem"),
        "{msg}"
    );

    cfg.tls_cert_path.clear();
    cfg.tls_key_path.clear();
    cfg.allow_insecure = true;
    let collector = rankscope_collector::start(cfg).await.expect("allowed");
    assert!(collector.grpc_addr.ip().is_unspecified());
    collector.shutdown().await;
}
