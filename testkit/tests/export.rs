//! Metrics export: OTLP/gRPC to a real metrics receiver (the
//! opentelemetry-proto service served with tonic by the test), and
//! `/metrics` on the collector (and the agent) parsed as Prometheus text.

use crate::common;

use std::collections::BTreeMap;

use common::*;
use opentelemetry_proto::tonic::collector::metrics::v1::{
    metrics_service_server::{MetricsService, MetricsServiceServer},
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::metrics::v1::{metric::Data, number_data_point::Value as Num};
use rankscope_cli::simulate::{self, Straggler};
use tokio::sync::mpsc;

/// (metric name, attributes, value) of every data point received.
type Point = (String, BTreeMap<String, String>, f64);

struct Sink(mpsc::UnboundedSender<Point>);

#[tonic::async_trait]
impl MetricsService for Sink {
    async fn export(
        &self,
        req: tonic::Request<ExportMetricsServiceRequest>,
    ) -> Result<tonic::Response<ExportMetricsServiceResponse>, tonic::Status> {
        for rm in req.into_inner().resource_metrics {
            for sm in rm.scope_metrics {
                for m in sm.metrics {
                    let points = match m.data {
                        Some(Data::Gauge(g)) => g.data_points,
                        Some(Data::Sum(s)) => s.data_points,
                        _ => continue,
                    };
                    for p in points {
                        let attrs = p
                            .attributes
                            .iter()
                            .map(|kv| {
                                let v = match kv.value.as_ref().and_then(|v| v.value.clone()) {
                                    Some(AnyValue::StringValue(s)) => s,
                                    other => format!("{other:?}"),
                                };
                                (kv.key.clone(), v)
                            })
                            .collect();
                        let v = match p.value {
                            Some(Num::AsDouble(d)) => d,
                            Some(Num::AsInt(i)) => i as f64,
                            None => f64::NAN,
                        };
                        let _ = self.0.send((m.name.clone(), attrs, v));
                    }
                }
            }
        }
        Ok(tonic::Response::new(ExportMetricsServiceResponse::default()))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn otlp_receiver_gets_straggler_gauge_step_times_and_labelled_counters() {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(MetricsServiceServer::new(Sink(tx)))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener))
            .await
            .unwrap();
    });
    let mut stack = Stack::start_with(|c| {
        c.otlp_endpoint = format!("http://{addr}");
        c.otlp_export_interval_ms = 200;
    })
    .await;
    let mut sim = sim_config("otel-job", 8, 10);
    sim.layers = 2;
    sim.stragglers = vec![Straggler {
        rank: 4,
        factor: 1.4,
    }];
    simulate::run(&sim, &stack.agent_url())
        .await
        .expect("simulate");
    // A rejected batch: OTLP carries its reason as /metrics does.
    let mut bad = small_batch("otel-job", 1);
    bad.ranks[0].identity.as_mut().unwrap().world_size = 1;
    stack.ingest(bad).await.expect_err("rank 1 of 1 is refused");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let (mut straggler, mut step_time, mut pipeline) = (None, None, None);
    let (mut rejected, mut sink_sent) = (None, None);
    while straggler.is_none()
        || step_time.is_none()
        || pipeline.is_none()
        || rejected.is_none()
        || sink_sent.is_none()
    {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let Ok(Some((name, attrs, v))) = tokio::time::timeout(left, rx.recv()).await else {
            panic!("OTLP export incomplete: straggler {straggler:?} step {step_time:?} pipeline {pipeline:?} rejected {rejected:?} sink {sink_sent:?}");
        };
        let job = attrs.get("job").map(String::as_str);
        match name.as_str() {
            "rankscope_straggler_active" if job == Some("otel-job") && v == 1.0 => {
                straggler = Some(attrs)
            }
            "rankscope_step_time_seconds" if job == Some("otel-job") && v > 0.0 => {
                step_time = Some(attrs)
            }
            "rankscope_collector_events_stored_total" if v > 0.0 => pipeline = Some(v),
            "rankscope_collector_rejected_batches_total"
                if attrs.get("reason").map(String::as_str) == Some("rank_out_of_range") =>
            {
                rejected = Some(v)
            }
            // The straggler's firing went to the log sink.
            "rankscope_collector_alert_sink_sent_total"
                if attrs.get("sink").map(String::as_str) == Some("log") && v >= 1.0 =>
            {
                sink_sent = Some(v)
            }
            _ => {}
        }
    }
    assert_eq!(rejected, Some(1.0));
    let s = straggler.unwrap();
    assert_eq!(s["rank"], "4");
    assert_eq!(s["node"], "sim-node-0");
    let t = step_time.unwrap();
    assert!(
        t.contains_key("rank") && t["node"].starts_with("sim-node-"),
        "{t:?}"
    );
    stack.stop_agent().await;
    stack.stop().await;
}

/// Parses Prometheus text exposition strictly enough to catch malformed
/// output: comments are `# HELP`/`# TYPE`, samples are `name{labels} value`.
pub fn parse_prometheus(text: &str) -> Result<Vec<(String, String, f64)>, String> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.is_empty() {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# ") {
            let kind = rest.split_whitespace().next().unwrap_or("");
            if kind != "HELP" && kind != "TYPE" {
                return Err(format!("line {}: bad comment {line:?}", i + 1));
            }
            continue;
        }
        let (series, value) = line
            .rsplit_once(' ')
            .ok_or_else(|| format!("line {}: no value: {line:?}", i + 1))?;
        let value: f64 = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            "NaN" => f64::NAN,
            v => v
                .parse()
                .map_err(|_| format!("line {}: bad value {v:?}", i + 1))?,
        };
        let (name, labels) = match series.split_once('{') {
            Some((n, l)) => {
                let l = l
                    .strip_suffix('}')
                    .ok_or_else(|| format!("line {}: unclosed labels", i + 1))?;
                (n, l)
            }
            None => (series, ""),
        };
        let valid_name = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
            && !name.starts_with(|c: char| c.is_ascii_digit());
        if !valid_name {
            return Err(format!("line {}: bad metric name {name:?}", i + 1));
        }
        out.push((name.to_owned(), labels.to_owned(), value));
    }
    Ok(out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn collector_metrics_parse_as_prometheus_text() {
    let mut stack = Stack::start().await;
    let mut sim = sim_config("prom-job", 8, 8);
    sim.layers = 1;
    simulate::run(&sim, &stack.agent_url())
        .await
        .expect("simulate");
    stack.stop_agent().await;
    stack
        .api_poll("/api/v1/jobs/prom-job/breakdown?step=7", "breakdown", |r| {
            r.len() == 8
        })
        .await;
    let url = format!("http://{}/metrics", stack.http_addr());
    let (status, body) =
        rankscope_cli::query::http::HttpClient::new(std::time::Duration::from_secs(10))
            .get(&url)
            .await
            .expect("GET /metrics");
    assert!(status.is_success());
    let text = String::from_utf8(body.to_vec()).expect("UTF-8");
    let samples = parse_prometheus(&text).expect("valid exposition");
    let get = |name: &str| {
        samples
            .iter()
            .filter(|s| s.0 == name)
            .map(|s| s.2)
            .sum::<f64>()
    };
    assert!(get("rankscope_collector_events_stored_total") > 0.0);
    assert!(get("rankscope_collector_batch_latency_seconds_count") > 0.0);
    assert!(get("rankscope_collector_clickhouse_insert_latency_seconds_count") > 0.0);
    let step_times: Vec<_> = samples
        .iter()
        .filter(|s| s.0 == "rankscope_step_time_seconds" && s.1.contains("job=\"prom-job\""))
        .collect();
    assert_eq!(step_times.len(), 8, "one series per rank");
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_metrics_parse_as_prometheus_text() {
    let mut stack = Stack::start().await;
    let mut sim = sim_config("agent-prom", 2, 3);
    sim.layers = 1;
    let plan = simulate::plan(&sim);
    simulate::run(&sim, &stack.agent_url())
        .await
        .expect("simulate");
    let addr = stack
        .agent
        .as_ref()
        .unwrap()
        .metrics_addr
        .expect("metrics endpoint");
    let (status, body) =
        rankscope_cli::query::http::HttpClient::new(std::time::Duration::from_secs(10))
            .get(&format!("http://{addr}/metrics"))
            .await
            .expect("GET /metrics");
    assert!(status.is_success());
    let text = String::from_utf8(body.to_vec()).expect("UTF-8");
    let samples = parse_prometheus(&text).expect("valid exposition");
    let received: f64 = samples
        .iter()
        .filter(|s| s.0 == "rankscope_agent_received_events_total")
        .map(|s| s.2)
        .sum();
    assert_eq!(received as u64, plan.event_counts().total());
    assert!(samples.iter().any(|s| s.0.starts_with("rankscope_agent_")));
    stack.stop_agent().await;
    stack.stop().await;
}
