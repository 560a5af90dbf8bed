//! Test support: a fake collector (real tonic server on 127.0.0.1), rank
//! clients over TCP or the Unix socket, polling with a deadline.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rankscope_agent::{AgentHandle, Config};
use rankscope_proto::v1 as proto;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tonic::transport::{Channel, Endpoint, Server};
use tonic::{Code, Request, Response, Status};

/// How long any single wait in a test may take before it fails.
pub const WAIT: Duration = Duration::from_secs(20);

/// What the fake collector saw and how it behaves.
#[derive(Debug)]
pub struct CollectorState {
    /// Answer UNAVAILABLE to this many calls first.
    pub fail_first: AtomicU32,
    /// Store this many batches but answer UNAVAILABLE (the ack is "lost").
    pub lose_first_acks: AtomicU32,
    /// Answer every call with this code (permanent rejection) when set.
    pub reject_with: Mutex<Option<Code>>,
    /// Calls wait until this is true.
    open: watch::Sender<bool>,
    /// All calls received.
    pub calls: AtomicU64,
    /// Calls answered UNAVAILABLE by `fail_first`.
    pub failed: AtomicU64,
    /// Duplicates of an already stored batch.
    pub duplicates: AtomicU64,
    /// Stored batches, deduplicated by (agent_session, seq), in arrival order.
    pub batches: Mutex<Vec<proto::AgentBatch>>,
    seen: Mutex<HashSet<(String, u64, u64)>>,
}

impl CollectorState {
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            fail_first: AtomicU32::new(0),
            lose_first_acks: AtomicU32::new(0),
            reject_with: Mutex::new(None),
            open: watch::channel(true).0,
            calls: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            duplicates: AtomicU64::new(0),
            batches: Mutex::new(Vec::new()),
            seen: Mutex::new(HashSet::new()),
        })
    }

    /// Makes calls hang until [`CollectorState::release`].
    pub fn stall(&self) {
        self.open.send_replace(false);
    }

    pub fn release(&self) {
        self.open.send_replace(true);
    }

    /// Number of events stored.
    pub fn events(&self) -> usize {
        let batches = self.batches.lock().unwrap();
        batches
            .iter()
            .flat_map(|b| &b.ranks)
            .map(|r| r.events.len())
            .sum()
    }

    /// Stored batches' seqs in arrival order.
    pub fn seqs(&self) -> Vec<u64> {
        self.batches.lock().unwrap().iter().map(|b| b.seq).collect()
    }

    /// Events per (job, rank) in batch `seq` order.
    pub fn events_by_rank(&self) -> HashMap<(String, u32), Vec<proto::Event>> {
        let mut batches = self.batches.lock().unwrap().clone();
        batches.sort_by_key(|b| (b.agent_session, b.seq));
        let mut out: HashMap<(String, u32), Vec<proto::Event>> = HashMap::new();
        for b in batches {
            for r in b.ranks {
                let id = r.identity.expect("identity in every RankEvents");
                out.entry((id.job_id, id.rank))
                    .or_default()
                    .extend(r.events);
            }
        }
        out
    }
}

struct FakeIngest(Arc<CollectorState>);

#[tonic::async_trait]
impl proto::collector_ingest_server::CollectorIngest for FakeIngest {
    async fn ingest(
        &self,
        request: Request<proto::AgentBatch>,
    ) -> Result<Response<proto::IngestAck>, Status> {
        let st = &self.0;
        st.calls.fetch_add(1, SeqCst);
        let mut open = st.open.subscribe();
        let _ = open.wait_for(|o| *o).await;
        if let Some(code) = *st.reject_with.lock().unwrap() {
            return Err(Status::new(code, "rejected by the test collector"));
        }
        if st
            .fail_first
            .fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            st.failed.fetch_add(1, SeqCst);
            return Err(Status::unavailable("test collector: try again"));
        }
        let batch = request.into_inner();
        let key = (batch.agent_id.clone(), batch.agent_session, batch.seq);
        let seq = batch.seq;
        if !st.seen.lock().unwrap().insert(key) {
            st.duplicates.fetch_add(1, SeqCst);
            return Ok(Response::new(proto::IngestAck {
                seq,
                rows: 0,
                duplicate: true,
            }));
        }
        let rows = batch.ranks.iter().map(|r| r.events.len() as u64).sum();
        st.batches.lock().unwrap().push(batch);
        if st
            .lose_first_acks
            .fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            return Err(Status::unavailable("test collector: stored, ack lost"));
        }
        Ok(Response::new(proto::IngestAck {
            seq,
            rows,
            duplicate: false,
        }))
    }
}

/// A running fake collector.
pub struct FakeCollector {
    pub addr: SocketAddr,
    pub state: Arc<CollectorState>,
}

impl FakeCollector {
    pub async fn start() -> Self {
        Self::start_on("127.0.0.1:0".parse().unwrap(), CollectorState::new()).await
    }

    pub async fn start_on(addr: SocketAddr, state: Arc<CollectorState>) -> Self {
        let listener = TcpListener::bind(addr).await.expect("bind fake collector");
        let addr = listener.local_addr().unwrap();
        let svc = proto::collector_ingest_server::CollectorIngestServer::new(FakeIngest(
            Arc::clone(&state),
        ));
        tokio::spawn(
            Server::builder()
                .add_service(svc)
                .serve_with_incoming(TcpListenerStream::new(listener)),
        );
        Self { addr, state }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

/// A free local port nobody listens on (bound, then released).
pub async fn closed_port() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    l.local_addr().unwrap()
}

/// An agent config for tests: ephemeral TCP port, socket in `dir` (or none),
/// fast retries and batches.
pub fn config(collector_url: &str, dir: Option<&Path>) -> Config {
    Config {
        listen_addr: "127.0.0.1:0".into(),
        metrics_listen_addr: "127.0.0.1:0".into(),
        unix_socket_path: dir
            .map(|d| d.join("agent.sock").to_string_lossy().into_owned())
            .unwrap_or_default(),
        collector_url: collector_url.to_owned(),
        agent_id: "test-agent".into(),
        node: "test-node".into(),
        batch_max_delay_ms: 20,
        retry_initial_ms: 5,
        retry_max_ms: 50,
        request_timeout_ms: 10_000,
        // Telemetry has its own tests (tests/telemetry); here batches hold
        // rank events only, so seqs and call counts are exact.
        gpu_sample_interval_ms: 0,
        host_sample_interval_ms: 0,
        ..Config::default()
    }
}

/// Polls `cond` every 2 ms until it holds; panics after [`WAIT`].
pub async fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !cond() {
        if tokio::time::Instant::now() > deadline {
            panic!("timed out waiting for: {what}");
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Waits until the agent reports `n` delivered events.
pub async fn wait_delivered(agent: &AgentHandle, n: u64) {
    wait_until(&format!("{n} events delivered"), || {
        agent.metrics().delivered_events >= n
    })
    .await;
}

/// One rank's bidi stream to the agent.
pub struct Rank {
    tx: Option<mpsc::Sender<proto::RankMessage>>,
    acks: tonic::Streaming<proto::RankAck>,
}

impl Rank {
    pub async fn over_tcp(addr: SocketAddr) -> Self {
        Self::open(Endpoint::from_shared(format!("http://{addr}")).unwrap()).await
    }

    pub async fn over_unix(path: &Path) -> Self {
        Self::open(Endpoint::from_shared(format!("unix://{}", path.display())).unwrap()).await
    }

    /// Over TCP with a tiny HTTP/2 receive window, so that unread acks
    /// quickly back up into the agent.
    pub async fn over_tcp_small_window(addr: SocketAddr) -> Self {
        let ep = Endpoint::from_shared(format!("http://{addr}"))
            .unwrap()
            .initial_stream_window_size(1024);
        Self::open(ep).await
    }

    async fn open(ep: Endpoint) -> Self {
        let channel: Channel = ep.connect().await.expect("connect to agent");
        let mut client = proto::rank_ingest_client::RankIngestClient::new(channel);
        let (tx, rx) = mpsc::channel(16 * 1024);
        let acks = client
            .stream_events(ReceiverStream::new(rx))
            .await
            .expect("open rank stream")
            .into_inner();
        Self { tx: Some(tx), acks }
    }

    /// Queues a message for sending (does not wait for the agent).
    pub async fn send(&self, msg: proto::RankMessage) {
        let tx = self.tx.as_ref().expect("stream open");
        tx.send(msg).await.expect("request stream open");
    }

    /// The next ack; panics on a stream error, end or after [`WAIT`].
    pub async fn ack(&mut self) -> proto::RankAck {
        match self.next().await {
            Ok(Some(a)) => a,
            other => panic!("expected an ack, got {other:?}"),
        }
    }

    /// The next item of the ack stream.
    pub async fn next(&mut self) -> Result<Option<proto::RankAck>, Status> {
        tokio::time::timeout(WAIT, self.acks.message())
            .await
            .expect("ack within the deadline")
    }

    /// Sends `msg` and returns its ack.
    pub async fn call(&mut self, msg: proto::RankMessage) -> proto::RankAck {
        self.send(msg).await;
        self.ack().await
    }

    /// Closes the request side (the agent then ends the ack stream).
    pub fn close(&mut self) {
        self.tx = None;
    }
}
