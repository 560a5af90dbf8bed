//! `simulate::run` against a real tonic `RankIngest` server on real sockets
//! (TCP on 127.0.0.1:0 and a Unix socket). The server applies the shared
//! validation rules per stream, like the agent, and records every message.

use proto::rank_ingest_server::{RankIngest, RankIngestServer};
use rankscope_cli::simulate::{self, plan, SimConfig, SimError};
use rankscope_proto::v1 as proto;
use rankscope_proto::validate::{validate_events, validate_identity, validate_names, StepState};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::mpsc;
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream, UnixListenerStream};
use tonic::{Request, Response, Status, Streaming};

/// How the test server answers.
#[derive(Clone, Copy, Default)]
enum Mode {
    /// Validate and accept.
    #[default]
    Accept,
    /// Reject message `seq` of rank `rank` with INVALID_ARGUMENT.
    Reject { rank: u32, seq: u64 },
    /// Answer every message with RESOURCE_EXHAUSTED, all events dropped.
    QueueFull,
    /// Echo a wrong seq in every ack.
    WrongSeq,
}

#[derive(Clone, Default)]
struct Recorder {
    mode: Mode,
    /// Every finished stream's messages, in arrival order.
    streams: Arc<Mutex<Vec<Vec<proto::RankMessage>>>>,
}

type AckStream = ReceiverStream<Result<proto::RankAck, Status>>;

#[tonic::async_trait]
impl RankIngest for Recorder {
    type StreamEventsStream = AckStream;

    async fn stream_events(
        &self,
        request: Request<Streaming<proto::RankMessage>>,
    ) -> Result<Response<AckStream>, Status> {
        let mut inbound = request.into_inner();
        // Like an agent that wants the identity before it answers.
        let first = inbound
            .message()
            .await?
            .ok_or_else(|| Status::invalid_argument("empty stream"))?;
        let (tx, rx) = mpsc::channel(64);
        let (mode, streams) = (self.mode, Arc::clone(&self.streams));
        tokio::spawn(async move {
            let mut names: HashMap<u32, String> = HashMap::new();
            let mut state = StepState::default();
            let mut rank = None;
            let mut log = Vec::new();
            let mut next = Some(first);
            while let Some(msg) = next {
                let ack = answer(mode, &msg, &mut rank, &mut names, &mut state);
                log.push(msg);
                if tx.send(Ok(ack)).await.is_err() {
                    break;
                }
                next = inbound.message().await.ok().flatten();
            }
            streams.lock().unwrap().push(log);
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}

fn answer(
    mode: Mode,
    msg: &proto::RankMessage,
    rank: &mut Option<u32>,
    names: &mut HashMap<u32, String>,
    state: &mut StepState,
) -> proto::RankAck {
    let n = msg.events.len() as u32;
    let ack = |code, message: String, accepted, dropped| proto::RankAck {
        seq: if matches!(mode, Mode::WrongSeq) {
            msg.seq + 100
        } else {
            msg.seq
        },
        code,
        message,
        accepted,
        dropped,
    };
    if rank.is_none() {
        match validate_identity(msg.identity.as_ref()) {
            Ok(id) => *rank = Some(id.rank),
            Err(e) => return ack(3, e.to_string(), 0, 0),
        }
    }
    let new = msg
        .names
        .as_ref()
        .map(|t| t.names.clone())
        .unwrap_or_default();
    let checked = validate_names(&new, names)
        .and_then(|()| validate_events(&msg.events, &new, names, *state));
    match checked {
        Err(e) => ack(3, e.to_string(), 0, 0),
        Ok(_) if matches!(mode, Mode::Reject { rank: r, seq } if Some(r) == *rank && seq == msg.seq) => {
            ack(3, "events[0]: bad thing".into(), 0, 0)
        }
        Ok(after) => {
            *state = after;
            for d in new {
                names.insert(d.id, d.name);
            }
            match mode {
                Mode::QueueFull => ack(8, "agent queue full".into(), 0, n),
                _ => ack(0, String::new(), n, 0),
            }
        }
    }
}

async fn serve_tcp(rec: Recorder) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(RankIngestServer::new(rec))
            .serve_with_incoming(TcpListenerStream::new(listener)),
    );
    format!("http://{addr}")
}

fn config(ranks: u32, steps: u64) -> SimConfig {
    SimConfig {
        job: "client-test".into(),
        run_id: "run-7".into(),
        ranks,
        ranks_per_node: 2,
        steps,
        layers: 2,
        events_per_message: 100,
        ..SimConfig::default()
    }
}

/// Checks the recorded streams against the plan: every event arrives in
/// order, identity only first, seq 1.., names defined once before use.
fn check_streams(cfg: &SimConfig, streams: &[Vec<proto::RankMessage>]) -> u64 {
    let p = plan(cfg);
    assert_eq!(streams.len(), cfg.ranks as usize, "one stream per rank");
    let mut messages = 0;
    let mut seen_ranks = Vec::new();
    for stream in streams {
        let id = stream[0]
            .identity
            .clone()
            .expect("identity in the first message");
        assert_eq!(id.job_id, cfg.job);
        assert_eq!(id.run_id, cfg.run_id);
        assert_eq!(id.world_size, cfg.ranks);
        assert_eq!(id.local_rank, id.rank % 2);
        assert_eq!(id.node, format!("sim-node-{}", id.rank / 2));
        assert_eq!(id.labels.get("simulated").map(String::as_str), Some("true"));
        seen_ranks.push(id.rank);
        let mut defined: HashMap<u32, String> = HashMap::new();
        let mut events = Vec::new();
        for (i, m) in stream.iter().enumerate() {
            assert_eq!(m.seq, i as u64 + 1, "rank {}: message seq", id.rank);
            assert_eq!(
                m.identity.is_some(),
                i == 0,
                "identity only in the first message"
            );
            assert!(m.events.len() <= cfg.events_per_message);
            for n in m.names.iter().flat_map(|t| &t.names) {
                assert!(
                    defined.insert(n.id, n.name.clone()).is_none(),
                    "name {} defined twice",
                    n.id
                );
            }
            for e in &m.events {
                let id = simulate::model::event_name_id(e);
                assert!(
                    id == 0 || defined.contains_key(&id),
                    "name {id} used before defined"
                );
            }
            events.extend(m.events.iter().cloned());
        }
        let expected: Vec<proto::Event> = p.rank_events(id.rank).cloned().collect();
        assert_eq!(
            events.len(),
            expected.len(),
            "rank {}: event count",
            id.rank
        );
        assert!(
            events == expected,
            "rank {}: events differ from the plan",
            id.rank
        );
        messages += stream.len() as u64;
    }
    seen_ranks.sort_unstable();
    assert_eq!(seen_ranks, (0..cfg.ranks).collect::<Vec<_>>());
    messages
}

#[tokio::test]
async fn every_event_arrives_over_tcp() {
    let rec = Recorder::default();
    let url = serve_tcp(rec.clone()).await;
    // 50 events per message: each step (66 events per rank) spans two.
    let cfg = SimConfig {
        events_per_message: 50,
        ..config(4, 3)
    };
    let summary = simulate::run(&cfg, &url).await.expect("run");
    let streams = rec.streams.lock().unwrap().clone();
    let messages = check_streams(&cfg, &streams);
    let counts = plan(&cfg).event_counts();
    assert_eq!(summary.sent_by_kind, counts);
    assert_eq!(summary.events_sent, counts.total());
    assert_eq!(summary.accepted, counts.total());
    assert_eq!((summary.dropped, summary.messages_rejected), (0, 0));
    assert_eq!(summary.messages_sent, messages);
    let per_rank = counts.total() / 4;
    assert_eq!(per_rank, 3 * 66);
    assert_eq!(messages, 4 * per_rank.div_ceil(50));
    assert_eq!(
        (summary.job.as_str(), summary.ranks, summary.nodes),
        ("client-test", 4, 2)
    );
}

#[tokio::test]
async fn every_event_arrives_over_a_unix_socket() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agent.sock");
    let rec = Recorder::default();
    let listener = tokio::net::UnixListener::bind(&path).unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(RankIngestServer::new(rec.clone()))
            .serve_with_incoming(UnixListenerStream::new(listener)),
    );
    let cfg = SimConfig {
        events_per_message: 2_000,
        ..config(3, 2)
    };
    let summary = simulate::run(&cfg, &format!("unix:{}", path.display()))
        .await
        .expect("run");
    let streams = rec.streams.lock().unwrap().clone();
    check_streams(&cfg, &streams);
    assert_eq!(summary.accepted, plan(&cfg).event_counts().total());
}

#[tokio::test]
async fn a_rejected_message_is_reported() {
    let rec = Recorder {
        mode: Mode::Reject { rank: 1, seq: 2 },
        ..Recorder::default()
    };
    let url = serve_tcp(rec.clone()).await;
    let cfg = config(2, 2);
    let summary = simulate::run(&cfg, &url).await.expect("run");
    assert_eq!(summary.messages_rejected, 1);
    let first = summary.first_rejection.expect("first rejection");
    assert!(
        first.contains("rank 1 message 2") && first.contains("bad thing"),
        "{first}"
    );
    let streams = rec.streams.lock().unwrap().clone();
    let rank1 = streams
        .iter()
        .find(|s| s[0].identity.as_ref().map(|i| i.rank) == Some(1))
        .unwrap();
    let rejected_events = rank1[1].events.len() as u64;
    assert!(rejected_events > 0);
    assert_eq!(summary.accepted, summary.events_sent - rejected_events);
}

#[tokio::test]
async fn queue_full_acks_count_as_drops_not_rejections() {
    let url = serve_tcp(Recorder {
        mode: Mode::QueueFull,
        ..Recorder::default()
    })
    .await;
    let summary = simulate::run(&config(2, 1), &url).await.expect("run");
    assert_eq!(summary.dropped, summary.events_sent);
    assert_eq!((summary.accepted, summary.messages_rejected), (0, 0));
}

#[tokio::test]
async fn acks_out_of_order_are_an_error() {
    let url = serve_tcp(Recorder {
        mode: Mode::WrongSeq,
        ..Recorder::default()
    })
    .await;
    let err = simulate::run(&config(1, 1), &url).await.unwrap_err();
    assert!(
        matches!(
            err,
            SimError::AckOutOfOrder {
                rank: 0,
                expected: 1,
                got: 101
            }
        ),
        "{err}"
    );
}

#[tokio::test]
async fn an_unreachable_agent_is_named() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let err = simulate::run(&config(1, 1), &url).await.unwrap_err();
    assert!(matches!(err, SimError::Connect { rank: 0, .. }), "{err}");
    assert!(err.to_string().contains(&url), "{err}");
}

#[tokio::test]
async fn bad_config_is_refused_before_connecting() {
    let mut cfg = config(2, 1);
    cfg.stragglers.push(simulate::Straggler {
        rank: 2,
        factor: 1.3,
    });
    let err = simulate::run(&cfg, "http://127.0.0.1:1").await.unwrap_err();
    assert!(
        err.to_string().contains("straggler rank 2 is out of range"),
        "{err}"
    );
}

#[tokio::test]
async fn rate_limits_all_ranks_together() {
    let url = serve_tcp(Recorder::default()).await;
    let cfg = SimConfig {
        layers: 1,
        rate_events_per_s: Some(2_000.0),
        events_per_message: 50,
        ..config(2, 2)
    };
    let total = plan(&cfg).event_counts().total();
    let started = Instant::now();
    let summary = simulate::run(&cfg, &url).await.expect("run");
    let elapsed = started.elapsed().as_secs_f64();
    assert_eq!(summary.events_sent, total);
    // Every message waits for the end of its slot on the shared schedule.
    let floor = total as f64 / 2_000.0;
    assert!(
        elapsed >= floor,
        "{total} events in {elapsed} s, expected >= {floor} s"
    );
}

#[tokio::test]
async fn paced_messages_end_with_their_step() {
    let rec = Recorder::default();
    let url = serve_tcp(rec.clone()).await;
    // Neither the size nor the rate's share cuts a message here: only the
    // ends of steps do, as the rank SDK sends a StepEnd at once.
    let cfg = SimConfig {
        layers: 1,
        rate_events_per_s: Some(1e6),
        events_per_message: 100_000,
        ..config(2, 3)
    };
    let summary = simulate::run(&cfg, &url).await.expect("run");
    assert_eq!(
        summary.messages_sent,
        2 * 3,
        "one message per step and rank"
    );
    let streams = rec.streams.lock().unwrap();
    for m in streams.iter().flatten() {
        assert!(
            matches!(
                m.events.last().and_then(|e| e.kind.as_ref()),
                Some(proto::event::Kind::StepEnd(_))
            ),
            "message {} does not end with a StepEnd",
            m.seq
        );
    }
    check_streams(&cfg, &streams);
}

#[tokio::test]
async fn realtime_waits_for_the_wall_clock() {
    let rec = Recorder::default();
    let url = serve_tcp(rec.clone()).await;
    let now_ns = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let cfg = SimConfig {
        layers: 1,
        realtime: true,
        start_ns: now_ns,
        ..config(2, 2)
    };
    let last_end_ns = plan(&cfg).step_times().iter().map(|t| t.3).max().unwrap();
    let summary = simulate::run(&cfg, &url).await.expect("run");
    let done_ns = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    assert!(
        done_ns >= last_end_ns,
        "finished before the last step ended"
    );
    assert!(Duration::from_nanos(last_end_ns - now_ns) > Duration::from_millis(50));
    // One message per step per rank: each step is sent when it has happened.
    assert_eq!(summary.messages_sent, 2 * 2);
    check_streams(&cfg, &rec.streams.lock().unwrap());
}
