//! Pipeline counters of the collector, rendered in the Prometheus text format
//! on `GET /metrics`.
//!
//! In: increments from the ingest service and the writer. Out: a text
//! exposition. Counters only ever increase; labelled counters keep one series
//! per label value (labels are fixed reason strings, never user input).

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

    /// Renders the counters (plus `extra` series) as Prometheus text.
    pub fn render(&self, extra: &[(&str, &str, u64)]) -> String {
        let mut out = String::new();
        let plain = [
            (
                "rankscope_collector_batches_received_total",
                "Agent batches received.",
                &self.batches_received,
            ),
            (
                "rankscope_collector_batches_stored_total",
                "Agent batches stored and acknowledged.",
                &self.batches_stored,
            ),
            (
                "rankscope_collector_batches_duplicate_total",
                "Duplicate agent batches acknowledged without writing.",
                &self.batches_duplicate,
            ),
            (
                "rankscope_collector_batches_retry_total",
                "Agent batches answered UNAVAILABLE.",
                &self.batches_retry,
            ),
            (
                "rankscope_collector_events_stored_total",
                "Event rows stored in ClickHouse.",
                &self.events_stored,
            ),
        ];
        for (name, help, v) in plain {
            counter(&mut out, name, help, &[("", v.load(Relaxed))]);
        }
        let rejected: Vec<(&str, u64)> = self.rejected().into_iter().collect();
        counter(
            &mut out,
            "rankscope_collector_rejected_batches_total",
            "Agent batches rejected as invalid, by reason.",
            &rejected.iter().map(|(r, v)| (*r, *v)).collect::<Vec<_>>(),
        );
        for (name, help, v) in extra {
            counter(&mut out, name, help, &[("", *v)]);
        }
        out
    }
}

/// Writes one counter family; a non-empty first tuple element is the
/// `reason` label value.
fn counter(out: &mut String, name: &str, help: &str, series: &[(&str, u64)]) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
    for (reason, v) in series {
        if reason.is_empty() {
            let _ = writeln!(out, "{name} {v}");
        } else {
            let _ = writeln!(out, "{name}{{reason=\"{reason}\"}} {v}");
        }
    }
}
