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
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering::Relaxed};
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
    /// The disk spool held `spool_max_bytes`; the newest events were dropped.
    SpoolFull,
    /// A step marker whose partner was dropped for one of the reasons
    /// above (the collector would refuse the batch holding it).
    Unpaired,
}

impl DropReason {
    const ALL: [DropReason; 5] = [
        Self::QueueFull,
        Self::RejectedByCollector,
        Self::Shutdown,
        Self::SpoolFull,
        Self::Unpaired,
    ];

    /// The `reason` label.
    pub fn label(self) -> &'static str {
        match self {
            Self::QueueFull => "queue_full",
            Self::RejectedByCollector => "rejected_by_collector",
            Self::Shutdown => "shutdown",
            Self::SpoolFull => "spool_full",
            Self::Unpaired => "unpaired",
        }
    }
}

/// Whether this agent samples GPUs (`rankscope_agent_nvml_state{state}`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum NvmlState {
    /// GPU sampling is switched off (`gpu_sample_interval_ms = 0`) or has
    /// not started yet.
    #[default]
    Disabled,
    /// NVML is loaded and initialised; GPUs are sampled.
    Ok,
    /// NVML could not be loaded or initialised; the agent samples the host
    /// only (the reason is logged once and shown by `--check`).
    Unavailable,
}

impl NvmlState {
    const ALL: [NvmlState; 3] = [Self::Disabled, Self::Ok, Self::Unavailable];

    /// The `state` label.
    pub fn label(self) -> &'static str {
        match self {
            Self::Disabled => "disabled",
            Self::Ok => "ok",
            Self::Unavailable => "unavailable",
        }
    }

    fn from_u8(v: u8) -> Self {
        Self::ALL.get(usize::from(v)).copied().unwrap_or_default()
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
    dropped: [AtomicU64; DropReason::ALL.len()],
    rejected: Mutex<BTreeMap<&'static str, u64>>,
    pub(crate) batches_created: AtomicU64,
    pub(crate) batches_cut_at_step_end: AtomicU64,
    pub(crate) batches_sent: AtomicU64,
    pub(crate) batches_retried: AtomicU64,
    pub(crate) batches_acked: AtomicU64,
    pub(crate) batches_duplicate: AtomicU64,
    pub(crate) batches_tried_elsewhere: AtomicU64,
    pub(crate) batches_rejected: AtomicU64,
    pub(crate) delivered_events: AtomicU64,
    pub(crate) gpu_samples: AtomicU64,
    pub(crate) host_samples: AtomicU64,
    pub(crate) gpu_read_errors: AtomicU64,
    pub(crate) delivered_samples: AtomicU64,
    /// Calls to the collector that failed in TLS (handshake, certificate).
    pub(crate) collector_tls_failures: AtomicU64,
    /// Lookups of `collector_url` that failed with a new reason.
    pub(crate) collector_resolve_errors: AtomicU64,
    /// Collectors evicted after `collector_failover_after_ms` of failures
    /// (their jobs moved to the next collector of their order).
    pub(crate) collector_failovers: AtomicU64,
    /// Certificate reloads that installed new files.
    pub(crate) tls_reloads: AtomicU64,
    /// Certificate reloads that failed (the previous files stay in use).
    pub(crate) tls_reload_failures: AtomicU64,
    /// Captured traces uploaded to `[traces] archive_url`, and uploads that failed.
    pub(crate) traces_archived: AtomicU64,
    pub(crate) trace_archive_failures: AtomicU64,
    samples_dropped: [AtomicU64; DropReason::ALL.len()],
    nvml_state: AtomicU8,
    pub(crate) gpus: AtomicU64,
    /// Batches the spool could not write (sent all the same, not durable).
    pub(crate) spool_write_errors: AtomicU64,
    /// Batches of previous runs delivered from the spool.
    pub(crate) batches_resent_from_spool: AtomicU64,
}

impl Metrics {
    pub(crate) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Relaxed);
    }

    pub(crate) fn inc(counter: &AtomicU64) {
        counter.fetch_add(1, Relaxed);
    }

    /// Counts `n` dropped events.
    pub(crate) fn dropped(&self, reason: DropReason, n: u64) {
        self.dropped[reason as usize].fetch_add(n, Relaxed);
    }

    /// Counts `n` dropped telemetry samples.
    pub(crate) fn samples_dropped(&self, reason: DropReason, n: u64) {
        self.samples_dropped[reason as usize].fetch_add(n, Relaxed);
    }

    /// Sets the NVML state gauge.
    pub(crate) fn set_nvml_state(&self, state: NvmlState) {
        self.nvml_state.store(state as u8, Relaxed);
    }

    /// Counts one rejected rank message.
    pub(crate) fn rejected(&self, reason: &'static str) {
        // A poisoned lock only means another thread panicked mid-increment;
        // the map itself is still usable.
        let mut map = self.rejected.lock().unwrap_or_else(|e| e.into_inner());
        *map.entry(reason).or_default() += 1;
    }

    /// Reads every counter. `queued_events` and `backlog_bytes` are passed
    /// in by the owners of the queue and of the backlog's byte budget (gauges
    /// of their semaphores).
    pub(crate) fn snapshot(&self, queued_events: u64, backlog_bytes: u64) -> MetricsSnapshot {
        let get = |c: &AtomicU64| c.load(Relaxed);
        let rejected = self.rejected.lock().unwrap_or_else(|e| e.into_inner());
        let batches_created = get(&self.batches_created);
        let batches_acked = get(&self.batches_acked);
        let batches_rejected = get(&self.batches_rejected);
        MetricsSnapshot {
            streams_opened: get(&self.streams_opened),
            streams_active: get(&self.streams_active),
            received_messages: get(&self.received_messages),
            received_events: get(&self.received_events),
            accepted_events: get(&self.accepted_events),
            acks_dropped: get(&self.acks_dropped),
            dropped_events: DropReason::ALL
                .iter()
                .map(|r| (r.label().to_owned(), get(&self.dropped[*r as usize])))
                .collect(),
            rejected_messages: rejected
                .iter()
                .map(|(k, v)| ((*k).to_owned(), *v))
                .collect(),
            queued_events,
            batches_created,
            batches_cut_at_step_end: get(&self.batches_cut_at_step_end),
            batches_sent: get(&self.batches_sent),
            batches_retried: get(&self.batches_retried),
            batches_acked,
            batches_duplicate: get(&self.batches_duplicate),
            batches_tried_elsewhere: get(&self.batches_tried_elsewhere),
            batches_rejected,
            backlog_batches: batches_created.saturating_sub(batches_acked + batches_rejected),
            backlog_bytes,
            delivered_events: get(&self.delivered_events),
            gpu_samples: get(&self.gpu_samples),
            host_samples: get(&self.host_samples),
            gpu_read_errors: get(&self.gpu_read_errors),
            delivered_samples: get(&self.delivered_samples),
            collector_tls_failures: get(&self.collector_tls_failures),
            collector_resolve_errors: get(&self.collector_resolve_errors),
            collector_failovers: get(&self.collector_failovers),
            tls_reloads: get(&self.tls_reloads),
            tls_reload_failures: get(&self.tls_reload_failures),
            traces_archived: get(&self.traces_archived),
            trace_archive_failures: get(&self.trace_archive_failures),
            dropped_samples: DropReason::ALL
                .iter()
                .map(|r| {
                    (
                        r.label().to_owned(),
                        get(&self.samples_dropped[*r as usize]),
                    )
                })
                .collect(),
            nvml_state: NvmlState::from_u8(self.nvml_state.load(Relaxed)),
            gpus: get(&self.gpus),
        }
    }
}

/// A point-in-time copy of the agent's counters. Field `x` is the Prometheus
/// series `rankscope_agent_x_total` for counters, `rankscope_agent_x` for
/// gauges (see [`MetricsSnapshot::to_prometheus`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MetricsSnapshot {
    /// Rank streams opened since start.
    pub streams_opened: u64,
    /// Rank streams open now.
    pub streams_active: u64,
    /// Rank messages received (valid or not).
    pub received_messages: u64,
    /// Events received in those messages.
    pub received_events: u64,
    /// Events validated and taken into the queue.
    pub accepted_events: u64,
    /// Acks not sent because the rank did not read its acks.
    pub acks_dropped: u64,
    /// Events dropped, by reason (`queue_full`, `rejected_by_collector`,
    /// `shutdown`; every reason is present).
    pub dropped_events: BTreeMap<String, u64>,
    /// Rank messages rejected, by validation reason.
    pub rejected_messages: BTreeMap<String, u64>,
    /// Events waiting in the rank-facing queue (gauge).
    pub queued_events: u64,
    /// Encoded bytes of the batches cut and not yet settled (gauge; at most
    /// `backlog_max_bytes`).
    pub backlog_bytes: u64,
    /// Batches cut by the batcher.
    pub batches_created: u64,
    /// Of those, batches cut because every live rank of the node ended a
    /// step (`flush_at_step_end`).
    pub batches_cut_at_step_end: u64,
    /// Batches sent to the collector for the first time.
    pub batches_sent: u64,
    /// Repeated attempts to send a batch.
    pub batches_retried: u64,
    /// Batches the collector acknowledged (including duplicates).
    pub batches_acked: u64,
    /// Acknowledged batches the collector had already stored.
    pub batches_duplicate: u64,
    /// Calls of a batch another collector had before (its job's owner
    /// changed while it was unacknowledged).
    pub batches_tried_elsewhere: u64,
    /// Batches the collector rejected permanently.
    pub batches_rejected: u64,
    /// Batches cut and not yet acknowledged or rejected (gauge).
    pub backlog_batches: u64,
    /// Events in acknowledged batches.
    pub delivered_events: u64,
    /// GPU samples taken (one per GPU per tick, lost GPUs included).
    pub gpu_samples: u64,
    /// Host samples taken.
    pub host_samples: u64,
    /// NVML queries that failed with an unexpected error (the metric is
    /// left empty; `NotSupported` is not counted).
    pub gpu_read_errors: u64,
    /// Telemetry samples in acknowledged batches.
    pub delivered_samples: u64,
    pub collector_tls_failures: u64,
    /// Failed lookups of `collector_url` (each new reason once).
    pub collector_resolve_errors: u64,
    /// Collectors whose jobs failed over to the next of their order.
    pub collector_failovers: u64,
    pub tls_reloads: u64,
    pub tls_reload_failures: u64,
    /// Captured traces archived to `[traces] archive_url`.
    pub traces_archived: u64,
    /// Archive uploads that failed (the trace is imported all the same).
    pub trace_archive_failures: u64,
    /// Telemetry samples dropped, by reason (`queue_full`: the batcher was
    /// behind; `rejected_by_collector`; `shutdown`; every reason present).
    pub dropped_samples: BTreeMap<String, u64>,
    /// Whether GPUs are sampled (gauge, exported as one series per state).
    pub nvml_state: NvmlState,
    /// GPUs NVML reported at the last tick (gauge).
    pub gpus: u64,
}

impl MetricsSnapshot {
    /// Dropped events for one reason label (0 when unknown).
    pub fn dropped(&self, reason: &str) -> u64 {
        self.dropped_events.get(reason).copied().unwrap_or(0)
    }

    /// Rejected messages for one reason label (0 when none).
    pub fn rejected(&self, reason: &str) -> u64 {
        self.rejected_messages.get(reason).copied().unwrap_or(0)
    }

    /// Prometheus text exposition of the snapshot: `rankscope_agent_<field>`,
    /// with `_total` appended for counters.
    pub fn to_prometheus(&self) -> String {
        let mut out = String::new();
        let counters = [
            ("streams_opened", self.streams_opened),
            ("received_messages", self.received_messages),
            ("received_events", self.received_events),
            ("accepted_events", self.accepted_events),
            ("acks_dropped", self.acks_dropped),
            ("batches_created", self.batches_created),
            ("batches_cut_at_step_end", self.batches_cut_at_step_end),
            ("batches_sent", self.batches_sent),
            ("batches_retried", self.batches_retried),
            ("batches_acked", self.batches_acked),
            ("batches_duplicate", self.batches_duplicate),
            ("batches_tried_elsewhere", self.batches_tried_elsewhere),
            ("batches_rejected", self.batches_rejected),
            ("delivered_events", self.delivered_events),
            ("gpu_samples", self.gpu_samples),
            ("host_samples", self.host_samples),
            ("gpu_read_errors", self.gpu_read_errors),
            ("delivered_samples", self.delivered_samples),
            ("collector_tls_failures", self.collector_tls_failures),
            ("collector_resolve_errors", self.collector_resolve_errors),
            ("collector_failovers", self.collector_failovers),
            ("tls_reloads", self.tls_reloads),
            ("tls_reload_failures", self.tls_reload_failures),
            ("traces_archived", self.traces_archived),
            ("trace_archive_failures", self.trace_archive_failures),
        ];
        for (name, v) in counters {
            let _ = writeln!(out, "# TYPE rankscope_agent_{name}_total counter");
            let _ = writeln!(out, "rankscope_agent_{name}_total {v}");
        }
        let gauges = [
            ("streams_active", self.streams_active),
            ("queued_events", self.queued_events),
            ("backlog_batches", self.backlog_batches),
            ("backlog_bytes", self.backlog_bytes),
            ("gpus", self.gpus),
        ];
        for (name, v) in gauges {
            let _ = writeln!(out, "# TYPE rankscope_agent_{name} gauge");
            let _ = writeln!(out, "rankscope_agent_{name} {v}");
        }
        let _ = writeln!(out, "# TYPE rankscope_agent_nvml_state gauge");
        for state in NvmlState::ALL {
            let v = u8::from(state == self.nvml_state);
            let _ = writeln!(
                out,
                "rankscope_agent_nvml_state{{state=\"{}\"}} {v}",
                state.label()
            );
        }
        for (name, map) in [
            ("dropped_events", &self.dropped_events),
            ("rejected_messages", &self.rejected_messages),
            ("dropped_samples", &self.dropped_samples),
        ] {
            let _ = writeln!(out, "# TYPE rankscope_agent_{name}_total counter");
            for (reason, v) in map {
                let _ = writeln!(
                    out,
                    "rankscope_agent_{name}_total{{reason=\"{reason}\"}} {v}"
                );
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
        let s = m.snapshot(7, 0);
        assert_eq!(s.dropped("queue_full"), 7);
        assert_eq!(s.dropped("shutdown"), 0);
        assert_eq!(s.rejected("step_backwards"), 1);
        assert_eq!(s.backlog_batches, 1);
        assert_eq!(s.queued_events, 7);
        let text = s.to_prometheus();
        assert!(text.contains("rankscope_agent_dropped_events_total{reason=\"queue_full\"} 7"));
        assert!(
            text.contains("rankscope_agent_rejected_messages_total{reason=\"step_backwards\"} 1")
        );
        assert!(text.contains("rankscope_agent_backlog_batches 1"));
        assert!(text.contains("rankscope_agent_batches_created_total 3"));
        assert!(text.contains("rankscope_agent_nvml_state{state=\"disabled\"} 1"));
    }

    #[test]
    fn nvml_state_gauge_and_sample_counters() {
        let m = Metrics::default();
        m.set_nvml_state(NvmlState::Unavailable);
        m.samples_dropped(DropReason::QueueFull, 4);
        Metrics::add(&m.gpu_samples, 16);
        let s = m.snapshot(0, 0);
        assert_eq!(s.nvml_state, NvmlState::Unavailable);
        assert_eq!(s.dropped_samples["queue_full"], 4);
        let text = s.to_prometheus();
        assert!(text.contains("rankscope_agent_nvml_state{state=\"unavailable\"} 1"));
        assert!(text.contains("rankscope_agent_nvml_state{state=\"ok\"} 0"));
        assert!(text.contains("rankscope_agent_gpu_samples_total 16"));
        assert!(text.contains("rankscope_agent_dropped_samples_total{reason=\"queue_full\"} 4"));
    }
}
