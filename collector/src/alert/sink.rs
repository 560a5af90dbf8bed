//! Alert sinks: where notifications go. One task per sink, fed through a
//! bounded queue; a slow or failing sink never blocks ingest or analytics
//! (a full queue drops the notification and counts it).
//!
//! In: [`Transition`]s. Out: HTTP POSTs (webhook, Alertmanager, Slack
//! formats) with configured headers, a timeout and retries with exponential
//! backoff; or log lines. Counters per sink: sent, failed (after retries),
//! dropped (queue full).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::{connect::HttpConnector, Client};

/// The sinks' HTTP client: `http://` and `https://` (rustls).
type HttpClient = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

/// The client of one sink: for `https://`, trusting `ca_path` or the
/// system's CA certificates.
fn client(cfg: &SinkConfig) -> Result<HttpClient, rankscope_proto::tls::TlsError> {
    let ca = (!cfg.ca_path.is_empty()).then(|| std::path::Path::new(&cfg.ca_path));
    let tls = if cfg.kind == SinkKind::Webhook && cfg.url.starts_with("https://") {
        rankscope_proto::tls::client_config_for_public(ca, "alerts.sinks.ca_path", &[])?
    } else {
        rankscope_proto::tls::client_config_without_roots(&[])
    };
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .wrap_connector(http);
    Ok(Client::builder(hyper_util::rt::TokioExecutor::new()).build(https))
}
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use super::engine::Transition;
use super::payload::{body, Format};

/// Where a sink sends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SinkConfig {
    /// `webhook` (HTTP POST) or `log`.
    pub kind: SinkKind,
    /// POST target (webhook kind).
    pub url: String,
    /// Body format (webhook kind).
    pub format: Format,
    /// Extra request headers, e.g. `Authorization = "Bearer ..."`.
    pub headers: std::collections::BTreeMap<String, String>,
    /// Timeout of one POST.
    pub timeout_ms: u64,
    /// Retries after a failed POST (timeouts, connection errors, 5xx, 429).
    pub max_retries: u32,
    /// First retry delay; doubles per retry.
    pub retry_initial_ms: u64,
    /// Notifications waiting for this sink; beyond it they are dropped.
    pub queue_capacity: usize,
    /// PEM CA certificates an `https://` url's certificate must chain to
    /// (empty: the system's CA certificates).
    pub ca_path: String,
}

/// Kind of sink.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SinkKind {
    #[default]
    Webhook,
    Log,
}

impl Default for SinkConfig {
    fn default() -> Self {
        Self {
            kind: SinkKind::Webhook,
            url: String::new(),
            format: Format::Webhook,
            headers: Default::default(),
            timeout_ms: 5_000,
            max_retries: 3,
            retry_initial_ms: 500,
            queue_capacity: 1_024,
            ca_path: String::new(),
        }
    }
}

/// Counters of one sink.
#[derive(Debug, Default)]
pub struct SinkMetrics {
    pub sent: AtomicU64,
    pub failed: AtomicU64,
    pub dropped: AtomicU64,
    pub retries: AtomicU64,
}

/// Hands notifications to a sink task.
#[derive(Clone)]
pub struct SinkHandle {
    pub name: String,
    tx: mpsc::Sender<Transition>,
    pub metrics: Arc<SinkMetrics>,
}

impl SinkHandle {
    /// Queues `t`; drops and counts it when the queue is full.
    pub fn notify(&self, t: &Transition) {
        if self.tx.try_send(t.clone()).is_err() {
            self.metrics.dropped.fetch_add(1, Relaxed);
            tracing::warn!(sink = %self.name, "alert sink queue full; notification dropped");
        }
    }
}

/// Starts the task of one sink; fails when its TLS trust cannot be loaded.
pub fn spawn_sink(
    name: String,
    cfg: SinkConfig,
    generator_url: String,
) -> Result<(SinkHandle, tokio::task::JoinHandle<()>), rankscope_proto::tls::TlsError> {
    let client = client(&cfg)?;
    let (tx, rx) = mpsc::channel(cfg.queue_capacity.max(1));
    let metrics = Arc::new(SinkMetrics::default());
    let task = tokio::spawn(run(
        name.clone(),
        cfg,
        client,
        generator_url,
        rx,
        metrics.clone(),
    ));
    Ok((SinkHandle { name, tx, metrics }, task))
}

async fn run(
    name: String,
    cfg: SinkConfig,
    client: HttpClient,
    generator_url: String,
    mut rx: mpsc::Receiver<Transition>,
    metrics: Arc<SinkMetrics>,
) {
    while let Some(t) = rx.recv().await {
        let a = t.alert();
        if cfg.kind == SinkKind::Log {
            tracing::warn!(job = %a.key.job, rule = a.key.rule, rank = a.key.rank, state = a.state.as_str(), summary = %a.evidence.summary, "alert");
            metrics.sent.fetch_add(1, Relaxed);
            continue;
        }
        let payload = body(cfg.format, &t, &generator_url).to_string();
        let mut delay = Duration::from_millis(cfg.retry_initial_ms.max(1));
        let mut attempt = 0;
        loop {
            match post(&client, &cfg, payload.clone()).await {
                Ok(()) => {
                    metrics.sent.fetch_add(1, Relaxed);
                    break;
                }
                Err((error, retryable)) if retryable && attempt < cfg.max_retries => {
                    attempt += 1;
                    metrics.retries.fetch_add(1, Relaxed);
                    tracing::debug!(sink = %name, attempt, %error, "alert POST failed; retrying");
                    tokio::time::sleep(delay).await;
                    delay = delay.saturating_mul(2);
                }
                Err((error, _)) => {
                    metrics.failed.fetch_add(1, Relaxed);
                    tracing::warn!(sink = %name, url = %cfg.url, %error, "alert notification failed; dropped");
                    break;
                }
            }
        }
    }
}

/// One POST; the error says whether a retry may help.
async fn post(
    client: &HttpClient,
    cfg: &SinkConfig,
    payload: String,
) -> Result<(), (String, bool)> {
    let mut req = hyper::Request::post(&cfg.url).header("content-type", "application/json");
    for (k, v) in &cfg.headers {
        req = req.header(k.as_str(), v.as_str());
    }
    let req = req
        .body(Full::new(Bytes::from(payload)))
        .map_err(|e| (format!("bad request: {e}"), false))?;
    let call = client.request(req);
    match tokio::time::timeout(Duration::from_millis(cfg.timeout_ms.max(1)), call).await {
        Err(_) => Err((format!("timed out after {} ms", cfg.timeout_ms), true)),
        Ok(Err(e)) => Err((format!("request failed: {e}"), true)),
        Ok(Ok(resp)) => {
            let s = resp.status();
            if s.is_success() {
                Ok(())
            } else {
                Err((
                    format!("HTTP {s}"),
                    s.is_server_error() || s.as_u16() == 429,
                ))
            }
        }
    }
}
