//! Counters of the agent, named as the Prometheus series they will become.
//!
//! In: increments from the ingest streams, the batcher and the uplink (all
//! `Relaxed` atomics, never a lock on the hot path except for the rare
//! rejection-by-reason map). Out: a [`MetricsSnapshot`] (plain numbers, used by
//! tests and later by `/metrics`), renderable as Prometheus text.
//!
//! Invariants, once the agent is idle:
//! `accepted_events = delivered_events + dropped{rejected_by_collector} +
//! dropped{shutdown} + events still inside the agent`; and
//! `backlog_batches = batches_created - batches_acked - batches_rejected`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

/// Why events were dropped (`rankscope_agent_dropped_events_total{reason}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropReason {
    /// The rank-facing queue was full; the newest message's events were dropped.
    QueueFull,
    /// The collector answered a batch with a permanent error.
    RejectedByCollector,
    /// The agent shut down before the events were delivered.
    Shutdown,
}

impl DropReason {
    const ALL: [DropReason; 3] = [Self::QueueFull, Self::RejectedByCollector, Self::Shutdown];

    /// The `reason` label.
    pub fn label(self) -> &'static str {
        match self {
            Self::QueueFull => "queue_full",
            Self::RejectedByCollector => "rejected_by_collector",
            Self::Shutdown => "shutdown",
        }
    }
}

/// Live counters, shared by all tasks of one agent.
#[derive(Debug, Default)]
pub struct Metrics {
    pub(crate) streams_opened: AtomicU64,
    pub(crate) streams_active: AtomicU64,
    pub(crate) received_messages: AtomicU64,
    pub(crate) received_events: AtomicU64,
    pub(crate) accepted_events: AtomicU64,
    pub(crate) acks_dropped: AtomicU64,
    dropped: [AtomicU64; 3],
    rejected: Mutex<BTreeMap<&'static str, u64>>,
    pub(crate) batches_created: AtomicU64,
    pub(crate) batches_sent: AtomicU64,
    pub(crate) batch_retries: AtomicU64,
    pub(crate) batches_acked: AtomicU64,
    pub(crate) batches_duplicate: AtomicU64,
    pub(crate) batches_rejected: AtomicU64,
    pub(crate) delivered_events: AtomicU64,
}

impl Metrics {
    pub(crate) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Relaxed);
    }

    pub(crate) fn inc(counter: &AtomicU64) {
        counter.fetch_add(1, Relaxed);
    }

    pub(crate) fn dec(counter: &AtomicU64) {
        counter.fetch_sub(1, Relaxed);
    }

    /// Counts `n` dropped events.
    pub(crate) fn dropped(&self, reason: DropReason, n: u64) {
        self.dropped[reason as usize].fetch_add(n, Relaxed);
    }

    /// Counts one rejected rank message.
    pub(crate) fn rejected(&self, reason: &'static str) {
        // A poisoned lock only means another thread panicked mid-increment;
        // the map itself is still usable.
        let mut map = self.rejected.lock().unwrap_or_else(|e| e.into_inner());
        *map.entry(reason).or_default() += 1;
    }

    /// Reads every counter. `queued_events` is passed in by the owner of the
    /// queue (it is a gauge of the queue's semaphore).
    pub(crate) fn snapshot(&self, queued_events: u64) -> MetricsSnapshot {
        let get = |c: &AtomicU64| c.load(Relaxed);
        let rejected = self.rejected.lock().unwrap_or_else(|e| e.into_inner());
        let batches_created = get(&self.batches_created);
        let batches_acked = get(&self.batches_acked);
        let batches_rejected = get(&self.batches_rejected);
        MetricsSnapshot {
            streams_opened_total: get(&self.streams_opened),
            streams_active: get(&self.streams_active),
            received_messages_total: get(&self.received_messages),
            received_events_total: get(&self.received_events),
            accepted_events_total: get(&self.accepted_events),
            acks_dropped_total: get(&self.acks_dropped),
            dropped_events_total: DropReason::ALL
                .iter()
                .map(|r| (r.label().to_owned(), get(&self.dropped[*r as usize])))
                .collect(),
            rejected_messages_total: rejected
                .iter()
                .map(|(k, v)| ((*k).to_owned(), *v))
                .collect(),
            queued_events,
            batches_created_total: batches_created,
            batches_sent_total: get(&self.batches_sent),
            batch_retries_total: get(&self.batch_retries),
            batches_acked_total: batches_acked,
            batches_duplicate_total: get(&self.batches_duplicate),
            batches_rejected_total: batches_rejected,
            backlog_batches: batches_created.saturating_sub(batches_acked + batches_rejected),
            delivered_events_total: get(&self.delivered_events),
        }
    }
}

/// A point-in-time copy of the agent's counters. Field names are the
/// Prometheus series without the `rankscope_agent_` prefix.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MetricsSnapshot {
    /// Rank streams opened since start.
    pub streams_opened_total: u64,
    /// Rank streams open now.
    pub streams_active: u64,
    /// Rank messages received (valid or not).
    pub received_messages_total: u64,
    /// Events received in those messages.
    pub received_events_total: u64,
    /// Events validated and taken into the queue.
    pub accepted_events_total: u64,
    /// Acks not sent because the rank did not read its acks.
    pub acks_dropped_total: u64,
    /// Events dropped, by reason (`queue_full`, `rejected_by_collector`,
    /// `shutdown`; every reason is present).
    pub dropped_events_total: BTreeMap<String, u64>,
    /// Rank messages rejected, by validation reason.
    pub rejected_messages_total: BTreeMap<String, u64>,
    /// Events waiting in the rank-facing queue (gauge).
    pub queued_events: u64,
    /// Batches cut by the batcher.
    pub batches_created_total: u64,
    /// Batches sent to the collector for the first time.
    pub batches_sent_total: u64,
    /// Repeated attempts to send a batch.
    pub batch_retries_total: u64,
    /// Batches the collector acknowledged (including duplicates).
    pub batches_acked_total: u64,
    /// Acknowledged batches the collector had already stored.
    pub batches_duplicate_total: u64,
    /// Batches the collector rejected permanently.
    pub batches_rejected_total: u64,
    /// Batches cut and not yet acknowledged or rejected (gauge).
    pub backlog_batches: u64,
    /// Events in acknowledged batches.
    pub delivered_events_total: u64,
}

impl MetricsSnapshot {
    /// Dropped events for one reason label (0 when unknown).
    pub fn dropped(&self, reason: &str) -> u64 {
        self.dropped_events_total.get(reason).copied().unwrap_or(0)
    }

    /// Rejected messages for one reason label (0 when none).
    pub fn rejected(&self, reason: &str) -> u64 {
        self.rejected_messages_total
            .get(reason)
            .copied()
            .unwrap_or(0)
    }

    /// Prometheus text exposition of the snapshot.
    pub fn to_prometheus(&self) -> String {
        let mut out = String::new();
        let mut one = |name: &str, kind: &str, v: u64| {
            let _ = writeln!(out, "# TYPE rankscope_agent_{name} {kind}");
            let _ = writeln!(out, "rankscope_agent_{name} {v}");
        };
        one("streams_opened_total", "counter", self.streams_opened_total);
        one("streams_active", "gauge", self.streams_active);
        one("received_messages_total", "counter", self.received_messages_total);
        one("received_events_total", "counter", self.received_events_total);
        one("accepted_events_total", "counter", self.accepted_events_total);
        one("acks_dropped_total", "counter", self.acks_dropped_total);
        one("queued_events", "gauge", self.queued_events);
        one("batches_created_total", "counter", self.batches_created_total);
        one("batches_sent_total", "counter", self.batches_sent_total);
        one("batch_retries_total", "counter", self.batch_retries_total);
        one("batches_acked_total", "counter", self.batches_acked_total);
        one("batches_duplicate_total", "counter", self.batches_duplicate_total);
        one("batches_rejected_total", "counter", self.batches_rejected_total);
        one("backlog_batches", "gauge", self.backlog_batches);
        one("delivered_events_total", "counter", self.delivered_events_total);
        for (name, map) in [
            ("dropped_events_total", &self.dropped_events_total),
            ("rejected_messages_total", &self.rejected_messages_total),
        ] {
            let _ = writeln!(out, "# TYPE rankscope_agent_{name} counter");
            for (reason, v) in map {
                let _ = writeln!(out, "rankscope_agent_{name}{{reason=\"{reason}\"}} {v}");
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_reports_labelled_counters_and_backlog() {
        let m = Metrics::default();
        m.dropped(DropReason::QueueFull, 5);
        m.dropped(DropReason::QueueFull, 2);
        m.rejected("step_backwards");
        Metrics::add(&m.batches_created, 3);
        Metrics::inc(&m.batches_acked);
        Metrics::inc(&m.batches_rejected);
        let s = m.snapshot(7);
        assert_eq!(s.dropped("queue_full"), 7);
        assert_eq!(s.dropped("shutdown"), 0);
        assert_eq!(s.rejected("step_backwards"), 1);
        assert_eq!(s.backlog_batches, 1);
        assert_eq!(s.queued_events, 7);
        let text = s.to_prometheus();
        assert!(text.contains("rankscope_agent_dropped_events_total{reason=\"queue_full\"} 7"));
        assert!(text.contains("rankscope_agent_rejected_messages_total{reason=\"step_backwards\"} 1"));
        assert!(text.contains("rankscope_agent_backlog_batches 1"));
    }
}
