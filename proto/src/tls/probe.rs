//! A TLS probe: what a failed gRPC connection does not say.
//!
//! In: a server URL and the client's TLS files. Out: `Ok` when the server
//! completed the handshake and answered the HTTP/2 preface, or a
//! [`ProbeError`] that says which side refused what. The agent runs it once
//! per outage and in `--check`; `rankscope import` runs it when a call fails,
//! so a certificate problem ends the import with its cause instead of
//! retries.

use std::sync::Arc;
use std::time::Duration;

use super::{client_config, TlsPaths, ALPN_H2};

/// How long [`probe`] waits for each step.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);
/// The HTTP/2 client preface and an empty SETTINGS frame: makes a gRPC
/// server answer right after the handshake.
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00";

/// Why [`probe`] could not complete a TLS connection.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// TLS itself failed: an untrusted server certificate, a refused client
    /// certificate, unusable files.
    #[error("{0}")]
    Tls(String),
    /// The server could not be reached (connect failed, timeouts).
    #[error("{0}")]
    Unreachable(String),
}

/// Connects to a gRPC server at `url` with the TLS settings `paths` and says
/// why the connection fails, if it does: a server certificate the client does
/// not trust, or (TLS 1.3 reports it only after the handshake) a client
/// certificate the server refused. gRPC hides both behind "connection
/// closed". `server_name` overrides the name checked (empty: the URL's host).
pub async fn probe(url: &str, paths: &TlsPaths, server_name: &str) -> Result<(), ProbeError> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let tls = client_config(paths, &[ALPN_H2]).map_err(|e| ProbeError::Tls(e.to_string()))?;
    let uri: tonic::codegen::http::Uri = url
        .parse()
        .map_err(|e| ProbeError::Unreachable(format!("{url}: {e}")))?;
    let host = uri
        .host()
        .unwrap_or_default()
        .trim_matches(['[', ']'])
        .to_owned();
    let port = uri.port_u16().unwrap_or(443);
    let name = if server_name.is_empty() {
        host.clone()
    } else {
        server_name.to_owned()
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
        .map_err(|e| ProbeError::Tls(format!("TLS handshake with the server failed: {e}")))?;
    let refused = |e: std::io::Error| {
        ProbeError::Tls(format!("the server refused this client's TLS connection: {e} (check the client certificate (tls_cert_path / tls_key_path) against the server's tls_ca_path)"))
    };
    stream.write_all(H2_PREFACE).await.map_err(refused)?;
    stream.flush().await.map_err(refused)?;
    let mut byte = [0u8; 1];
    match tokio::time::timeout(PROBE_TIMEOUT, stream.read(&mut byte)).await {
        Ok(Ok(n)) if n > 0 => Ok(()),
        Ok(Ok(_)) => Err(ProbeError::Tls(
            "the server closed the TLS connection without answering".into(),
        )),
        Ok(Err(e)) => Err(refused(e)),
        Err(_) => Err(ProbeError::Unreachable(format!(
            "the server did not answer within {PROBE_TIMEOUT:?} after the TLS handshake"
        ))),
    }
}
