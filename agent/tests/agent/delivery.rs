//! Many ranks over TCP and the Unix socket: everything delivered exactly
//! once, per-rank order kept, batches self-contained.

use std::collections::HashSet;
use std::sync::atomic::Ordering::SeqCst;

use rankscope_proto::v1 as proto;

use crate::support::*;
use crate::workload::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_ranks_are_delivered_exactly_once_in_order() {
    let collector = FakeCollector::start().await;
    // The first calls fail, so some batches are retried.
    collector.state.fail_first.store(3, SeqCst);
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(&collector.url(), Some(dir.path()));
    cfg.batch_max_events = 300;
    let agent = rankscope_agent::start(cfg).await.unwrap();
    let unix = agent.unix_path.clone().unwrap();

    const RANKS: u32 = 64;
    const STEPS: u64 = 20;
    let mut tasks = Vec::new();
    for rank in 0..RANKS {
        let (addr, unix) = (agent.tcp_addr, unix.clone());
        tasks.push(tokio::spawn(async move {
            // Every fourth rank talks over the Unix socket.
            let mut r = if rank % 4 == 0 {
                Rank::over_unix(&unix).await
            } else {
                Rank::over_tcp(addr).await
            };
            let msgs = step_messages(identity("job-a", rank, RANKS), STEPS);
            let sent: Vec<proto::Event> = msgs.iter().flat_map(|m| m.events.clone()).collect();
            for m in &msgs {
                r.send(m.clone()).await;
            }
            for m in &msgs {
                let ack = r.ack().await;
                assert_eq!(ack.seq, m.seq, "acks come in order");
                assert_eq!(ack.code, 0, "{}", ack.message);
                assert_eq!(ack.accepted as usize, m.events.len());
            }
            (rank, sent)
        }));
    }
    let mut sent = Vec::new();
    for t in tasks {
        sent.push(t.await.unwrap());
    }
    let total: usize = sent.iter().map(|(_, e)| e.len()).sum();
    assert_eq!(total, 64 * 20 * 10);
    wait_delivered(&agent, total as u64).await;

    let st = &collector.state;
    assert_eq!(st.events(), total, "every event stored exactly once");
    let by_rank = st.events_by_rank();
    for (rank, events) in &sent {
        assert_eq!(
            by_rank.get(&("job-a".to_owned(), *rank)),
            Some(events),
            "rank {rank}: events in the order sent"
        );
    }
    // Self-contained batches: each RankEvents defines every id its events use,
    // although the ranks defined the names only in their first message.
    let batches = st.batches.lock().unwrap().clone();
    assert!(batches.len() > 1);
    for b in &batches {
        assert_eq!(b.agent_id, "test-agent");
        assert_eq!(b.node, "test-node");
        // Every batch holds one job, in that job's own session.
        assert!(b
            .ranks
            .iter()
            .all(|r| r.identity.as_ref().unwrap().job_id == "job-a"));
        assert_eq!(b.agent_session, agent.session_for("job-a"));
        assert!(b.sent_at_ns > 0);
        for r in &b.ranks {
            assert_eq!(r.identity.as_ref().unwrap().node, "test-node");
            let defined: HashSet<u32> = r.names.iter().map(|n| n.id).collect();
            assert_eq!(defined.len(), r.names.len(), "names defined once");
            for e in &r.events {
                if let Some(id) = referenced(e) {
                    assert!(defined.contains(&id), "batch {} lacks name {id}", b.seq);
                }
            }
        }
        assert!(b.ranks.iter().map(|r| r.events.len()).sum::<usize>() <= 300);
    }
    // Seqs are 1..=n without gaps.
    let mut seqs = st.seqs();
    seqs.sort_unstable();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());

    // The ack of the last batch is counted just after its events are.
    let want_acked = batches.len() as u64;
    wait_until("every batch's ack counted", || {
        agent.metrics().batches_acked >= want_acked
    })
    .await;
    let m = agent.metrics();
    assert_eq!(m.streams_opened, 64);
    assert_eq!(m.accepted_events, total as u64);
    assert_eq!(m.batches_acked, batches.len() as u64);
    assert!(m.batches_retried >= 3, "{m:?}");
    assert_eq!(st.failed.load(SeqCst), 3);
    assert_eq!(m.backlog_batches, 0);
    let report = agent.shutdown().await;
    assert_eq!(report.undelivered_events, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unread_acks_are_dropped_and_the_rank_keeps_streaming() {
    let collector = FakeCollector::start().await;
    let agent = rankscope_agent::start(config(&collector.url(), None))
        .await
        .unwrap();
    // A tiny HTTP/2 window: acks the rank does not read back up quickly.
    let mut r = Rank::over_tcp_small_window(agent.tcp_addr).await;
    const N: u64 = 4_000;
    r.send(proto::RankMessage {
        identity: Some(identity("job-b", 0, 1)),
        names: names(&[(1, "k")]),
        ..Default::default()
    })
    .await;
    for i in 1..=N {
        r.send(proto::RankMessage {
            seq: i,
            events: kernels(1, i),
            ..Default::default()
        })
        .await;
    }
    // The agent keeps accepting although nobody reads the acks.
    wait_delivered(&agent, N).await;
    let dropped = agent.metrics().acks_dropped;
    assert!(dropped > 0, "some acks were dropped");
    // Reading now yields the acks that were not dropped, still in order.
    r.close();
    let mut got = 0;
    let mut last = None;
    while let Some(ack) = r.next().await.unwrap() {
        assert!(last < Some(ack.seq), "acks in order");
        last = Some(ack.seq);
        got += 1;
    }
    assert_eq!(got + dropped, N + 1);
    assert_eq!(collector.state.events(), N as usize);
}
