//! A rank whose stream ends is reported to the collector (`stream_closed`),
//! so a job whose ranks are all gone is not taken for a hung one.

use rankscope_proto::v1 as proto;

use crate::support::*;
use crate::workload::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_stream_is_marked_after_its_events() {
    let collector = FakeCollector::start().await;
    let mut cfg = config(&collector.url(), None);
    cfg.batch_max_delay_ms = 10;
    let agent = rankscope_agent::start(cfg).await.unwrap();
    let mut r = Rank::over_tcp(agent.tcp_addr).await;
    let ack = r
        .call(proto::RankMessage {
            identity: Some(identity("job", 2, 4)),
            seq: 1,
            names: names(&[(1, "k")]),
            events: kernels(3, 0),
        })
        .await;
    assert_eq!(ack.code, 0);
    r.close();
    wait_until("the closed marker reached the collector", || {
        collector
            .state
            .batches
            .lock()
            .unwrap()
            .iter()
            .flat_map(|b| &b.ranks)
            .any(|g| g.stream_closed)
    })
    .await;
    let batches = collector.state.batches.lock().unwrap().clone();
    let groups: Vec<&proto::RankEvents> = batches.iter().flat_map(|b| &b.ranks).collect();
    let closed: Vec<&&proto::RankEvents> = groups.iter().filter(|g| g.stream_closed).collect();
    assert_eq!(closed.len(), 1, "one marker");
    assert_eq!(closed[0].identity.as_ref().unwrap().rank, 2);
    // The marker comes after the rank's events.
    let events_before: usize = groups
        .iter()
        .take_while(|g| !g.stream_closed)
        .map(|g| g.events.len())
        .sum::<usize>()
        + closed[0].events.len();
    assert_eq!(events_before, 3);
    agent.shutdown().await;
}
