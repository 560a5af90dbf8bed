//! rankscope-collector: receives agent batches over gRPC, stores them in
//! ClickHouse and serves the query API.
//!
//! Flow: `service` (gRPC `CollectorIngest`: validate, [`convert`], [`dedupe`])
//! -> `store::writer` (the one task that owns buffered rows; batches per table
//! and acknowledges after ClickHouse accepted) -> ClickHouse; once the writer
//! holds a batch, `stream` (live analytics) has it too, and writes its results
//! through a second writer with a short flush interval. `api` reads back
//! through `store` queries. `retention` drops expired day partitions.
//!
//! Backpressure: the writer queue is bounded; when full the service answers
//! UNAVAILABLE at once and the agent keeps the batch and retries. Nothing is
//! acknowledged before it is stored.

pub mod alert;
pub mod api;
mod civil;
pub mod config;
pub mod convert;
pub mod counters;
pub mod dedupe;
pub mod fleet;
pub mod gauges;
pub mod limits;
pub mod metrics;
pub mod otel;
pub mod ownership;
pub mod service;
pub mod store;
pub mod stream;
mod tick;
pub mod tls;
pub mod traces;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rankscope_proto::v1 as proto;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use config::Config;

/// Why the collector could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    #[error("ClickHouse: {0}")]
    Store(#[from] store::StoreError),
    #[error("rebuilding live state from ClickHouse: {0}")]
    Recover(store::StoreError),
    #[error("{0}")]
    Otel(String),
    #[error("TLS: {0}")]
    Tls(#[from] rankscope_proto::tls::TlsError),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: String,
        source: std::io::Error,
    },
}

/// A running collector.
pub struct Collector {
    /// Bound address of the gRPC ingest service.
    pub grpc_addr: SocketAddr,
    /// Bound address of the HTTP API.
    pub http_addr: SocketAddr,
    metrics: Arc<metrics::Metrics>,
    writer: store::WriterHandle,
    stream: stream::StreamHandle,
    alerts: alert::AlertHandle,
    gauges: Arc<gauges::JobGauges>,
    otel: Option<otel::Otel>,
    tls: Option<Arc<tls::TlsState>>,
    shutdown: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl Collector {
    /// Pipeline counters.
    pub fn metrics(&self) -> &metrics::Metrics {
        &self.metrics
    }

    /// Live analytics counters.
    pub fn stream(&self) -> &stream::StreamHandle {
        &self.stream
    }

    /// The writer (for its counters).
    pub fn writer(&self) -> &store::WriterHandle {
        &self.writer
    }

    /// Stops accepting requests, lets in-flight batches finish, flushes the
    /// writer and waits for every task.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        for t in self.tasks {
            let _ = t.await;
        }
        if let Some(o) = self.otel {
            // The SDK's shutdown blocks on a final export.
            let _ = tokio::task::spawn_blocking(move || o.shutdown()).await;
        }
    }

    /// Alerting counters and sinks.
    pub fn alerts(&self) -> &alert::AlertHandle {
        &self.alerts
    }

    /// TLS state (counters, reload), when the listeners serve TLS.
    pub fn tls(&self) -> Option<&Arc<tls::TlsState>> {
        self.tls.as_ref()
    }

    /// The latest analytics gauges.
    pub fn gauges(&self) -> &gauges::JobGauges {
        &self.gauges
    }
}

/// Starts the collector: migrates the schema, starts the writer, analytics,
/// binds both listeners and spawns the tasks.
pub async fn start(cfg: Config) -> Result<Collector, StartError> {
    cfg.validate()?;
    // Certificates first: a wrong path should fail before any other work.
    let tls = match cfg.tls_paths() {
        Some(paths) => Some(tls::TlsState::load(paths)?),
        None => None,
    };
    let exposed = [&cfg.grpc_listen_addr, &cfg.http_listen_addr]
        .into_iter()
        .any(|a| !rankscope_proto::tls::is_loopback_listen_addr(a));
    if tls.is_none() && exposed {
        tracing::warn!(
            grpc = %cfg.grpc_listen_addr,
            http = %cfg.http_listen_addr,
            "allow_insecure = true: serving plaintext on a non-loopback address; tokens and data cross the network unencrypted"
        );
    }
    let store = store::Store::connect(&cfg.clickhouse)?.with_cluster(&cfg.clickhouse_cluster)?;
    let applied = store.migrate().await?;
    tracing::info!(applied = ?applied, database = %cfg.clickhouse.database, cluster = %cfg.clickhouse_cluster, "schema up to date");

    let dedupe = Arc::new(Mutex::new(dedupe::Dedupe::new(cfg.dedupe_max_sessions)));

    let (shutdown, shutdown_rx) = watch::channel(false);
    let (writer, writer_task) = store::spawn_writer(
        store.clone(),
        cfg.writer.clone(),
        wait_for(shutdown_rx.clone()),
    );
    // Live analytics results (and alerts) through their own writer with a
    // short flush interval: a verdict does not wait behind the ingest
    // writer's large flushes. Same counters.
    let (results_writer, results_writer_task) = store::spawn_writer_counting(
        store.clone(),
        cfg.writer.for_results(),
        writer.metrics_arc(),
        wait_for(shutdown_rx.clone()),
    );
    let metrics = Arc::new(metrics::Metrics::default());
    let trace_hub = traces::TraceHub::new(cfg.traces.clone(), store.clone(), writer.clone());
    match trace_hub.reload().await {
        Ok(n) => tracing::debug!(rows = n, "trace states reloaded"),
        Err(e) => tracing::warn!(error = %e, "cannot reload trace states; listing starts empty"),
    }
    let policy = cfg
        .stream
        .straggler
        .policy()
        .map_err(config::ConfigError::Invalid)?;
    let gauges = Arc::new(gauges::JobGauges::default());
    // After a crash: the live state of running jobs and the firing alerts
    // come back from ClickHouse before any batch is accepted.
    let started = std::time::Instant::now();
    let recovered = stream::recover::load(&store, &cfg.stream, &policy, service::now_ns())
        .await
        .map_err(StartError::Recover)?;
    let stats = recovered.stats;
    if stats.jobs + stats.jobs_skipped > 0
        || !recovered.firing.is_empty()
        || !recovered.uncommitted.is_empty()
    {
        tracing::info!(
            jobs = stats.jobs,
            jobs_skipped = stats.jobs_skipped,
            events = stats.events_replayed,
            firing_alerts = recovered.firing.len(),
            uncommitted_batches = recovered.uncommitted.len(),
            ms = started.elapsed().as_millis() as u64,
            "live state rebuilt from ClickHouse"
        );
    }
    let (alerts, alerts_task) = alert::spawn_alerts(
        cfg.alerts.clone(),
        results_writer.clone(),
        recovered.firing,
        wait_for(shutdown_rx.clone()),
    )?;
    // The fleet route's answers live one repeat_offender tick (fleet::cache).
    let fleet_answers = fleet::cache::FleetCache::new(std::time::Duration::from_millis(
        cfg.alerts.rules.repeat_offender.evaluate_interval_ms,
    ));
    let fleet_refresher =
        fleet_answers.spawn_refresher(store.clone(), wait_for(shutdown_rx.clone()));
    // The fleet-wide repeat_offender rule, on its own tick (fleet::watch).
    let fleet_task = fleet::watch::spawn(
        store.clone(),
        cfg.alerts.rules.repeat_offender.clone(),
        alerts.clone(),
        gauges.clone(),
        fleet_answers.clone(),
        wait_for(shutdown_rx.clone()),
    );
    // The clock_skew rule, on its own tick (alert::clock_watch).
    let clock_task = alert::clock_watch::spawn(
        store.clone(),
        cfg.alerts.rules.clock_skew.clone(),
        alerts.clone(),
        wait_for(shutdown_rx.clone()),
    );
    let live_verdicts = Arc::new(stream::live::LiveVerdicts::default());
    let (stream, stream_task) = stream::spawn_stream(
        cfg.stream.clone(),
        policy,
        stream::Outputs {
            alerts: Some(alerts.clone()),
            gauges: gauges.clone(),
            hang_after_secs: cfg.alerts.rules.hang.hang_after_secs,
            traces: Some(trace_hub.clone()),
            live: live_verdicts.clone(),
        },
        results_writer,
        recovered.jobs,
        wait_for(shutdown_rx.clone()),
    );

    let ownership_metrics = Arc::new(ownership::OwnershipMetrics::default());
    let counters = counters::Counters {
        ingest: metrics.clone(),
        writer: writer.clone(),
        stream: stream.clone(),
        alerts: alerts.clone(),
        tls: tls.clone(),
        traces: Some(trace_hub.metrics.clone()),
        ownership: Some(ownership_metrics.clone()),
    };
    let otel = if cfg.otlp_endpoint.is_empty() {
        None
    } else {
        Some(
            otel::Otel::start(
                &cfg.otlp_endpoint,
                Duration::from_millis(cfg.otlp_export_interval_ms),
                gauges.clone(),
                counters.clone(),
            )
            .map_err(|e| StartError::Otel(e.to_string()))?,
        )
    };
    let grpc = bind(&cfg.grpc_listen_addr).await?;
    let http = bind(&cfg.http_listen_addr).await?;
    let grpc_addr = grpc.local_addr().map_err(|source| StartError::Bind {
        addr: cfg.grpc_listen_addr.clone(),
        source,
    })?;
    let http_addr = http.local_addr().map_err(|source| StartError::Bind {
        addr: cfg.http_listen_addr.clone(),
        source,
    })?;

    let svc_dedupe = Arc::clone(&dedupe);
    let svc = service::IngestService::new(
        store.clone(),
        writer.clone(),
        stream.clone(),
        dedupe,
        metrics.clone(),
    )
    .with_traces(trace_hub.clone())
    .with_uncommitted(recovered.uncommitted);
    let ownership = Arc::new(ownership::Ownership::new(
        store.clone(),
        stream.clone(),
        cfg.stream.clone(),
        policy,
        cfg.ownership.clone(),
        if cfg.ownership.collector_id.is_empty() {
            ownership::default_id(grpc_addr)
        } else {
            cfg.ownership.collector_id.clone()
        },
        svc_dedupe,
        svc.uncommitted(),
        ownership_metrics,
    ));
    tokio::spawn(Arc::clone(&ownership).run(wait_for(shutdown_rx.clone())));
    let svc = svc.with_ownership(Arc::clone(&ownership));
    let server = proto::collector_ingest_server::CollectorIngestServer::new(svc)
        .max_decoding_message_size(cfg.max_message_bytes);
    let server = tonic::service::interceptor::InterceptedService::new(
        server,
        token_check(cfg.auth_token.clone(), metrics.clone()),
    );
    // The agents' control streams: the same token as ingest.
    let control = tonic::service::interceptor::InterceptedService::new(
        proto::collector_control_server::CollectorControlServer::new(
            traces::control::ControlService::new(trace_hub.clone(), shutdown_rx.clone()),
        ),
        token_check(cfg.auth_token.clone(), metrics.clone()),
    );
    let grpc_task = {
        let stop = wait_for(shutdown_rx.clone());
        let router = tonic::transport::Server::builder()
            .layer(tower::util::MapResponseLayer::new(
                limits::rewrite_too_large,
            ))
            .add_service(server)
            .add_service(control);
        let tls = tls.clone();
        tokio::spawn(async move {
            let res = match tls {
                Some(state) => {
                    router
                        .serve_with_incoming_shutdown(tls::incoming(grpc, state), stop)
                        .await
                }
                None => {
                    router
                        .serve_with_incoming_shutdown(tokio_stream_incoming(grpc), stop)
                        .await
                }
            };
            if let Err(e) = res {
                tracing::error!(error = %e, "gRPC server failed");
            }
        })
    };
    let api_task = {
        let state = api::ApiState {
            auth_token: cfg.auth_token.clone(),
            store: store.clone(),
            counters,
            gauges: gauges.clone(),
            traces: trace_hub.clone(),
            live: live_verdicts,
            fleet: fleet_answers,
            overviews: Default::default(),
        };
        let stop = wait_for(shutdown_rx.clone());
        let app = api::router(state);
        let http = match &tls {
            Some(state) => HttpSocket::Tls(tls::HttpListener::new(http, state.clone()).map_err(
                |source| StartError::Bind {
                    addr: cfg.http_listen_addr.clone(),
                    source,
                },
            )?),
            None => HttpSocket::Plain(http),
        };
        tokio::spawn(async move {
            let res = match http {
                HttpSocket::Tls(l) => axum::serve(l, app).with_graceful_shutdown(stop).await,
                HttpSocket::Plain(l) => axum::serve(l, app).with_graceful_shutdown(stop).await,
            };
            if let Err(e) = res {
                tracing::error!(error = %e, "HTTP server failed");
            }
        })
    };
    let mut tasks = vec![
        grpc_task,
        api_task,
        tokio::spawn(traces::run_ticker(
            trace_hub.clone(),
            wait_for(shutdown_rx.clone()),
        )),
    ];
    if let Some(state) = &tls {
        tasks.push(tokio::spawn(tls::run_reloader(
            state.clone(),
            Duration::from_secs(cfg.tls_reload_interval_secs),
            rankscope_proto::tls::sighup(),
            wait_for(shutdown_rx.clone()),
        )));
    }
    let retention_task = tokio::spawn(retention(
        store,
        cfg.retention_days,
        Duration::from_secs(cfg.retention_check_interval_secs),
        wait_for(shutdown_rx),
    ));
    tracing::info!(
        grpc = %grpc_addr,
        http = %http_addr,
        tls = tls.is_some(),
        mutual_tls = tls.as_ref().is_some_and(|t| t.mutual()),
        "collector listening"
    );
    // Servers first: in-flight batches finish before the writer's final flush.
    tasks.extend(fleet_task);
    tasks.push(fleet_refresher);
    tasks.extend(clock_task);
    tasks.extend([
        retention_task,
        stream_task,
        alerts_task,
        results_writer_task,
        writer_task,
    ]);
    Ok(Collector {
        grpc_addr,
        http_addr,
        metrics,
        writer,
        stream,
        alerts,
        gauges,
        otel,
        tls,
        shutdown,
        tasks,
    })
}

/// The gRPC interceptor both agent-facing services share: the bearer token
/// in `authorization`, counted as `unauthenticated` when wrong or missing.
fn token_check(
    token: String,
    metrics: Arc<metrics::Metrics>,
) -> impl FnMut(tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> + Clone {
    move |req: tonic::Request<()>| {
        let header = req
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok());
        if rankscope_proto::auth::authorized(header, &token) {
            Ok(req)
        } else {
            metrics.reject("unauthenticated");
            Err(tonic::Status::unauthenticated(
                "missing or wrong bearer token (agent collector_token / RANKSCOPE_TOKEN)",
            ))
        }
    }
}

/// The HTTP API's socket: plaintext (loopback or `allow_insecure`) or TLS.
enum HttpSocket {
    Plain(tokio::net::TcpListener),
    Tls(tls::HttpListener),
}

async fn bind(addr: &str) -> Result<tokio::net::TcpListener, StartError> {
    tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| StartError::Bind {
            addr: addr.to_owned(),
            source,
        })
}

fn tokio_stream_incoming(
    l: tokio::net::TcpListener,
) -> impl futures_util::Stream<Item = std::io::Result<tokio::net::TcpStream>> {
    futures_util::stream::unfold(l, |l| async move {
        let r = l.accept().await.map(|(s, _)| {
            let _ = s.set_nodelay(true);
            s
        });
        Some((r, l))
    })
}

/// Resolves when the shutdown flag turns true (or its sender is gone).
async fn wait_for(mut rx: watch::Receiver<bool>) {
    let _ = rx.wait_for(|stop| *stop).await;
}

/// Drops day partitions older than `retention_days` every `every`.
async fn retention(
    store: store::Store,
    retention_days: u32,
    every: Duration,
    stop: impl Future<Output = ()>,
) {
    if retention_days == 0 {
        return;
    }
    tokio::pin!(stop);
    let mut tick = tokio::time::interval(every);
    loop {
        tokio::select! {
            _ = &mut stop => return,
            _ = tick.tick() => {
                match store.drop_expired_partitions(retention_days, service::now_ns()).await {
                    Ok(dropped) if !dropped.is_empty() => {
                        tracing::info!(?dropped, retention_days, "dropped expired partitions");
                    }
                    Ok(_) => {}
                    Err(e) => tracing::warn!(error = %e, "retention check failed"),
                }
            }
        }
    }
}
