//! OpenTelemetry export (OTLP/gRPC) of the job metrics the collector computes
//! and of its own pipeline telemetry.
//!
//! In: the [`JobGauges`] registry and every pipeline counter ([`Counters`]:
//! ingest, writer, live analytics, alerting and its sinks, TLS). Out: OTLP metric exports to
//! `otlp_endpoint` every `otlp_export_interval_ms`, through the
//! opentelemetry SDK's periodic reader (its own thread). Instruments are
//! observable: each export reads the current values, so nothing on the ingest
//! path waits for or calls into OpenTelemetry. Names and labels are the ones
//! `GET /metrics` shows (see `gauges` and `counters`), labels included
//! (`reason`, `sink`, `listener`, `result`).

use std::sync::Arc;
use std::time::Duration;

use opentelemetry::metrics::MeterProvider as _;
use opentelemetry::KeyValue;
use opentelemetry_otlp::{MetricExporter, WithExportConfig};
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::Resource;

use crate::counters::Counters;
use crate::gauges::JobGauges;

/// Why the exporter could not start.
#[derive(Debug, thiserror::Error)]
#[error("OTLP exporter for {endpoint}: {reason}")]
pub struct OtelError {
    endpoint: String,
    reason: String,
}

/// The names of the gauges exported from [`JobGauges`].
const GAUGES: [&str; 11] = [
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
    "rankscope_fleet_score",
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
        counters: Counters,
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
        for family in counters.families() {
            let (name, counters) = (family.name, counters.clone());
            meter
                .u64_observable_counter(name)
                .with_description(family.help)
                .with_callback(move |obs| {
                    let Some(f) = counters.families().into_iter().find(|f| f.name == name) else {
                        return;
                    };
                    for (labels, v) in f.series {
                        let attrs: Vec<KeyValue> = labels
                            .into_iter()
                            .map(|(k, v)| KeyValue::new(k, v))
                            .collect();
                        obs.observe(v, &attrs);
                    }
                })
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
