//! Per-collector health of the uplink: degraded collectors' probes, the
//! eviction of a collector failing for `collector_failover_after_ms` (its
//! jobs fail over), readmission when the route table says it is back.

use std::sync::Arc;

use tokio::time::Instant;

use super::Uplink;
use crate::metrics::Metrics;

/// Per collector: whether it answers.
#[derive(Debug, Default)]
pub(super) struct Lane {
    /// Failed probes since it last answered (0 = healthy).
    pub(super) failures: u32,
    pub(super) retry_at: Option<Instant>,
    /// When its current outage began.
    pub(super) down_since: Option<Instant>,
    /// Calls to it running now.
    pub(super) in_flight: usize,
    /// Evicted by this uplink (its jobs failed over).
    pub(super) evicted: bool,
}

impl Uplink {
    /// The earliest lane deadline: a probe, or an eviction.
    pub(super) fn next_wake(&self) -> Option<Instant> {
        self.lanes
            .values()
            .flat_map(|l| {
                let evict = (!l.evicted && l.failures > 0)
                    .then(|| l.down_since.map(|d| d + self.failover_after))
                    .flatten();
                [l.retry_at, evict]
            })
            .flatten()
            .min()
    }

    /// A readmitted (or re-resolved) collector starts healthy.
    pub(super) fn routes_changed_now(&mut self) {
        let t = crate::route::lock(&self.routes);
        self.lanes.retain(|k, l| match t.targets.get(k) {
            Some(x) => {
                if l.evicted && !x.evicted {
                    *l = Lane {
                        in_flight: l.in_flight,
                        ..Lane::default()
                    };
                }
                true
            }
            None => l.in_flight > 0,
        });
    }

    /// Evicts every collector failing for `failover_after`: its jobs go to
    /// the next collector of their order, and its running calls are aborted
    /// (a dead collector's calls would only time out).
    pub(super) fn evict_failed(&mut self, now: Instant) {
        if self.dump.is_some() {
            return;
        }
        let due: Vec<String> = self
            .lanes
            .iter()
            .filter(|(_, l)| {
                !l.evicted
                    && l.failures > 0
                    && l.down_since.is_some_and(|d| now >= d + self.failover_after)
            })
            .map(|(k, _)| k.clone())
            .collect();
        for key in due {
            if let Some(l) = self.lanes.get_mut(&key) {
                l.evicted = true;
                l.retry_at = None;
            }
            Metrics::inc(&self.metrics.collector_failovers);
            tracing::warn!(collector = %key, after_ms = self.failover_after.as_millis() as u64, "collector unreachable for collector_failover_after_ms; its jobs move to the next collector of their rendezvous order");
            crate::route::lock(&self.routes).evict(&key);
            for s in self.window.values() {
                if s.target.as_deref() == Some(key.as_str()) {
                    if let Some(c) = &s.call {
                        c.abort();
                    }
                }
            }
        }
    }

    /// Probes every degraded collector whose delay has passed.
    pub(super) fn probe_due(&mut self) {
        let now = Instant::now();
        let due: Vec<String> = self
            .lanes
            .iter()
            .filter(|(_, l)| l.retry_at.is_some_and(|r| r <= now))
            .map(|(k, _)| k.clone())
            .collect();
        for key in due {
            if let Some(l) = self.lanes.get_mut(&key) {
                l.retry_at = None;
            }
            // Its oldest idle batch.
            let first = self
                .window
                .iter()
                .filter(|(_, s)| s.target.is_none())
                .map(|(o, s)| (*o, Arc::clone(&s.pending.job)))
                .find(|(_, job)| self.owner(job).is_some_and(|(k, _)| k == key));
            if let Some((order, job)) = first {
                if let Some((_, channel)) = self.owner(&job) {
                    self.call(order, key, channel, true);
                }
            }
        }
    }

    /// `key` answered: it leaves the degraded state.
    pub(super) fn recovered(&mut self, key: &str) {
        if let Some(l) = self.lanes.get_mut(key) {
            if l.failures > 0 {
                tracing::info!(
                    failures = l.failures,
                    collector = key,
                    "collector reachable again"
                );
                if self.dump.is_none() {
                    crate::route::lock(&self.routes).set_failing(key, false);
                }
            }
            l.failures = 0;
            l.retry_at = None;
            l.down_since = None;
        }
    }
}
