//! Each kind of bad input gets INVALID_ARGUMENT naming field and value, is
//! counted by reason, and the same stream keeps working.

use rankscope_proto::v1 as proto;
use tonic::Code;

use crate::support::*;
use crate::workload::*;

fn msg(seq: u64, events: Vec<proto::Event>) -> proto::RankMessage {
    proto::RankMessage {
        seq,
        events,
        ..Default::default()
    }
}

fn assert_rejected(ack: &proto::RankAck, seq: u64, needles: &[&str]) {
    assert_eq!(ack.seq, seq);
    assert_eq!(ack.code, Code::InvalidArgument as i32, "{ack:?}");
    assert_eq!((ack.accepted, ack.dropped), (0, 0));
    for n in needles {
        assert!(ack.message.contains(n), "{:?} lacks {n:?}", ack.message);
    }
}

fn assert_ok(ack: &proto::RankAck, seq: u64, accepted: u32) {
    assert_eq!(ack.seq, seq);
    assert_eq!(ack.code, 0, "{}", ack.message);
    assert_eq!(ack.accepted, accepted);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_messages_are_rejected_and_the_stream_goes_on() {
    let collector = FakeCollector::start().await;
    let dir = tempfile::tempdir().unwrap();
    let agent = rankscope_agent::start(config(&collector.url(), Some(dir.path())))
        .await
        .unwrap();
    let mut r = Rank::over_unix(agent.unix_path.as_ref().unwrap()).await;

    // Missing identity on the first message.
    let ack = r.call(msg(1, vec![step_begin(0, 10)])).await;
    assert_rejected(&ack, 1, &["identity"]);
    // rank >= world_size.
    let mut bad = msg(2, vec![]);
    bad.identity = Some(identity("job", 8, 8));
    let ack = r.call(bad).await;
    assert_rejected(&ack, 2, &["identity.rank = 8", "world_size = 8"]);
    // Now a good identity: the same stream works.
    let mut good = msg(3, vec![step_begin(5, 100)]);
    good.identity = Some(identity("job", 3, 8));
    good.names = names(&[(1, "gemm")]);
    assert_ok(&r.call(good).await, 3, 1);

    // End before start (the span's events are all dropped, none queued).
    let ack = r
        .call(msg(4, vec![span(1, 500, 400), kernel(1, 600, 1)]))
        .await;
    assert_rejected(&ack, 4, &["events[0]", "end_ns = 400", "start_ns = 500"]);
    // Unknown name id.
    let ack = r
        .call(msg(5, vec![kernel(1, 600, 2), kernel(42, 700, 3)]))
        .await;
    assert_rejected(&ack, 5, &["events[1]", "name_id = 42"]);
    // Step going backwards.
    let ack = r
        .call(msg(6, vec![step_end(5, 900), step_begin(3, 1_000)]))
        .await;
    assert_rejected(&ack, 6, &["events[1]", "step = 3", "last step was 5"]);
    // A changed identity.
    let mut changed = msg(7, vec![]);
    changed.identity = Some(identity("other-job", 3, 8));
    assert_rejected(&r.call(changed).await, 7, &["job_id", "other-job"]);

    // The stream still works, and the rejected messages changed no state:
    // step 5 is still open, name 1 still known.
    assert_ok(
        &r.call(msg(8, vec![kernel(1, 800, 4), step_end(5, 900)]))
            .await,
        8,
        2,
    );

    wait_delivered(&agent, 3).await;
    let by_rank = collector.state.events_by_rank();
    let got = &by_rank[&("job".to_owned(), 3)];
    assert_eq!(
        got,
        &vec![step_begin(5, 100), kernel(1, 800, 4), step_end(5, 900)],
        "only accepted events reach the collector"
    );
    let m = agent.metrics();
    for reason in [
        "missing_identity",
        "rank_out_of_range",
        "end_before_start",
        "unknown_name_id",
        "step_backwards",
        "identity_changed",
    ] {
        assert_eq!(m.rejected(reason), 1, "{reason}: {m:?}");
    }
    assert_eq!(m.received_messages, 8);
    assert_eq!(m.accepted_events, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn message_over_the_size_limit_gets_resource_exhausted() {
    let collector = FakeCollector::start().await;
    let mut cfg = config(&collector.url(), None);
    cfg.max_message_bytes = 4096;
    let agent = rankscope_agent::start(cfg).await.unwrap();
    let mut r = Rank::over_tcp(agent.tcp_addr).await;
    let mut first = msg(1, kernels(1, 0));
    first.identity = Some(identity("job", 0, 1));
    first.names = names(&[(1, "k")]);
    assert_ok(&r.call(first).await, 1, 1);
    let mut big = msg(2, vec![]);
    big.names = names(&[(2, &"x".repeat(10_000))]);
    r.send(big).await;
    let status = r.next().await.unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(
        status.message().contains("max_message_bytes = 4096"),
        "{status:?}"
    );
    assert_eq!(agent.metrics().rejected("message_too_large"), 1);
    // Other streams are unaffected.
    let mut r2 = Rank::over_tcp(agent.tcp_addr).await;
    let mut m = msg(1, kernels(1, 0));
    m.identity = Some(identity("job", 0, 1));
    m.names = names(&[(1, "k")]);
    assert_ok(&r2.call(m).await, 1, 1);
}
