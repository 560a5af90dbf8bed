//! `rankscope-agent`: the per-node agent between training ranks and the
//! collector.
//!
//! In: `RankIngest.StreamEvents` bidi streams from the ranks of this node
//! (TCP and a Unix socket); NVML and the host, sampled by [`sample`]. Out:
//! `AgentBatch`es (events and samples) to the collector's
//! `CollectorIngest.Ingest`, acks to the ranks, counters ([`MetricsSnapshot`]).
//!
//! ```text
//! rank --gRPC--> ingest --Chunk, queue bounded by events--> batcher
//!      <-RankAck-        (full: drop newest, count, ack says so)
//! sampler thread (NVML, sysinfo) --SampleSet (<= 1 s of ticks), bounded--> batcher
//!      (full: drop the handoff, count; ranks come from ingest's registry)
//! batcher --AgentBatch, backlog bounded by batches--> uplink --gRPC--> collector
//!          (full: batcher waits => queue fills => drops at ingest)
//!          uplink: <= max_in_flight calls, retry transient errors with
//!          jittered exponential backoff, drop permanent rejections (counted)
//! ```
//!
//! Invariants: a rank is never blocked (the only drop point is the ingest
//! queue); every batch is self-contained (defines the names its events use)
//! and identified by `(agent_id, agent_session, seq)` so the collector can drop
//! duplicates of a retried batch; events of one rank stream keep their order.
//!
//! Use [`start`] to run an agent and [`AgentHandle::shutdown`] to stop it.

use std::hash::{BuildHasher, Hasher};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tokio::sync::{mpsc, oneshot, watch, Semaphore};
use tokio::task::JoinHandle;
use tokio::time::Instant;

pub mod archive;
pub mod backoff;
mod batch;
mod channel;
pub mod config;
mod control;
pub mod dump;
pub mod http;
mod ingest;
pub mod kineto;
pub mod metrics;
pub mod route;
pub mod sample;
mod serve;
mod spool;
mod uplink;

pub use backoff::Backoff;
pub use config::Config;
pub use metrics::{DropReason, MetricsSnapshot, NvmlState};
pub use serve::ServeError;

use batch::Batcher;
pub use channel::{probe_tls, ProbeError};
use ingest::{Ingest, IngestService};
use metrics::Metrics;
use uplink::Uplink;

/// Why the agent could not start.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    #[error("invalid collector_url {url:?}: {error}")]
    CollectorUrl {
        url: String,
        error: tonic::transport::Error,
    },
    #[error("TLS to the collector: {0}")]
    Tls(#[from] rankscope_proto::tls::TlsError),
    #[error(transparent)]
    Listen(#[from] ServeError),
    #[error("cannot start the sampler thread: {0}")]
    Sampler(std::io::Error),
    #[error("invalid metrics_listen_addr {addr:?}: {error}")]
    MetricsAddr { addr: String, error: String },
    #[error("cannot use spool_dir {dir:?}: {error}")]
    Spool { dir: String, error: String },
    #[error("cannot use dump_dir {dir:?}: {error}")]
    Dump { dir: String, error: String },
}

/// What happened to the data at shutdown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShutdownReport {
    /// Events the collector acknowledged since start.
    pub delivered_events: u64,
    /// Accepted events neither delivered nor rejected by the collector:
    /// lost because the flush timeout expired (also counted as
    /// `dropped_events{reason="shutdown"}`).
    pub undelivered_events: u64,
    /// Batches cut but neither acknowledged nor rejected.
    pub undelivered_batches: u64,
    /// Whether the flush timeout expired.
    pub timed_out: bool,
    /// How long the shutdown took.
    pub elapsed: Duration,
    /// The counters after shutdown.
    pub metrics: MetricsSnapshot,
}

/// A running agent.
pub struct AgentHandle {
    /// The bound TCP address of the rank-facing service.
    pub tcp_addr: SocketAddr,
    /// The bound address of `/metrics`, when enabled.
    pub metrics_addr: Option<SocketAddr>,
    /// The Unix socket of the rank-facing service, when enabled.
    pub unix_path: Option<PathBuf>,
    /// This run's `agent_session` (random, non-zero); each job's batches
    /// carry [`AgentHandle::session_for`] it.
    pub agent_session: u64,
    routes: route::Routes,
    metrics: Arc<Metrics>,
    queue: Arc<Semaphore>,
    queue_max_events: usize,
    budget: batch::Budget,
    ingest: Arc<Ingest>,
    servers: Vec<JoinHandle<()>>,
    server_stop: watch::Sender<bool>,
    flush: oneshot::Sender<()>,
    batcher: JoinHandle<()>,
    uplink: JoinHandle<()>,
    sampler: Option<sample::Sampler>,
    flush_timeout: Duration,
    kineto: Arc<kineto::KinetoDaemon>,
    control: JoinHandle<()>,
}

/// Starts an agent: binds its listeners, then runs ingest, batcher and uplink
/// as tasks on the current Tokio runtime. The collector is connected lazily,
/// so the agent starts while the collector is down.
pub async fn start(config: Config) -> Result<AgentHandle, AgentError> {
    config.validate()?;
    let backoff = config.backoff().map_err(config::ConfigError::from)?;
    let client = channel::client(&config)?;
    let (client_tx, client_rx) = watch::channel(client);
    let control_client = client_rx.clone();

    let listen_addr = config.listen_socket_addr()?;
    let tcp = serve::bind_tcp(listen_addr).await?;
    let tcp_addr = tcp.local_addr().map_err(|error| ServeError::Tcp {
        addr: listen_addr,
        error,
    })?;
    let unix = match config.unix_socket() {
        Some(path) => Some((serve::bind_unix(path)?, path.to_owned())),
        None => None,
    };

    let metrics = Arc::new(Metrics::default());
    let mut rng = SmallRng::seed_from_u64(entropy());
    let agent_session = loop {
        let s: u64 = rng.random();
        if s != 0 {
            break s;
        }
    };
    let queue = Arc::new(Semaphore::new(config.queue_max_events));
    let (spool, spooled_before) = if config.spool_dir.is_empty() {
        (None, Vec::new())
    } else {
        let (s, left) = spool::Spool::open(
            std::path::Path::new(&config.spool_dir),
            config.spool_max_bytes,
            config.spool_fsync,
        )
        .map_err(|e| AgentError::Spool {
            dir: config.spool_dir.clone(),
            error: e.to_string(),
        })?;
        (Some(Arc::new(s)), left)
    };
    let dump = if config.dump_dir.is_empty() {
        None
    } else {
        Some(dump::open(&config.dump_dir).map_err(|e| AgentError::Dump {
            dir: config.dump_dir.clone(),
            error: e.to_string(),
        })?)
    };
    let progress = (config.trace_on_start_iterations > 0)
        .then(|| Arc::new(kineto::local::Progress::default()));
    let (chunk_tx, chunk_rx) = mpsc::unbounded_channel();
    let (backlog_tx, backlog_rx) = mpsc::channel(config.backlog_max_batches);
    let budget = batch::Budget::new(config.backlog_max_bytes);
    let (flush_tx, flush_rx) = oneshot::channel();

    if let Some(paths) = channel::tls_paths(&config) {
        // Ends by itself once the uplink (the only receiver) is gone.
        tokio::spawn(channel::run_reloader(
            config.clone(),
            paths,
            Duration::from_secs(config.tls_reload_interval_secs),
            client_tx,
            Arc::clone(&metrics),
            rankscope_proto::tls::sighup(),
        ));
    }
    let routes: route::Routes = Arc::default();
    let (routes_tx, routes_rx) = watch::channel(0u64);
    if dump.is_none() {
        let urls = route::resolve::parse_urls(&config.collector_url).map_err(|problem| {
            config::ConfigError::Url {
                field: "collector_url",
                value: config.collector_url.clone(),
                problem,
            }
        })?;
        let cfg = config.clone();
        let connect: route::resolve::Connect = Arc::new(move |url, addr| {
            channel::client_for(&cfg, url, addr)
                .map_err(
                    |e| tracing::error!(%addr, error = %e, "cannot build a client for a collector"),
                )
                .ok()
        });
        let resolver = route::resolve::Resolver {
            urls,
            every: Duration::from_millis(config.collector_resolve_interval_ms),
            connect,
            routes: Arc::clone(&routes),
            changed: routes_tx,
            metrics: Arc::clone(&metrics),
            reload: channel::tls_paths(&config).map(|_| client_rx.clone()),
        };
        tokio::spawn(resolver.run());
    } else {
        drop(routes_tx);
    }
    drop(client_rx);
    let uplink = Uplink::new(
        Arc::clone(&routes),
        routes_rx,
        Arc::clone(&metrics),
        backoff,
        SmallRng::seed_from_u64(rng.random()),
        config.max_in_flight_batches,
    )
    .with_failover_after(Duration::from_millis(config.collector_failover_after_ms))
    .with_tls_probe(channel::tls_paths(&config).map(|_| config.clone()))
    .with_spool(spool.clone())
    .with_dump(dump.clone())
    .with_token(&config.collector_token)
    .map_err(|_| config::ConfigError::Invalid {
        field: "collector_token",
        value: "(hidden)".to_owned(),
        problem: "is not a valid HTTP header value",
    })?;
    let uplink = tokio::spawn(uplink.run(backlog_rx));
    let batcher = Batcher::new(
        config.agent_id.clone(),
        config.node.clone(),
        agent_session,
        config.batch_max_events,
        Duration::from_millis(config.batch_max_delay_ms),
        Arc::clone(&metrics),
        budget.clone(),
    )
    .with_spool(spool.clone())
    .with_step_end_flush(config.flush_at_step_end)
    .with_progress(progress.clone());
    let (sample_tx, sample_rx) = mpsc::channel(sample::QUEUE_SETS);
    let batcher = tokio::spawn(batcher.run(chunk_rx, sample_rx, backlog_tx, flush_rx));

    let ranks = Arc::new(sample::ranks::RankRegistry::default());
    let sampler = sample::Sampler::spawn(
        sample::SamplerConfig {
            gpu_interval_ms: config.gpu_sample_interval_ms,
            host_interval_ms: config.host_sample_interval_ms,
            nvml_library: config.nvml_library().to_owned(),
            nvml_retry_interval_ms: config.nvml_retry_interval_ms,
        },
        Arc::clone(&ranks),
        Arc::clone(&metrics),
        sample_tx,
    )
    .map_err(AgentError::Sampler)?;

    let kineto = Arc::new(kineto::KinetoDaemon::start(
        kineto::DaemonConfig {
            name: config.kineto_daemon_name.clone(),
            trace_dir: PathBuf::from(&config.trace_dir),
            max_trace_bytes: config.trace_max_file_bytes,
            max_dir_bytes: config.trace_dir_max_bytes,
            keep_traces: config.keep_traces,
            request_ttl_ms: config.trace_request_ttl_ms,
        },
        Arc::clone(&ranks),
    ));
    let ingest = Arc::new(Ingest::new(
        config.node.clone(),
        Arc::clone(&queue),
        chunk_tx,
        Arc::clone(&metrics),
        config.max_message_bytes,
        ranks,
        spool.clone(),
    ));
    let svc = IngestService(Arc::clone(&ingest));
    let (server_stop, stop_rx) = watch::channel(false);
    // `authorization` of the control stream and the spool's resends (the
    // uplink validated the token above).
    let auth: Option<tonic::metadata::MetadataValue<tonic::metadata::Ascii>> =
        (!config.collector_token.is_empty())
            .then(|| {
                rankscope_proto::auth::bearer(&config.collector_token)
                    .parse()
                    .ok()
            })
            .flatten();
    let control = control::Control {
        client: control_client,
        auth: auth.clone(),
        hello: rankscope_proto::v1::AgentHello {
            agent_id: config.agent_id.clone(),
            node: config.node.clone(),
            agent_session,
            kineto_listening: kineto.is_listening(),
        },
        daemon: Arc::clone(&kineto),
        ingest: Arc::clone(&ingest),
        node: config.node.clone(),
        max_trace_bytes: config.trace_max_file_bytes,
        archive: config.traces.archive(),
        metrics: Arc::clone(&metrics),
        backoff: config.backoff().map_err(config::ConfigError::from)?,
        rng: SmallRng::seed_from_u64(rng.random()),
    };
    // With a dump there is no collector: no control stream (its trace
    // imports need the collector's step numbers; captured trace files stay
    // in trace_dir), only the local trigger when configured.
    let control = if dump.is_none() {
        tokio::spawn(control.run(stop_rx.clone()))
    } else {
        drop(control);
        tokio::spawn(async {})
    };
    if let Some(progress) = progress {
        tokio::spawn(kineto::local::trace_on_start(
            Arc::clone(&kineto),
            progress,
            config.trace_on_start_iterations,
            stop_rx.clone(),
        ));
    }
    if let Some(s) = &spool {
        let resend = spool::Resend {
            routes: Arc::clone(&routes),
            auth: auth.clone(),
            backoff: config.backoff().map_err(config::ConfigError::from)?,
            rng: SmallRng::seed_from_u64(rng.random()),
            metrics: Arc::clone(&metrics),
        };
        tokio::spawn(resend.run(spooled_before, Arc::clone(s), stop_rx.clone()));
    }
    let mut servers = Vec::new();
    servers.push(serve::spawn_tcp(
        tcp,
        &svc,
        config.max_message_bytes,
        stop_rx.clone(),
    ));
    let unix_path = unix.map(|(listener, path)| {
        servers.push(serve::spawn_unix(
            listener,
            &svc,
            config.max_message_bytes,
            stop_rx,
        ));
        path
    });
    let metrics_addr = if config.metrics_listen_addr.is_empty() {
        None
    } else {
        let addr: SocketAddr =
            config
                .metrics_listen_addr
                .parse()
                .map_err(|e: std::net::AddrParseError| AgentError::MetricsAddr {
                    addr: config.metrics_listen_addr.clone(),
                    error: e.to_string(),
                })?;
        let (m, q, max, b) = (
            Arc::clone(&metrics),
            Arc::clone(&queue),
            config.queue_max_events,
            budget.clone(),
        );
        let r = Arc::clone(&routes);
        let render: http::Render = Arc::new(move || {
            let queued = max.saturating_sub(q.available_permits());
            let mut text = m.snapshot(queued as u64, b.held() as u64).to_prometheus();
            text.push_str(&route::lock(&r).prometheus());
            text
        });
        let r = Arc::clone(&routes);
        let status: http::Render = Arc::new(move || route::lock(&r).status());
        let (bound, task) = http::spawn(addr, render, status, server_stop.subscribe())
            .await
            .map_err(|e| AgentError::MetricsAddr {
                addr: config.metrics_listen_addr.clone(),
                error: e.to_string(),
            })?;
        servers.push(task);
        Some(bound)
    };
    tracing::info!(
        %tcp_addr,
        metrics = ?metrics_addr,
        unix = ?unix_path,
        collector = %config.collector_url,
        dump_dir = %config.dump_dir,
        agent_id = %config.agent_id,
        agent_session,
        "agent started"
    );
    Ok(AgentHandle {
        tcp_addr,
        metrics_addr,
        unix_path,
        agent_session,
        routes,
        metrics,
        queue,
        queue_max_events: config.queue_max_events,
        budget,
        ingest,
        servers,
        server_stop,
        flush: flush_tx,
        batcher,
        uplink,
        sampler,
        flush_timeout: Duration::from_millis(config.shutdown_flush_timeout_ms),
        kineto,
        control,
    })
}

impl AgentHandle {
    /// The `agent_session` of `job`'s batches ([`route::job_session`]).
    pub fn session_for(&self, job: &str) -> u64 {
        route::job_session(self.agent_session, job)
    }

    /// The agent status: collectors and each live job's owner (`GET /status`).
    pub fn route_status(&self) -> String {
        route::lock(&self.routes).status()
    }

    /// Offers a trace request to the libkineto processes polling this
    /// agent (see [`kineto`]).
    pub fn request_trace(&self, req: kineto::TraceRequest) {
        self.kineto.request(req);
    }

    /// Every (rank, trace) this agent delivered, and its state.
    pub fn traces(&self) -> Vec<kineto::RankTrace> {
        self.kineto.traces()
    }

    /// The attributed libkineto processes polling this agent: (pid, identity).
    pub fn kineto_processes(&self) -> Vec<(i32, kineto::ProcessIdentity)> {
        self.kineto.processes()
    }

    /// Whether the Kineto daemon endpoint is bound and served.
    pub fn kineto_listening(&self) -> bool {
        self.kineto.is_listening()
    }

    /// The agent's counters now.
    pub fn metrics(&self) -> MetricsSnapshot {
        let queued = self
            .queue_max_events
            .saturating_sub(self.queue.available_permits());
        self.metrics
            .snapshot(queued as u64, self.budget.held() as u64)
    }

    /// Stops accepting rank streams, ends the open ones, flushes the batch
    /// under construction and lets the uplink deliver the backlog for up to
    /// `shutdown_flush_timeout_ms`; whatever is still undelivered then is
    /// dropped and reported.
    pub async fn shutdown(self) -> ShutdownReport {
        let started = Instant::now();
        let deadline = started + self.flush_timeout;
        self.server_stop.send_replace(true);
        let streams_ended = tokio::time::timeout_at(deadline, self.ingest.stop())
            .await
            .is_ok();
        // The control task saw server_stop; it holds a sender of the
        // batcher's input, so it must be gone before the final flush.
        let _ = tokio::time::timeout_at(deadline, &mut { self.control }).await;
        let kineto = Arc::clone(&self.kineto);
        let _ = tokio::task::spawn_blocking(move || kineto.stop()).await;
        if let Some(sampler) = self.sampler {
            // Joining blocks until the current NVML call returns.
            let _ = tokio::task::spawn_blocking(move || sampler.stop()).await;
        }
        let _ = self.flush.send(());
        let (mut batcher, mut uplink) = (self.batcher, self.uplink);
        let flushed = tokio::time::timeout_at(deadline, async {
            let _ = (&mut batcher).await;
            let _ = (&mut uplink).await;
        })
        .await
        .is_ok();
        if !flushed {
            for task in [batcher, uplink] {
                // A handle that already returned must not be polled again.
                if !task.is_finished() {
                    task.abort();
                    let _ = task.await;
                }
            }
        }
        // The listeners stop once their connections are gone; do not wait
        // for ranks that keep idle connections open.
        let grace = Instant::now() + Duration::from_millis(200);
        for server in self.servers {
            if tokio::time::timeout_at(grace, &mut { server })
                .await
                .is_err()
            {
                tracing::debug!("ingest listener did not stop in time, detached");
            }
        }
        if let Some(path) = &self.unix_path {
            let _ = std::fs::remove_file(path);
        }

        let m = self.metrics.snapshot(0, 0);
        let settled = m.delivered_events + m.dropped("rejected_by_collector");
        let undelivered_events = m.accepted_events.saturating_sub(settled);
        if undelivered_events > 0 {
            self.metrics
                .dropped(DropReason::Shutdown, undelivered_events);
        }
        let taken = m.gpu_samples + m.host_samples;
        let settled = m.delivered_samples
            + m.dropped_samples.get("queue_full").copied().unwrap_or(0)
            + m.dropped_samples
                .get("rejected_by_collector")
                .copied()
                .unwrap_or(0);
        if taken > settled {
            self.metrics
                .samples_dropped(DropReason::Shutdown, taken - settled);
        }
        let report = ShutdownReport {
            delivered_events: m.delivered_events,
            undelivered_events,
            undelivered_batches: m.backlog_batches,
            timed_out: !(streams_ended && flushed),
            elapsed: started.elapsed(),
            metrics: self.metrics.snapshot(0, 0),
        };
        if report.undelivered_events > 0 {
            tracing::warn!(
                undelivered_events,
                undelivered_batches = report.undelivered_batches,
                "agent stopped with undelivered events"
            );
        } else {
            tracing::info!(
                delivered_events = report.delivered_events,
                "agent stopped, everything delivered"
            );
        }
        report
    }
}

/// A seed from the OS-seeded hasher keys of std, the clock and the pid.
fn entropy() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    h.write_u128(now);
    h.write_u32(std::process::id());
    h.finish()
}
