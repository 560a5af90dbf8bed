//! One rank's `RankIngest.StreamEvents` stream.
//!
//! In: the rank's steps (from the generator, in order) and a connection.
//! Out: `RankMessage`s of at most `events_per_message` events, and a
//! [`RankOutcome`] tallying the agent's acks.
//!
//! Invariants: the first message carries the identity; every name is
//! defined (in the message's `names`) in the first message whose events use
//! it, and never again; message `seq` starts at 1 and increases by one; acks
//! must come back in order (`seq` of the oldest unacknowledged message); at
//! most [`WINDOW`] messages are unacknowledged at once.
//!
//! Reconnects: when the stream breaks (the agent restarted or went away),
//! the messages in flight are counted as lost (`lost_disconnected`, as the
//! SDK's `dropped_disconnected`: never resent, so nothing is stored twice),
//! and the message at hand is sent on a new stream whose first message
//! carries the identity and every name defined so far. Retries back off from
//! 100 ms to 1 s and give up after [`RECONNECT_TIMEOUT`] per outage.

use super::pace::{wait_until_wall_ns, Pacer};
use super::SimError;
use crate::simulate::model::{event_name_id, name_text, EventCounts, RankStep};
use proto::rank_ingest_client::RankIngestClient;
use rankscope_proto::v1 as proto;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;

/// Most messages in flight (sent, not yet acknowledged) per stream.
pub const WINDOW: usize = 8;
/// gRPC status code RESOURCE_EXHAUSTED.
const CODE_RESOURCE_EXHAUSTED: i32 = 8;
/// How long to wait for the agent to close a fully acknowledged stream.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long an ack may take; the agent never blocks a rank, so a silent
/// agent is broken, not busy.
const ACK_TIMEOUT: Duration = Duration::from_secs(60);
/// How long one outage of the agent may last before the rank gives up.
const RECONNECT_TIMEOUT: Duration = Duration::from_secs(60);
/// First and longest wait between reconnection attempts.
const RETRY_INITIAL: Duration = Duration::from_millis(100);
const RETRY_MAX: Duration = Duration::from_secs(1);

/// How one rank sends.
#[derive(Debug, Clone)]
pub struct RankOptions {
    /// Identity sent in the first message.
    pub identity: proto::RankIdentity,
    /// Most events per message (>= 1).
    pub events_per_message: usize,
    /// Hold each step until the wall clock has passed its end.
    pub realtime: bool,
    /// Shared throttle, if any.
    pub pacer: Option<Arc<Pacer>>,
}

/// What one rank sent and what the agent said.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RankOutcome {
    pub sent: EventCounts,
    pub messages_sent: u64,
    pub accepted: u64,
    pub dropped: u64,
    pub rejected: u64,
    pub first_rejection: Option<String>,
    /// Events in messages that were in flight when a stream broke.
    pub lost: u64,
    /// Streams that broke (each followed by a reconnect, or the end).
    pub disconnects: u64,
}

/// Cuts a rank's event sequence into messages, interning names.
#[derive(Debug)]
pub struct MessageBuilder {
    identity: Option<proto::RankIdentity>,
    max_events: usize,
    next_seq: u64,
    defined: Vec<bool>,
    names: Vec<proto::InternedName>,
    events: Vec<proto::Event>,
}

impl MessageBuilder {
    /// A builder whose first message carries `identity`.
    pub fn new(identity: proto::RankIdentity, max_events: usize) -> Self {
        Self {
            identity: Some(identity),
            max_events: max_events.max(1),
            next_seq: 1,
            defined: Vec::new(),
            names: Vec::new(),
            events: Vec::new(),
        }
    }

    /// Adds one event; returns a message when it filled one.
    pub fn push(&mut self, event: proto::Event) -> Option<proto::RankMessage> {
        let id = event_name_id(&event);
        let index = id as usize;
        if id != 0 && !self.defined.get(index).copied().unwrap_or(false) {
            if self.defined.len() <= index {
                self.defined.resize(index + 1, false);
            }
            self.defined[index] = true;
            let name = name_text(id).unwrap_or("unknown").to_string();
            self.names.push(proto::InternedName { id, name });
        }
        self.events.push(event);
        (self.events.len() >= self.max_events).then(|| self.take())
    }

    /// Whether events are waiting for a message.
    pub fn has_pending(&self) -> bool {
        !self.events.is_empty()
    }

    /// The next message with whatever is pending (possibly no events).
    pub fn take(&mut self) -> proto::RankMessage {
        let seq = self.next_seq;
        self.next_seq += 1;
        let names = std::mem::take(&mut self.names);
        proto::RankMessage {
            identity: self.identity.take(),
            seq,
            names: (!names.is_empty()).then_some(proto::NameTable { names }),
            events: std::mem::take(&mut self.events),
        }
    }
}

/// Streams a rank's steps to the agent until the generator is done.
pub async fn run_rank(
    opts: RankOptions,
    channel: Channel,
    mut steps: mpsc::Receiver<RankStep>,
) -> Result<RankOutcome, SimError> {
    let mut builder = MessageBuilder::new(opts.identity.clone(), opts.events_per_message);
    let mut sender = Sender::new(opts.identity.clone(), channel, opts.pacer.clone());
    while let Some(step) = steps.recv().await {
        if opts.realtime {
            wait_until_wall_ns(step.end_ns).await;
        }
        for event in step.events {
            if let Some(msg) = builder.push(event) {
                sender.send(msg).await?;
            }
        }
        // Paced or in real time, a step's end goes out with the step, as
        // the rank SDK sends it.
        if (opts.realtime || opts.pacer.is_some()) && builder.has_pending() {
            sender.send(builder.take()).await?;
        }
    }
    if builder.has_pending() || sender.outcome.messages_sent == 0 {
        sender.send(builder.take()).await?;
    }
    sender.finish().await
}

/// The gRPC side of one rank: sends messages, reads acks in order, and
/// opens a new stream when one breaks.
struct Sender {
    rank: u32,
    identity: proto::RankIdentity,
    /// Every name defined so far (sent again on a new stream).
    names: Vec<proto::InternedName>,
    /// The next message opens a stream: it carries identity and names.
    fresh: bool,
    client: RankIngestClient<Channel>,
    pacer: Option<Arc<Pacer>>,
    tx: Option<mpsc::Sender<proto::RankMessage>>,
    rx: Option<mpsc::Receiver<proto::RankMessage>>,
    acks: Option<tonic::Streaming<proto::RankAck>>,
    /// (seq, events) of the unacknowledged messages.
    in_flight: VecDeque<(u64, u64)>,
    outcome: RankOutcome,
}

/// Whether the error is the stream breaking (worth a new stream).
fn is_disconnect(e: &SimError) -> bool {
    use tonic::Code;
    match e {
        SimError::Unacked { .. } => true,
        SimError::Stream { code, .. } => matches!(
            code,
            Code::Unavailable | Code::Unknown | Code::Cancelled | Code::Aborted
        ),
        _ => false,
    }
}

impl Sender {
    fn new(identity: proto::RankIdentity, channel: Channel, pacer: Option<Arc<Pacer>>) -> Self {
        let client = RankIngestClient::new(channel)
            .max_decoding_message_size(64 << 20)
            .max_encoding_message_size(64 << 20);
        Self {
            rank: identity.rank,
            identity,
            names: Vec::new(),
            fresh: true,
            client,
            pacer,
            tx: None,
            rx: None,
            acks: None,
            in_flight: VecDeque::with_capacity(WINDOW),
            outcome: RankOutcome::default(),
        }
    }

    async fn send(&mut self, msg: proto::RankMessage) -> Result<(), SimError> {
        if let Some(pacer) = &self.pacer {
            pacer.acquire(msg.events.len()).await;
        }
        if let Some(table) = &msg.names {
            self.names.extend(table.names.iter().cloned());
        }
        let (mut msg, mut waited, mut backoff) = (msg, Duration::ZERO, RETRY_INITIAL);
        loop {
            match self.try_send(msg).await {
                Ok(()) => return Ok(()),
                Err((e, Some(back))) if is_disconnect(&e) && waited < RECONNECT_TIMEOUT => {
                    tracing::debug!(rank = self.rank, error = %e, "stream broke; reconnecting");
                    self.drop_stream();
                    tokio::time::sleep(backoff).await;
                    waited += backoff;
                    backoff = (backoff * 2).min(RETRY_MAX);
                    msg = back;
                }
                Err((e, _)) => return Err(e),
            }
        }
    }

    /// Sends one message on the current stream (opening one if needed);
    /// on failure, gives the message back when it did not reach the agent.
    async fn try_send(
        &mut self,
        mut msg: proto::RankMessage,
    ) -> Result<(), (SimError, Option<proto::RankMessage>)> {
        while self.in_flight.len() >= WINDOW {
            if let Err(e) = self.read_ack().await {
                return Err((e, Some(msg)));
            }
        }
        if self.fresh {
            msg.identity = Some(self.identity.clone());
            if !self.names.is_empty() {
                msg.names = Some(proto::NameTable {
                    names: self.names.clone(),
                });
            }
        }
        if self.tx.is_none() {
            let (tx, rx) = mpsc::channel(WINDOW);
            (self.tx, self.rx, self.acks) = (Some(tx), Some(rx), None);
        }
        // The first message of a stream is queued before the call opens (an
        // agent that waits for it before answering cannot deadlock us); kept
        // to send again if the call cannot open.
        let first = self.rx.is_some().then(|| msg.clone());
        let mut counts = EventCounts::default();
        for e in &msg.events {
            counts.add(e);
        }
        let (seq, events) = (msg.seq, msg.events.len() as u64);
        let sent = match &self.tx {
            Some(tx) => tx.send(msg).await.map_err(|back| back.0),
            None => Err(msg),
        };
        if let Err(back) = sent {
            let unacked = self.in_flight.len();
            let rank = self.rank;
            let e = self
                .read_ack()
                .await
                .err()
                .unwrap_or(SimError::Unacked { rank, unacked });
            return Err((e, Some(back)));
        }
        self.in_flight.push_back((seq, events));
        if let Some(rx) = self.rx.take() {
            match self.client.stream_events(ReceiverStream::new(rx)).await {
                Ok(response) => self.acks = Some(response.into_inner()),
                Err(status) => {
                    self.in_flight.pop_back();
                    return Err((SimError::stream(self.rank, status), first));
                }
            }
        }
        self.fresh = false;
        let o = &mut self.outcome;
        o.messages_sent += 1;
        o.sent.steps += counts.steps;
        o.sent.spans += counts.spans;
        o.sent.collectives += counts.collectives;
        o.sent.kernels += counts.kernels;
        Ok(())
    }

    /// Forgets a broken stream: its unacknowledged messages are lost.
    fn drop_stream(&mut self) {
        let lost: u64 = self.in_flight.drain(..).map(|(_, n)| n).sum();
        let o = &mut self.outcome;
        o.lost += lost;
        o.disconnects += 1;
        (self.tx, self.rx, self.acks, self.fresh) = (None, None, None, true);
    }

    async fn read_ack(&mut self) -> Result<(), SimError> {
        let rank = self.rank;
        let unacked = self.in_flight.len();
        let acks = self
            .acks
            .as_mut()
            .ok_or(SimError::Unacked { rank, unacked })?;
        let ack = match tokio::time::timeout(ACK_TIMEOUT, acks.message()).await {
            Ok(Ok(Some(ack))) => ack,
            Ok(Ok(None)) => return Err(SimError::Unacked { rank, unacked }),
            Ok(Err(status)) => return Err(SimError::stream(rank, status)),
            Err(_) => {
                let waited_s = ACK_TIMEOUT.as_secs();
                return Err(SimError::AckTimeout { rank, waited_s });
            }
        };
        let expected = self.in_flight.front().map_or(0, |m| m.0);
        if ack.seq != expected {
            return Err(SimError::AckOutOfOrder {
                rank,
                expected,
                got: ack.seq,
            });
        }
        self.in_flight.pop_front();
        self.record(&ack);
        Ok(())
    }

    fn record(&mut self, ack: &proto::RankAck) {
        let o = &mut self.outcome;
        o.accepted += u64::from(ack.accepted);
        o.dropped += u64::from(ack.dropped);
        // RESOURCE_EXHAUSTED with dropped events is the queue-full drop;
        // every other non-zero code rejected the message.
        let queue_full = ack.code == CODE_RESOURCE_EXHAUSTED && ack.dropped > 0;
        if ack.code != 0 && !queue_full {
            o.rejected += 1;
            tracing::debug!(rank = self.rank, seq = ack.seq, code = ack.code, message = %ack.message, "message rejected");
            if o.first_rejection.is_none() {
                o.first_rejection = Some(format!(
                    "rank {} message {}: code {}: {}",
                    self.rank, ack.seq, ack.code, ack.message
                ));
            }
        }
    }

    async fn finish(mut self) -> Result<RankOutcome, SimError> {
        // Closing our side ends the request stream; the agent then ends its.
        self.tx = None;
        while !self.in_flight.is_empty() {
            match self.read_ack().await {
                Ok(()) => {}
                Err(e) if is_disconnect(&e) => {
                    // Nothing left to send: the unacknowledged are lost.
                    self.drop_stream();
                    return Ok(self.outcome);
                }
                Err(e) => return Err(e),
            }
        }
        if let Some(acks) = self.acks.as_mut() {
            match tokio::time::timeout(CLOSE_TIMEOUT, acks.message()).await {
                Ok(Ok(None)) => {}
                Ok(Ok(Some(extra))) => {
                    tracing::warn!(rank = self.rank, seq = extra.seq, "unexpected extra ack");
                }
                Ok(Err(status)) => return Err(SimError::stream(self.rank, status)),
                Err(_) => tracing::debug!(rank = self.rank, "agent did not close the stream"),
            }
        }
        Ok(self.outcome)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::simulate::model::catalog::Name;

    fn kernel(name: Name) -> proto::Event {
        proto::Event {
            kind: Some(proto::event::Kind::Kernel(proto::Kernel {
                kind: proto::KernelKind::Kernel as i32,
                name_id: name.id(),
                ..Default::default()
            })),
        }
    }

    #[test]
    fn builder_interns_once_and_numbers_messages() {
        let id = proto::RankIdentity {
            job_id: "j".into(),
            world_size: 1,
            ..Default::default()
        };
        let mut b = MessageBuilder::new(id.clone(), 2);
        assert!(b.push(kernel(Name::GemmQkv)).is_none());
        let m1 = b.push(kernel(Name::GemmQkv)).unwrap();
        assert_eq!(m1.seq, 1);
        assert_eq!(m1.identity, Some(id));
        let names = m1.names.unwrap().names;
        assert_eq!(names.len(), 1);
        assert_eq!(names[0].id, Name::GemmQkv.id());
        assert_eq!(names[0].name, Name::GemmQkv.text());
        assert!(b.push(kernel(Name::GemmQkv)).is_none());
        let m2 = b.push(kernel(Name::FlashFwd)).unwrap();
        assert_eq!(m2.seq, 2);
        assert_eq!(m2.identity, None);
        let names = m2.names.unwrap().names;
        assert_eq!(
            names.iter().map(|n| n.id).collect::<Vec<_>>(),
            [Name::FlashFwd.id()]
        );
        assert!(!b.has_pending());
        let m3 = b.take();
        assert_eq!((m3.seq, m3.events.len(), m3.names), (3, 0, None));
    }
}
