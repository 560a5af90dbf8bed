//! Every counter the collector exports, listed once, so that `GET /metrics`
//! and the OTLP export (`otel`) cannot disagree on a name or a label.
//!
//! In: the counters the pipeline stages keep in memory: ingest
//! ([`Metrics`]), the ClickHouse writer, live analytics (`stream`), alerting
//! and each of its sinks, TLS. Out: [`Family`]s (name, help, one value per
//! label set), rendered as Prometheus text by [`render`] and observed by the
//! OTLP instruments. Reading is lock-free except for the rejected-reason map.
//!
//! Label values are fixed strings (`reason`, `listener`, `result`) or the
//! configured sink names (`sink`), never request input.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use crate::alert::AlertHandle;
use crate::metrics::Metrics;
use crate::store::WriterHandle;
use crate::stream::StreamHandle;
use crate::tls::TlsState;

/// One counter family: its series are `(labels, value)`.
#[derive(Debug, Clone, PartialEq)]
pub struct Family {
    pub name: &'static str,
    pub help: &'static str,
    pub series: Vec<(Vec<(&'static str, String)>, u64)>,
}

impl Family {
    fn plain(name: &'static str, help: &'static str, v: &AtomicU64) -> Self {
        Self {
            name,
            help,
            series: vec![(Vec::new(), v.load(Relaxed))],
        }
    }

    fn labelled<'a>(
        name: &'static str,
        help: &'static str,
        label: &'static str,
        values: impl IntoIterator<Item = (&'a str, u64)>,
    ) -> Self {
        Self {
            name,
            help,
            series: values
                .into_iter()
                .map(|(l, v)| (vec![(label, l.to_owned())], v))
                .collect(),
        }
    }
}

/// Handles on every counter source; cheap to clone.
#[derive(Clone)]
pub struct Counters {
    pub ingest: Arc<Metrics>,
    pub writer: WriterHandle,
    pub stream: StreamHandle,
    pub alerts: AlertHandle,
    pub tls: Option<Arc<TlsState>>,
    /// Kineto traces on request (`traces::TraceHub`).
    pub traces: Option<Arc<crate::traces::TraceMetrics>>,
    /// Jobs taken over, released and refused (`ownership`).
    pub ownership: Option<Arc<crate::ownership::OwnershipMetrics>>,
}

impl Counters {
    /// The current value of every counter. The set of families does not
    /// change while the collector runs (series of a labelled family may be
    /// added, e.g. a first rejection reason).
    pub fn families(&self) -> Vec<Family> {
        let m = &*self.ingest;
        let rejected = m.rejected();
        let w = self.writer.metrics();
        let s = self.stream.metrics();
        let a = self.alerts.metrics();
        let sinks = self.alerts.sinks();
        let sink = |name: &'static str,
                    help: &'static str,
                    read: fn(&crate::alert::sink::SinkMetrics) -> &AtomicU64| {
            Family::labelled(
                name,
                help,
                "sink",
                sinks
                    .iter()
                    .map(|h| (h.name.as_str(), read(&h.metrics).load(Relaxed))),
            )
        };
        let mut out = vec![
            Family::plain(
                "rankscope_collector_batches_received_total",
                "Agent batches received.",
                &m.batches_received,
            ),
            Family::plain(
                "rankscope_collector_batches_stored_total",
                "Agent batches stored and acknowledged.",
                &m.batches_stored,
            ),
            Family::plain(
                "rankscope_collector_batches_duplicate_total",
                "Duplicate agent batches acknowledged without writing.",
                &m.batches_duplicate,
            ),
            Family::plain(
                "rankscope_collector_batches_retry_total",
                "Agent batches answered UNAVAILABLE.",
                &m.batches_retry,
            ),
            Family::plain(
                "rankscope_collector_events_stored_total",
                "Event rows stored in ClickHouse.",
                &m.events_stored,
            ),
            Family::labelled(
                "rankscope_collector_rejected_batches_total",
                "Agent batches rejected as invalid, by reason.",
                "reason",
                rejected.iter().map(|(r, v)| (*r, *v)),
            ),
            Family::plain(
                "rankscope_collector_clickhouse_inserts_total",
                "INSERT statements ClickHouse accepted.",
                &w.inserts,
            ),
            Family::labelled(
                "rankscope_collector_clickhouse_table_inserts_total",
                "INSERT statements ClickHouse accepted, by table (each is a part to merge).",
                "table",
                crate::store::Table::ALL
                    .iter()
                    .map(|t| (t.name(), w.table(*t).inserts.load(Relaxed))),
            ),
            Family::plain(
                "rankscope_collector_clickhouse_insert_failures_total",
                "INSERT statements that failed.",
                &w.insert_failures,
            ),
            Family::plain(
                "rankscope_collector_clickhouse_rows_written_total",
                "Rows ClickHouse accepted (all tables).",
                &w.rows_written,
            ),
            Family::plain(
                "rankscope_collector_stream_dropped_batches_total",
                "Accepted batches left out of live analytics because its queue (stream.queue_capacity) was full.",
                &s.dropped_batches,
            ),
            Family::plain(
                "rankscope_collector_stream_duplicate_batches_total",
                "Batches offered to live analytics again after it had them (an agent retried a batch whose flush failed); dropped.",
                &s.duplicate_batches,
            ),
            Family::plain(
                "rankscope_collector_stream_steps_finalized_total",
                "Steps live analytics finalized (per job and step).",
                &s.steps_finalized,
            ),
            Family::plain(
                "rankscope_collector_stream_partial_steps_total",
                "Steps finalized by stream.step_timeout_ms before every rank ended them.",
                &s.partial_steps,
            ),
            Family::plain(
                "rankscope_collector_stream_verdict_changes_total",
                "Straggler verdict versions written (new, changed or cleared).",
                &s.verdict_changes,
            ),
            Family::plain(
                "rankscope_collector_stream_verdict_evidence_total",
                "Straggler verdict versions that carried evidence (GPU, or where an `other` straggler's time sits).",
                &s.verdict_evidence,
            ),
            Family::plain(
                "rankscope_collector_stream_live_verdicts_dropped_total",
                "New straggler verdicts not held in memory for the API because 100,000 recent versions were (served once stored).",
                &s.live_verdicts_dropped,
            ),
            Family::plain(
                "rankscope_collector_stream_hang_suspects_total",
                "Ranks suspected hung (silent while the job went on).",
                &s.hang_suspects,
            ),
            Family::plain(
                "rankscope_collector_stream_result_write_failures_total",
                "Failed writes of analytics results (not retried; raw events are stored).",
                &s.result_write_failures,
            ),
            Family::plain(
                "rankscope_collector_alert_inputs_dropped_total",
                "Analytics events left out of alerting because its queue (alerts.queue_capacity) was full.",
                &a.inputs_dropped,
            ),
            Family::plain(
                "rankscope_collector_alerts_fired_total",
                "Alert transitions to firing.",
                &a.fired,
            ),
            Family::plain(
                "rankscope_collector_alerts_resolved_total",
                "Alert transitions to resolved.",
                &a.resolved,
            ),
            Family::plain(
                "rankscope_collector_alert_write_failures_total",
                "Failed writes of alert transitions to the alerts table.",
                &a.write_failures,
            ),
            Family::plain(
                "rankscope_collector_fleet_rounds_total",
                "Fleet evaluations (repeat_offender) the alert rules applied.",
                &a.fleet_rounds,
            ),
            Family::plain(
                "rankscope_collector_fleet_round_failures_total",
                "Fleet evaluations (repeat_offender) whose query failed.",
                &a.fleet_round_failures,
            ),
            sink(
                "rankscope_collector_alert_sink_sent_total",
                "Notifications a sink delivered, by sink.",
                |m| &m.sent,
            ),
            sink(
                "rankscope_collector_alert_sink_failed_total",
                "Notifications a sink gave up on after its retries, by sink.",
                |m| &m.failed,
            ),
            sink(
                "rankscope_collector_alert_sink_dropped_total",
                "Notifications dropped because a sink's queue was full, by sink.",
                |m| &m.dropped,
            ),
            sink(
                "rankscope_collector_alert_sink_retries_total",
                "Retried notification POSTs, by sink.",
                |m| &m.retries,
            ),
        ];
        if let Some(tls) = &self.tls {
            out.extend(tls.counters.families());
        }
        if let Some(o) = &self.ownership {
            out.push(Family::labelled(
                "rankscope_collector_jobs_owned_total",
                "Jobs this collector took over (rebuilt from ClickHouse), released (another took them, or idle) or refused (another schema version holds them).",
                "event",
                [
                    ("taken", o.jobs_taken.load(Relaxed)),
                    ("released", o.jobs_released.load(Relaxed)),
                    ("refused", o.jobs_refused.load(Relaxed)),
                ],
            ));
        }
        if let Some(t) = &self.traces {
            out.extend([
                Family::plain(
                    "rankscope_collector_traces_requested_total",
                    "Kineto traces requested (by the API or automatically).",
                    &t.requested,
                ),
                Family::plain(
                    "rankscope_collector_trace_ranks_imported_total",
                    "Ranks whose requested trace was imported.",
                    &t.imported,
                ),
                Family::plain(
                    "rankscope_collector_trace_ranks_failed_total",
                    "Ranks whose requested trace failed (reason in GET .../traces).",
                    &t.failed,
                ),
                Family::plain(
                    "rankscope_collector_control_commands_dropped_total",
                    "Commands to agents dropped because their control stream was full.",
                    &t.commands_dropped,
                ),
                Family::plain(
                    "rankscope_collector_control_streams_opened_total",
                    "Agent control streams opened (one per agent connection).",
                    &t.control_streams_opened,
                ),
            ]);
        }
        out
    }
}

/// Writes `families` as Prometheus text.
pub fn render(families: &[Family], out: &mut String) {
    for f in families {
        let name = f.name;
        let _ = writeln!(out, "# HELP {name} {}\n# TYPE {name} counter", f.help);
        for (labels, v) in &f.series {
            if labels.is_empty() {
                let _ = writeln!(out, "{name} {v}");
                continue;
            }
            let labels: Vec<String> = labels
                .iter()
                .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
                .collect();
            let _ = writeln!(out, "{name}{{{}}} {v}", labels.join(","));
        }
    }
}

/// A label value as the exposition format wants it.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_plain_and_labelled_series() {
        let m = Metrics::default();
        m.reject("rank_out_of_range");
        m.reject("rank_out_of_range");
        m.batches_received.fetch_add(3, Relaxed);
        let rejected = m.rejected();
        let families = [
            Family::plain(
                "rankscope_collector_batches_received_total",
                "Agent batches received.",
                &m.batches_received,
            ),
            Family::labelled(
                "rankscope_collector_rejected_batches_total",
                "R.",
                "reason",
                rejected.iter().map(|(r, v)| (*r, *v)),
            ),
            Family::labelled("x_total", "X.", "sink", [("a\"b", 1)]),
        ];
        let mut out = String::new();
        render(&families, &mut out);
        assert!(out.contains("# TYPE rankscope_collector_batches_received_total counter\n"));
        assert!(out.contains("rankscope_collector_batches_received_total 3\n"));
        assert!(out.contains(
            "rankscope_collector_rejected_batches_total{reason=\"rank_out_of_range\"} 2\n"
        ));
        assert!(out.contains("x_total{sink=\"a\\\"b\"} 1\n"), "{out}");
    }
}
