//! Ingest counters of the collector and the latency [`Histogram`].
//!
//! In: increments from the ingest service (and the writer, for its
//! histogram). Out: values read by `counters` (which names and exports every
//! counter, on `GET /metrics` and over OTLP) and histogram text for
//! `/metrics`. Counters only ever increase; rejections keep one value per
//! reason (fixed reason strings, never user input).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

/// Counters of the ingest path.
#[derive(Debug, Default)]
pub struct Metrics {
    /// Agent batches received (before validation).
    pub batches_received: AtomicU64,
    /// Batches acknowledged after their rows were stored.
    pub batches_stored: AtomicU64,
    /// Batches acknowledged as duplicates without writing.
    pub batches_duplicate: AtomicU64,
    /// Batches answered UNAVAILABLE (the agent retries them).
    pub batches_retry: AtomicU64,
    /// Events (rows) stored.
    pub events_stored: AtomicU64,
    /// Time from receiving a batch to acknowledging it (stored).
    pub batch_latency: Histogram,
    rejected: Mutex<BTreeMap<&'static str, u64>>,
}

impl Metrics {
    /// Counts a rejected batch under `reason`.
    pub fn reject(&self, reason: &'static str) {
        if let Ok(mut m) = self.rejected.lock() {
            *m.entry(reason).or_default() += 1;
        }
    }

    /// Rejected batches by reason.
    pub fn rejected(&self) -> BTreeMap<&'static str, u64> {
        self.rejected.lock().map(|m| m.clone()).unwrap_or_default()
    }
}

/// Upper bounds (seconds) of the latency histogram buckets.
pub const LATENCY_BUCKETS_S: [f64; 13] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// A latency histogram with fixed buckets, lock-free to observe.
#[derive(Debug, Default)]
pub struct Histogram {
    /// Per bucket (not cumulative); the last slot is +Inf.
    buckets: [AtomicU64; LATENCY_BUCKETS_S.len() + 1],
    sum_us: AtomicU64,
    count: AtomicU64,
}

impl Histogram {
    /// Records one observation.
    pub fn observe(&self, d: std::time::Duration) {
        let s = d.as_secs_f64();
        let i = LATENCY_BUCKETS_S
            .iter()
            .position(|b| s <= *b)
            .unwrap_or(LATENCY_BUCKETS_S.len());
        self.buckets[i].fetch_add(1, Relaxed);
        self.sum_us
            .fetch_add(u64::try_from(d.as_micros()).unwrap_or(u64::MAX), Relaxed);
        self.count.fetch_add(1, Relaxed);
    }

    /// Observations so far.
    pub fn count(&self) -> u64 {
        self.count.load(Relaxed)
    }

    /// Sum of the observations, seconds.
    pub fn sum_s(&self) -> f64 {
        self.sum_us.load(Relaxed) as f64 / 1e6
    }

    /// Prometheus text of the histogram `name`.
    pub fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        let mut cum = 0;
        for (i, b) in LATENCY_BUCKETS_S.iter().enumerate() {
            cum += self.buckets[i].load(Relaxed);
            let _ = writeln!(out, "{name}_bucket{{le=\"{b}\"}} {cum}");
        }
        cum += self.buckets[LATENCY_BUCKETS_S.len()].load(Relaxed);
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {cum}");
        let _ = writeln!(out, "{name}_sum {}", self.sum_s());
        let _ = writeln!(out, "{name}_count {}", self.count());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn histogram_renders_cumulative_buckets() {
        let h = Histogram::default();
        h.observe(Duration::from_micros(500));
        h.observe(Duration::from_millis(30));
        h.observe(Duration::from_secs(20));
        let mut out = String::new();
        h.render(&mut out, "x_seconds", "X.");
        assert!(out.contains("x_seconds_bucket{le=\"0.001\"} 1\n"), "{out}");
        assert!(out.contains("x_seconds_bucket{le=\"0.05\"} 2\n"));
        assert!(out.contains("x_seconds_bucket{le=\"10\"} 2\n"));
        assert!(out.contains("x_seconds_bucket{le=\"+Inf\"} 3\n"));
        assert!(out.contains("x_seconds_count 3\n"));
        assert!((h.sum_s() - 20.0305).abs() < 1e-9);
    }
}
