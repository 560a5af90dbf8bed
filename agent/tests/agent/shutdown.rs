//! Graceful shutdown: open streams end with UNAVAILABLE, the pending batch is
//! flushed and delivered; what cannot be delivered in time is reported.

use std::sync::atomic::Ordering::SeqCst;

use rankscope_proto::v1 as proto;
use tonic::Code;

use crate::support::*;
use crate::workload::*;

async fn send_events(r: &mut Rank, n: u64) {
    let ack = r
        .call(proto::RankMessage {
            identity: Some(identity("job", 0, 1)),
            seq: 1,
            names: names(&[(1, "k")]),
            events: kernels(n, 0),
        })
        .await;
    assert_eq!((ack.code, u64::from(ack.accepted)), (0, n));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_flushes_the_pending_batch() {
    let collector = FakeCollector::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(&collector.url(), Some(dir.path()));
    // Neither the size nor the time bound would ever cut this batch.
    cfg.batch_max_events = 1_000;
    cfg.batch_max_delay_ms = 3_600_000;
    let agent = rankscope_agent::start(cfg).await.unwrap();
    let sock = agent.unix_path.clone().unwrap();
    let mut r = Rank::over_tcp(agent.tcp_addr).await;
    send_events(&mut r, 25).await;
    wait_until("events taken by the batcher", || {
        agent.metrics().queued_events == 0
    })
    .await;
    assert_eq!(collector.state.calls.load(SeqCst), 0, "nothing sent yet");

    let report = agent.shutdown().await;
    assert!(!report.timed_out, "{report:?}");
    assert_eq!(report.delivered_events, 25);
    assert_eq!(report.undelivered_events, 0);
    assert_eq!(report.undelivered_batches, 0);
    assert_eq!(collector.state.events(), 25);
    // The open stream was ended with UNAVAILABLE, the socket file removed.
    let status = r.next().await.unwrap_err();
    assert_eq!(status.code(), Code::Unavailable);
    assert!(!sock.exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_reports_what_the_unreachable_collector_did_not_get() {
    let addr = closed_port().await;
    let mut cfg = config(&format!("http://{addr}"), None);
    cfg.batch_max_events = 4;
    cfg.shutdown_flush_timeout_ms = 300;
    let agent = rankscope_agent::start(cfg).await.unwrap();
    let mut r = Rank::over_tcp(agent.tcp_addr).await;
    send_events(&mut r, 10).await;
    wait_until("a delivery attempt failed", || {
        agent.metrics().batches_retried >= 1
    })
    .await;
    let report = agent.shutdown().await;
    assert!(report.timed_out);
    assert_eq!(report.delivered_events, 0);
    assert_eq!(report.undelivered_events, 10);
    assert_eq!(report.undelivered_batches, 3, "4 + 4 + 2 events");
    assert_eq!(report.metrics.dropped("shutdown"), 10);
}
