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

pub use rankscope_proto::tls::probe::ProbeError;
use rankscope_proto::tls::{self as shared_tls, TlsPaths};
use tokio::sync::watch;
use tonic::transport::{Channel, Endpoint};

use crate::config::Config;
use crate::metrics::Metrics;
use crate::AgentError;

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

/// The first URL of `collector_url` (the control stream's collector and
/// the TLS probe's; a list names several).
pub(crate) fn first_url(config: &Config) -> String {
    config
        .collector_url
        .split(',')
        .map(str::trim)
        .find(|s| !s.is_empty())
        .unwrap_or_default()
        .to_owned()
}

/// A lazily connecting client for `config`'s first collector URL (reads
/// the TLS files now).
pub(crate) fn client(config: &Config) -> Result<Channel, AgentError> {
    client_at(config, &first_url(config), &config.tls_server_name)
}

/// A lazily connecting client for one resolved collector address of `url`;
/// TLS checks the certificate against `tls_server_name`, else the URL's
/// host (not the address).
pub(crate) fn client_for(
    config: &Config,
    url: &crate::route::resolve::CollectorUrl,
    addr: std::net::SocketAddr,
) -> Result<Channel, AgentError> {
    let name = if config.tls_server_name.is_empty() {
        url.host.as_str()
    } else {
        config.tls_server_name.as_str()
    };
    client_at(config, &format!("{}://{addr}", url.scheme), name)
}

fn client_at(config: &Config, url: &str, server_name: &str) -> Result<Channel, AgentError> {
    let timeout = Duration::from_millis(config.request_timeout_ms);
    let mut endpoint = Endpoint::from_shared(url.to_owned())
        .map_err(|error| AgentError::CollectorUrl {
            url: url.to_owned(),
            error,
        })?
        .connect_timeout(timeout)
        .timeout(timeout)
        .tcp_nodelay(true);
    if let Some(paths) = tls_paths(config) {
        endpoint = endpoint
            .tls_config(shared_tls::tonic_client_tls(&paths, server_name)?)
            .map_err(|error| AgentError::CollectorUrl {
                url: url.to_owned(),
                error,
            })?;
    }
    Ok(endpoint.connect_lazy())
}

/// Rebuilds the client when the TLS files change (checked every `every`) or
/// on SIGHUP, until the uplink is gone. A reload that fails keeps the current
/// client and is logged and counted.
pub(crate) async fn run_reloader(
    config: Config,
    paths: TlsPaths,
    every: Duration,
    tx: watch::Sender<Channel>,
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

/// Connects to the collector with this agent's TLS settings and says why
/// the connection fails, if it does ([`shared_tls::probe::probe`]); the
/// uplink runs it once per outage and `--check` runs it too.
/// `Ok(false)`: the collector_url is not https://.
pub async fn probe_tls(config: &Config) -> Result<bool, ProbeError> {
    let Some(paths) = tls_paths(config) else {
        return Ok(false);
    };
    shared_tls::probe::probe(&first_url(config), &paths, &config.tls_server_name).await?;
    Ok(true)
}
