//! The network side of the simulator: one connection, one tokio task and
//! one `RankIngest.StreamEvents` stream per rank.
//!
//! In: a [`SimConfig`] and the agent URL (`http://host:port` or
//! `unix:/path`). Out: a [`SimSummary`], or a [`SimError`] when a stream
//! could not be opened or broke.
//!
//! Flow and memory: a blocking generator thread walks [`plan_iter`] step by
//! step and hands each rank its part over a bounded channel (two steps deep),
//! so memory stays bounded however many steps are simulated; the rank tasks
//! send as fast as the agent acknowledges (at most `stream::WINDOW` messages
//! in flight), or slower under `--rate` / `--realtime`.

pub mod pace;
pub mod stream;

use super::model::{identity, plan_iter, RankStep};
use super::{ConfigError, SimConfig, SimSummary};
use connect::{Target, UrlError};
use pace::Pacer;
pub use rankscope_sdk::connect;
use std::sync::Arc;
use std::time::Instant;
use stream::{RankOptions, RankOutcome};
use tokio::sync::mpsc;

/// Steps buffered between the generator and each rank task.
const STEPS_BUFFERED: usize = 2;

/// Why a simulation could not run to the end.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Url(#[from] UrlError),
    #[error("rank {rank}: cannot connect to the agent at {url}: {reason}")]
    Connect {
        rank: u32,
        url: String,
        reason: String,
    },
    #[error("rank {rank}: the stream failed: {code:?}: {message}")]
    Stream {
        rank: u32,
        code: tonic::Code,
        message: String,
    },
    #[error("rank {rank}: ack for message {got} arrived while message {expected} was the oldest unacknowledged")]
    AckOutOfOrder { rank: u32, expected: u64, got: u64 },
    #[error("rank {rank}: the agent ended the stream with {unacked} message(s) unacknowledged")]
    Unacked { rank: u32, unacked: usize },
    #[error("rank {rank}: no ack from the agent for {waited_s} s")]
    AckTimeout { rank: u32, waited_s: u64 },
    #[error("the event generator failed: {0}")]
    Generator(String),
}

impl SimError {
    pub(crate) fn stream(rank: u32, status: tonic::Status) -> Self {
        Self::Stream {
            rank,
            code: status.code(),
            message: status.message().to_string(),
        }
    }
}

/// Simulates the job `cfg` against the agent at `agent_url`.
pub async fn run(cfg: &SimConfig, agent_url: &str) -> Result<SimSummary, SimError> {
    run_nodes(cfg, &[agent_url]).await
}

/// Simulates the job `cfg` with each node's ranks (`rank / ranks_per_node`)
/// sending to their own agent: node `n` to `agent_urls[n % len]` (a
/// multi-node job on one machine, one agent per node).
pub async fn run_nodes(cfg: &SimConfig, agent_urls: &[&str]) -> Result<SimSummary, SimError> {
    cfg.validate()?;
    let agent_url = agent_urls.first().copied().unwrap_or_default();
    let targets = agent_urls
        .iter()
        .map(|u| Target::parse(u))
        .collect::<Result<Vec<_>, _>>()?;
    let started = Instant::now();

    let mut channels = Vec::with_capacity(cfg.ranks as usize);
    for rank in 0..cfg.ranks {
        let node = (rank / cfg.ranks_per_node.max(1)) as usize % targets.len().max(1);
        let channel = targets[node]
            .connect()
            .await
            .map_err(|e| SimError::Connect {
                rank,
                url: agent_urls[node].to_string(),
                reason: crate::error_chain(&e),
            })?;
        channels.push(channel);
    }
    tracing::info!(job = %cfg.job, ranks = cfg.ranks, steps = cfg.steps, agent = agent_url, "simulation started");

    let pacer = cfg.rate_events_per_s.map(|r| Arc::new(Pacer::new(r)));
    let mut senders = Vec::with_capacity(channels.len());
    let mut tasks = Vec::with_capacity(channels.len());
    for (rank, channel) in (0..cfg.ranks).zip(channels) {
        let (tx, rx) = mpsc::channel::<RankStep>(STEPS_BUFFERED);
        senders.push(Some(tx));
        let opts = RankOptions {
            identity: identity(cfg, rank),
            events_per_message: pace::events_per_message(
                cfg.events_per_message,
                cfg.rate_events_per_s,
                cfg.ranks,
            ),
            realtime: cfg.realtime,
            pacer: pacer.clone(),
        };
        tasks.push(tokio::spawn(stream::run_rank(opts, channel, rx)));
    }

    let plan = plan_iter(cfg);
    let generator = tokio::task::spawn_blocking(move || generate(plan, senders));

    let mut outcomes = Vec::with_capacity(tasks.len());
    let mut first_error = None;
    for task in tasks {
        match task.await {
            Ok(Ok(outcome)) => outcomes.push(outcome),
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "rank stream failed");
                first_error.get_or_insert(e);
            }
            Err(join) => {
                first_error.get_or_insert(SimError::Generator(join.to_string()));
            }
        }
    }
    if let Err(join) = generator.await {
        first_error.get_or_insert(SimError::Generator(join.to_string()));
    }
    if let Some(e) = first_error {
        return Err(e);
    }
    Ok(summarise(
        cfg,
        agent_url,
        &outcomes,
        started.elapsed().as_secs_f64(),
    ))
}

/// Hands each rank its part of every step; a rank whose task ended is
/// skipped, and generation stops when none is left.
fn generate(plan: super::PlanIter, mut senders: Vec<Option<mpsc::Sender<RankStep>>>) {
    for step in plan {
        for rank_step in step.ranks {
            let slot = senders.get_mut(rank_step.rank as usize);
            if let Some(slot) = slot {
                if let Some(tx) = slot {
                    if tx.blocking_send(rank_step).is_err() {
                        *slot = None;
                    }
                }
            }
        }
        if senders.iter().all(Option::is_none) {
            return;
        }
    }
}

fn summarise(
    cfg: &SimConfig,
    agent_url: &str,
    outcomes: &[RankOutcome],
    elapsed_s: f64,
) -> SimSummary {
    let mut s = SimSummary {
        job: cfg.job.clone(),
        agent: agent_url.to_string(),
        ranks: cfg.ranks,
        nodes: cfg.nodes(),
        steps: cfg.steps,
        sent_by_kind: Default::default(),
        events_sent: 0,
        accepted: 0,
        dropped: 0,
        lost_disconnected: 0,
        disconnects: 0,
        messages_sent: 0,
        messages_rejected: 0,
        first_rejection: None,
        elapsed_s,
        events_per_s: 0.0,
    };
    for o in outcomes {
        s.sent_by_kind.steps += o.sent.steps;
        s.sent_by_kind.spans += o.sent.spans;
        s.sent_by_kind.collectives += o.sent.collectives;
        s.sent_by_kind.kernels += o.sent.kernels;
        s.accepted += o.accepted;
        s.dropped += o.dropped;
        s.lost_disconnected += o.lost;
        s.disconnects += o.disconnects;
        s.messages_sent += o.messages_sent;
        s.messages_rejected += o.rejected;
        if s.first_rejection.is_none() {
            s.first_rejection.clone_from(&o.first_rejection);
        }
    }
    s.events_sent = s.sent_by_kind.total();
    if elapsed_s > 0.0 {
        s.events_per_s = s.events_sent as f64 / elapsed_s;
    }
    s
}
