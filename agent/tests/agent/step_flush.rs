//! `flush_at_step_end`: the batch is cut as soon as every live rank of the
//! node has ended a step, not `batch_max_delay_ms` after its first event.

use std::sync::atomic::Ordering::SeqCst;

use rankscope_proto::v1 as proto;

use crate::support::*;
use crate::workload::*;

fn step(rank: u32, seq: u64, events: Vec<proto::Event>) -> proto::RankMessage {
    proto::RankMessage {
        identity: Some(identity("job", rank, 2)),
        seq,
        names: names(&[(1, "k")]),
        events,
    }
}

/// Rank 0 ends step 0; rank 1 is still in it. Returns the agent, its
/// collector and the ranks.
async fn one_rank_ended(flush: bool) -> (rankscope_agent::AgentHandle, FakeCollector, Rank, Rank) {
    let collector = FakeCollector::start().await;
    let mut cfg = config(&collector.url(), None);
    // Neither the size nor the time bound would cut a batch in this test.
    cfg.batch_max_events = 100_000;
    cfg.batch_max_delay_ms = 3_600_000;
    cfg.flush_at_step_end = flush;
    let agent = rankscope_agent::start(cfg).await.unwrap();
    let mut r0 = Rank::over_tcp(agent.tcp_addr).await;
    let mut r1 = Rank::over_tcp(agent.tcp_addr).await;
    let ack = r1.call(step(1, 1, vec![step_begin(0, 10)])).await;
    assert_eq!(ack.accepted, 1);
    let mut events = vec![step_begin(0, 10)];
    events.extend(kernels(5, 0));
    events.push(step_end(0, 1_000_000));
    let ack = r0.call(step(0, 1, events)).await;
    assert_eq!(ack.accepted, 7);
    wait_until("events taken by the batcher", || {
        agent.metrics().queued_events == 0
    })
    .await;
    (agent, collector, r0, r1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_ranks_step_end_cuts_the_batch() {
    let (agent, collector, _r0, mut r1) = one_rank_ended(true).await;
    assert_eq!(agent.metrics().batches_cut_at_step_end, 0);
    let mut events = kernels(3, 10);
    events.push(step_end(0, 2_000_000));
    assert_eq!(r1.call(step(1, 2, events)).await.accepted, 4);
    wait_delivered(&agent, 12).await;
    let m = agent.metrics();
    assert_eq!(m.batches_cut_at_step_end, 1, "{m:?}");
    assert_eq!(
        collector.state.calls.load(SeqCst),
        1,
        "one batch: both ranks' step 0"
    );
    assert_eq!(collector.state.events(), 12);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_it_the_batch_waits_for_its_bounds() {
    let (agent, collector, _r0, mut r1) = one_rank_ended(false).await;
    let mut events = kernels(3, 10);
    events.push(step_end(0, 2_000_000));
    assert_eq!(r1.call(step(1, 2, events)).await.accepted, 4);
    wait_until("events taken by the batcher", || {
        agent.metrics().queued_events == 0
    })
    .await;
    assert_eq!(collector.state.calls.load(SeqCst), 0, "nothing cut");
    let report = agent.shutdown().await;
    assert_eq!(report.delivered_events, 12, "the shutdown flush sends it");
    assert_eq!(report.metrics.batches_cut_at_step_end, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rank_that_leaves_no_longer_holds_the_node_back() {
    let (agent, collector, _r0, mut r1) = one_rank_ended(true).await;
    r1.close();
    wait_delivered(&agent, 8).await;
    assert_eq!(agent.metrics().batches_cut_at_step_end, 1);
    assert_eq!(collector.state.events(), 8);
}
