//! Resolving `collector_url` into the live collector set.
//!
//! In: the configured URLs (one, or several separated by commas) and a
//! client factory. Out: every `collector_resolve_interval_ms`, the
//! [`RouteTable`](super::RouteTable)'s targets: each URL's host resolved to
//! every A/AAAA address (a Kubernetes headless Service names each collector
//! pod), with the URL's port; a literal IP needs no DNS. A URL that does not
//! resolve keeps nothing in the set and its reason is on `/metrics`
//! (`rankscope_agent_collector_resolve_error{url,reason}`) and in the log
//! (once per change of reason). A failed lookup drops that URL's addresses
//! (a Service scaled to zero empties the set; batches wait in the backlog
//! and the spool).
//! Evicted targets are probed with a TCP connect each round and readmitted
//! when it succeeds.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tonic::transport::Channel;

use super::{lock, Routes};
use crate::metrics::Metrics;

/// One entry of `collector_url`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CollectorUrl {
    /// The URL as configured (labels, logs).
    pub(crate) url: String,
    /// `http` or `https`.
    pub(crate) scheme: String,
    /// Host name or IP literal (without IPv6 brackets).
    pub(crate) host: String,
    pub(crate) port: u16,
}

/// Splits and parses `collector_url`; the error names the bad entry.
pub(crate) fn parse_urls(value: &str) -> Result<Vec<CollectorUrl>, String> {
    let mut out = Vec::new();
    for raw in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let uri: tonic::codegen::http::Uri = raw
            .parse()
            .map_err(|e| format!("{raw:?} is not a URL: {e}"))?;
        let scheme = uri.scheme_str().unwrap_or("").to_owned();
        if scheme != "http" && scheme != "https" {
            return Err(format!("{raw:?} must start with http:// or https://"));
        }
        let host = uri
            .host()
            .ok_or_else(|| format!("{raw:?} has no host"))?
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        let port = uri
            .port_u16()
            .unwrap_or(if scheme == "https" { 443 } else { 80 });
        out.push(CollectorUrl {
            url: raw.to_owned(),
            scheme,
            host,
            port,
        });
    }
    if out.is_empty() {
        return Err("names no collector".to_owned());
    }
    if out.iter().any(|u| u.scheme != out[0].scheme) {
        return Err("mixes http:// and https:// collectors".to_owned());
    }
    Ok(out)
}

/// Builds a client for one resolved address of `url`.
pub(crate) type Connect = Arc<dyn Fn(&CollectorUrl, SocketAddr) -> Option<Channel> + Send + Sync>;

/// The resolver task's settings.
pub(crate) struct Resolver {
    pub(crate) urls: Vec<CollectorUrl>,
    pub(crate) every: Duration,
    pub(crate) connect: Connect,
    pub(crate) routes: Routes,
    /// Woken on every change of the set (the uplink).
    pub(crate) changed: watch::Sender<u64>,
    pub(crate) metrics: Arc<Metrics>,
    /// A new value: the TLS files changed; rebuild every client.
    pub(crate) reload: Option<watch::Receiver<Channel>>,
}

impl Resolver {
    /// One round now (the agent starts with a set), then one every `every`
    /// until the uplink is gone.
    pub(crate) async fn run(mut self) {
        let mut clients: BTreeMap<String, Channel> = BTreeMap::new();
        loop {
            self.round(&mut clients).await;
            let reload = async {
                match self.reload.as_mut() {
                    Some(r) => r.changed().await.is_ok(),
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = self.changed.closed() => return,
                _ = tokio::time::sleep(self.every) => {}
                true = reload => {
                    // New certificates: new clients for every address.
                    clients.clear();
                    lock(&self.routes).targets.clear();
                }
            }
        }
    }

    /// Resolves every URL, updates the set and readmits evicted targets
    /// that accept a connection again.
    pub(crate) async fn round(&mut self, clients: &mut BTreeMap<String, Channel>) {
        let mut resolved = BTreeMap::new();
        let mut errors = BTreeMap::new();
        for u in &self.urls {
            match lookup(u, self.every.max(Duration::from_secs(1))).await {
                Ok(addrs) => {
                    for addr in addrs {
                        let key = addr.to_string();
                        let ch = match clients.get(&key) {
                            Some(c) => Some(c.clone()),
                            None => (self.connect)(u, addr),
                        };
                        if let Some(ch) = ch {
                            clients.insert(key.clone(), ch.clone());
                            resolved.insert(key, ch);
                        }
                    }
                }
                Err(reason) => {
                    errors.insert(u.url.clone(), reason);
                }
            }
        }
        clients.retain(|k, _| resolved.contains_key(k));
        let evicted: Vec<String> = {
            let mut t = lock(&self.routes);
            for (url, reason) in &errors {
                if t.resolve_errors.get(url) != Some(reason) {
                    Metrics::inc(&self.metrics.collector_resolve_errors);
                    tracing::warn!(url, %reason, "collector_url does not resolve; batches are kept (backlog, spool) until a collector does");
                }
            }
            for url in t.resolve_errors.keys() {
                if !errors.contains_key(url) {
                    tracing::info!(url, "collector_url resolves again");
                }
            }
            t.resolve_errors = errors;
            t.set_targets(resolved);
            t.targets
                .iter()
                .filter(|(_, x)| x.evicted)
                .map(|(k, _)| k.clone())
                .collect()
        };
        for key in evicted {
            let Ok(addr) = key.parse::<SocketAddr>() else {
                continue;
            };
            let open =
                tokio::time::timeout(Duration::from_secs(1), tokio::net::TcpStream::connect(addr))
                    .await;
            if matches!(open, Ok(Ok(_))) {
                let mut t = lock(&self.routes);
                if let Some(x) = t.targets.get_mut(&key) {
                    x.evicted = false;
                    x.failing = false;
                    t.version += 1;
                    tracing::info!(collector = %key, "collector accepts connections again; its jobs move back");
                }
            }
        }
        let v = lock(&self.routes).version;
        self.changed.send_if_modified(|old| {
            let changed = *old != v;
            *old = v;
            changed
        });
    }
}

/// Every address of `u` (an IP literal as it is), within `timeout`.
async fn lookup(u: &CollectorUrl, timeout: Duration) -> Result<Vec<SocketAddr>, String> {
    if let Ok(ip) = u.host.parse::<IpAddr>() {
        return Ok(vec![SocketAddr::new(ip, u.port)]);
    }
    match tokio::time::timeout(timeout, tokio::net::lookup_host((u.host.as_str(), u.port))).await {
        Err(_) => Err(format!("DNS lookup of {} timed out", u.host)),
        Ok(Err(e)) => Err(format!("DNS lookup of {} failed: {e}", u.host)),
        Ok(Ok(addrs)) => {
            let mut v: Vec<SocketAddr> = addrs.collect();
            v.sort();
            v.dedup();
            if v.is_empty() {
                Err(format!("{} has no addresses", u.host))
            } else {
                Ok(v)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_parses_each_url_and_bad_entries_are_named() {
        let v = parse_urls("http://10.0.0.1:7700, http://collectors.svc:7701").unwrap();
        assert_eq!(v.len(), 2);
        assert_eq!((v[0].host.as_str(), v[0].port), ("10.0.0.1", 7700));
        assert_eq!((v[1].host.as_str(), v[1].port), ("collectors.svc", 7701));
        let v = parse_urls("https://[::1]:7700").unwrap();
        assert_eq!(v[0].host, "::1");
        let e = parse_urls("http://a:1,ftp://b:2").unwrap_err();
        assert!(e.contains("ftp://b:2"), "{e}");
        assert!(parse_urls("http://a:1,https://b:2")
            .unwrap_err()
            .contains("mixes"));
        assert!(parse_urls(" , ").is_err());
    }

    #[tokio::test]
    async fn an_unresolvable_name_says_why() {
        let u = &parse_urls("http://no-such-host.invalid:7700").unwrap()[0];
        let e = lookup(u, Duration::from_secs(5)).await.unwrap_err();
        assert!(e.contains("no-such-host.invalid"), "{e}");
    }
}
