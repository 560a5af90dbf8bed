//! The rank-facing gRPC service `RankIngest.StreamEvents`.
//!
//! In: one bidi stream per training rank (TCP or Unix socket). Out: validated
//! events as [`Chunk`]s to the batcher, and one `RankAck` per message back to
//! the rank, in order.
//!
//! Backpressure — a rank is never blocked:
//! * the queue to the batcher is bounded by events: a message's events enter
//!   only if the queue's semaphore grants one permit per event at once
//!   (`try_acquire_many_owned`); otherwise all of them are dropped (drop
//!   newest), counted as `dropped_events{reason="queue_full"}` and the
//!   ack says `RESOURCE_EXHAUSTED` with the `dropped` count;
//! * acks go through a bounded channel with `try_send`; when the rank does
//!   not read its acks they are dropped and counted (`acks_dropped`);
//! * handling a message never awaits anything but the next message.
//!
//! After events of a stream were dropped, the step markers of its next
//! messages that would not pair up with what was forwarded (a StepEnd whose
//! StepBegin was dropped) are dropped too, counted as
//! `dropped_events{reason="unpaired"}`: the collector validates every batch's
//! step markers and would otherwise refuse the whole batch, with the events
//! of every rank in it.
//!
//! Invalid messages are answered with `INVALID_ARGUMENT` and the validation
//! text, counted by reason, and the stream goes on. A message over
//! `max_message_bytes` ends the stream with `RESOURCE_EXHAUSTED` (the gRPC
//! framing cannot be resynchronised past it). At shutdown every stream ends
//! with `UNAVAILABLE` at its next message boundary.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::Arc;

use rankscope_proto::v1 as proto;
use rankscope_proto::wire::server::rank_ingest_server;
use rankscope_proto::wire::RankMessageIn;
use tokio::sync::{mpsc, oneshot, watch, Notify, Semaphore};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Code, Request, Response, Status, Streaming};

pub(crate) mod session;

use crate::batch::steps::last_step_end;
use crate::batch::Chunk;
use crate::metrics::{DropReason, Metrics};
use crate::sample::ranks::{RankInfo, RankRegistry};
use session::Session;

/// Acks buffered per stream before they are dropped.
const ACK_BUFFER: usize = 1024;

/// State shared by all rank streams.
pub(crate) struct Ingest {
    pub(crate) node: String,
    pub(crate) queue: Arc<Semaphore>,
    pub(crate) chunks: mpsc::UnboundedSender<Chunk>,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) max_message_bytes: usize,
    /// Ranks with an open stream, for mapping GPUs and processes to ranks.
    pub(crate) ranks: Arc<RankRegistry>,
    pub(crate) next_stream: AtomicU64,
    /// With a disk spool, a message is acknowledged once its events are in it.
    spool: Option<Arc<crate::spool::Spool>>,
    stopping: AtomicBool,
    stop: watch::Sender<bool>,
    stream_ended: Notify,
}

impl Ingest {
    pub(crate) fn new(
        node: String,
        queue: Arc<Semaphore>,
        chunks: mpsc::UnboundedSender<Chunk>,
        metrics: Arc<Metrics>,
        max_message_bytes: usize,
        ranks: Arc<RankRegistry>,
        spool: Option<Arc<crate::spool::Spool>>,
    ) -> Self {
        Self {
            spool,
            node,
            queue,
            chunks,
            metrics,
            max_message_bytes,
            ranks,
            next_stream: AtomicU64::new(1),
            stopping: AtomicBool::new(false),
            stop: watch::channel(false).0,
            stream_ended: Notify::new(),
        }
    }

    /// Refuses new streams, ends the open ones at their next message boundary
    /// and waits until all of them are gone.
    pub(crate) async fn stop(&self) {
        self.stopping.store(true, SeqCst);
        self.stop.send_replace(true);
        loop {
            let ended = self.stream_ended.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            if self.metrics.streams_active.load(SeqCst) == 0 {
                return;
            }
            ended.await;
        }
    }

    /// Handles one message: validate, queue, build the ack. Never waits;
    /// with a spool, the ack is due once the returned receiver fires (the
    /// batch holding the events is on disk).
    fn handle(
        &self,
        session: &mut Session,
        msg: RankMessageIn,
    ) -> (proto::RankAck, Option<oneshot::Receiver<()>>) {
        let mut spooled = None;
        let ack = self.handle_inner(session, msg, &mut spooled);
        (ack, spooled)
    }

    fn handle_inner(
        &self,
        session: &mut Session,
        msg: RankMessageIn,
        spooled: &mut Option<oneshot::Receiver<()>>,
    ) -> proto::RankAck {
        let seq = msg.seq;
        let n = msg.raw.len();
        Metrics::inc(&self.metrics.received_messages);
        Metrics::add(&self.metrics.received_events, n as u64);
        let mut accepted = match session.accept(msg) {
            Ok(a) => a,
            Err(e) => {
                self.metrics.rejected(e.reason());
                tracing::debug!(seq, reason = e.reason(), error = %e, "rank message rejected");
                return ack(seq, Code::InvalidArgument, e.to_string(), 0, 0);
            }
        };
        // Markers left out count as `unpaired` only when the rest of the
        // message is forwarded; when it is dropped they go with it.
        let (unpaired, forwarded) = session.repair(&mut accepted);
        if n == 0 || n == unpaired {
            session.forwarded(forwarded);
            self.metrics.dropped(DropReason::Unpaired, unpaired as u64);
            return ack(seq, Code::Ok, String::new(), 0, unpaired);
        }
        let all = n;
        let n = n - unpaired;
        if self.spool.as_ref().is_some_and(|s| s.full()) {
            session.dropped();
            self.metrics.dropped(DropReason::SpoolFull, all as u64);
            return ack(
                seq,
                Code::ResourceExhausted,
                format!("agent spool full (spool_max_bytes): dropped {all} events"),
                0,
                all,
            );
        }
        let permit = u32::try_from(n)
            .ok()
            .and_then(|k| Arc::clone(&self.queue).try_acquire_many_owned(k).ok());
        let Some(permit) = permit else {
            session.dropped();
            self.metrics.dropped(DropReason::QueueFull, all as u64);
            return ack(
                seq,
                Code::ResourceExhausted,
                format!("agent queue full: dropped {all} events"),
                0,
                all,
            );
        };
        let tx = self.spool.as_ref().map(|_| {
            let (tx, rx) = oneshot::channel();
            *spooled = Some(rx);
            tx
        });
        let chunk = Chunk {
            step_end: last_step_end(&accepted.events),
            stream: accepted.stream,
            names: accepted.names,
            events: accepted.raw,
            permit,
            closed: false,
            spooled: tx,
        };
        if self.chunks.send(chunk).is_err() {
            session.dropped();
            self.metrics.dropped(DropReason::Shutdown, all as u64);
            return ack(
                seq,
                Code::ResourceExhausted,
                format!("agent is shutting down: dropped {all} events"),
                0,
                all,
            );
        }
        session.forwarded(forwarded);
        self.metrics.dropped(DropReason::Unpaired, unpaired as u64);
        Metrics::add(&self.metrics.accepted_events, n as u64);
        ack(seq, Code::Ok, String::new(), n, unpaired)
    }
}

fn ack(seq: u64, code: Code, message: String, accepted: usize, dropped: usize) -> proto::RankAck {
    proto::RankAck {
        seq,
        code: code as i32,
        message,
        accepted: u32::try_from(accepted).unwrap_or(u32::MAX),
        dropped: u32::try_from(dropped).unwrap_or(u32::MAX),
    }
}

/// Counts a live stream; wakes [`Ingest::stop`] when dropped.
struct StreamGuard(Arc<Ingest>);

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.0.metrics.streams_active.fetch_sub(1, SeqCst);
        self.0.stream_ended.notify_waiters();
    }
}

type AckStream = Pin<Box<dyn tokio_stream::Stream<Item = Result<proto::RankAck, Status>> + Send>>;

/// The tonic service; cheap to clone into both listeners.
#[derive(Clone)]
pub(crate) struct IngestService(pub(crate) Arc<Ingest>);

#[tonic::async_trait]
impl rank_ingest_server::RankIngest for IngestService {
    type StreamEventsStream = AckStream;

    async fn stream_events(
        &self,
        request: Request<Streaming<RankMessageIn>>,
    ) -> Result<Response<AckStream>, Status> {
        let ingest = Arc::clone(&self.0);
        // Count first, then check: `stop` sets the flag first, then reads
        // the count, so no stream slips past it unseen.
        ingest.metrics.streams_active.fetch_add(1, SeqCst);
        let guard = StreamGuard(Arc::clone(&ingest));
        if ingest.stopping.load(SeqCst) {
            return Err(Status::unavailable("agent is shutting down"));
        }
        Metrics::inc(&ingest.metrics.streams_opened);
        let id = ingest.next_stream.fetch_add(1, SeqCst);
        let (tx, rx) = mpsc::channel(ACK_BUFFER);
        tokio::spawn(run_stream(guard, id, request.into_inner(), tx));
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}

/// Reads one rank stream until it ends, the rank goes away or the agent stops.
async fn run_stream(
    guard: StreamGuard,
    id: u64,
    mut inbound: Streaming<RankMessageIn>,
    acks: mpsc::Sender<Result<proto::RankAck, Status>>,
) {
    let ingest = Arc::clone(&guard.0);
    let mut session = Session::new(id, ingest.node.clone());
    let mut stop = ingest.stop.subscribe();
    let mut registered = false;
    // Acks waiting for their events to reach the spool, in message order.
    let mut waiting: std::collections::VecDeque<(proto::RankAck, oneshot::Receiver<()>)> =
        std::collections::VecDeque::new();
    tracing::debug!(stream = id, "rank stream opened");
    loop {
        // At most ACK_BUFFER messages wait for the spool: then the rank's
        // own window holds it back.
        let may_read = waiting.len() < ACK_BUFFER;
        let front = async {
            match waiting.front_mut() {
                Some((_, rx)) => {
                    let _ = rx.await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        let next = tokio::select! {
            biased;
            _ = stop.wait_for(|s| *s) => {
                let _ = acks.try_send(Err(Status::unavailable("agent is shutting down")));
                break;
            }
            () = front => None,
            next = inbound.message(), if may_read => Some(next),
        };
        let Some(next) = next else {
            if let Some((ack, _)) = waiting.pop_front() {
                if send_ack(&ingest, &acks, ack).is_err() {
                    break;
                }
            }
            continue;
        };
        let msg = match next {
            Ok(Some(msg)) => msg,
            Ok(None) => {
                // The rank closed its side after its last message (as
                // `rankscope simulate` does): the acks still waiting for the
                // spool are owed to it, or it counts spooled events as lost.
                drain_acks(&ingest, &acks, &mut waiting, &mut stop).await;
                break;
            }
            Err(status) => {
                if let Some(status) = too_large(&status, ingest.max_message_bytes) {
                    ingest.metrics.rejected("message_too_large");
                    let _ = acks.try_send(Err(status));
                }
                tracing::debug!(stream = id, code = ?status.code(), message = status.message(), "rank stream failed");
                break;
            }
        };
        let (ack, spooled) = ingest.handle(&mut session, msg);
        if !registered {
            if let Some(i) = session.identity() {
                ingest.ranks.insert(
                    id,
                    RankInfo {
                        job_id: i.job_id.clone(),
                        rank: i.rank,
                        local_rank: i.local_rank,
                        pid: i.pid,
                    },
                );
                registered = true;
            }
        }
        match spooled {
            Some(rx) => waiting.push_back((ack, rx)),
            None if waiting.is_empty() => {
                if send_ack(&ingest, &acks, ack).is_err() {
                    break;
                }
            }
            // Behind acks that wait for the spool: keep the order.
            None => {
                let (tx, rx) = oneshot::channel();
                let _ = tx.send(());
                waiting.push_back((ack, rx));
            }
        }
    }
    ingest.ranks.remove(id);
    if let Some(stream) = session.stream() {
        // Tell the collector this rank is gone (no queue permit: no events).
        if let Ok(permit) = Arc::clone(&ingest.queue).try_acquire_many_owned(0) {
            let _ = ingest.chunks.send(Chunk {
                stream: Arc::clone(stream),
                names: Vec::new(),
                events: Default::default(),
                step_end: None,
                permit,
                closed: true,
                spooled: None,
            });
        }
    }
    let rank = session.identity().map(|i| (i.job_id.clone(), i.rank));
    tracing::debug!(stream = id, ?rank, "rank stream closed");
}

/// Sends the acks still waiting for the spool, in order, as each one's
/// events reach it; stops at shutdown or when the rank is gone.
async fn drain_acks(
    ingest: &Ingest,
    acks: &mpsc::Sender<Result<proto::RankAck, Status>>,
    waiting: &mut std::collections::VecDeque<(proto::RankAck, oneshot::Receiver<()>)>,
    stop: &mut tokio::sync::watch::Receiver<bool>,
) {
    while let Some((ack, rx)) = waiting.pop_front() {
        tokio::select! {
            biased;
            _ = stop.wait_for(|s| *s) => return,
            _ = rx => {}
        }
        if send_ack(ingest, acks, ack).is_err() {
            return;
        }
    }
}

/// Queues one ack for the rank; `Err` when the rank is gone.
fn send_ack(
    ingest: &Ingest,
    acks: &mpsc::Sender<Result<proto::RankAck, Status>>,
    ack: proto::RankAck,
) -> Result<(), ()> {
    match acks.try_send(Ok(ack)) {
        Ok(()) => Ok(()),
        Err(mpsc::error::TrySendError::Full(_)) => {
            Metrics::inc(&ingest.metrics.acks_dropped);
            Ok(())
        }
        Err(mpsc::error::TrySendError::Closed(_)) => Err(()),
    }
}

/// Maps tonic's "decoded message length too large" (OUT_OF_RANGE) to the
/// RESOURCE_EXHAUSTED our protocol promises.
fn too_large(status: &Status, limit: usize) -> Option<Status> {
    (status.code() == Code::OutOfRange && status.message().contains("too large")).then(|| {
        Status::resource_exhausted(format!(
            "message exceeds max_message_bytes = {limit}: {}",
            status.message()
        ))
    })
}
