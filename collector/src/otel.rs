//! OpenTelemetry export (OTLP/gRPC) of the job metrics the collector computes
//! and of its own pipeline telemetry.
//!
//! In: the [`JobGauges`] registry, the pipeline counters ([`Metrics`],
//! writer and analytics counters). Out: OTLP metric exports to
//! `otlp_endpoint` every `otlp_export_interval_ms`, through the
//! opentelemetry SDK's periodic reader (its own thread). Instruments are
//! observable: each export reads the current values, so nothing on the ingest
//! path waits for or calls into OpenTelemetry. Names and labels are the ones
//! `GET /metrics` shows (see `gauges` and `metrics`).

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use opentelemetry::metrics::MeterProvider as _;
use opentelemetry::KeyValue;
use opentelemetry_otlp::{MetricExporter, WithExportConfig};
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::Resource;

use crate::gauges::JobGauges;
use crate::metrics::Metrics;
use crate::store::WriterHandle;

/// Why the exporter could not start.
#[derive(Debug, thiserror::Error)]
#[error("OTLP exporter for {endpoint}: {reason}")]
pub struct OtelError {
    endpoint: String,
    reason: String,
}

/// The names of the gauges exported from [`JobGauges`].
const GAUGES: [&str; 10] = [
    "rankscope_step",
    "rankscope_step_time_seconds",
    "rankscope_step_compute_seconds",
    "rankscope_step_communication_seconds",
    "rankscope_step_overlap_seconds",
    "rankscope_step_exposed_communication_seconds",
    "rankscope_step_collective_wait_seconds",
    "rankscope_straggler_slowdown",
    "rankscope_straggler_active",
    "rankscope_collective_busbw_gbps",
];

/// A running exporter; dropping it does not stop it, [`Otel::shutdown`] does.
pub struct Otel {
    provider: SdkMeterProvider,
}

impl Otel {
    /// Starts exporting to `endpoint` (e.g. `http://otel-collector:4317`).
    /// Must be called within the tokio runtime (the gRPC channel lives there).
    pub fn start(
        endpoint: &str,
        interval: Duration,
        gauges: Arc<JobGauges>,
        metrics: Arc<Metrics>,
        writer: WriterHandle,
    ) -> Result<Self, OtelError> {
        let exporter = MetricExporter::builder()
            .with_tonic()
            .with_endpoint(endpoint)
            .with_timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| OtelError {
                endpoint: endpoint.to_owned(),
                reason: e.to_string(),
            })?;
        let reader = PeriodicReader::builder(exporter)
            .with_interval(interval)
            .build();
        let provider = SdkMeterProvider::builder()
            .with_reader(reader)
            .with_resource(
                Resource::builder()
                    .with_service_name("rankscope-collector")
                    .build(),
            )
            .build();
        let meter = provider.meter("rankscope");
        for name in GAUGES {
            let gauges = gauges.clone();
            meter
                .f64_observable_gauge(name)
                .with_callback(move |obs| {
                    for (n, labels, v) in gauges.samples() {
                        if n == name {
                            let attrs: Vec<KeyValue> = labels
                                .into_iter()
                                .map(|(k, v)| KeyValue::new(k, v))
                                .collect();
                            obs.observe(v, &attrs);
                        }
                    }
                })
                .build();
        }
        for (name, read) in pipeline_counters(metrics, writer) {
            meter
                .u64_observable_counter(name)
                .with_callback(move |obs| obs.observe(read(), &[]))
                .build();
        }
        tracing::info!(
            endpoint,
            interval_ms = interval.as_millis() as u64,
            "exporting metrics over OTLP"
        );
        Ok(Self { provider })
    }

    /// Exports once more and stops.
    pub fn shutdown(self) {
        if let Err(e) = self.provider.shutdown() {
            tracing::warn!(error = %e, "OTLP exporter shutdown failed");
        }
    }
}

type Reader = Box<dyn Fn() -> u64 + Send + Sync>;

/// The pipeline counters, by the names `/metrics` uses.
fn pipeline_counters(m: Arc<Metrics>, w: WriterHandle) -> Vec<(&'static str, Reader)> {
    let mut out: Vec<(&'static str, Reader)> = Vec::new();
    macro_rules! counter {
        ($name:expr, $src:ident, $field:ident) => {{
            let src = $src.clone();
            out.push(($name, Box::new(move || src.$field.load(Relaxed))));
        }};
    }
    counter!(
        "rankscope_collector_batches_received_total",
        m,
        batches_received
    );
    counter!(
        "rankscope_collector_batches_stored_total",
        m,
        batches_stored
    );
    counter!(
        "rankscope_collector_batches_duplicate_total",
        m,
        batches_duplicate
    );
    counter!("rankscope_collector_batches_retry_total", m, batches_retry);
    counter!("rankscope_collector_events_stored_total", m, events_stored);
    let m2 = m.clone();
    out.push((
        "rankscope_collector_rejected_batches_total",
        Box::new(move || m2.rejected().values().sum()),
    ));
    let w1 = w.clone();
    out.push((
        "rankscope_collector_clickhouse_rows_written_total",
        Box::new(move || w1.metrics().rows_written.load(Relaxed)),
    ));
    let w2 = w.clone();
    out.push((
        "rankscope_collector_clickhouse_inserts_total",
        Box::new(move || w2.metrics().inserts.load(Relaxed)),
    ));
    out.push((
        "rankscope_collector_clickhouse_insert_failures_total",
        Box::new(move || w.metrics().insert_failures.load(Relaxed)),
    ));
    out
}
