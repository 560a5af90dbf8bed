//! The soak (`make soak`, issue 14 item 5): many simulated agents against one
//! collector for a long time, watching for loss, growth and slowdown.
//!
//! In: [`SoakParams`] — agents, ranks per agent (one node each), jobs, step
//! period, layers of the simulated model, duration — the release collector
//! binary and a ClickHouse server. Out: a [`SoakReport`]: events sent and
//! stored (zero loss means equal), batch acknowledgement latency p50/p99 per
//! minute and overall, the collector's RSS and ClickHouse's active parts
//! sampled every `sample_s`, the collector's CPU.
//!
//! Each simulated agent is a task with its own gRPC connection speaking
//! `CollectorIngest.Ingest` as the real agent does: one `AgentBatch` per step
//! period holding its ranks' events of that step (from the simulator's model,
//! `rankscope_cli::simulate::plan_iter`), sequence numbers from 1, retried in
//! order on UNAVAILABLE with backoff. One generator thread per job walks the
//! model and hands every agent its ranks' part over a bounded channel.
//! Agents start staggered over one step period so batches spread evenly.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rankscope_cli::simulate::model::{event_name_id, identity, name_text};
use rankscope_cli::simulate::{plan_iter, RankStep, SimConfig};
use rankscope_proto::v1 as proto;
use serde::Serialize;
use tokio::sync::mpsc;

use crate::error::BenchError;

/// What to run.
#[derive(Debug, Clone, Serialize)]
pub struct SoakParams {
    pub agents: u32,
    pub ranks_per_agent: u32,
    /// Jobs the agents are split into (agents % jobs == 0).
    pub jobs: u32,
    pub step_ms: u64,
    pub layers: u32,
    pub duration_s: u64,
    /// Samples taken this often; the first `warmup_s` do not count for RSS flatness.
    pub sample_s: u64,
    pub warmup_s: u64,
}

/// One sample of the run.
#[derive(Debug, Clone, Serialize)]
pub struct Sample {
    pub t_s: f64,
    pub events_acked: u64,
    pub collector_rss_mib: f64,
    pub clickhouse_active_parts: u64,
    pub ack_p50_ms: f64,
    pub ack_p99_ms: f64,
}

/// The result.
#[derive(Debug, Clone, Serialize)]
pub struct SoakReport {
    pub params: SoakParams,
    pub ranks: u32,
    pub events_sent: u64,
    pub events_stored: u64,
    pub batches: u64,
    pub retries: u64,
    pub events_per_s: f64,
    pub ack_p50_ms: f64,
    pub ack_p99_ms: f64,
    pub ack_max_ms: f64,
    pub collector_cpu_cores: f64,
    pub collector_rss_after_warmup_min_mib: f64,
    pub collector_rss_after_warmup_max_mib: f64,
    pub samples: Vec<Sample>,
}

/// Shared tallies of the agents.
#[derive(Default)]
struct Tally {
    events: AtomicU64,
    batches: AtomicU64,
    retries: AtomicU64,
    /// Ack latencies (µs) since the last sample, and all of them.
    window: Mutex<Vec<u32>>,
    all: Mutex<Vec<u32>>,
}

fn pct(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    f64::from(sorted[i]) / 1000.0
}

/// Runs the soak against the collector at `grpc_url`; `probe` samples
/// (collector RSS MiB, ClickHouse active parts) and `stored` counts the
/// stored event rows at the end.
pub async fn run(
    p: &SoakParams,
    grpc_url: &str,
    mut probe: impl FnMut() -> (f64, u64),
    collector_cpu_s: impl Fn() -> f64,
    stored: impl Fn() -> Result<u64, BenchError>,
) -> Result<SoakReport, BenchError> {
    if p.jobs == 0 || !p.agents.is_multiple_of(p.jobs) {
        return Err(BenchError::parse(
            "soak",
            "agents must be a multiple of jobs",
        ));
    }
    let tally = Arc::new(Tally::default());
    let started = Instant::now();
    let until = started + Duration::from_secs(p.duration_s);
    let agents_per_job = p.agents / p.jobs;
    let mut tasks = Vec::new();
    let mut generators = Vec::new();
    for job in 0..p.jobs {
        let cfg = SimConfig {
            job: format!("soak-{job}"),
            ranks: agents_per_job * p.ranks_per_agent,
            ranks_per_node: p.ranks_per_agent,
            steps: u64::MAX / 4,
            layers: p.layers,
            seed: u64::from(job) + 1,
            start_ns: rankscope_collector::service::now_ns(),
            ..Default::default()
        };
        let mut senders = Vec::new();
        for a in 0..agents_per_job {
            let (tx, rx) = mpsc::channel::<Vec<RankStep>>(2);
            senders.push(tx);
            let node = format!("soak-node-{job}-{a}");
            let channel = tonic::transport::Endpoint::from_shared(grpc_url.to_owned())
                .map_err(|e| BenchError::parse("soak collector url", e.to_string()))?
                .connect()
                .await
                .map_err(|e| BenchError::parse("soak connect", e.to_string()))?;
            let ids: Vec<proto::RankIdentity> = (0..p.ranks_per_agent)
                .map(|r| identity(&cfg, a * p.ranks_per_agent + r))
                .collect();
            let offset =
                Duration::from_millis(p.step_ms * u64::from(a) / u64::from(agents_per_job));
            let agent = Agent {
                id: node.clone(),
                node,
                session: rand::random::<u64>() | 1,
                ids,
                client: proto::collector_ingest_client::CollectorIngestClient::new(channel)
                    .max_encoding_message_size(64 << 20),
                tally: tally.clone(),
            };
            let step = Duration::from_millis(p.step_ms);
            tasks.push(tokio::spawn(agent.run(rx, started + offset, step, until)));
        }
        generators.push(std::thread::spawn(move || generate(cfg, senders)));
    }

    let mut samples = Vec::new();
    let mut next = started;
    let cpu0 = collector_cpu_s();
    while Instant::now() < until {
        next += Duration::from_secs(p.sample_s.max(1));
        tokio::time::sleep_until(next.into()).await;
        let (rss, parts) = probe();
        let mut w = std::mem::take(&mut *tally.window.lock().map_err(|_| poisoned())?);
        w.sort_unstable();
        let s = Sample {
            t_s: started.elapsed().as_secs_f64(),
            events_acked: tally.events.load(Relaxed),
            collector_rss_mib: rss,
            clickhouse_active_parts: parts,
            ack_p50_ms: pct(&w, 0.5),
            ack_p99_ms: pct(&w, 0.99),
        };
        eprintln!(
            "soak: {:>5.0} s  {:>11} events  ack p50 {:>7.2} ms p99 {:>8.2} ms  collector {:>6.1} MiB  parts {}",
            s.t_s, s.events_acked, s.ack_p50_ms, s.ack_p99_ms, s.collector_rss_mib, s.clickhouse_active_parts
        );
        samples.push(s);
    }
    for t in tasks {
        t.await
            .map_err(|e| BenchError::parse("soak agent", e.to_string()))??;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let cpu = collector_cpu_s() - cpu0;
    drop(generators);
    let sent = tally.events.load(Relaxed);
    // Every acknowledged batch is stored; wait for the count to settle.
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut n = stored()?;
    while n < sent && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(500)).await;
        n = stored()?;
    }
    let mut all = std::mem::take(&mut *tally.all.lock().map_err(|_| poisoned())?);
    all.sort_unstable();
    let warm: Vec<f64> = samples
        .iter()
        .filter(|s| s.t_s >= p.warmup_s as f64)
        .map(|s| s.collector_rss_mib)
        .collect();
    Ok(SoakReport {
        params: p.clone(),
        ranks: p.agents * p.ranks_per_agent,
        events_sent: sent,
        events_stored: n,
        batches: tally.batches.load(Relaxed),
        retries: tally.retries.load(Relaxed),
        events_per_s: sent as f64 / elapsed,
        ack_p50_ms: pct(&all, 0.5),
        ack_p99_ms: pct(&all, 0.99),
        ack_max_ms: all.last().map_or(0.0, |&v| f64::from(v) / 1000.0),
        collector_cpu_cores: cpu / elapsed,
        collector_rss_after_warmup_min_mib: warm.iter().copied().fold(f64::INFINITY, f64::min),
        collector_rss_after_warmup_max_mib: warm.iter().copied().fold(0.0, f64::max),
        samples,
    })
}

fn poisoned() -> BenchError {
    BenchError::parse("soak", "a tally lock was poisoned")
}

/// Walks the job's model; each agent gets its ranks' part of every step.
fn generate(cfg: SimConfig, senders: Vec<mpsc::Sender<Vec<RankStep>>>) {
    let per = cfg.ranks_per_node as usize;
    for step in plan_iter(&cfg) {
        let mut parts: Vec<Vec<RankStep>> = (0..senders.len())
            .map(|_| Vec::with_capacity(per))
            .collect();
        for rs in step.ranks {
            if let Some(p) = parts.get_mut(rs.rank as usize / per) {
                p.push(rs);
            }
        }
        for (tx, part) in senders.iter().zip(parts) {
            if tx.blocking_send(part).is_err() {
                return;
            }
        }
    }
}

struct Agent {
    id: String,
    node: String,
    session: u64,
    ids: Vec<proto::RankIdentity>,
    client: proto::collector_ingest_client::CollectorIngestClient<tonic::transport::Channel>,
    tally: Arc<Tally>,
}

impl Agent {
    async fn run(
        mut self,
        mut steps: mpsc::Receiver<Vec<RankStep>>,
        first: Instant,
        every: Duration,
        until: Instant,
    ) -> Result<(), BenchError> {
        let mut at = first;
        let mut seq = 0;
        while at < until {
            tokio::time::sleep_until(at.into()).await;
            at += every;
            let Some(part) = steps.recv().await else {
                break;
            };
            seq += 1;
            let batch = self.batch(seq, part);
            let events: u64 = batch.ranks.iter().map(|r| r.events.len() as u64).sum();
            let mut backoff = Duration::from_millis(50);
            loop {
                let sent = Instant::now();
                match self.client.ingest(batch.clone()).await {
                    Ok(_) => {
                        let us = u32::try_from(sent.elapsed().as_micros()).unwrap_or(u32::MAX);
                        self.tally.events.fetch_add(events, Relaxed);
                        self.tally.batches.fetch_add(1, Relaxed);
                        if let Ok(mut w) = self.tally.window.lock() {
                            w.push(us);
                        }
                        if let Ok(mut a) = self.tally.all.lock() {
                            a.push(us);
                        }
                        break;
                    }
                    Err(s) if s.code() == tonic::Code::Unavailable => {
                        self.tally.retries.fetch_add(1, Relaxed);
                        tokio::time::sleep(backoff).await;
                        backoff = (backoff * 2).min(Duration::from_secs(1));
                    }
                    Err(s) => {
                        return Err(BenchError::parse(
                            "soak ingest",
                            format!(
                                "agent {} batch {seq}: {:?}: {}",
                                self.id,
                                s.code(),
                                s.message()
                            ),
                        ))
                    }
                }
            }
        }
        Ok(())
    }

    fn batch(&self, seq: u64, part: Vec<RankStep>) -> proto::AgentBatch {
        let ranks = part
            .into_iter()
            .map(|rs| {
                let used: BTreeSet<u32> = rs
                    .events
                    .iter()
                    .map(event_name_id)
                    .filter(|&i| i != 0)
                    .collect();
                proto::RankEvents {
                    identity: self.ids.get(rs.rank as usize % self.ids.len()).cloned(),
                    names: used
                        .into_iter()
                        .map(|id| proto::InternedName {
                            id,
                            name: name_text(id).unwrap_or("unknown").to_owned(),
                        })
                        .collect(),
                    events: rs.events,
                    ..Default::default()
                }
            })
            .collect();
        proto::AgentBatch {
            agent_id: self.id.clone(),
            agent_session: self.session,
            seq,
            node: self.node.clone(),
            sent_at_ns: rankscope_collector::service::now_ns(),
            ranks,
            ..Default::default()
        }
    }
}
