//! The agent's control stream to the collector, against a collector stand-in
//! (a real tonic server on a real socket) that holds the stream's opening
//! until the test lets it go: what the agent learns while the stream is
//! being opened reaches the collector once it is open.
//!
//! Found by a CI run: under load the stream took long to open, both ranks
//! polled the agent meanwhile, and the agent compared later process sets
//! against the ones it saw when the open completed instead of the ones its
//! first report carried, so the collector never heard of the job.

use crate::common;

use std::pin::Pin;
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::kineto_client::FakeClient;
use rankscope_proto::v1 as proto;
use tokio::sync::{mpsc, oneshot};
use tonic::{Request, Response, Status, Streaming};

type Commands =
    Pin<Box<dyn tokio_stream::Stream<Item = Result<proto::ControlCommand, Status>> + Send>>;

/// A `CollectorControl` whose first `Control` call tells the test it has
/// begun (`opened`), waits for `release`, then forwards every report.
struct Gated {
    opened: Mutex<Option<oneshot::Sender<()>>>,
    release: Mutex<Option<oneshot::Receiver<()>>>,
    reports: mpsc::UnboundedSender<proto::AgentReport>,
}

#[tonic::async_trait]
impl proto::collector_control_server::CollectorControl for Gated {
    type ControlStream = Commands;

    async fn control(
        &self,
        request: Request<Streaming<proto::AgentReport>>,
    ) -> Result<Response<Commands>, Status> {
        let opened = self.opened.lock().unwrap().take();
        let release = self.release.lock().unwrap().take();
        let (Some(opened), Some(release)) = (opened, release) else {
            return Err(Status::unavailable("one stream only in this test"));
        };
        let _ = opened.send(());
        let _ = release.await;
        let mut inbound = request.into_inner();
        let reports = self.reports.clone();
        tokio::spawn(async move {
            while let Ok(Some(r)) = inbound.message().await {
                if reports.send(r).is_err() {
                    return;
                }
            }
        });
        // No commands; the stream stays open as long as the agent's does.
        Ok(Response::new(Box::pin(tokio_stream::pending())))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_that_polls_while_the_stream_opens_is_reported_once_it_is_open() {
    let (opened_tx, opened_rx) = oneshot::channel();
    let (release_tx, release_rx) = oneshot::channel();
    let (reports_tx, mut reports) = mpsc::unbounded_channel();
    let gated = Gated {
        opened: Mutex::new(Some(opened_tx)),
        release: Mutex::new(Some(release_rx)),
        reports: reports_tx,
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(proto::collector_control_server::CollectorControlServer::new(gated))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    let dir = tempfile::tempdir().unwrap();
    let daemon = format!("rankscope-test-daemon-ctl-{}", std::process::id());
    let mut cfg = common::agent_config(&format!("http://{addr}"), dir.path());
    cfg.kineto_daemon_name = daemon.clone();
    cfg.gpu_sample_interval_ms = 0;
    cfg.host_sample_interval_ms = 0;
    let agent = rankscope_agent::start(cfg).await.expect("agent");
    assert!(agent.kineto_listening(), "@{daemon} is bound");

    // The agent has built its first report and is waiting for the stream.
    tokio::time::timeout(Duration::from_secs(30), opened_rx)
        .await
        .expect("the agent opens its control stream")
        .unwrap();
    let job = format!("ctl-race-{}", std::process::id());
    let mut rank = Command::new("sleep")
        .arg("300")
        .env("RANKSCOPE_JOB_ID", &job)
        .env("RANK", "0")
        .env("WORLD_SIZE", "1")
        .spawn()
        .unwrap();
    let pid = rank.id();
    let client = FakeClient::new("ctl-race", &daemon);
    // Polls until the agent attributes the pid (the child's environ can be
    // unreadable for a moment after spawn returns: the kernel wakes the
    // parent before it has set the new image's environment up).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        assert_eq!(client.poll(pid), "", "nothing requested");
        let known = agent
            .kineto_processes()
            .iter()
            .any(|(p, id)| *p == pid as i32 && id.job_id == job);
        if known {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the agent never attributed pid {pid}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    release_tx.send(()).unwrap();

    // First the report built before the process polled, then the process.
    let first = reports.recv().await.expect("the first report");
    assert!(first.hello.is_some());
    assert!(first.processes.is_empty(), "{:?}", first.processes);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let r = tokio::time::timeout(left, reports.recv())
            .await
            .expect("the process is reported within 30 s of the stream opening")
            .expect("the stream stays open");
        if r.processes_snapshot {
            assert_eq!(r.processes.len(), 1, "{:?}", r.processes);
            assert_eq!(r.processes[0].pid, pid as i32);
            assert_eq!(r.processes[0].job_id, job);
            assert_eq!(r.processes[0].world_size, 1);
            break;
        }
    }
    let _ = rank.kill();
    let _ = rank.wait();
    agent.shutdown().await;
}
