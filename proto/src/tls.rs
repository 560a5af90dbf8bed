//! TLS material shared by the collector (server side) and its clients (agent,
//! CLI): PEM files in, rustls configurations out.
//!
//! In: file paths (`tls_cert_path`, `tls_key_path`, `tls_ca_path` in every
//! configuration). Out: [`server_config`] / [`client_config`] built with the
//! `ring` provider, and a [`Fingerprint`] of the files so a reloader can tell
//! when they changed on disk.
//!
//! Invariants:
//! - Every error names the file and the option it came from and says what is
//!   wrong with it (unreadable, no PEM block of the expected kind, a key that
//!   does not match the certificate, a CA file without certificates).
//! - Nothing is trusted implicitly: clients verify the server against
//!   `tls_ca_path` only (no system roots; a cluster runs its own CA), and a
//!   server given a CA requires every client to present a certificate signed by
//!   it (mutual TLS).

pub mod probe;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::{
    self, crypto::CryptoProvider, server::WebPkiClientVerifier, ClientConfig, RootCertStore,
    ServerConfig,
};

/// ALPN id of HTTP/2 (gRPC).
pub const ALPN_H2: &[u8] = b"h2";
/// ALPN id of HTTP/1.1 (the JSON API).
pub const ALPN_HTTP1: &[u8] = b"http/1.1";

/// TLS material that cannot be used. The message is written for the person
/// who configured the path.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{option} {path}: cannot read: {source}")]
    Read {
        option: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{option} {path}: {problem}")]
    Content {
        option: &'static str,
        path: PathBuf,
        problem: String,
    },
    #[error("{0}")]
    Config(String),
}

/// The three paths every TLS-capable component is configured with.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsPaths {
    /// PEM certificate chain presented to the peer (`tls_cert_path`).
    pub cert: Option<PathBuf>,
    /// PEM private key of that certificate (`tls_key_path`).
    pub key: Option<PathBuf>,
    /// PEM CA certificate(s) the peer must be signed by (`tls_ca_path`).
    pub ca: Option<PathBuf>,
}

impl TlsPaths {
    /// Paths from configuration strings; empty means unset.
    pub fn from_config(cert: &str, key: &str, ca: &str) -> Self {
        let p = |s: &str| (!s.is_empty()).then(|| PathBuf::from(s));
        Self {
            cert: p(cert),
            key: p(key),
            ca: p(ca),
        }
    }

    /// Whether any path is set.
    pub fn any(&self) -> bool {
        self.cert.is_some() || self.key.is_some() || self.ca.is_some()
    }

    /// The client identity (certificate and key), requiring both or neither.
    fn identity(&self) -> Result<Option<(&Path, &Path)>, TlsError> {
        match (&self.cert, &self.key) {
            (Some(c), Some(k)) => Ok(Some((c, k))),
            (None, None) => Ok(None),
            _ => Err(TlsError::Config(
                "tls_cert_path and tls_key_path must be set together".into(),
            )),
        }
    }

    /// The state of the files on disk now.
    pub fn fingerprint(&self) -> Fingerprint {
        let stat = |p: &Option<PathBuf>| {
            p.as_ref()
                .and_then(|p| std::fs::metadata(p).ok())
                .map(|m| (m.modified().ok(), m.len()))
        };
        Fingerprint([stat(&self.cert), stat(&self.key), stat(&self.ca)])
    }
}

/// Modification time and size of the three files: a cheap "changed on disk"
/// test for reloaders (a rewritten file changes one or both).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fingerprint([Option<(Option<SystemTime>, u64)>; 3]);

/// The crypto provider used everywhere (ring).
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Reads a PEM file as bytes (for APIs that take PEM, like tonic's).
pub fn read_pem(option: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        option,
        path: path.to_owned(),
        source,
    })
}

/// Every certificate in a PEM file; at least one.
pub fn load_certs(
    option: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read_pem(option, path)?;
    let content = |problem: String| TlsError::Content {
        option,
        path: path.to_owned(),
        problem,
    };
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| content(format!("not valid PEM: {e}")))?;
    if certs.is_empty() {
        return Err(content(
            "holds no PEM certificate (-----BEGIN CERTIFICATE-----)".into(),
        ));
    }
    Ok(certs)
}

/// The private key in a PEM file (PKCS#8, PKCS#1 or SEC1).
pub fn load_key(option: &'static str, path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let pem = read_pem(option, path)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| TlsError::Content {
        option,
        path: path.to_owned(),
        problem: format!("holds no usable PEM private key: {e}"),
    })
}

/// A root store of every certificate in a PEM file.
pub fn load_roots(option: &'static str, path: &Path) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in load_certs(option, path)? {
        roots.add(cert).map_err(|e| TlsError::Content {
            option,
            path: path.to_owned(),
            problem: format!("not a usable CA certificate: {e}"),
        })?;
    }
    Ok(roots)
}

/// A server configuration presenting `paths.cert` / `paths.key`. With
/// `paths.ca` and `require_client_cert`, every client must present a
/// certificate signed by that CA (mutual TLS); otherwise clients are not asked
/// for one.
pub fn server_config(
    paths: &TlsPaths,
    require_client_cert: bool,
    alpn: &[&[u8]],
) -> Result<ServerConfig, TlsError> {
    let Some((cert, key)) = paths.identity()? else {
        return Err(TlsError::Config(
            "tls_cert_path and tls_key_path are required to serve TLS".into(),
        ));
    };
    let chain = load_certs("tls_cert_path", cert)?;
    let key_der = load_key("tls_key_path", key)?;
    let provider = provider();
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?;
    let builder = match (&paths.ca, require_client_cert) {
        (Some(ca), true) => {
            let roots = Arc::new(load_roots("tls_ca_path", ca)?);
            let verifier = WebPkiClientVerifier::builder_with_provider(roots, provider)
                .build()
                .map_err(|e| TlsError::Content {
                    option: "tls_ca_path",
                    path: ca.clone(),
                    problem: format!("cannot verify clients with it: {e}"),
                })?;
            builder.with_client_cert_verifier(verifier)
        }
        _ => builder.with_no_client_auth(),
    };
    let mut cfg = builder
        .with_single_cert(chain, key_der)
        .map_err(|e| TlsError::Content {
            option: "tls_key_path",
            path: key.to_owned(),
            problem: format!("does not fit the certificate in {}: {e}", cert.display()),
        })?;
    cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(cfg)
}

/// A client configuration trusting only `paths.ca` and presenting
/// `paths.cert` / `paths.key` when both are set.
pub fn client_config(paths: &TlsPaths, alpn: &[&[u8]]) -> Result<ClientConfig, TlsError> {
    let identity = paths.identity()?;
    let Some(ca) = &paths.ca else {
        return Err(TlsError::Config(
            "tls_ca_path is required for https:// (the CA that signed the collector's certificate)"
                .into(),
        ));
    };
    let builder = client_builder(load_roots("tls_ca_path", ca)?)?;
    let cfg = match identity {
        Some((cert, key)) => builder
            .with_client_auth_cert(
                load_certs("tls_cert_path", cert)?,
                load_key("tls_key_path", key)?,
            )
            .map_err(|e| TlsError::Content {
                option: "tls_key_path",
                path: key.to_owned(),
                problem: format!("does not fit the certificate in {}: {e}", cert.display()),
            })?,
        None => builder.with_no_client_auth(),
    };
    Ok(with_alpn(cfg, alpn))
}

/// A client configuration for public endpoints (alert webhooks): trusts the
/// CA certificates in `ca` when given, else the system's (`/etc/ssl/certs`
/// through rustls-native-certs).
pub fn client_config_for_public(
    ca: Option<&Path>,
    option: &'static str,
    alpn: &[&[u8]],
) -> Result<ClientConfig, TlsError> {
    let roots = match ca {
        Some(path) => load_roots(option, path)?,
        None => {
            let found = rustls_native_certs::load_native_certs();
            let mut roots = RootCertStore::empty();
            let (added, _) = roots.add_parsable_certificates(found.certs);
            if added == 0 {
                return Err(TlsError::Config(format!(
                    "no system CA certificates found ({} errors; install the ca-certificates package or set {option})",
                    found.errors.len()
                )));
            }
            roots
        }
    };
    Ok(with_alpn(
        client_builder(roots)?.with_no_client_auth(),
        alpn,
    ))
}

/// A client configuration that trusts nothing (for clients that only speak
/// plaintext unless given a CA).
pub fn client_config_without_roots(alpn: &[&[u8]]) -> ClientConfig {
    let cfg = match client_builder(RootCertStore::empty()) {
        Ok(b) => b.with_no_client_auth(),
        // The ring provider supports the default versions; unreachable.
        Err(_) => ClientConfig::builder()
            .with_root_certificates(RootCertStore::empty())
            .with_no_client_auth(),
    };
    with_alpn(cfg, alpn)
}

/// A client configuration builder (ring, default protocol versions)
/// trusting `roots`.
fn client_builder(
    roots: RootCertStore,
) -> Result<rustls::ConfigBuilder<ClientConfig, rustls::client::WantsClientCert>, TlsError> {
    Ok(ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?
        .with_root_certificates(roots))
}

fn with_alpn(mut cfg: ClientConfig, alpn: &[&[u8]]) -> ClientConfig {
    cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    cfg
}

/// tonic's client TLS settings for `paths` (what the agent and `rankscope
/// import` use): the files are validated with [`client_config`] first, so a
/// wrong file fails here, naming it, instead of at the first call.
/// `server_name` overrides the name checked against the server certificate
/// (empty: the URL's host).
pub fn tonic_client_tls(
    paths: &TlsPaths,
    server_name: &str,
) -> Result<tonic::transport::ClientTlsConfig, TlsError> {
    use tonic::transport::{Certificate, ClientTlsConfig, Identity};
    client_config(paths, &[ALPN_H2])?;
    let mut cfg = ClientTlsConfig::new();
    if let Some(ca) = &paths.ca {
        cfg = cfg.ca_certificate(Certificate::from_pem(read_pem("tls_ca_path", ca)?));
    }
    if let (Some(cert), Some(key)) = (&paths.cert, &paths.key) {
        cfg = cfg.identity(Identity::from_pem(
            read_pem("tls_cert_path", cert)?,
            read_pem("tls_key_path", key)?,
        ));
    }
    if !server_name.is_empty() {
        cfg = cfg.domain_name(server_name);
    }
    Ok(cfg)
}

/// A SIGHUP listener for certificate reloads, registered now (a SIGHUP sent
/// once this returns is caught, not fatal). `None`, logged, when signals are
/// unavailable: certificates then reload on file change only.
pub fn sighup() -> Option<tokio::signal::unix::Signal> {
    tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        .map_err(|e| {
            tracing::warn!(error = %e, "cannot listen for SIGHUP; certificates reload on file change only");
        })
        .ok()
}

/// Whether a listen address (`host:port`) is a loopback address. Names other
/// than `localhost` count as non-loopback (they may resolve anywhere).
pub fn is_loopback_listen_addr(addr: &str) -> bool {
    if let Ok(sa) = addr.parse::<std::net::SocketAddr>() {
        return sa.ip().is_loopback();
    }
    addr.rsplit_once(':')
        .is_some_and(|(host, _)| host.eq_ignore_ascii_case("localhost"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_addresses() {
        assert!(is_loopback_listen_addr("127.0.0.1:7700"));
        assert!(is_loopback_listen_addr("[::1]:7700"));
        assert!(is_loopback_listen_addr("localhost:7700"));
        assert!(!is_loopback_listen_addr("0.0.0.0:7700"));
        assert!(!is_loopback_listen_addr("[::]:7700"));
        assert!(!is_loopback_listen_addr("10.0.0.5:7700"));
        assert!(!is_loopback_listen_addr("collector.example:7700"));
    }

    #[test]
    fn errors_name_the_option_and_file() {
        let dir = std::env::temp_dir();
        let missing = dir.join("rankscope-no-such-cert.pem");
        let e = load_certs("tls_cert_path", &missing).unwrap_err();
        assert!(e.to_string().starts_with("tls_cert_path "), "{e}");
        assert!(e.to_string().contains("rankscope-no-such-cert.pem"), "{e}");

        let junk = dir.join(format!("rankscope-junk-{}.pem", std::process::id()));
        std::fs::write(&junk, "not a certificate\n").unwrap();
        let e = load_certs("tls_ca_path", &junk).unwrap_err();
        assert!(e.to_string().contains("holds no PEM certificate"), "{e}");
        let e = load_key("tls_key_path", &junk).unwrap_err();
        assert!(e.to_string().contains("no usable PEM private key"), "{e}");
        std::fs::remove_file(&junk).unwrap();
    }

    #[test]
    fn identity_needs_both_halves() {
        let p = TlsPaths::from_config("a.pem", "", "ca.pem");
        let e = client_config(&p, &[]).unwrap_err();
        assert!(e.to_string().contains("set together"), "{e}");
        let e = server_config(&TlsPaths::from_config("", "", "ca.pem"), true, &[]).unwrap_err();
        assert!(e.to_string().contains("required to serve TLS"), "{e}");
        let e = client_config(&TlsPaths::default(), &[]).unwrap_err();
        assert!(e.to_string().contains("tls_ca_path is required"), "{e}");
    }
}
