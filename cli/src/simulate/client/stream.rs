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
    let rank = opts.identity.rank;
    let mut builder = MessageBuilder::new(opts.identity.clone(), opts.events_per_message);
    let mut sender = Sender::new(rank, channel, opts.pacer.clone());
    while let Some(step) = steps.recv().await {
        if opts.realtime {
            wait_until_wall_ns(step.end_ns).await;
        }
        for event in step.events {
            if let Some(msg) = builder.push(event) {
                sender.send(msg).await?;
            }
        }
        if opts.realtime && builder.has_pending() {
            sender.send(builder.take()).await?;
        }
    }
    if builder.has_pending() || sender.outcome.messages_sent == 0 {
        sender.send(builder.take()).await?;
    }
    sender.finish().await
}

/// The gRPC side of one stream: sends messages, reads acks in order.
struct Sender {
    rank: u32,
    client: RankIngestClient<Channel>,
    pacer: Option<Arc<Pacer>>,
    tx: Option<mpsc::Sender<proto::RankMessage>>,
    rx: Option<mpsc::Receiver<proto::RankMessage>>,
    acks: Option<tonic::Streaming<proto::RankAck>>,
    in_flight: VecDeque<u64>,
    outcome: RankOutcome,
}

impl Sender {
    fn new(rank: u32, channel: Channel, pacer: Option<Arc<Pacer>>) -> Self {
        let (tx, rx) = mpsc::channel(WINDOW);
        let client = RankIngestClient::new(channel)
            .max_decoding_message_size(64 << 20)
            .max_encoding_message_size(64 << 20);
        Self {
            rank,
            client,
            pacer,
            tx: Some(tx),
            rx: Some(rx),
            acks: None,
            in_flight: VecDeque::with_capacity(WINDOW),
            outcome: RankOutcome::default(),
        }
    }

    async fn send(&mut self, msg: proto::RankMessage) -> Result<(), SimError> {
        if let Some(pacer) = &self.pacer {
            pacer.acquire(msg.events.len()).await;
        }
        while self.in_flight.len() >= WINDOW {
            self.read_ack().await?;
        }
        self.outcome.messages_sent += 1;
        for e in &msg.events {
            self.outcome.sent.add(e);
        }
        self.in_flight.push_back(msg.seq);
        let tx = self.tx.as_ref().ok_or(SimError::Unacked {
            rank: self.rank,
            unacked: self.in_flight.len(),
        })?;
        if tx.send(msg).await.is_err() {
            // The call ended; its status says why.
            return Err(self.read_ack().await.err().unwrap_or(SimError::Unacked {
                rank: self.rank,
                unacked: self.in_flight.len(),
            }));
        }
        if self.acks.is_none() {
            // The first message is queued before the call, so an agent that
            // waits for it before answering cannot deadlock us.
            if let Some(rx) = self.rx.take() {
                let response = self
                    .client
                    .stream_events(ReceiverStream::new(rx))
                    .await
                    .map_err(|status| SimError::stream(self.rank, status))?;
                self.acks = Some(response.into_inner());
            }
        }
        Ok(())
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
        let expected = self.in_flight.front().copied().unwrap_or(0);
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
            self.read_ack().await?;
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
