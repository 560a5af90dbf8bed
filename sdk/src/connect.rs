//! Connections to the agent: TCP (`http://host:port`) or a Unix socket
//! (`unix:/path`, `unix:///path` or a plain absolute path).
//!
//! In: the agent URL. Out: a tonic [`Channel`] per call to
//! [`Target::connect`] (each rank process has its own connection; the
//! simulator opens one per simulated rank). Invariant: a bad URL is an error naming it,
//! never a panic.

use hyper_util::rt::TokioIo;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::net::UnixStream;
use tonic::codegen::http::Uri;
use tonic::codegen::Service;
use tonic::transport::{Channel, Endpoint};

/// How long establishing one connection may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Where the agent listens.
#[derive(Debug, Clone)]
pub enum Target {
    /// gRPC over TCP.
    Tcp(Endpoint),
    /// gRPC over a Unix socket at this path.
    Unix(Endpoint, PathBuf),
}

impl std::fmt::Display for Target {
    /// `unix:/path` or the endpoint's `http://host:port`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Tcp(e) => write!(f, "{}", e.uri()),
            Self::Unix(_, path) => write!(f, "unix:{}", path.display()),
        }
    }
}

/// An agent URL that cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("invalid agent URL {url:?}: {reason}")]
pub struct UrlError {
    /// The URL as given.
    pub url: String,
    /// What is wrong with it.
    pub reason: String,
}

impl Target {
    /// Parses `http://host:port`, `host:port`, `unix:/path` or `/path`.
    pub fn parse(url: &str) -> Result<Self, UrlError> {
        let err = |reason: &str| UrlError {
            url: url.to_string(),
            reason: reason.to_string(),
        };
        if url.starts_with('/') {
            return Self::parse(&format!("unix:{url}")).map_err(|mut e| {
                e.url = url.to_string();
                e
            });
        }
        if let Some(rest) = url.strip_prefix("unix:") {
            let path = rest.strip_prefix("//").unwrap_or(rest);
            if path.is_empty() {
                return Err(err("the Unix socket path is empty"));
            }
            // The authority is never used: the connector dials the socket.
            let endpoint =
                Endpoint::from_static("http://agent.sock").connect_timeout(CONNECT_TIMEOUT);
            return Ok(Self::Unix(endpoint, PathBuf::from(path)));
        }
        if url.starts_with("https://") {
            return Err(err("TLS is not supported; use http:// or unix:"));
        }
        let full = if url.contains("://") {
            url.to_string()
        } else {
            format!("http://{url}")
        };
        if !full.starts_with("http://") {
            return Err(err("expected http://HOST:PORT or unix:/PATH"));
        }
        let endpoint = Endpoint::from_shared(full).map_err(|e| err(&e.to_string()))?;
        Ok(Self::Tcp(
            endpoint.connect_timeout(CONNECT_TIMEOUT).tcp_nodelay(true),
        ))
    }

    /// Opens one connection.
    pub async fn connect(&self) -> Result<Channel, tonic::transport::Error> {
        match self {
            Self::Tcp(endpoint) => endpoint.connect().await,
            Self::Unix(endpoint, path) => {
                let connector = UnixConnector(Arc::new(path.clone()));
                endpoint.connect_with_connector(connector).await
            }
        }
    }
}

/// Dials a Unix socket whatever URI tonic asks for.
#[derive(Debug, Clone)]
struct UnixConnector(Arc<PathBuf>);

impl Service<Uri> for UnixConnector {
    type Response = TokioIo<UnixStream>;
    type Error = std::io::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _uri: Uri) -> Self::Future {
        let path = Arc::clone(&self.0);
        Box::pin(async move { Ok(TokioIo::new(UnixStream::connect(path.as_path()).await?)) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_accepted_forms() {
        assert!(matches!(
            Target::parse("http://127.0.0.1:7710"),
            Ok(Target::Tcp(_))
        ));
        assert!(matches!(
            Target::parse("127.0.0.1:7710"),
            Ok(Target::Tcp(_))
        ));
        match Target::parse("unix:///run/rankscope/agent.sock") {
            Ok(Target::Unix(_, p)) => assert_eq!(p, PathBuf::from("/run/rankscope/agent.sock")),
            other => panic!("{other:?}"),
        }
        match Target::parse("unix:/tmp/a.sock") {
            Ok(Target::Unix(_, p)) => assert_eq!(p, PathBuf::from("/tmp/a.sock")),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn rejects_bad_urls_naming_them() {
        for bad in ["unix:", "https://x:1", "ftp://x:1", "http://exa mple:1"] {
            let err = Target::parse(bad).unwrap_err();
            assert_eq!(err.url, bad);
            assert!(err.to_string().contains(bad), "{err}");
        }
    }
}
