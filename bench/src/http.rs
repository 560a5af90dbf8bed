//! A small HTTP/1.1 GET client for the collector's API and `/metrics`.
//!
//! In: URLs. Out: status, body and the round-trip time (request written to
//! the last body byte read) measured with the monotonic clock.
//! Connections are kept alive between requests, as any API client would.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use crate::BenchError;

/// One answered request.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub body: Bytes,
    /// From sending the request to reading the whole body.
    pub elapsed: Duration,
}

impl Reply {
    /// The body parsed as JSON.
    pub fn json(&self) -> Result<serde_json::Value, BenchError> {
        serde_json::from_slice(&self.body).map_err(|e| BenchError::parse("JSON reply", e))
    }
}

/// A keep-alive HTTP client with a per-request timeout.
#[derive(Clone)]
pub struct HttpClient {
    client: Client<HttpConnector, Empty<Bytes>>,
    timeout: Duration,
}

impl HttpClient {
    /// A client whose requests fail after `timeout`.
    pub fn new(timeout: Duration) -> HttpClient {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        HttpClient {
            client: Client::builder(TokioExecutor::new()).build(connector),
            timeout,
        }
    }

    /// `GET url`.
    pub async fn get(&self, url: &str) -> Result<Reply, BenchError> {
        let err = |detail: String| BenchError::Http {
            what: format!("GET {url}"),
            detail,
        };
        let uri: hyper::Uri = url.parse().map_err(|e| err(format!("bad URL: {e}")))?;
        let started = Instant::now();
        let fut = async {
            let resp = self
                .client
                .get(uri)
                .await
                .map_err(|e| err(error_chain(&e)))?;
            let status = resp.status().as_u16();
            let body = resp
                .into_body()
                .collect()
                .await
                .map_err(|e| err(e.to_string()))?
                .to_bytes();
            Ok::<_, BenchError>((status, body))
        };
        let (status, body) = tokio::time::timeout(self.timeout, fut)
            .await
            .map_err(|_| err(format!("no answer within {:?}", self.timeout)))??;
        Ok(Reply {
            status,
            body,
            elapsed: started.elapsed(),
        })
    }

    /// `GET url`, failing unless the status is 200.
    pub async fn get_ok(&self, url: &str) -> Result<Reply, BenchError> {
        let r = self.get(url).await?;
        if r.status != 200 {
            return Err(BenchError::Http {
                what: format!("GET {url}"),
                detail: format!(
                    "status {}: {}",
                    r.status,
                    String::from_utf8_lossy(&r.body[..r.body.len().min(300)])
                ),
            });
        }
        Ok(r)
    }
}

/// The value of an unlabelled counter in a Prometheus text exposition.
pub fn prometheus_counter(text: &str, name: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let rest = l.strip_prefix(name)?;
        let v = rest.strip_prefix(' ')?;
        v.trim().parse::<f64>().ok().map(|f| f as u64)
    })
}

/// The series of counter `name` with one label: (label value, value) for
/// lines like `name{table="kernels"} 12`.
pub fn prometheus_labelled(text: &str, name: &str) -> Vec<(String, u64)> {
    text.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix(name)?.strip_prefix('{')?;
            let (labels, value) = rest.split_once("} ")?;
            let (_, label) = labels.split_once("=\"")?;
            let label = label.strip_suffix('"')?;
            let v = value.trim().parse::<f64>().ok()?;
            Some((label.to_owned(), v as u64))
        })
        .collect()
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counter_is_found_by_exact_name() {
        let text = "# HELP a_total x\n# TYPE a_total counter\na_total_other 5\na_total 42\n";
        assert_eq!(prometheus_counter(text, "a_total"), Some(42));
        assert_eq!(prometheus_counter(text, "b_total"), None);
    }

    #[test]
    fn labelled_series_are_read_with_their_label() {
        let text = "# TYPE t_total counter\nt_total{table=\"kernels\"} 12\nt_total{table=\"steps\"} 3\nt_total_x{table=\"a\"} 9\n";
        assert_eq!(
            prometheus_labelled(text, "t_total"),
            vec![("kernels".to_owned(), 12), ("steps".to_owned(), 3)]
        );
    }
}
