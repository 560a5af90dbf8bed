//! Listeners of the rank-facing service: TCP and a Unix socket.
//!
//! In: the configured addresses. Out: bound listeners and the server tasks
//! that serve [`IngestService`] on them until told to stop.
//!
//! Invariants: the Unix socket's parent directory is created when missing; a
//! stale socket file (nobody accepts on it) is replaced, but a live one or a
//! non-socket file is an error, never removed; the socket is mode 0660 so
//! ranks of the agent's group can connect.

use std::io;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};

use rankscope_proto::wire::server::rank_ingest_server::RankIngestServer;
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::transport::server::TcpIncoming;
use tonic::transport::Server;

use crate::ingest::IngestService;

/// Listener set-up errors.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("cannot listen on {addr}: {error}")]
    Tcp {
        addr: std::net::SocketAddr,
        error: io::Error,
    },
    #[error("unix socket {path}: {what}: {error}")]
    Unix {
        path: PathBuf,
        what: &'static str,
        error: io::Error,
    },
}

fn unix_err<'a>(path: &'a Path, what: &'static str) -> impl FnOnce(io::Error) -> ServeError + 'a {
    move |error| ServeError::Unix {
        path: path.to_owned(),
        what,
        error,
    }
}

/// Binds the TCP listener (port 0 picks a free port).
pub(crate) async fn bind_tcp(addr: std::net::SocketAddr) -> Result<TcpListener, ServeError> {
    TcpListener::bind(addr)
        .await
        .map_err(|error| ServeError::Tcp { addr, error })
}

/// Prepares the socket's directory, replaces a stale socket file, binds and
/// sets mode 0660.
pub(crate) fn bind_unix(path: &Path) -> Result<UnixListener, ServeError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o770)
            .create(dir)
            .map_err(unix_err(path, "cannot create parent directory"))?;
    }
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => {
            if std::os::unix::net::UnixStream::connect(path).is_ok() {
                return Err(ServeError::Unix {
                    path: path.to_owned(),
                    what: "another process is listening on it",
                    error: io::ErrorKind::AddrInUse.into(),
                });
            }
            std::fs::remove_file(path).map_err(unix_err(path, "cannot remove stale socket"))?;
        }
        Ok(_) => {
            return Err(ServeError::Unix {
                path: path.to_owned(),
                what: "exists and is not a socket",
                error: io::ErrorKind::AlreadyExists.into(),
            })
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(unix_err(path, "cannot inspect")(e)),
    }
    let listener = UnixListener::bind(path).map_err(unix_err(path, "cannot bind"))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660))
        .map_err(unix_err(path, "cannot chmod 0660"))?;
    Ok(listener)
}

fn server(
    svc: &IngestService,
    max_message_bytes: usize,
) -> (Server, RankIngestServer<IngestService>) {
    let svc = RankIngestServer::new(svc.clone()).max_decoding_message_size(max_message_bytes);
    (Server::builder().tcp_nodelay(true), svc)
}

async fn stopped(mut stop: watch::Receiver<bool>) {
    // An Err means the sender is gone: stop as well.
    let _ = stop.wait_for(|s| *s).await;
}

/// Serves `svc` on `listener` until `stop` turns true.
pub(crate) fn spawn_tcp(
    listener: TcpListener,
    svc: &IngestService,
    max_message_bytes: usize,
    stop: watch::Receiver<bool>,
) -> JoinHandle<()> {
    let (mut server, svc) = server(svc, max_message_bytes);
    let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
    tokio::spawn(async move {
        let router = server.add_service(svc);
        if let Err(e) = router
            .serve_with_incoming_shutdown(incoming, stopped(stop))
            .await
        {
            tracing::error!(error = %e, "tcp ingest server failed");
        }
    })
}

/// Serves `svc` on the Unix socket `listener` until `stop` turns true.
pub(crate) fn spawn_unix(
    listener: UnixListener,
    svc: &IngestService,
    max_message_bytes: usize,
    stop: watch::Receiver<bool>,
) -> JoinHandle<()> {
    let (mut server, svc) = server(svc, max_message_bytes);
    let incoming = UnixListenerStream::new(listener);
    tokio::spawn(async move {
        let router = server.add_service(svc);
        if let Err(e) = router
            .serve_with_incoming_shutdown(incoming, stopped(stop))
            .await
        {
            tracing::error!(error = %e, "unix ingest server failed");
        }
    })
}
