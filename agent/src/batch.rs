//! The batcher: one task that owns the batch under construction.
//!
//! In: [`Chunk`]s (validated events of one rank message) from the ingest
//! streams over an unbounded channel whose size is bounded by the queue's
//! semaphore (a chunk carries one permit per event), telemetry
//! [`SampleSet`]s from the sampler thread (bounded channel; the sampler
//! drops a tick when it is full), and a flush command at shutdown. Out:
//! [`Pending`] batches to the uplink over the bounded backlog channel
//! (`backlog_max_batches`).
//!
//! Invariants:
//! * a batch holds at most `batch_max_events` events plus samples (a big
//!   chunk is split) and is cut at the latest `batch_max_delay_ms` after its
//!   first event, or one second after its first sample when it holds no
//!   events;
//! * `seq` starts at 1 and grows by one per batch; per rank stream, events
//!   leave in the order they arrived;
//! * queue permits are released as soon as their events are in the batch
//!   under construction;
//! * backpressure: when the backlog is full the batcher waits on it, stops
//!   reading chunks, the queue fills up and ingest drops the newest events.
//!   That is the agent's single drop point; nothing is dropped here.

use std::sync::Arc;
use std::time::Duration;

use rankscope_proto::v1 as proto;
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit};
use tokio::time::Instant;

pub(crate) mod builder;

use crate::metrics::Metrics;
use crate::sample::SampleSet;
use builder::{BatchBuilder, RankStream};

/// How long a batch holding only telemetry samples may wait for more (at
/// least `batch_max_delay_ms`): telemetry alone makes about one batch a
/// second, not one per `batch_max_delay_ms` (fewer calls, fewer INSERTs).
const SAMPLES_MAX_DELAY: Duration = Duration::from_millis(1000);

/// Validated events of one rank message, waiting in the queue.
#[derive(Debug)]
pub(crate) struct Chunk {
    pub(crate) stream: Arc<RankStream>,
    /// Definitions of every name id the events reference.
    pub(crate) names: Vec<(u32, Arc<str>)>,
    pub(crate) events: Vec<proto::Event>,
    /// One permit per event of the queue's semaphore.
    pub(crate) permit: OwnedSemaphorePermit,
    /// The stream ended after these events.
    pub(crate) closed: bool,
    /// Fired once the batch holding the last of these events is in the
    /// disk spool (with a spool only): the rank's ack waits for it.
    pub(crate) spooled: Option<oneshot::Sender<()>>,
}

/// A cut batch on its way to the collector.
#[derive(Debug)]
pub(crate) struct Pending {
    pub(crate) batch: proto::AgentBatch,
    pub(crate) events: u64,
    /// Telemetry samples in the batch.
    pub(crate) samples: u64,
}

/// Batcher settings and state.
pub(crate) struct Batcher {
    pub(crate) agent_id: String,
    pub(crate) node: String,
    pub(crate) session: u64,
    pub(crate) max_events: usize,
    pub(crate) max_delay: Duration,
    pub(crate) metrics: Arc<Metrics>,
    next_seq: u64,
    builder: BatchBuilder,
    deadline: Option<Instant>,
    spool: Option<Arc<crate::spool::Spool>>,
    /// Acks waiting for the batch under construction to be spooled.
    spool_waiting: Vec<oneshot::Sender<()>>,
}

impl Batcher {
    pub(crate) fn new(
        agent_id: String,
        node: String,
        session: u64,
        max_events: usize,
        max_delay: Duration,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self {
            agent_id,
            node,
            session,
            max_events: max_events.max(1),
            max_delay,
            metrics,
            next_seq: 1,
            builder: BatchBuilder::default(),
            deadline: None,
            spool: None,
            spool_waiting: Vec::new(),
        }
    }

    /// Writes every batch to `spool` before its ranks are acknowledged.
    pub(crate) fn with_spool(mut self, spool: Option<Arc<crate::spool::Spool>>) -> Self {
        self.spool = spool;
        self
    }

    /// Runs until `flush` fires (or its sender is dropped) or every chunk
    /// sender is gone; then drains what is queued, cuts the last batch and
    /// returns, closing the backlog channel.
    pub(crate) async fn run(
        mut self,
        mut input: mpsc::UnboundedReceiver<Chunk>,
        mut samples: mpsc::Receiver<SampleSet>,
        out: mpsc::Sender<Pending>,
        mut flush: oneshot::Receiver<()>,
    ) {
        let mut samples_open = true;
        loop {
            let deadline = self.deadline;
            tokio::select! {
                biased;
                _ = &mut flush => {
                    while let Ok(chunk) = input.try_recv() {
                        self.add(chunk, &out).await;
                    }
                    while let Ok(set) = samples.try_recv() {
                        self.add_samples(set, &out).await;
                    }
                    break;
                }
                chunk = input.recv() => match chunk {
                    Some(chunk) => self.add(chunk, &out).await,
                    None => break,
                },
                set = samples.recv(), if samples_open => match set {
                    Some(set) => self.add_samples(set, &out).await,
                    None => samples_open = false,
                },
                _ = tokio::time::sleep_until(deadline.unwrap_or_else(Instant::now)),
                    if deadline.is_some() => self.cut(&out).await,
            }
        }
        self.cut(&out).await;
        tracing::debug!(last_seq = self.next_seq - 1, "batcher stopped");
    }

    async fn add(&mut self, chunk: Chunk, out: &mpsc::Sender<Pending>) {
        let Chunk {
            stream,
            names,
            mut events,
            mut permit,
            closed,
            spooled,
        } = chunk;
        if closed {
            // A marker without events: one unit, so the batch carrying it is cut.
            if self.builder.is_empty() {
                let due = Instant::now() + self.max_delay;
                self.deadline = Some(self.deadline.map_or(due, |d| d.min(due)));
            }
            self.builder.close(&stream);
        }
        while !events.is_empty() {
            let room = self.max_events.saturating_sub(self.builder.units()).max(1);
            let rest = if events.len() > room {
                events.split_off(room)
            } else {
                Vec::new()
            };
            if self.builder.events() == 0 {
                // The first events bring a samples-only batch's deadline forward.
                let due = Instant::now() + self.max_delay;
                self.deadline = Some(self.deadline.map_or(due, |d| d.min(due)));
            }
            let taken = events.len();
            self.builder.push(&stream, &names, events);
            // The events are in the batch now: give their queue room back.
            drop(permit.split(taken));
            if self.builder.units() >= self.max_events {
                self.cut(out).await;
            }
            events = rest;
        }
        if let Some(tx) = spooled {
            if self.builder.is_empty() {
                let _ = tx.send(()); // nothing of it waits in a batch
            } else {
                self.spool_waiting.push(tx);
            }
        }
    }

    /// Adds the samples of one tick (never split: a tick is small).
    async fn add_samples(&mut self, set: SampleSet, out: &mpsc::Sender<Pending>) {
        if set.len() == 0 {
            return;
        }
        if self.builder.is_empty() {
            let delay = self.max_delay.max(SAMPLES_MAX_DELAY);
            self.deadline = Some(Instant::now() + delay);
        }
        self.builder.push_samples(set);
        if self.builder.units() >= self.max_events {
            self.cut(out).await;
        }
    }

    /// Cuts the batch under construction (if any) and hands it to the uplink,
    /// waiting while the backlog is full.
    async fn cut(&mut self, out: &mpsc::Sender<Pending>) {
        self.deadline = None;
        if self.builder.is_empty() {
            return;
        }
        let events = self.builder.events() as u64;
        let samples = self.builder.samples() as u64;
        let (gpu_samples, host_samples) = self.builder.take_samples();
        let batch = proto::AgentBatch {
            agent_id: self.agent_id.clone(),
            agent_session: self.session,
            seq: self.next_seq,
            node: self.node.clone(),
            sent_at_ns: 0,
            ranks: self.builder.take(),
            gpu_samples,
            host_samples,
        };
        self.next_seq += 1;
        Metrics::inc(&self.metrics.batches_created);
        if let Some(spool) = &self.spool {
            let (spool, bytes) = (
                Arc::clone(spool),
                rankscope_proto::codec::Encoded::of(&batch).0,
            );
            let (session, seq) = (batch.agent_session, batch.seq);
            let written = tokio::task::spawn_blocking(move || spool.write(session, seq, &bytes))
                .await
                .map_err(|e| std::io::Error::other(e.to_string()))
                .and_then(|r| r);
            if let Err(e) = written {
                Metrics::inc(&self.metrics.spool_write_errors);
                tracing::warn!(seq, error = %e, "cannot write the batch to the spool; it is sent all the same");
            }
        }
        for tx in self.spool_waiting.drain(..) {
            let _ = tx.send(());
        }
        tracing::trace!(seq = batch.seq, events, samples, "batch cut");
        let pending = Pending {
            batch,
            events,
            samples,
        };
        if out.send(pending).await.is_err() {
            // Only after the uplink was aborted at the end of a shutdown; the
            // shutdown report counts these events as undelivered.
            tracing::error!(events, "uplink gone, batch not handed over");
        }
    }
}
