//! A full queue drops the newest events, counts them and says so in the ack;
//! the rank is answered at once although nothing moves downstream.

use rankscope_proto::v1 as proto;
use tonic::Code;

use crate::support::*;
use crate::workload::*;

/// An agent with a tiny pipeline in front of a stalled collector, and a
/// rank (job "job", rank 0, name 1 = "k") connected to it. Pipeline
/// capacity: 1 batch in flight + 1 in the backlog + 1 the encoder is
/// waiting to hand over + 1 waiting for the encoder + 1 the batcher is
/// waiting to hand over + 10 queued events = 35 events of 5-event messages.
/// Cuts happen only by size.
async fn stalled_tiny_agent() -> (FakeCollector, rankscope_agent::AgentHandle, Rank) {
    let collector = FakeCollector::start().await;
    collector.state.stall();
    let mut cfg = config(&collector.url(), None);
    cfg.queue_max_events = 10;
    cfg.batch_max_events = 5;
    cfg.batch_max_delay_ms = 3_600_000;
    cfg.backlog_max_batches = 1;
    cfg.max_in_flight_batches = 1;
    let agent = rankscope_agent::start(cfg).await.unwrap();
    let mut r = Rank::over_tcp(agent.tcp_addr).await;
    let first = proto::RankMessage {
        identity: Some(identity("job", 0, 1)),
        names: names(&[(1, "k")]),
        ..Default::default()
    };
    assert_eq!(r.call(first).await.code, 0);
    (collector, agent, r)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_queue_drops_newest_and_never_blocks_the_rank() {
    let (collector, agent, mut r) = stalled_tiny_agent().await;

    let (mut accepted, mut dropped, mut seq) = (0u64, 0u64, 0u64);
    // Fill the pipeline until it is stuck on the stalled collector.
    let stuck =
        |m: &rankscope_agent::MetricsSnapshot| m.queued_events == 10 && m.backlog_batches == 5;
    while !stuck(&agent.metrics()) {
        seq += 1;
        assert!(seq < 1_000, "pipeline never filled: {:?}", agent.metrics());
        let (a, d) = send5(&mut r, seq).await;
        accepted += a;
        dropped += d;
    }
    assert_eq!(accepted, 35, "pipeline capacity");
    // Stuck: every further message is answered at once, all events dropped.
    for _ in 0..20 {
        seq += 1;
        let (a, d) = send5(&mut r, seq).await;
        assert_eq!((a, d), (0, 5));
        dropped += d;
    }
    let m = agent.metrics();
    assert_eq!(m.dropped("queue_full"), dropped);
    assert_eq!(m.accepted_events, 35);
    assert_eq!(collector.state.events(), 0);

    // Once the collector moves, exactly the accepted events arrive.
    collector.state.release();
    wait_delivered(&agent, 35).await;
    let report = agent.shutdown().await;
    assert_eq!(report.delivered_events, 35);
    assert_eq!(report.undelivered_events, 0);
    assert_eq!(collector.state.events(), 35);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_backlog_is_bounded_in_bytes_and_a_batch_larger_than_the_bound_is_held_alone() {
    let collector = FakeCollector::start().await;
    collector.state.stall();
    let mut cfg = config(&collector.url(), None);
    // Room for 100 batches by count, 1 byte by size: every batch is larger
    // than the budget, so one is held at a time (the one in flight). Then
    // 1 the encoder is waiting to admit + 1 waiting for the encoder + 1 the
    // batcher is waiting to hand over + 10 queued events = 30 events.
    cfg.queue_max_events = 10;
    cfg.batch_max_events = 5;
    cfg.batch_max_delay_ms = 3_600_000;
    cfg.backlog_max_batches = 100;
    cfg.backlog_max_bytes = 1;
    cfg.max_in_flight_batches = 4;
    let agent = rankscope_agent::start(cfg).await.unwrap();
    let mut r = Rank::over_tcp(agent.tcp_addr).await;
    let first = proto::RankMessage {
        identity: Some(identity("job", 0, 1)),
        names: names(&[(1, "k")]),
        ..Default::default()
    };
    assert_eq!(r.call(first).await.code, 0);
    let (mut accepted, mut seq, mut fill_dropped) = (0u64, 0u64, 0u64);
    let stuck = |m: &rankscope_agent::MetricsSnapshot| {
        m.queued_events == 10 && m.backlog_batches == 4 && m.backlog_bytes == 1
    };
    // The queue can be full before the encoder and batcher have settled
    // into the stuck state the metrics show: events sent meanwhile are
    // dropped (counted here).
    while !stuck(&agent.metrics()) {
        seq += 1;
        assert!(seq < 1_000, "pipeline never filled: {:?}", agent.metrics());
        let (a, d) = send5(&mut r, seq).await;
        (accepted, fill_dropped) = (accepted + a, fill_dropped + d);
    }
    assert_eq!(accepted, 30, "pipeline capacity");
    for _ in 0..20 {
        seq += 1;
        assert_eq!(send5(&mut r, seq).await, (0, 5));
    }
    let m = agent.metrics();
    assert_eq!(m.dropped("queue_full"), 100 + fill_dropped);
    assert_eq!(m.backlog_bytes, 1, "{m:?}");

    collector.state.release();
    wait_delivered(&agent, 30).await;
    assert_eq!(
        agent.metrics().backlog_bytes,
        0,
        "settled batches give their bytes back"
    );
    let report = agent.shutdown().await;
    assert_eq!(report.delivered_events, 30);
    assert_eq!(collector.state.events(), 30);
}

/// Sends a 5-event message and checks its ack; returns (accepted, dropped).
async fn send5(r: &mut Rank, seq: u64) -> (u64, u64) {
    let ack = r
        .call(proto::RankMessage {
            seq,
            events: kernels(5, seq * 5),
            ..Default::default()
        })
        .await;
    assert_eq!(ack.seq, seq);
    assert_eq!(ack.accepted + ack.dropped, 5);
    if ack.dropped > 0 {
        assert_eq!(ack.code, Code::ResourceExhausted as i32);
        assert!(ack.message.contains("queue full"), "{}", ack.message);
    } else {
        assert_eq!(ack.code, 0);
    }
    (u64::from(ack.accepted), u64::from(ack.dropped))
}

/// Message `k` of a rank whose every message holds a step boundary:
/// `[end(k - 1), begin(k), 3 kernels]` (`[begin(1), 4 kernels]` for k = 1).
fn step_message(k: u64) -> proto::RankMessage {
    let ts = k * 10_000;
    let mut events = Vec::new();
    if k > 1 {
        events.push(step_end(k - 1, ts));
    }
    events.push(step_begin(k, ts + 1));
    events.extend(kernels(5 - events.len() as u64, ts + 2));
    proto::RankMessage {
        seq: k,
        events,
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_dropping_events_the_forwarded_stream_keeps_valid_step_markers() {
    let (collector, agent, mut r) = stalled_tiny_agent().await;

    // Fill the pipeline, then drop a few messages (each holds the end of
    // the step the last queued message began).
    let mut k = 0;
    let mut dropped_messages = 0;
    while dropped_messages < 3 {
        k += 1;
        assert!(k < 1_000, "pipeline never filled: {:?}", agent.metrics());
        let ack = r.call(step_message(k)).await;
        if ack.dropped > 0 {
            assert_eq!(ack.accepted, 0);
            dropped_messages += 1;
        }
    }
    let accepted_before = agent.metrics().accepted_events;
    collector.state.release();
    wait_delivered(&agent, accepted_before).await;

    // The next message ends a step whose begin was dropped: that marker is
    // left out (the collector would refuse the batch), the rest goes on.
    k += 1;
    let ack = r.call(step_message(k)).await;
    assert_eq!((ack.code, ack.accepted, ack.dropped), (0, 4, 1));
    k += 1;
    let ack = r.call(step_message(k)).await;
    assert_eq!((ack.accepted, ack.dropped), (5, 0), "in step again");
    let m = agent.metrics();
    assert_eq!(m.dropped("unpaired"), 1);
    // Shutting down delivers what is still batched.
    let report = agent.shutdown().await;
    assert_eq!(report.delivered_events, accepted_before + 9);

    // What the collector got validates as one stream, as the real
    // collector checks every batch.
    let events = collector.state.events_by_rank()[&("job".to_owned(), 0)].clone();
    let known = std::collections::HashMap::from([(1u32, "k".to_owned())]);
    let state = rankscope_proto::validate::validate_events(
        &events,
        &[],
        &known,
        rankscope_proto::validate::StepState::default(),
    );
    assert_eq!(
        state.map(|s| s.open.map(|(step, _)| step)),
        Ok(Some(k)),
        "step {k} is open at the end"
    );
}
