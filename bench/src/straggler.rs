//! Straggler latency: how long after the decisive step-end arrives the
//! collector's API names the straggler.
//!
//! In: a running collector (gRPC ingest and HTTP API). Out: one
//! [`StragglerTrial`] per simulated job.
//!
//! Method (one trial = one fresh job of 1,024 ranks on 128 nodes, rank
//! [`SLOW_RANK`] 1.5x slower from step 0, `--layers 1`-sized steps generated
//! by the simulator's own model): this driver plays the 128 node agents and
//! sends `AgentBatch`es straight to the collector's `CollectorIngest.Ingest`
//! as an agent sends them: each batch encoded once when it is built, and
//! every call stamping its own `sent_at_ns` (`codec::ingest_stamped`).
//! Steps 0 and 1 go first (one batch per node) and are acknowledged; the driver then waits until their breakdown is
//! queryable, so the collector's writer is idle. Under the default policy
//! (flagged in 3 of the last 5 steps) step 2 is the first step in which the
//! straggler crosses the threshold. Its 128 batches are built and encoded
//! in advance (on a cluster each node's agent encodes its own batch on its
//! own CPU; here the driver shares the collector's cores, so encoding after
//! `t0` would be the driver's cost in the collector's window) and sent
//! concurrently (an UNAVAILABLE answer, the collector's writer queue
//! being full, is retried with the agent's default backoff and counted);
//! `t0` is when the last of them (holding the last rank's StepEnd) was
//! handed to the client. From then on the driver polls
//! `GET /api/v1/jobs/{job}/stragglers` every [`POLL`] until an active verdict
//! names the slow rank, while the batches' acknowledgements come in (it
//! does not wait for them: the analytics take a batch once the writer holds
//! it, as on the agent path); latency = receipt of that answer - `t0`. Also
//! recorded: when the last batch was acknowledged (rows stored) and the
//! verdict's `updated_ns` (when the collector computed it), which split the
//! latency into ingest storage, analysis and result storage.
//!
//! End to end ([`run_via_agent`]): the same jobs, but the driver plays the
//! 1,024 ranks and streams each rank's steps over its own
//! `RankIngest.StreamEvents` stream to a real `rankscope-agent`, which
//! batches (`batch_max_delay_ms`) and forwards to the collector: rank ->
//! agent -> collector -> verdict in the API. `t0` is when the last rank's
//! decisive-step message (holding its StepEnd) was handed to its stream;
//! *stored* is not observable on this path (the agent's acks are internal).

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use prost::Message;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rankscope_cli::simulate::model::{event_name_id, identity, name_text, plan_iter};
use rankscope_cli::simulate::{SimConfig, Straggler};
use rankscope_proto::codec::{ingest_stamped, StampedBatch};
use rankscope_proto::v1 as proto;
use tonic::transport::Channel;

use crate::http::HttpClient;
use crate::BenchError;

/// The slow rank.
pub const SLOW_RANK: u32 = 777;
/// World size of the headline trials (issue 15: p99 <= 250 ms here).
pub const RANKS: u32 = 1_024;
/// World size of the scale trials (issue 15: p99 <= 1,000 ms here).
pub const RANKS_16K: u32 = 16_384;
/// Ranks per node (one simulated agent per node).
pub const RANKS_PER_NODE: u32 = 8;
/// Poll interval of the stragglers route.
pub const POLL: Duration = Duration::from_millis(5);
/// The step whose finalization raises the verdict (K = 3 flagged steps).
const DECISIVE_STEP: u64 = 2;

/// One measured trial.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct StragglerTrial {
    /// t0 -> the verdict was in an API answer.
    pub latency_ms: f64,
    /// t0 -> the last batch of the decisive step was acknowledged (stored).
    pub stored_ms: f64,
    /// t0 -> the collector computed the verdict (its `updated_ns`).
    pub detected_ms: f64,
    /// Events in the decisive step.
    pub step_events: u64,
    /// Decisive-step batches the collector answered UNAVAILABLE (writer
    /// queue full) that the driver retried, as an agent does.
    pub retries: u64,
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// Sends `trials` jobs of `ranks` ranks (one batch per node of
/// [`RANKS_PER_NODE`] per step, as that many agents would) one after the
/// other to the collector.
pub async fn run(
    grpc_url: &str,
    http_url: &str,
    http: &HttpClient,
    ranks: u32,
    trials: usize,
    tag: &str,
) -> Result<Vec<StragglerTrial>, BenchError> {
    let grpc = |detail: String| BenchError::Grpc {
        what: format!("connect {grpc_url}"),
        detail,
    };
    // A few HTTP/2 connections, as 128 agents would not share one.
    let mut clients = Vec::new();
    for _ in 0..8 {
        let ch = Channel::from_shared(grpc_url.to_owned())
            .map_err(|e| grpc(e.to_string()))?
            .tcp_nodelay(true)
            .connect()
            .await
            .map_err(|e| grpc(e.to_string()))?;
        clients.push(ch);
    }
    let mut out = Vec::new();
    for t in 0..trials {
        let job = format!("bench-straggler-{tag}-{t}-{}", now_ns() % 1_000_000_007);
        out.push(trial(&clients, http_url, http, &job, ranks).await?);
    }
    Ok(out)
}

type Client = Channel;

/// The trial job: `ranks` ranks, [`SLOW_RANK`] 1.5x slower, one-layer steps.
fn job_config(job: &str, ranks: u32) -> SimConfig {
    SimConfig {
        job: job.to_owned(),
        ranks,
        ranks_per_node: RANKS_PER_NODE,
        steps: DECISIVE_STEP + 1,
        layers: 1,
        seed: now_ns(),
        stragglers: vec![Straggler {
            rank: SLOW_RANK,
            factor: 1.5,
        }],
        start_ns: now_ns().saturating_sub(10_000_000_000),
        ..SimConfig::default()
    }
}

async fn trial(
    clients: &[Client],
    http_url: &str,
    http: &HttpClient,
    job: &str,
    world: u32,
) -> Result<StragglerTrial, BenchError> {
    let cfg = job_config(job, world);
    let steps: Vec<_> = plan_iter(&cfg).collect();
    let nodes = cfg.nodes();
    let session = (now_ns() | 1) ^ 0x5bd1_e995;
    let batch = |node: u32, seq: u64, from: usize, to: usize| {
        let mut ranks = Vec::new();
        for r in node * RANKS_PER_NODE..((node + 1) * RANKS_PER_NODE).min(world) {
            let events: Vec<proto::Event> = steps[from..to]
                .iter()
                .flat_map(|s| s.ranks[r as usize].events.iter().cloned())
                .collect();
            let mut ids: Vec<u32> = events
                .iter()
                .map(event_name_id)
                .filter(|&i| i != 0)
                .collect();
            ids.sort_unstable();
            ids.dedup();
            let names = ids
                .into_iter()
                .filter_map(|id| {
                    name_text(id).map(|n| proto::InternedName {
                        id,
                        name: n.to_owned(),
                    })
                })
                .collect();
            ranks.push(proto::RankEvents {
                identity: Some(identity(&cfg, r)),
                names,
                events,
                ..Default::default()
            });
        }
        proto::AgentBatch {
            agent_id: format!("bench-straggler-node-{node}"),
            agent_session: session,
            seq,
            node: format!("sim-node-{node}"),
            // Stamped per call (`StampedBatch`).
            sent_at_ns: 0,
            ranks,
            ..Default::default()
        }
    };
    let encoded = |b: &proto::AgentBatch| Bytes::from(b.encode_to_vec());
    let d = DECISIVE_STEP as usize;
    let warm: Vec<_> = (0..nodes).map(|n| encoded(&batch(n, 1, 0, d))).collect();
    send_all(clients, warm).await?;
    wait_breakdown(http, http_url, job, DECISIVE_STEP - 1, world).await?;

    let mut step_events = 0;
    let decisive: Vec<_> = (0..nodes)
        .map(|n| {
            let b = batch(n, 2, d, d + 1);
            step_events += b.ranks.iter().map(|r| r.events.len() as u64).sum::<u64>();
            encoded(&b)
        })
        .collect();
    let (tx, mut handed) = tokio::sync::mpsc::unbounded_channel();
    let n = decisive.len();
    let sends = spawn_sends(clients, decisive, Some(tx));
    let verdict = async {
        // t0: the last batch's first hand-over to its client.
        let mut t0: Option<(Instant, u64)> = None;
        for _ in 0..n {
            let Some(sent) = handed.recv().await else {
                break;
            };
            if t0.is_none_or(|(t, _)| sent.0 > t) {
                t0 = Some(sent);
            }
        }
        let (t0, wall) = t0.ok_or_else(|| BenchError::Check("no batch sent".into()))?;
        let (latency, updated_ns) = wait_verdict(http, http_url, job, t0).await?;
        Ok::<_, BenchError>((t0, wall, latency, updated_ns))
    };
    let (acks, verdict) = tokio::join!(join_acks(sends), verdict);
    let (_, acked, retries) = acks?;
    let (t0, t0_wall_ns, latency, updated_ns) = verdict?;
    Ok(StragglerTrial {
        latency_ms: latency.as_secs_f64() * 1e3,
        stored_ms: (acked - t0).as_secs_f64() * 1e3,
        detected_ms: (updated_ns as f64 - t0_wall_ns as f64) / 1e6,
        step_events,
        retries,
    })
}

/// Polls the stragglers route until an active verdict names [`SLOW_RANK`];
/// returns the time since `t0` and the verdict's `updated_ns`.
async fn wait_verdict(
    http: &HttpClient,
    http_url: &str,
    job: &str,
    t0: Instant,
) -> Result<(Duration, u64), BenchError> {
    let url = format!("{http_url}/api/v1/jobs/{job}/stragglers");
    let deadline = t0 + Duration::from_secs(60);
    loop {
        let r = http.get(&url).await?;
        if r.status == 200 {
            let v = r.json()?;
            let found = v["stragglers"].as_array().and_then(|a| {
                a.iter().find(|s| {
                    s["rank"].as_u64() == Some(u64::from(SLOW_RANK)) && s["active"] == true
                })
            });
            if let Some(s) = found {
                return Ok((t0.elapsed(), s["updated_ns"].as_u64().unwrap_or(0)));
            }
        }
        if Instant::now() >= deadline {
            return Err(BenchError::Timeout {
                what: format!("a straggler verdict for rank {SLOW_RANK} of {job}"),
                secs: 60,
            });
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Like [`run`], but every rank streams to the agent at `agent_url`
/// (`http://127.0.0.1:<port>`), which forwards to the collector.
pub async fn run_via_agent(
    agent_url: &str,
    http_url: &str,
    http: &HttpClient,
    trials: usize,
    tag: &str,
) -> Result<Vec<StragglerTrial>, BenchError> {
    // 1,024 rank streams over a few HTTP/2 connections.
    let mut channels = Vec::new();
    for _ in 0..8 {
        channels.push(
            Channel::from_shared(agent_url.to_owned())
                .map_err(|e| BenchError::Grpc {
                    what: format!("connect {agent_url}"),
                    detail: e.to_string(),
                })?
                .tcp_nodelay(true)
                .connect()
                .await
                .map_err(|e| BenchError::Grpc {
                    what: format!("connect {agent_url}"),
                    detail: e.to_string(),
                })?,
        );
    }
    let mut out = Vec::new();
    for t in 0..trials {
        let job = format!("bench-straggler-{tag}-{t}-{}", now_ns() % 1_000_000_007);
        out.push(agent_trial(&channels, http_url, http, &job).await?);
    }
    Ok(out)
}

async fn agent_trial(
    channels: &[Channel],
    http_url: &str,
    http: &HttpClient,
    job: &str,
) -> Result<StragglerTrial, BenchError> {
    use rankscope_cli::simulate::client::stream::MessageBuilder;
    let cfg = job_config(job, RANKS);
    let steps: Vec<_> = plan_iter(&cfg).collect();
    let d = DECISIVE_STEP as usize;
    let mut streams = Vec::new();
    let mut builders = Vec::new();
    for r in 0..RANKS {
        let (tx, rx) = tokio::sync::mpsc::channel::<proto::RankMessage>(4);
        let mut client = proto::rank_ingest_client::RankIngestClient::new(
            channels[r as usize % channels.len()].clone(),
        )
        .max_encoding_message_size(64 << 20);
        let acks = client
            .stream_events(tokio_stream::wrappers::ReceiverStream::new(rx))
            .await
            .map_err(|s| BenchError::Grpc {
                what: "RankIngest.StreamEvents".into(),
                detail: format!("{:?}: {}", s.code(), s.message()),
            })?
            .into_inner();
        // Acks are read (an agent never waits for a rank that does not).
        tokio::spawn(async move {
            let mut acks = acks;
            while let Ok(Some(_)) = acks.message().await {}
        });
        streams.push(tx);
        builders.push(MessageBuilder::new(identity(&cfg, r), usize::MAX));
    }
    let message = |b: &mut MessageBuilder, r: u32, from: usize, to: usize| {
        for s in &steps[from..to] {
            for e in &s.ranks[r as usize].events {
                let _ = b.push(e.clone());
            }
        }
        b.take()
    };
    let closed = |_| BenchError::Check("a rank stream closed".into());
    for r in 0..RANKS {
        let m = message(&mut builders[r as usize], r, 0, d);
        streams[r as usize].send(m).await.map_err(closed)?;
    }
    wait_breakdown(http, http_url, job, DECISIVE_STEP - 1, RANKS).await?;

    let decisive: Vec<_> = (0..RANKS)
        .map(|r| message(&mut builders[r as usize], r, d, d + 1))
        .collect();
    let step_events = decisive.iter().map(|m| m.events.len() as u64).sum();
    for (r, m) in decisive.into_iter().enumerate() {
        streams[r].send(m).await.map_err(closed)?;
    }
    let (t0, t0_wall_ns) = (Instant::now(), now_ns());
    let (latency, updated_ns) = wait_verdict(http, http_url, job, t0).await?;
    drop(streams);
    Ok(StragglerTrial {
        latency_ms: latency.as_secs_f64() * 1e3,
        stored_ms: f64::NAN,
        detected_ms: (updated_ns as f64 - t0_wall_ns as f64) / 1e6,
        step_events,
        retries: 0,
    })
}

/// Sends `batches` concurrently and waits for every acknowledgement;
/// returns (when the last was handed over, as instant and wall clock ns,
/// when the last was acknowledged, retries).
async fn send_all(
    clients: &[Client],
    batches: Vec<Bytes>,
) -> Result<(Instant, u64, Instant, u64), BenchError> {
    let (last_sent, last_ack, retries) = join_acks(spawn_sends(clients, batches, None)).await?;
    Ok((last_sent.0, last_sent.1, last_ack, retries))
}

/// When a batch was first handed to its client (instant, wall clock ns).
type Handed = (Instant, u64);

/// The send tasks: each ends with its hand-over and either (when it was
/// acknowledged, retries) or the refusal.
type Sends = tokio::task::JoinSet<(Handed, Result<(Instant, u32), tonic::Status>)>;

/// One task per encoded batch: sends it, retrying UNAVAILABLE with the
/// agent's default backoff (100 ms doubling, equal jitter); each task
/// reports its first hand-over on `handed`.
fn spawn_sends(
    clients: &[Client],
    batches: Vec<Bytes>,
    handed: Option<tokio::sync::mpsc::UnboundedSender<Handed>>,
) -> Sends {
    let mut set = tokio::task::JoinSet::new();
    for (i, b) in batches.into_iter().enumerate() {
        let c = clients[i % clients.len()].clone();
        let handed = handed.clone();
        set.spawn(async move {
            let sent = (Instant::now(), now_ns());
            if let Some(h) = handed {
                let _ = h.send(sent);
            }
            let mut rng = SmallRng::seed_from_u64(sent.1 ^ i as u64);
            let mut retries = 0u32;
            loop {
                let request = tonic::Request::new(StampedBatch {
                    body: b.clone(),
                    sent_at_ns: now_ns(),
                });
                match ingest_stamped(c.clone(), request).await {
                    Ok(_) => return (sent, Ok((Instant::now(), retries))),
                    Err(s) if s.code() == tonic::Code::Unavailable && retries < 20 => {
                        let base = 100.0 * 2f64.powi(retries.min(7) as i32);
                        let jitter: f64 = rng.random();
                        let delay_ms = base * (1.0 - 0.5 * jitter);
                        tokio::time::sleep(Duration::from_secs_f64(delay_ms / 1e3)).await;
                        retries += 1;
                    }
                    Err(s) => return (sent, Err(s)),
                }
            }
        });
    }
    set
}

/// Waits for every send of `set`: (the last hand-over, the last
/// acknowledgement, retries); the first refused batch is an error.
async fn join_acks(mut set: Sends) -> Result<(Handed, Instant, u64), BenchError> {
    let mut last_sent: Option<Handed> = None;
    let mut last_ack: Option<Instant> = None;
    let mut retries = 0;
    while let Some(res) = set.join_next().await {
        let (sent, r) = res.map_err(|e| BenchError::Grpc {
            what: "send task".into(),
            detail: e.to_string(),
        })?;
        let (acked, n) = r.map_err(|s| BenchError::Grpc {
            what: "Ingest".into(),
            detail: format!("{:?}: {}", s.code(), s.message()),
        })?;
        retries += u64::from(n);
        if last_sent.is_none_or(|(t, _)| sent.0 > t) {
            last_sent = Some(sent);
        }
        if last_ack.is_none_or(|t| acked > t) {
            last_ack = Some(acked);
        }
    }
    match (last_sent, last_ack) {
        (Some(sent), Some(ack)) => Ok((sent, ack, retries)),
        _ => Err(BenchError::Check("no batch sent".into())),
    }
}

/// Waits until the breakdown of `step` covers all `ranks` ranks.
async fn wait_breakdown(
    http: &HttpClient,
    http_url: &str,
    job: &str,
    step: u64,
    ranks: u32,
) -> Result<(), BenchError> {
    let url = format!("{http_url}/api/v1/jobs/{job}/breakdown?step={step}");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let r = http.get(&url).await?;
        if r.status == 200 {
            let n = r.json()?["breakdown"].as_array().map_or(0, Vec::len);
            if n >= ranks as usize {
                return Ok(());
            }
        }
        if Instant::now() >= deadline {
            return Err(BenchError::Timeout {
                what: format!("breakdown of step {step} of {job}"),
                secs: 60,
            });
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
