//! Every drop / failure counter the collector keeps is exported: each test
//! forces a counter through a real collector (its ClickHouse, its queues, real
//! HTTP receivers as alert sinks) and reads a nonzero value back from
//! `GET /metrics`.
//!
//! The queue-full tests run on a current-thread runtime on purpose: there a
//! task that fills a queue in one poll cannot be interrupted by the task that
//! drains it, so "the queue is full" is a fact of the schedule, not a race.

use crate::common;

use std::time::Duration;

use common::*;
use rankscope_cli::simulate::{self, Straggler};

/// `GET /metrics` of the collector.
async fn scrape(stack: &Stack) -> String {
    let url = format!("http://{}/metrics", stack.http_addr());
    let (status, body) = rankscope_cli::query::http::HttpClient::new(Duration::from_secs(10))
        .get(&url)
        .await
        .expect("GET /metrics");
    assert!(status.is_success(), "/metrics answered {status}");
    String::from_utf8(body.to_vec()).expect("UTF-8")
}

/// The value of the series `series` (`name` or `name{labels}`), if present.
fn value(text: &str, series: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// Scrapes until `series` is present with a value `>= min`; returns the text.
async fn wait_for_series(stack: &Stack, series: &str, min: u64) -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let text = scrape(stack).await;
        if value(&text, series).is_some_and(|v| v >= min) {
            return text;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{series} never reached {min}:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "current_thread")]
async fn analytics_queue_drops_and_rejections_show_on_metrics() {
    // A batch is handed to analytics when the writer takes its rows, not
    // after the flush, so no writer window is involved. The first batch
    // of the session goes alone: its handler reads the session's stored
    // batches from ClickHouse, which would spread the others out in time.
    // Then K batches go in one burst over one HTTP/2 connection: their
    // handlers run one after the other before the analytics task (queue of
    // one) is polled, so all but one are dropped and counted. A burst that
    // the network splits may drop fewer; bursts repeat until one dropped.
    use rankscope_proto::v1::collector_ingest_client::CollectorIngestClient;
    const K: u64 = 6;
    const MAX_BURSTS: u64 = 20;
    let stack = Stack::start_without_agent_with(|c| c.stream.queue_capacity = 1).await;
    let client = CollectorIngestClient::connect(format!("http://{}", stack.grpc_addr()))
        .await
        .expect("connect");
    let ingest = |seq: u64| {
        let mut c = client.clone();
        async move { c.ingest(small_batch("q-drop", seq)).await }
    };
    let ack = ingest(1).await.expect("stored").into_inner();
    assert_eq!(ack.rows, 4);
    let metrics = stack.collector.as_ref().unwrap().stream().metrics();
    let dropped_now = || {
        metrics
            .dropped_batches
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    let mut seq = 1;
    for _ in 0..MAX_BURSTS {
        // Spawned in order on this one thread: each call is queued on the
        // connection before the connection task writes any of them.
        let mut burst = tokio::task::JoinSet::new();
        for s in seq + 1..=seq + K {
            burst.spawn(ingest(s));
        }
        seq += K;
        while let Some(ack) = burst.join_next().await {
            assert_eq!(ack.expect("joined").expect("stored").into_inner().rows, 4);
        }
        if dropped_now() > 0 {
            break;
        }
    }
    let sent = seq;
    // A rejected batch: its reason is the label.
    let mut bad = small_batch("q-drop", sent + 1);
    bad.ranks[0].identity.as_mut().unwrap().world_size = 1;
    let err = stack.ingest(bad).await.expect_err("rank 1 of 1 is refused");
    assert_eq!(err.code(), tonic::Code::InvalidArgument);

    let text = scrape(&stack).await;
    let dropped = value(&text, "rankscope_collector_stream_dropped_batches_total")
        .expect("dropped batches exported");
    assert!(
        (1..sent).contains(&dropped),
        "expected 1..{sent} dropped, got {dropped}"
    );
    assert_eq!(dropped, dropped_now());
    assert_eq!(
        value(
            &text,
            "rankscope_collector_rejected_batches_total{reason=\"rank_out_of_range\"}"
        ),
        Some(1)
    );
    // Dropped from analytics, never from storage.
    assert_eq!(
        value(&text, "rankscope_collector_batches_stored_total"),
        Some(sent)
    );
    stack.stop().await;
}

#[tokio::test(flavor = "current_thread")]
async fn alert_input_drops_show_on_metrics() {
    // One analytics pass over a finalized step of 8 ranks submits several
    // alert inputs (job progress, one per collective key) without yielding:
    // with room for one, the rest are dropped and counted.
    let mut stack = Stack::start_with(|c| c.alerts.queue_capacity = 1).await;
    let mut sim = sim_config("alert-q", 8, 6);
    sim.layers = 2;
    simulate::run(&sim, &stack.agent_url())
        .await
        .expect("simulate");
    stack.stop_agent().await;
    let text = wait_for_series(
        &stack,
        "rankscope_collector_stream_steps_finalized_total",
        6,
    )
    .await;
    let dropped = value(&text, "rankscope_collector_alert_inputs_dropped_total")
        .expect("alert input drops exported");
    assert!(dropped > 0, "no alert input dropped:\n{text}");
    stack.stop().await;
}

/// Accepts connections and never answers: a sink posting here is stuck
/// for its whole timeout.
async fn black_hole() -> (std::net::SocketAddr, tokio::task::JoinHandle<()>) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = l.accept().await {
            held.push(s);
        }
    });
    (addr, task)
}

/// A webhook receiver answering every POST with `status`.
async fn answering(status: u16) -> std::net::SocketAddr {
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(
            move || async move { axum::http::StatusCode::from_u16(status).unwrap() },
        ),
    );
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(l, app).await.unwrap() });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alert_sink_sent_failed_retried_and_dropped_show_on_metrics() {
    use rankscope_collector::alert::SinkConfig;
    let ok = answering(200).await;
    let failing = answering(500).await;
    let (stuck, _hole) = black_hole().await;
    let mut stack = Stack::start_with(|c| {
        c.alerts.webhook_url = String::new();
        c.alerts.log = false;
        c.alerts.sinks = vec![
            SinkConfig {
                url: format!("http://{ok}/hook"),
                ..Default::default()
            },
            SinkConfig {
                url: format!("http://{failing}/hook"),
                max_retries: 1,
                retry_initial_ms: 1,
                ..Default::default()
            },
            // Holds the first notification for its whole timeout; its queue
            // takes one more; every further one is dropped.
            SinkConfig {
                url: format!("http://{stuck}/hook"),
                timeout_ms: 600_000,
                queue_capacity: 1,
                ..Default::default()
            },
        ];
    })
    .await;
    // Three stragglers: three firing transitions reach every sink.
    let mut sim = sim_config("alert-sinks", 8, 10);
    sim.layers = 1;
    sim.stragglers = [1, 3, 5]
        .into_iter()
        .map(|rank| Straggler { rank, factor: 1.5 })
        .collect();
    simulate::run(&sim, &stack.agent_url())
        .await
        .expect("simulate");
    stack.stop_agent().await;
    wait_for_series(&stack, "rankscope_collector_alerts_fired_total", 3).await;
    wait_for_series(
        &stack,
        "rankscope_collector_alert_sink_sent_total{sink=\"sink0\"}",
        3,
    )
    .await;
    wait_for_series(
        &stack,
        "rankscope_collector_alert_sink_failed_total{sink=\"sink1\"}",
        3,
    )
    .await;
    let text = wait_for_series(
        &stack,
        "rankscope_collector_alert_sink_dropped_total{sink=\"sink2\"}",
        1,
    )
    .await;
    let v = |s: &str| value(&text, s).unwrap_or_else(|| panic!("{s} missing:\n{text}"));
    // One retry per failed notification of the failing sink.
    assert_eq!(
        v("rankscope_collector_alert_sink_retries_total{sink=\"sink1\"}"),
        v("rankscope_collector_alert_sink_failed_total{sink=\"sink1\"}")
    );
    assert_eq!(
        v("rankscope_collector_alert_sink_failed_total{sink=\"sink0\"}"),
        0
    );
    assert_eq!(
        v("rankscope_collector_alert_sink_sent_total{sink=\"sink1\"}"),
        0
    );
    assert_eq!(
        v("rankscope_collector_alert_sink_sent_total{sink=\"sink2\"}"),
        0
    );
    assert_eq!(v("rankscope_collector_alert_inputs_dropped_total"), 0);
    stack.stop().await;
}
