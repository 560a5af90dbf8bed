//! Collector failures: transient ones are retried with the same seq and the
//! backlog is delivered in order; permanent ones are dropped, not retried.

use std::sync::atomic::Ordering::SeqCst;

use rankscope_proto::v1 as proto;
use tonic::Code;

use crate::support::*;
use crate::workload::*;

/// Opens a rank and sends `batches` messages of 10 events (one batch each
/// with `batch_max_events = 10`), checking every ack.
async fn send_batches(r: &mut Rank, first_seq: u64, batches: u64) {
    for seq in first_seq..first_seq + batches {
        let mut m = proto::RankMessage {
            seq,
            events: kernels(10, seq * 10),
            ..Default::default()
        };
        if seq == 1 {
            m.identity = Some(identity("job", 0, 1));
            m.names = names(&[(1, "k")]);
        }
        let ack = r.call(m).await;
        assert_eq!((ack.code, ack.accepted), (0, 10), "{}", ack.message);
    }
}

fn ten_per_batch(cfg: &mut rankscope_agent::Config) {
    cfg.batch_max_events = 10;
    cfg.batch_max_delay_ms = 3_600_000;
    cfg.max_in_flight_batches = 1;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unavailable_collector_is_retried_and_batches_arrive_in_order() {
    let collector = FakeCollector::start().await;
    collector.state.fail_first.store(3, SeqCst);
    let mut cfg = config(&collector.url(), None);
    ten_per_batch(&mut cfg);
    let agent = rankscope_agent::start(cfg).await.unwrap();
    let mut r = Rank::over_tcp(agent.tcp_addr).await;
    send_batches(&mut r, 1, 5).await;
    wait_delivered(&agent, 50).await;

    let st = &collector.state;
    assert_eq!(st.seqs(), [1, 2, 3, 4, 5], "arrival order");
    assert_eq!(st.calls.load(SeqCst), 8, "5 batches + 3 failed attempts");
    let m = agent.metrics();
    assert_eq!(m.batches_sent, 5);
    assert_eq!(m.batches_retried, 3);
    assert_eq!(m.batches_acked, 5);
    let got: Vec<u64> = st.events_by_rank()[&("job".to_owned(), 0)]
        .iter()
        .map(|e| match &e.kind {
            Some(proto::event::Kind::Kernel(k)) => k.correlation,
            _ => u64::MAX,
        })
        .collect();
    assert_eq!(got, (10..60).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn collector_down_at_start_gets_the_backlog_in_order_once_up() {
    let addr = closed_port().await;
    let mut cfg = config(&format!("http://{addr}"), None);
    ten_per_batch(&mut cfg);
    cfg.max_in_flight_batches = 4;
    // The agent starts although the collector is down.
    let agent = rankscope_agent::start(cfg).await.unwrap();
    let mut r = Rank::over_tcp(agent.tcp_addr).await;
    send_batches(&mut r, 1, 6).await;
    wait_until("connection refused twice", || {
        agent.metrics().batches_retried >= 2
    })
    .await;
    assert_eq!(agent.metrics().delivered_events, 0);

    let collector = FakeCollector::start_on(addr, CollectorState::new()).await;
    wait_delivered(&agent, 60).await;
    let st = &collector.state;
    // One probe gets through first; the rest of the window follows in seq
    // order: seq 1 is always first, and every batch arrives exactly once.
    let seqs = st.seqs();
    assert_eq!(seqs[0], 1, "{seqs:?}");
    let mut sorted = seqs.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, [1, 2, 3, 4, 5, 6]);
    assert_eq!(st.events(), 60);
    assert_eq!(agent.metrics().backlog_batches, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permanent_rejection_is_dropped_not_retried() {
    let collector = FakeCollector::start().await;
    *collector.state.reject_with.lock().unwrap() = Some(Code::InvalidArgument);
    let mut cfg = config(&collector.url(), None);
    ten_per_batch(&mut cfg);
    let agent = rankscope_agent::start(cfg).await.unwrap();
    let mut r = Rank::over_tcp(agent.tcp_addr).await;
    send_batches(&mut r, 1, 3).await;
    wait_until("3 batches rejected", || {
        agent.metrics().batches_rejected == 3
    })
    .await;
    let m = agent.metrics();
    assert_eq!(m.dropped("rejected_by_collector"), 30);
    assert_eq!(m.batches_retried, 0);
    assert_eq!(collector.state.calls.load(SeqCst), 3);

    // The agent carries on once the collector accepts again.
    *collector.state.reject_with.lock().unwrap() = None;
    send_batches(&mut r, 4, 2).await;
    wait_delivered(&agent, 20).await;
    assert_eq!(collector.state.seqs(), [4, 5]);
    assert_eq!(agent.metrics().backlog_batches, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retried_batch_keeps_its_seq_so_the_collector_drops_the_duplicate() {
    let collector = FakeCollector::start().await;
    // The collector stores the first batch but its ack is lost.
    collector.state.lose_first_acks.store(1, SeqCst);
    let mut cfg = config(&collector.url(), None);
    ten_per_batch(&mut cfg);
    let agent = rankscope_agent::start(cfg).await.unwrap();
    let mut r = Rank::over_tcp(agent.tcp_addr).await;
    send_batches(&mut r, 1, 2).await;
    wait_delivered(&agent, 20).await;
    let st = &collector.state;
    assert_eq!(st.calls.load(SeqCst), 3);
    assert_eq!(
        st.duplicates.load(SeqCst),
        1,
        "the retry carried seq 1 again"
    );
    assert_eq!(st.seqs(), [1, 2]);
    assert_eq!(st.events(), 20);
    let m = agent.metrics();
    assert_eq!(m.batches_duplicate, 1);
    assert_eq!(m.batches_retried, 1);
    assert_eq!(m.delivered_events, 20);
}
