//! TLS termination for both collector listeners, with certificate reload.
//!
//! In: `tls_cert_path` / `tls_key_path` (the collector's identity) and, for
//! mutual TLS, `tls_ca_path` (agents must present a certificate signed by it);
//! accepted TCP connections. Out: handshaken streams for the gRPC server
//! ([`incoming`]) and the HTTP API ([`HttpListener`]); counters of failed
//! handshakes and reloads.
//!
//! Policy:
//! * gRPC (ALPN h2) requires a client certificate when a CA is configured; the
//!   HTTP API (ALPN http/1.1) never asks for one — people and Prometheus reach
//!   it with the bearer token, and probes with `/healthz`;
//! * handshakes run in their own tasks with a deadline, so a slow or hostile
//!   client never stalls the accept loop; a failed handshake is logged with
//!   the peer address and the reason and counted per listener;
//! * [`TlsState::reload`] builds new configurations from the files and swaps
//!   them in for connections accepted afterwards; established connections keep
//!   the session they negotiated, so reloading never drops a stream. A reload
//!   that fails (a half-written file, a key that does not fit) keeps the old
//!   configuration and is counted. [`run_reloader`] reloads when the files
//!   change on disk and on SIGHUP.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use rankscope_proto::tls::{self, Fingerprint, TlsError, TlsPaths};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

/// Longest a TLS handshake may take before the connection is closed.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Handshaken connections waiting for the server to take them.
const ACCEPTED_QUEUE: usize = 64;

/// Which listener a connection arrived on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listener {
    Grpc,
    Http,
}

impl Listener {
    /// The `listener` label value.
    pub fn label(self) -> &'static str {
        match self {
            Listener::Grpc => "grpc",
            Listener::Http => "http",
        }
    }
}

/// TLS counters, rendered on `/metrics`.
#[derive(Debug, Default)]
pub struct TlsCounters {
    /// Completed handshakes on the gRPC listener (new agent connections).
    pub handshakes_grpc: AtomicU64,
    /// Completed handshakes on the HTTP listener.
    pub handshakes_http: AtomicU64,
    /// Failed handshakes on the gRPC listener (agents without a valid
    /// certificate land here).
    pub handshake_failures_grpc: AtomicU64,
    /// Failed handshakes on the HTTP listener.
    pub handshake_failures_http: AtomicU64,
    /// Reloads that installed new certificates.
    pub reloads: AtomicU64,
    /// Reloads that failed (the previous certificates stay in use).
    pub reload_failures: AtomicU64,
}

impl TlsCounters {
    /// The counters as families (for `/metrics` and OTLP).
    pub fn families(&self) -> Vec<crate::counters::Family> {
        use crate::counters::Family;
        let series = |pairs: [(&'static str, &AtomicU64); 2], label: &'static str| {
            pairs
                .iter()
                .map(|(l, v)| (vec![(label, (*l).to_owned())], v.load(Relaxed)))
                .collect()
        };
        vec![
            Family {
                name: "rankscope_collector_tls_handshake_failures_total",
                help: "TLS handshakes that failed (e.g. an agent without a valid client certificate), by listener.",
                series: series(
                    [
                        ("grpc", &self.handshake_failures_grpc),
                        ("http", &self.handshake_failures_http),
                    ],
                    "listener",
                ),
            },
            Family {
                name: "rankscope_collector_tls_handshakes_total",
                help: "Completed TLS handshakes (new connections), by listener.",
                series: series(
                    [("grpc", &self.handshakes_grpc), ("http", &self.handshakes_http)],
                    "listener",
                ),
            },
            Family {
                name: "rankscope_collector_tls_reloads_total",
                help: "Certificate reloads, by result.",
                series: series(
                    [("ok", &self.reloads), ("error", &self.reload_failures)],
                    "result",
                ),
            },
        ]
    }

    fn handshake_done(&self, l: Listener) {
        match l {
            Listener::Grpc => &self.handshakes_grpc,
            Listener::Http => &self.handshakes_http,
        }
        .fetch_add(1, Relaxed);
    }

    fn handshake_failed(&self, l: Listener) {
        match l {
            Listener::Grpc => &self.handshake_failures_grpc,
            Listener::Http => &self.handshake_failures_http,
        }
        .fetch_add(1, Relaxed);
    }
}

/// The current server configurations and the files they came from.
pub struct TlsState {
    paths: TlsPaths,
    grpc: RwLock<Arc<ServerConfig>>,
    http: RwLock<Arc<ServerConfig>>,
    loaded: Mutex<Fingerprint>,
    /// Counters.
    pub counters: TlsCounters,
}

impl std::fmt::Debug for TlsState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsState")
            .field("paths", &self.paths)
            .finish_non_exhaustive()
    }
}

fn build(paths: &TlsPaths) -> Result<(ServerConfig, ServerConfig), TlsError> {
    Ok((
        tls::server_config(paths, true, &[tls::ALPN_H2])?,
        tls::server_config(paths, false, &[tls::ALPN_HTTP1])?,
    ))
}

impl TlsState {
    /// Loads the certificates; errors name the file that is wrong.
    pub fn load(paths: TlsPaths) -> Result<Arc<Self>, TlsError> {
        let fingerprint = paths.fingerprint();
        let (grpc, http) = build(&paths)?;
        Ok(Arc::new(Self {
            paths,
            grpc: RwLock::new(Arc::new(grpc)),
            http: RwLock::new(Arc::new(http)),
            loaded: Mutex::new(fingerprint),
            counters: TlsCounters::default(),
        }))
    }

    /// Whether agents must present a client certificate.
    pub fn mutual(&self) -> bool {
        self.paths.ca.is_some()
    }

    fn acceptor(&self, l: Listener) -> TlsAcceptor {
        let slot = match l {
            Listener::Grpc => &self.grpc,
            Listener::Http => &self.http,
        };
        let cfg = slot.read().map(|c| Arc::clone(&c)).unwrap_or_else(|p| {
            // A panic while holding the lock cannot leave a torn Arc.
            Arc::clone(&p.into_inner())
        });
        TlsAcceptor::from(cfg)
    }

    /// Whether the files differ from what was loaded last.
    pub fn changed_on_disk(&self) -> bool {
        let now = self.paths.fingerprint();
        self.loaded.lock().map(|f| *f != now).unwrap_or(true)
    }

    /// Reads the files again and installs them for new connections. On error
    /// the previous configuration stays in use.
    pub fn reload(&self) -> Result<(), TlsError> {
        let fingerprint = self.paths.fingerprint();
        let built = build(&self.paths);
        if let Ok(mut f) = self.loaded.lock() {
            // Also on failure: a broken file is reported once, not every tick.
            *f = fingerprint;
        }
        match built {
            Ok((grpc, http)) => {
                for (slot, cfg) in [(&self.grpc, grpc), (&self.http, http)] {
                    if let Ok(mut s) = slot.write() {
                        *s = Arc::new(cfg);
                    }
                }
                self.counters.reloads.fetch_add(1, Relaxed);
                tracing::info!("TLS certificates reloaded");
                Ok(())
            }
            Err(e) => {
                self.counters.reload_failures.fetch_add(1, Relaxed);
                tracing::error!(error = %e, "TLS reload failed; the previous certificates stay in use");
                Err(e)
            }
        }
    }
}

/// Reloads `state` when its files change (checked every `every`) and on
/// SIGHUP (`hup`, from [`tls::sighup`]), until `stop` resolves.
pub async fn run_reloader(
    state: Arc<TlsState>,
    every: Duration,
    mut hup: Option<tokio::signal::unix::Signal>,
    stop: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(stop);
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = &mut stop => return,
            Some(()) = async { match hup.as_mut() { Some(h) => h.recv().await, None => None } } => {
                tracing::info!("SIGHUP: reloading TLS certificates");
                let _ = state.reload();
            }
            _ = tick.tick() => {
                if state.changed_on_disk() {
                    let _ = state.reload();
                }
            }
        }
    }
}

/// Accepts TCP connections on `listener` and hands out those whose TLS
/// handshake succeeded, with the peer address. Ends when the receiver is
/// dropped.
fn spawn_acceptor(
    listener: TcpListener,
    state: Arc<TlsState>,
    which: Listener,
) -> mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)> {
    let (tx, rx) = mpsc::channel(ACCEPTED_QUEUE);
    tokio::spawn(async move {
        let mut handshakes = JoinSet::new();
        loop {
            tokio::select! {
                _ = tx.closed() => return,
                Some(_) = handshakes.join_next(), if !handshakes.is_empty() => {}
                accepted = listener.accept() => {
                    let (tcp, peer) = match accepted {
                        Ok(a) => a,
                        Err(e) => {
                            // EMFILE and friends: back off briefly instead of spinning.
                            tracing::warn!(error = %e, listener = which.label(), "accept failed");
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        }
                    };
                    let _ = tcp.set_nodelay(true);
                    let acceptor = state.acceptor(which);
                    let (tx, state) = (tx.clone(), Arc::clone(&state));
                    handshakes.spawn(async move {
                        match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                            Ok(Ok(stream)) => {
                                state.counters.handshake_done(which);
                                let _ = tx.send((stream, peer)).await;
                            }
                            Ok(Err(e)) => {
                                state.counters.handshake_failed(which);
                                tracing::warn!(%peer, listener = which.label(), error = %e, "TLS handshake failed");
                            }
                            Err(_) => {
                                state.counters.handshake_failed(which);
                                tracing::warn!(%peer, listener = which.label(), "TLS handshake timed out");
                            }
                        }
                    });
                }
            }
        }
    });
    rx
}

/// The gRPC server's incoming connections over TLS.
pub fn incoming(
    listener: TcpListener,
    state: Arc<TlsState>,
) -> impl futures_util::Stream<Item = std::io::Result<TlsStream<TcpStream>>> {
    let rx = spawn_acceptor(listener, state, Listener::Grpc);
    futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|(s, _)| (Ok(s), rx))
    })
}

/// The HTTP API's listener over TLS (for `axum::serve`).
pub struct HttpListener {
    rx: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: SocketAddr,
}

impl HttpListener {
    /// Serves TLS on `listener`.
    pub fn new(listener: TcpListener, state: Arc<TlsState>) -> std::io::Result<Self> {
        let local = listener.local_addr()?;
        Ok(Self {
            rx: spawn_acceptor(listener, state, Listener::Http),
            local,
        })
    }
}

impl axum::serve::Listener for HttpListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.rx.recv().await {
            Some(conn) => conn,
            // The acceptor only ends when this receiver is gone.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}
