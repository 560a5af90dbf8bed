//! The connection to the collector: endpoint, TLS, certificate reload, and
//! readable transport errors.
//!
//! In: `collector_url` and, for `https://`, `tls_ca_path` (the CA that signed
//! the collector's certificate) plus optionally `tls_cert_path` /
//! `tls_key_path` (this agent's client certificate for mutual TLS). Out: a
//! lazily connecting client, replaced through a `watch` channel when the
//! certificate files change or on SIGHUP ([`run_reloader`]); the uplink picks
//! the newest client for each call, so calls already running finish on the
//! old connection and nothing is dropped.
//!
//! Invariant: PEM files are parsed at start-up with the same loader the
//! collector uses, so a wrong path or a key that does not fit fails the start
//! with an error naming the option and the file, not the first send.

use std::sync::Arc;
use std::time::Duration;

use rankscope_proto::tls::{self as shared_tls, TlsPaths};
use rankscope_proto::v1 as proto;
use tokio::sync::watch;
use tonic::transport::{Channel, Endpoint};

use crate::config::Config;
use crate::metrics::Metrics;
use crate::AgentError;

/// The generated client over a tonic channel.
pub(crate) type Client = proto::collector_ingest_client::CollectorIngestClient<Channel>;

/// The TLS files of `config`, when `collector_url` is `https://`.
pub(crate) fn tls_paths(config: &Config) -> Option<TlsPaths> {
    config.collector_url.starts_with("https://").then(|| {
        TlsPaths::from_config(
            &config.tls_cert_path,
            &config.tls_key_path,
            &config.tls_ca_path,
        )
    })
}

/// A lazily connecting client for `config` (reads the TLS files now).
pub(crate) fn client(config: &Config) -> Result<Client, AgentError> {
    let timeout = Duration::from_millis(config.request_timeout_ms);
    let mut endpoint = Endpoint::from_shared(config.collector_url.clone())
        .map_err(|error| AgentError::CollectorUrl {
            url: config.collector_url.clone(),
            error,
        })?
        .connect_timeout(timeout)
        .timeout(timeout)
        .tcp_nodelay(true);
    if let Some(paths) = tls_paths(config) {
        endpoint = endpoint
            .tls_config(shared_tls::tonic_client_tls(
                &paths,
                &config.tls_server_name,
            )?)
            .map_err(|error| AgentError::CollectorUrl {
                url: config.collector_url.clone(),
                error,
            })?;
    }
    Ok(proto::collector_ingest_client::CollectorIngestClient::new(
        endpoint.connect_lazy(),
    ))
}

/// A SIGHUP listener, registered now (a SIGHUP sent once this returns is
/// caught, not fatal). `None` (logged) when signals are unavailable.
pub(crate) fn sighup() -> Option<tokio::signal::unix::Signal> {
    tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        .map_err(|e| {
            tracing::warn!(error = %e, "cannot listen for SIGHUP; certificates reload on file change only");
        })
        .ok()
}

/// Rebuilds the client when the TLS files change (checked every `every`) or
/// on SIGHUP, until the uplink is gone. A reload that fails keeps the current
/// client and is logged and counted.
pub(crate) async fn run_reloader(
    config: Config,
    paths: TlsPaths,
    every: Duration,
    tx: watch::Sender<Client>,
    metrics: Arc<Metrics>,
    mut hup: Option<tokio::signal::unix::Signal>,
) {
    let mut loaded = paths.fingerprint();
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let forced = tokio::select! {
            _ = tx.closed() => return,
            Some(()) = async { match hup.as_mut() { Some(h) => h.recv().await, None => None } } => true,
            _ = tick.tick() => false,
        };
        let now = paths.fingerprint();
        if !forced && now == loaded {
            continue;
        }
        loaded = now;
        match client(&config) {
            Ok(c) => {
                Metrics::inc(&metrics.tls_reloads);
                tracing::info!("TLS certificates reloaded; new calls use them");
                let _ = tx.send(c);
            }
            Err(e) => {
                Metrics::inc(&metrics.tls_reload_failures);
                tracing::error!(error = %e, "TLS reload failed; the previous certificates stay in use");
            }
        }
    }
}

/// A failed call's message with every source ("transport error: ...:
/// received fatal alert: CertificateRequired"), and whether TLS caused it.
pub(crate) fn describe(status: &tonic::Status) -> (String, bool) {
    let mut text = status.message().to_owned();
    let mut tls = false;
    let mut next = std::error::Error::source(status);
    while let Some(e) = next {
        let line = e.to_string();
        if !text.ends_with(&line) {
            text.push_str(": ");
            text.push_str(&line);
        }
        if e.is::<tokio_rustls::rustls::Error>() {
            tls = true;
        }
        if let Some(inner) = e
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
        {
            if inner.is::<tokio_rustls::rustls::Error>() {
                tls = true;
            }
        }
        next = e.source();
    }
    (text, tls)
}

/// How long [`probe_tls`] waits for each step.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);
/// The HTTP/2 client preface and an empty SETTINGS frame: makes a gRPC
/// server answer right after the handshake.
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00";

/// Why [`probe_tls`] could not complete a TLS connection.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// TLS itself failed: an untrusted server certificate, a refused client
    /// certificate, unusable files.
    #[error("{0}")]
    Tls(String),
    /// The collector could not be reached (connect failed, timeouts).
    #[error("{0}")]
    Unreachable(String),
}

/// Connects to the collector with this agent's TLS settings and says why the
/// connection fails, if it does: a certificate the agent does not trust, or
/// (TLS 1.3 reports it only after the handshake) a client certificate the
/// collector refused. gRPC hides both behind "connection closed", so the
/// uplink runs this once per outage and `--check` runs it too.
/// `Ok(false)`: the collector_url is not https://.
pub async fn probe_tls(config: &Config) -> Result<bool, ProbeError> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Some(paths) = tls_paths(config) else {
        return Ok(false);
    };
    let tls = shared_tls::client_config(&paths, &[shared_tls::ALPN_H2])
        .map_err(|e| ProbeError::Tls(e.to_string()))?;
    let uri: tonic::codegen::http::Uri = config.collector_url.parse().map_err(|e| {
        ProbeError::Unreachable(format!("collector_url {}: {e}", config.collector_url))
    })?;
    let host = uri
        .host()
        .unwrap_or_default()
        .trim_matches(['[', ']'])
        .to_owned();
    let port = uri.port_u16().unwrap_or(443);
    let name = if config.tls_server_name.is_empty() {
        host.clone()
    } else {
        config.tls_server_name.clone()
    };
    let name = rustls_pki_types::ServerName::try_from(name.clone())
        .map_err(|e| ProbeError::Tls(format!("{name:?} is not a valid TLS server name: {e}")))?;
    let step = |what: &'static str| {
        move |_| ProbeError::Unreachable(format!("{what} timed out after {PROBE_TIMEOUT:?}"))
    };
    let tcp = tokio::time::timeout(
        PROBE_TIMEOUT,
        tokio::net::TcpStream::connect((host.as_str(), port)),
    )
    .await
    .map_err(step("connect"))?
    .map_err(|e| ProbeError::Unreachable(format!("cannot connect to {host}:{port}: {e}")))?;
    let connector = tokio_rustls::TlsConnector::from(Arc::new(tls));
    let mut stream = tokio::time::timeout(PROBE_TIMEOUT, connector.connect(name, tcp))
        .await
        .map_err(step("TLS handshake"))?
        .map_err(|e| ProbeError::Tls(format!("TLS handshake with the collector failed: {e}")))?;
    let refused = |e: std::io::Error| {
        ProbeError::Tls(format!("the collector refused this agent's TLS connection: {e} (check tls_cert_path / tls_key_path against the collector's tls_ca_path)"))
    };
    stream.write_all(H2_PREFACE).await.map_err(refused)?;
    stream.flush().await.map_err(refused)?;
    let mut byte = [0u8; 1];
    match tokio::time::timeout(PROBE_TIMEOUT, stream.read(&mut byte)).await {
        Ok(Ok(n)) if n > 0 => Ok(true),
        Ok(Ok(_)) => Err(ProbeError::Tls(
            "the collector closed the TLS connection without answering".into(),
        )),
        Ok(Err(e)) => Err(refused(e)),
        Err(_) => Err(ProbeError::Unreachable(format!(
            "the collector did not answer within {PROBE_TIMEOUT:?} after the TLS handshake"
        ))),
    }
}
