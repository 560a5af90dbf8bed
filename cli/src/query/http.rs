//! A tiny HTTP/1 GET client for the collector's JSON API (hyper 1 +
//! hyper-util's legacy client; `https://` through rustls, trusting only the
//! CA given with `--tls-ca-path`).
//!
//! In: a URL. Out: the decoded JSON body, or an [`HttpError`] that names the
//! URL and, for an error response, the HTTP status and the API's
//! `{"error": "..."}` message (or the start of a non-JSON body).
//!
//! Invariant: every request is bounded by the client's timeout; nothing here
//! panics on what the server sends.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, StatusCode, Uri};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use rankscope_proto::tls::{self, TlsError, TlsPaths};
use serde::de::DeserializeOwned;
use std::time::Duration;

/// Most characters of a non-JSON error body quoted in an error.
const BODY_QUOTE_CHARS: usize = 200;

/// Why a GET failed.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("invalid URL {url:?}: {reason}")]
    InvalidUrl { url: String, reason: String },
    #[error("{url} failed: {reason}")]
    Request { url: String, reason: String },
    #[error("{url} timed out after {timeout_ms} ms")]
    Timeout { url: String, timeout_ms: u128 },
    #[error("{url}: HTTP {status}: {message}")]
    Status {
        url: String,
        status: u16,
        message: String,
    },
    #[error("{url}: the response is not the expected JSON: {reason}")]
    Decode { url: String, reason: String },
}

/// HTTP/1 client with a per-request timeout.
#[derive(Debug, Clone)]
pub struct HttpClient {
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
    timeout: Duration,
    /// `authorization` header value, when a token is configured.
    auth: Option<String>,
}

impl HttpClient {
    /// A client whose requests (including reading the body) take at most
    /// `timeout`.
    pub fn new(timeout: Duration) -> Self {
        // No CA: https:// URLs fail verification (nothing is trusted).
        let cfg = tls::client_config_without_roots(&[]);
        Self::build(timeout, cfg)
    }

    /// Like [`HttpClient::new`], trusting the CA in `paths.ca` for
    /// `https://` (and presenting `paths.cert` / `paths.key` when set).
    pub fn with_tls(timeout: Duration, paths: &TlsPaths) -> Result<Self, TlsError> {
        let cfg = tls::client_config(paths, &[])?;
        Ok(Self::build(timeout, cfg))
    }

    fn build(timeout: Duration, tls: tokio_rustls::rustls::ClientConfig) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(timeout));
        connector.enforce_http(false);
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(connector);
        let client = Client::builder(TokioExecutor::new()).build(https);
        Self {
            client,
            timeout,
            auth: None,
        }
    }

    /// Sends `authorization: Bearer <token>` with every request (empty: none).
    pub fn with_token(mut self, token: &str) -> Self {
        self.auth = (!token.is_empty()).then(|| rankscope_proto::auth::bearer(token));
        self
    }

    /// GETs `url` and decodes a 2xx JSON body as `T`.
    pub async fn get_json<T: DeserializeOwned>(&self, url: &str) -> Result<T, HttpError> {
        let (status, body) = self.get(url).await?;
        if !status.is_success() {
            return Err(HttpError::Status {
                url: url.to_string(),
                status: status.as_u16(),
                message: error_message(status, &body),
            });
        }
        serde_json::from_slice(&body).map_err(|e| HttpError::Decode {
            url: url.to_string(),
            reason: e.to_string(),
        })
    }

    /// POSTs `body` (JSON) to `url` and decodes a 2xx JSON answer as `T`.
    pub async fn post_json<T: DeserializeOwned>(
        &self,
        url: &str,
        body: &serde_json::Value,
    ) -> Result<T, HttpError> {
        let bytes = Bytes::from(body.to_string());
        let (status, body) = self.send(hyper::Method::POST, url, bytes).await?;
        if !status.is_success() {
            return Err(HttpError::Status {
                url: url.to_string(),
                status: status.as_u16(),
                message: error_message(status, &body),
            });
        }
        serde_json::from_slice(&body).map_err(|e| HttpError::Decode {
            url: url.to_string(),
            reason: e.to_string(),
        })
    }

    /// GETs `url`: the status and the whole body.
    pub async fn get(&self, url: &str) -> Result<(StatusCode, Bytes), HttpError> {
        self.send(hyper::Method::GET, url, Bytes::new()).await
    }

    async fn send(
        &self,
        method: hyper::Method,
        url: &str,
        body: Bytes,
    ) -> Result<(StatusCode, Bytes), HttpError> {
        let uri: Uri =
            url.parse()
                .map_err(|e: hyper::http::uri::InvalidUri| HttpError::InvalidUrl {
                    url: url.to_string(),
                    reason: e.to_string(),
                })?;
        let mut request = Request::builder()
            .method(method.clone())
            .uri(uri)
            .header(hyper::header::ACCEPT, "application/json");
        if method == hyper::Method::POST {
            request = request.header(hyper::header::CONTENT_TYPE, "application/json");
        }
        if let Some(auth) = &self.auth {
            request = request.header(hyper::header::AUTHORIZATION, auth.as_str());
        }
        let request = request
            .body(Full::new(body))
            .map_err(|e| HttpError::InvalidUrl {
                url: url.to_string(),
                reason: e.to_string(),
            })?;
        let fetch = async {
            let response = self
                .client
                .request(request)
                .await
                .map_err(|e| HttpError::Request {
                    url: url.to_string(),
                    reason: crate::error_chain(&e),
                })?;
            let status = response.status();
            let body = response
                .into_body()
                .collect()
                .await
                .map_err(|e| HttpError::Request {
                    url: url.to_string(),
                    reason: crate::error_chain(&e),
                })?
                .to_bytes();
            Ok((status, body))
        };
        tokio::time::timeout(self.timeout, fetch)
            .await
            .map_err(|_| HttpError::Timeout {
                url: url.to_string(),
                timeout_ms: self.timeout.as_millis(),
            })?
    }
}

/// The message of an error response: the API's `{"error": ...}`, else the
/// start of the body, else the status's reason phrase.
pub fn error_message(status: StatusCode, body: &[u8]) -> String {
    #[derive(serde::Deserialize)]
    struct ApiError {
        error: String,
    }
    if let Ok(api) = serde_json::from_slice::<ApiError>(body) {
        return api.error;
    }
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if text.is_empty() {
        return status
            .canonical_reason()
            .unwrap_or("no message")
            .to_string();
    }
    let mut quoted: String = text.chars().take(BODY_QUOTE_CHARS).collect();
    if text.chars().count() > BODY_QUOTE_CHARS {
        quoted.push_str("...");
    }
    quoted
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_message_prefers_the_api_error() {
        let m = error_message(StatusCode::NOT_FOUND, br#"{"error":"job \"x\" not found"}"#);
        assert_eq!(m, "job \"x\" not found");
    }

    #[test]
    fn error_message_quotes_plain_bodies_and_falls_back_to_reason() {
        assert_eq!(
            error_message(StatusCode::BAD_GATEWAY, b" upstream down \n"),
            "upstream down"
        );
        assert_eq!(error_message(StatusCode::NOT_FOUND, b""), "Not Found");
        let long = "x".repeat(500);
        let m = error_message(StatusCode::INTERNAL_SERVER_ERROR, long.as_bytes());
        assert_eq!(m.len(), BODY_QUOTE_CHARS + 3);
        assert!(m.ends_with("..."));
    }
}
