//! The batcher: one task that owns the batch under construction.
//!
//! In: [`Chunk`]s (validated events of one rank message) from the ingest
//! streams over an unbounded channel whose size is bounded by the queue's
//! semaphore (a chunk carries one permit per event), telemetry
//! [`SampleSet`]s from the sampler thread (bounded channel; the sampler
//! drops a handoff when it is full), and a flush command at shutdown. Out:
//! [`Pending`] batches to the uplink over the bounded backlog channel
//! (`backlog_max_batches`), each encoded once here and holding its size in
//! permits of the backlog's byte budget (`backlog_max_bytes`) until the
//! uplink settles it.
//!
//! Invariants:
//! * a batch holds at most `batch_max_events` events plus samples (a big
//!   chunk is split) and is cut at the latest `batch_max_delay_ms` after its
//!   first event, or one second after its first sample when it holds no
//!   events; with `flush_at_step_end` it is cut as soon as every live rank
//!   stream of the node has ended a step ([`steps::NodeSteps`]; at most
//!   once per [`STEP_CUT_MIN_INTERVAL`], later ones wait that long);
//! * a batch holds one job: a cut splits the groups by job id; each job's
//!   batches are their own session ([`crate::route::job_session`]) whose
//!   `seq` starts at 1 and grows by one per batch; per rank stream, events
//!   leave in the order they arrived;
//! * queue permits are released as soon as their events are in the batch
//!   under construction;
//! * backpressure: when the backlog is full (in batches or in bytes) the
//!   batcher waits on it, stops
//!   reading chunks, the queue fills up and ingest drops the newest events.
//!   That is the agent's single drop point; nothing is dropped here.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rankscope_proto::wire::{AgentBatchWire, RankEventsWire, WireEvents};
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

pub(crate) mod builder;
pub(crate) mod steps;

use crate::metrics::Metrics;
use crate::sample::SampleSet;
use builder::{BatchBuilder, RankStream};

/// How long after its oldest sample was taken a batch holding only
/// telemetry samples is cut (at least `batch_max_delay_ms`): telemetry
/// alone makes about one batch a second, not one per `batch_max_delay_ms`
/// (fewer calls, fewer INSERTs). The sampler hands a second's ticks over
/// together ([`crate::sample::HANDOFF_EVERY`]), so such a batch is usually
/// cut as its samples arrive.
const SAMPLES_MAX_DELAY: Duration = Duration::from_millis(1000);

/// Cuts at node step ends are at least this far apart: a job of very short
/// steps (or a benchmark at full speed) gets batches of several steps, not
/// one small batch per step.
pub(crate) const STEP_CUT_MIN_INTERVAL: Duration = Duration::from_millis(50);

/// Validated events of one rank message, waiting in the queue.
#[derive(Debug)]
pub(crate) struct Chunk {
    pub(crate) stream: Arc<RankStream>,
    /// Definitions of every name id the events reference.
    pub(crate) names: Vec<(u32, Arc<str>)>,
    /// Each event's protobuf encoding, forwarded as it came
    /// (`rankscope_proto::wire`).
    pub(crate) events: WireEvents,
    /// The highest step a `StepEnd` of the events ends
    /// ([`steps::last_step_end`]).
    pub(crate) step_end: Option<u64>,
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
    /// The batch's `agent_session`: the job's ([`crate::route::job_session`]).
    pub(crate) session: u64,
    pub(crate) seq: u64,
    /// The one job of the batch (empty: samples only, before any job).
    pub(crate) job: Arc<str>,
    /// The `AgentBatch`, encoded once at the cut without `sent_at_ns` (the
    /// uplink appends it to each call); what the backlog holds in memory.
    pub(crate) body: Bytes,
    pub(crate) events: u64,
    /// Telemetry samples in the batch.
    pub(crate) samples: u64,
    /// The body's share of `backlog_max_bytes`, given back when the batch
    /// is settled (delivered or dropped) and this is dropped.
    pub(crate) _budget: Option<OwnedSemaphorePermit>,
}

/// The backlog's byte budget (`backlog_max_bytes`).
#[derive(Debug, Clone)]
pub(crate) struct Budget {
    pub(crate) bytes: Arc<Semaphore>,
    pub(crate) max: usize,
}

impl Budget {
    pub(crate) fn new(max: usize) -> Self {
        Self {
            bytes: Arc::new(Semaphore::new(max)),
            max,
        }
    }

    /// Bytes of encoded batches held now.
    pub(crate) fn held(&self) -> usize {
        self.max.saturating_sub(self.bytes.available_permits())
    }

    /// Waits until `len` bytes fit (a batch larger than the whole budget
    /// waits for all of it, so it is then held alone).
    async fn take(&self, len: usize) -> Option<OwnedSemaphorePermit> {
        let n = u32::try_from(len.clamp(1, self.max)).unwrap_or(u32::MAX);
        Arc::clone(&self.bytes).acquire_many_owned(n).await.ok()
    }
}

/// Batcher settings and state.
pub(crate) struct Batcher {
    pub(crate) agent_id: String,
    pub(crate) node: String,
    pub(crate) session: u64,
    pub(crate) max_events: usize,
    pub(crate) max_delay: Duration,
    pub(crate) metrics: Arc<Metrics>,
    budget: Budget,
    /// Next `seq` per job (each job's batches are their own session).
    next_seq: std::collections::HashMap<Arc<str>, u64>,
    /// The job of the latest events: a cut without events sends its
    /// samples with that job's batches.
    last_job: Arc<str>,
    builder: BatchBuilder,
    deadline: Option<Instant>,
    spool: Option<Arc<crate::spool::Spool>>,
    /// Acks waiting for the batch under construction to be spooled.
    spool_waiting: Vec<oneshot::Sender<()>>,
    /// Cut when the node's live ranks all ended a step.
    flush_at_step_end: bool,
    steps: steps::NodeSteps,
    last_step_cut: Option<Instant>,
    /// Where node steps are published for the local trace trigger.
    progress: Option<Arc<crate::kineto::local::Progress>>,
}

impl Batcher {
    pub(crate) fn new(
        agent_id: String,
        node: String,
        session: u64,
        max_events: usize,
        max_delay: Duration,
        metrics: Arc<Metrics>,
        budget: Budget,
    ) -> Self {
        Self {
            agent_id,
            node,
            session,
            max_events: max_events.max(1),
            max_delay,
            metrics,
            budget,
            next_seq: std::collections::HashMap::new(),
            last_job: Arc::from(""),
            builder: BatchBuilder::default(),
            deadline: None,
            spool: None,
            spool_waiting: Vec::new(),
            flush_at_step_end: false,
            steps: steps::NodeSteps::default(),
            last_step_cut: None,
            progress: None,
        }
    }

    /// Publishes each job's completed node step to `progress`.
    pub(crate) fn with_progress(
        mut self,
        progress: Option<Arc<crate::kineto::local::Progress>>,
    ) -> Self {
        self.progress = progress;
        self
    }

    /// Cuts the batch once every live rank stream ended a step.
    pub(crate) fn with_step_end_flush(mut self, on: bool) -> Self {
        self.flush_at_step_end = on;
        self
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
        // Encoding runs beside the batcher (its own task: while one batch
        // is encoded the next one is being built); one cut batch waits.
        let (cut_tx, cut_rx) = mpsc::channel::<Cut>(1);
        let encoder = tokio::spawn(encode(
            cut_rx,
            out,
            self.budget.clone(),
            self.spool.clone(),
            Arc::clone(&self.metrics),
        ));
        let out = cut_tx;
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
        drop(out);
        // Every batch is in the backlog (or the uplink is gone) when this returns.
        let _ = encoder.await;
        tracing::debug!(jobs = self.next_seq.len(), "batcher stopped");
    }

    async fn add(&mut self, chunk: Chunk, out: &mpsc::Sender<Cut>) {
        let Chunk {
            stream,
            names,
            mut events,
            step_end,
            mut permit,
            closed,
            spooled,
        } = chunk;
        // Trace imports are not live ranks of the node.
        let live = stream.trace.is_none() && self.flush_at_step_end;
        let job = &stream.identity.job_id;
        let mut step_done = live && self.steps.record(job, stream.id, step_end);
        if closed {
            // A marker without events: one unit, so the batch carrying it is cut.
            if self.builder.is_empty() {
                let due = Instant::now() + self.max_delay;
                self.deadline = Some(self.deadline.map_or(due, |d| d.min(due)));
            }
            self.builder.close(&stream);
            step_done |= live && self.steps.close(job, stream.id);
        }
        if let (true, Some(p)) = (step_done, &self.progress) {
            if let Some(step) = self.steps.complete(job) {
                p.set(job, step);
            }
        }
        while !events.is_empty() {
            let room = self.max_events.saturating_sub(self.builder.units()).max(1);
            let rest = if events.len() > room {
                events.split_off(room)
            } else {
                WireEvents::default()
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
        if step_done && !self.builder.is_empty() {
            self.cut_at_step_end(out).await;
        }
    }

    /// A node step is complete: cut now, or once [`STEP_CUT_MIN_INTERVAL`]
    /// has passed since the last such cut.
    async fn cut_at_step_end(&mut self, out: &mpsc::Sender<Cut>) {
        let now = Instant::now();
        match self.last_step_cut {
            Some(last) if now < last + STEP_CUT_MIN_INTERVAL => {
                let due = last + STEP_CUT_MIN_INTERVAL;
                self.deadline = Some(self.deadline.map_or(due, |d| d.min(due)));
            }
            _ => {
                self.last_step_cut = Some(now);
                Metrics::inc(&self.metrics.batches_cut_at_step_end);
                self.cut(out).await;
            }
        }
    }

    /// Adds the samples of one handoff (never split: a second of ticks is
    /// small).
    async fn add_samples(&mut self, set: SampleSet, out: &mpsc::Sender<Cut>) {
        if set.len() == 0 {
            return;
        }
        if self.builder.is_empty() {
            let delay = self.max_delay.max(SAMPLES_MAX_DELAY);
            self.deadline = Some(Instant::from_std(set.oldest) + delay);
        }
        self.builder.push_samples(set);
        let late = self.deadline.is_some_and(|d| d <= Instant::now());
        if late || self.builder.units() >= self.max_events {
            self.cut(out).await;
        }
    }

    /// Cuts the batch under construction (if any) into one batch per job
    /// (the collector that owns a job gets only its batches; the samples
    /// ride with the first job's, or with the latest job's when there are
    /// no events) and hands them to the uplink, waiting while the backlog
    /// is full.
    async fn cut(&mut self, out: &mpsc::Sender<Cut>) {
        self.deadline = None;
        if self.builder.is_empty() {
            return;
        }
        let (mut gpu_samples, mut host_samples) = self.builder.take_samples();
        let mut jobs: Vec<(Arc<str>, Vec<RankEventsWire>)> = Vec::new();
        for group in self.builder.take() {
            let job = group.identity.as_ref().map_or("", |i| i.job_id.as_str());
            match jobs.iter_mut().find(|(j, _)| &**j == job) {
                Some((_, v)) => v.push(group),
                None => jobs.push((Arc::from(job), vec![group])),
            }
        }
        if let Some((job, _)) = jobs.last() {
            self.last_job = Arc::clone(job);
        }
        if jobs.is_empty() {
            jobs.push((Arc::clone(&self.last_job), Vec::new()));
        }
        let mut spooled = std::mem::take(&mut self.spool_waiting);
        let last = jobs.len() - 1;
        for (i, (job, ranks)) in jobs.into_iter().enumerate() {
            let events: u64 = ranks
                .iter()
                .flat_map(|g| &g.events)
                .map(|p| p.len() as u64)
                .sum();
            let (gpu, host) = (
                std::mem::take(&mut gpu_samples),
                std::mem::take(&mut host_samples),
            );
            let samples = (gpu.len() + host.len()) as u64;
            let next = self.next_seq.entry(Arc::clone(&job)).or_insert(1);
            let seq = *next;
            *next += 1;
            let session = crate::route::job_session(self.session, &job);
            let batch = AgentBatchWire {
                agent_id: self.agent_id.clone(),
                agent_session: session,
                seq,
                node: self.node.clone(),
                sent_at_ns: 0,
                ranks,
                gpu_samples: gpu,
                host_samples: host,
            };
            Metrics::inc(&self.metrics.batches_created);
            let cut = Cut {
                batch,
                job,
                events,
                samples,
                // The acks wait for the last of the cut's batches.
                spooled: if i == last {
                    std::mem::take(&mut spooled)
                } else {
                    Vec::new()
                },
            };
            if out.send(cut).await.is_err() {
                tracing::error!(events, "encoder gone, batch not handed over");
            }
        }
    }
}

/// A cut batch on its way to the encoder.
pub(crate) struct Cut {
    batch: AgentBatchWire,
    job: Arc<str>,
    events: u64,
    samples: u64,
    /// Acks waiting for this batch to be spooled.
    spooled: Vec<oneshot::Sender<()>>,
}

/// The encoder stage: encodes each cut batch once, writes it to the spool
/// (when there is one) before its ranks' acks go out, and hands it to the
/// uplink, waiting while the backlog holds `backlog_max_bytes`. Ends when
/// the batcher is done and every batch is handed over.
async fn encode(
    mut input: mpsc::Receiver<Cut>,
    out: mpsc::Sender<Pending>,
    budget: Budget,
    spool: Option<Arc<crate::spool::Spool>>,
    metrics: Arc<Metrics>,
) {
    while let Some(cut) = input.recv().await {
        let Cut {
            batch,
            job,
            events,
            samples,
            spooled,
        } = cut;
        let (session, seq) = (batch.agent_session, batch.seq);
        let body = rankscope_proto::codec::Encoded::of(&batch).0;
        drop(batch);
        if let Some(spool) = &spool {
            let (spool, bytes) = (Arc::clone(spool), body.clone());
            let written = tokio::task::spawn_blocking(move || spool.write(session, seq, &bytes))
                .await
                .map_err(|e| std::io::Error::other(e.to_string()))
                .and_then(|r| r);
            if let Err(e) = written {
                Metrics::inc(&metrics.spool_write_errors);
                tracing::warn!(seq, error = %e, "cannot write the batch to the spool; it is sent all the same");
            }
        }
        for tx in spooled {
            let _ = tx.send(());
        }
        tracing::trace!(seq, events, samples, bytes = body.len(), "batch cut");
        let budget = budget.take(body.len()).await;
        let pending = Pending {
            session,
            seq,
            job,
            body,
            events,
            samples,
            _budget: budget,
        };
        if out.send(pending).await.is_err() {
            // Only after the uplink was aborted at the end of a shutdown; the
            // shutdown report counts these events as undelivered.
            tracing::error!(events, "uplink gone, batch not handed over");
        }
    }
}
