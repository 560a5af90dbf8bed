//! The background sender: one thread, one single-threaded tokio runtime,
//! one `RankIngest.StreamEvents` stream at a time.
//!
//! In: [`Item`]s from the client's bounded queue. Out: `RankMessage`s to the
//! agent; counters in [`Shared`].
//!
//! Loop: connect (jittered exponential backoff from [`BACKOFF_MIN`] to
//! [`BACKOFF_MAX`] while the agent is away; the queue is not read then, so
//! it fills and the caller drops and counts), then stream: every
//! [`DRAIN_INTERVAL`] the queue is drained without waiting (so a producer
//! never wakes this thread) into the pending message, which is sent when it holds
//! a StepEnd (the collector's per-step verdicts wait for it), when it holds
//! [`MAX_EVENTS_PER_MESSAGE`] events or when its oldest event is
//! [`MAX_DELAY`] old, as long as fewer than [`WINDOW`] messages are
//! unacknowledged. Acks
//! come back in order; a broken stream counts its unacknowledged events as
//! dropped and the loop reconnects with a new stream (identity and names
//! are sent again). Events not yet sent survive a reconnect.

use std::collections::VecDeque;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use rankscope_proto::v1::{self as proto, event::Kind};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;

use crate::client::Shared;
use crate::connect::Target;

/// Most events per message.
pub const MAX_EVENTS_PER_MESSAGE: usize = 1024;
/// Longest an event waits for its message to fill (a step's end does not
/// wait: the collector's per-step verdicts need only the StepEnd's message,
/// so this bounds how late events inside a long step arrive, as the
/// agent's `batch_max_delay_ms` does on its side, also 1 s). Every message
/// costs the agent a wake-up, a decode and an ack: 1 s keeps a steadily
/// streaming rank at about 1 message a second plus one per step (200 ms
/// gave 5 a second; issue 38 goal 3, bench/RESULTS-alternations.md).
pub const MAX_DELAY: Duration = Duration::from_secs(1);
/// How often the queue is drained.
pub const DRAIN_INTERVAL: Duration = Duration::from_millis(20);
/// Most events taken from the queue and not yet sent.
const MAX_PENDING_EVENTS: usize = 4 * MAX_EVENTS_PER_MESSAGE;
/// Most unacknowledged messages per stream.
pub const WINDOW: usize = 16;
/// First reconnect delay.
pub const BACKOFF_MIN: Duration = Duration::from_millis(100);
/// Longest reconnect delay.
pub const BACKOFF_MAX: Duration = Duration::from_secs(1);
/// How long closing waits for the agent's last acks.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);
/// gRPC RESOURCE_EXHAUSTED.
const CODE_RESOURCE_EXHAUSTED: i32 = 8;

/// What the client puts into the queue.
#[derive(Debug)]
pub(crate) enum Item {
    Event(proto::Event),
    /// Send everything queued before this and answer once acknowledged.
    Flush(std::sync::mpsc::SyncSender<bool>),
    /// Flush, close the stream and stop.
    Close(std::sync::mpsc::SyncSender<bool>),
}

/// Starts the sender thread.
pub(crate) fn spawn(
    target: Target,
    identity: proto::RankIdentity,
    rx: mpsc::Receiver<Item>,
    shared: Arc<Shared>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("rankscope-sender".into())
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    Shared::set_text(&shared.last_error, format!("no runtime: {e}"));
                    return;
                }
            };
            rt.block_on(Sender::new(target, identity, rx, shared).run());
        })
}

/// How a stream ended.
enum End {
    /// The stream broke; reconnect.
    Broken(String),
    /// Closing (or the client is gone): stop.
    Stop,
}

struct InFlight {
    seq: u64,
    events: u64,
    /// Names this message defined (undefined again if it is rejected).
    defined: Vec<u32>,
    /// Flush requests answered once this message is acknowledged.
    waiters: Vec<std::sync::mpsc::SyncSender<bool>>,
}

struct Sender {
    target: Target,
    identity: proto::RankIdentity,
    rx: mpsc::Receiver<Item>,
    shared: Arc<Shared>,
    /// Events not yet in a message (kept across reconnects).
    pending: Vec<proto::Event>,
    pending_since: Option<Instant>,
    /// `pending` holds a StepEnd: it is sent without waiting for
    /// [`MAX_DELAY`].
    step_ended: bool,
    /// Flush requests waiting for `pending` to be sent.
    waiters: Vec<std::sync::mpsc::SyncSender<bool>>,
    closing: Option<std::sync::mpsc::SyncSender<bool>>,
    streams: u64,
    /// The "no agent" line was printed (once per client).
    warned: bool,
    /// Step state of what this stream carried: (last step, open step).
    steps: (Option<u64>, Option<u64>),
}

impl Sender {
    fn new(
        target: Target,
        identity: proto::RankIdentity,
        rx: mpsc::Receiver<Item>,
        shared: Arc<Shared>,
    ) -> Self {
        Self {
            target,
            identity,
            rx,
            shared,
            pending: Vec::new(),
            pending_since: None,
            step_ended: false,
            waiters: Vec::new(),
            closing: None,
            streams: 0,
            warned: false,
            steps: (None, None),
        }
    }

    async fn run(mut self) {
        let mut backoff = BACKOFF_MIN;
        loop {
            match self.target.connect().await {
                Ok(channel) => {
                    self.streams += 1;
                    if self.streams > 1 {
                        self.shared.reconnects.fetch_add(1, Relaxed);
                    }
                    let started = Instant::now();
                    match self.stream(channel).await {
                        End::Stop => return,
                        End::Broken(why) => {
                            Shared::set_text(&self.shared.last_error, why);
                            if started.elapsed() > BACKOFF_MAX {
                                backoff = BACKOFF_MIN;
                            }
                        }
                    }
                }
                Err(e) => {
                    let why = error_chain(&e);
                    if self.streams == 0 && !self.warned {
                        // Once per rank, on stderr: training goes on, but
                        // nothing is recorded until an agent listens there.
                        self.warned = true;
                        let line = format!(
                            "rankscope: rank {} of job {:?}: no agent at {} ({why}); \
                             training goes on, its events wait in a bounded queue and are \
                             dropped when it is full (start an agent: `make up`, or point \
                             RANKSCOPE_AGENT / `rankscope run --agent` at one)\n",
                            self.identity.rank, self.identity.job_id, self.target
                        );
                        // One write: ranks sharing a terminal do not interleave.
                        let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
                    }
                    Shared::set_text(
                        &self.shared.last_error,
                        format!("cannot connect to the agent at {}: {why}", self.target),
                    );
                    self.shared.down.store(true, Relaxed);
                }
            }
            self.shared.connected.store(false, Relaxed);
            for w in self.waiters.drain(..) {
                let _ = w.try_send(false);
            }
            // A closing client with no agent: give up at once.
            if self.closing.is_some() || self.rx.is_closed() && self.rx.is_empty() {
                if let Some(c) = self.closing.take() {
                    let _ = c.try_send(false);
                }
                return;
            }
            // Jitter in [0.5, 1): ranks restarted together do not reconnect together.
            let jitter = 0.5 + (crate::now_ns() % 1000) as f64 / 2000.0;
            tokio::time::sleep(backoff.mul_f64(jitter)).await;
            backoff = (backoff * 2).min(BACKOFF_MAX);
        }
    }

    /// One stream, until it breaks or the client closes.
    async fn stream(&mut self, channel: tonic::transport::Channel) -> End {
        let mut client = proto::rank_ingest_client::RankIngestClient::new(channel);
        let (out_tx, out_rx) = mpsc::channel::<proto::RankMessage>(WINDOW);
        let mut defined: Vec<bool> = Vec::new();
        let mut in_flight: VecDeque<InFlight> = VecDeque::new();
        let mut next_seq = 1u64;
        self.steps = (None, None); // the agent starts each stream afresh
                                   // The identity message opens the stream (and tells the agent who we
                                   // are before any event, so its attribution and GPU mapping start).
        let hello = proto::RankMessage {
            identity: Some(self.identity.clone()),
            seq: next_seq,
            names: None,
            events: Vec::new(),
        };
        next_seq += 1;
        if out_tx.try_send(hello).is_err() {
            return End::Broken("cannot queue the first message".into());
        }
        in_flight.push_back(InFlight {
            seq: 1,
            events: 0,
            defined: Vec::new(),
            waiters: Vec::new(),
        });
        let mut out_tx = Some(out_tx);
        let mut acks = match client.stream_events(ReceiverStream::new(out_rx)).await {
            Ok(r) => r.into_inner(),
            Err(status) => return End::Broken(format!("the agent refused the stream: {status}")),
        };
        self.shared.connected.store(true, Relaxed);
        self.shared.down.store(false, Relaxed);
        let mut close_deadline: Option<Instant> = None;
        let mut next_drain = Instant::now();
        loop {
            // Send the pending message when it is due and the window allows.
            let full = self.pending.len() >= MAX_EVENTS_PER_MESSAGE;
            let due = self.pending_since.is_some_and(|t| t.elapsed() >= MAX_DELAY);
            let urgent = !self.waiters.is_empty() || self.closing.is_some() || self.step_ended;
            let has_work = !self.pending.is_empty() || !self.waiters.is_empty();
            if has_work && (full || due || urgent) && in_flight.len() < WINDOW {
                if let Some(tx) = &out_tx {
                    let msg = self.take_message(&mut next_seq, &mut defined, &mut in_flight);
                    if tx.try_send(msg).is_err() {
                        return self.broken(&mut in_flight, "the request stream is closed".into());
                    }
                }
                continue;
            }
            if self.closing.is_some() && self.pending.is_empty() && out_tx.is_some() {
                out_tx = None; // ends the request stream; the agent then ends its
                close_deadline = Some(Instant::now() + CLOSE_TIMEOUT);
            }
            let wake = self
                .pending_since
                .map_or(Instant::now() + Duration::from_secs(3600), |t| {
                    t + MAX_DELAY
                });
            let wake = close_deadline.map_or(wake, |d| d.min(wake));
            // The queue is drained on a clock, not read with a waiting
            // receiver: a producer's try_send then wakes nobody (no futex
            // wake on the training thread, no context switch per event).
            let wake = wake.min(next_drain);
            tokio::select! {
                ack = acks.message() => match ack {
                    Ok(Some(ack)) => {
                        if let Err(why) = self.on_ack(&ack, &mut in_flight, &mut defined) {
                            return self.broken(&mut in_flight, why);
                        }
                    }
                    Ok(None) => {
                        if self.closing.is_some() && out_tx.is_none() && in_flight.is_empty() {
                            return self.stop();
                        }
                        return self.broken(&mut in_flight, "the agent ended the stream".into());
                    }
                    Err(status) => {
                        return self.broken(&mut in_flight, format!("the stream failed: {status}"));
                    }
                },
                _ = tokio::time::sleep_until(wake) => {
                    if Instant::now() >= next_drain {
                        next_drain = Instant::now() + DRAIN_INTERVAL;
                        if self.drain() {
                            continue;
                        }
                    }
                    if close_deadline.is_some_and(|d| Instant::now() >= d) {
                        let _ = self.broken(&mut in_flight, "the agent did not close the stream".into());
                        return self.stop();
                    }
                }
            }
        }
    }

    /// Takes what the queue holds now (never waits), up to
    /// [`MAX_PENDING_EVENTS`]; true when it took anything.
    fn drain(&mut self) -> bool {
        let mut took = false;
        while self.closing.is_none() && self.pending.len() < MAX_PENDING_EVENTS {
            match self.rx.try_recv() {
                Ok(Item::Event(e)) => {
                    took = true;
                    if !self.keeps_steps_paired(&e) {
                        self.shared.dropped_unpaired.fetch_add(1, Relaxed);
                        continue;
                    }
                    if self.pending.is_empty() {
                        self.pending_since = Some(Instant::now());
                    }
                    self.step_ended |= matches!(e.kind, Some(Kind::StepEnd(_)));
                    self.pending.push(e);
                }
                Ok(Item::Flush(w)) => {
                    took = true;
                    self.waiters.push(w);
                }
                Ok(Item::Close(w)) => {
                    took = true;
                    self.closing = Some(w);
                }
                Err(mpsc::error::TryRecvError::Empty) => break,
                Err(mpsc::error::TryRecvError::Disconnected) => {
                    // The client is gone without closing: close for it.
                    let (tx, _rx) = std::sync::mpsc::sync_channel(1);
                    self.closing = Some(tx);
                    took = true;
                }
            }
        }
        took
    }

    /// Whether `e` fits the step markers this stream carried. When the
    /// queue dropped a step's begin or end, its partner would make the
    /// agent reject the whole message (an end that does not match the open
    /// step, or a step ended twice); such a marker is left out (and
    /// counted) instead. A begin while a step is open is kept: the agent
    /// and the collector take it as the start of the next step.
    fn keeps_steps_paired(&mut self, e: &proto::Event) -> bool {
        let (last, open) = self.steps;
        match &e.kind {
            Some(Kind::StepBegin(b)) => {
                if last.is_some_and(|l| b.step < l || (b.step == l && open.is_some())) {
                    return false;
                }
                self.steps = (Some(b.step), Some(b.step));
            }
            Some(Kind::StepEnd(x)) => {
                let fits = match open {
                    Some(o) => o == x.step,
                    None => last.is_none_or(|l| x.step > l),
                };
                if !fits {
                    return false;
                }
                self.steps = (Some(x.step), None);
            }
            _ => {}
        }
        true
    }

    /// Builds the next message from `pending`, defining the names it uses.
    fn take_message(
        &mut self,
        next_seq: &mut u64,
        defined: &mut Vec<bool>,
        in_flight: &mut VecDeque<InFlight>,
    ) -> proto::RankMessage {
        let n = self.pending.len().min(MAX_EVENTS_PER_MESSAGE);
        let events: Vec<proto::Event> = self.pending.drain(..n).collect();
        self.pending_since = (!self.pending.is_empty()).then(Instant::now);
        self.step_ended = self
            .pending
            .iter()
            .any(|e| matches!(e.kind, Some(Kind::StepEnd(_))));
        let mut new_ids = Vec::new();
        for e in &events {
            let id = match &e.kind {
                Some(Kind::Span(s)) => s.name_id,
                Some(Kind::Collective(c)) => c.process_group_id,
                Some(Kind::Kernel(k)) => k.name_id,
                _ => 0,
            };
            let i = id as usize;
            if id != 0 && !defined.get(i).copied().unwrap_or(false) {
                if defined.len() <= i {
                    defined.resize(i + 1, false);
                }
                defined[i] = true;
                new_ids.push(id);
            }
        }
        let names: Vec<proto::InternedName> = match self.shared.names.lock() {
            Ok(table) => new_ids
                .iter()
                .filter_map(|&id| {
                    let name = table.by_id.get(id as usize - 1)?;
                    Some(proto::InternedName {
                        id,
                        name: name.to_string(),
                    })
                })
                .collect(),
            Err(_) => Vec::new(),
        };
        let seq = *next_seq;
        *next_seq += 1;
        let waiters = if self.pending.is_empty() {
            std::mem::take(&mut self.waiters)
        } else {
            Vec::new()
        };
        in_flight.push_back(InFlight {
            seq,
            events: events.len() as u64,
            defined: new_ids,
            waiters,
        });
        proto::RankMessage {
            identity: None,
            seq,
            names: (!names.is_empty()).then_some(proto::NameTable { names }),
            events,
        }
    }

    fn on_ack(
        &mut self,
        ack: &proto::RankAck,
        in_flight: &mut VecDeque<InFlight>,
        defined: &mut [bool],
    ) -> Result<(), String> {
        let Some(front) = in_flight.pop_front() else {
            return Err(format!("unexpected ack for message {}", ack.seq));
        };
        if front.seq != ack.seq {
            return Err(format!(
                "ack for message {} while {} was the oldest unacknowledged",
                ack.seq, front.seq
            ));
        }
        let s = &self.shared;
        s.sent.fetch_add(u64::from(ack.accepted), Relaxed);
        s.dropped_by_agent
            .fetch_add(u64::from(ack.dropped), Relaxed);
        let queue_full = ack.code == CODE_RESOURCE_EXHAUSTED && ack.dropped > 0;
        let ok = ack.code == 0 || queue_full;
        if !ok {
            s.rejected.fetch_add(front.events, Relaxed);
            Shared::set_text(
                &s.last_rejection,
                format!("message {}: code {}: {}", ack.seq, ack.code, ack.message),
            );
            // The agent committed nothing of a rejected message.
            for id in &front.defined {
                if let Some(d) = defined.get_mut(*id as usize) {
                    *d = false;
                }
            }
        }
        for w in front.waiters {
            let _ = w.try_send(true);
        }
        Ok(())
    }

    fn broken(&mut self, in_flight: &mut VecDeque<InFlight>, why: String) -> End {
        let lost: u64 = in_flight.iter().map(|m| m.events).sum();
        self.shared.dropped_disconnected.fetch_add(lost, Relaxed);
        for m in in_flight.drain(..) {
            for w in m.waiters {
                let _ = w.try_send(false);
            }
        }
        End::Broken(why)
    }

    fn stop(&mut self) -> End {
        self.shared.connected.store(false, Relaxed);
        if let Some(c) = self.closing.take() {
            let _ = c.try_send(true);
        }
        End::Stop
    }
}

/// `e` and its sources, joined by ": ".
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(inner) = src {
        // Wrappers that repeat their source's text add nothing.
        let text = inner.to_string();
        if !s.ends_with(&text) {
            s.push_str(": ");
            s.push_str(&text);
        }
        src = inner.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(kind: Kind) -> Item {
        Item::Event(proto::Event { kind: Some(kind) })
    }

    #[test]
    fn a_step_end_sends_the_pending_message_without_waiting() {
        let (tx, rx) = mpsc::channel(16);
        let target = Target::Tcp(tonic::transport::Endpoint::from_static(
            "http://127.0.0.1:9",
        ));
        let mut s = Sender::new(target, Default::default(), rx, Arc::default());
        let (mut seq, mut defined, mut in_flight) = (1, Vec::new(), VecDeque::new());

        tx.try_send(ev(Kind::StepBegin(proto::StepBegin { step: 0, ts_ns: 1 })))
            .unwrap();
        assert!(s.drain());
        assert!(!s.step_ended, "a step's begin waits for MAX_DELAY");

        tx.try_send(ev(Kind::StepEnd(proto::StepEnd { step: 0, ts_ns: 2 })))
            .unwrap();
        tx.try_send(ev(Kind::StepBegin(proto::StepBegin { step: 1, ts_ns: 3 })))
            .unwrap();
        assert!(s.drain());
        assert!(s.step_ended, "the end makes the message due");

        let m = s.take_message(&mut seq, &mut defined, &mut in_flight);
        assert_eq!(m.events.len(), 3);
        assert!(!s.step_ended, "sent: nothing urgent is left");
    }
}
