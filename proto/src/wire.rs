//! Events kept as their wire bytes through the agent (issue 38, goal 1).
//!
//! The agent validates every event of a rank message, so it decodes each
//! one, but it forwards them unchanged: re-encoding millions of decoded
//! events into `AgentBatch`es was most of its protobuf work (the sizes of
//! every nested message computed at each level, varints written a byte at
//! a time). Here a rank message is decoded with each event's bytes kept
//! beside the decoded event, and a batch is encoded with those bytes copied
//! as they are.
//!
//! In: the bytes of a `RankMessage` (gRPC, [`RankMessageCodec`]); queued
//! events' bytes grouped into a batch ([`AgentBatchWire`]). Out: the
//! message's fields, its decoded events and each event's bytes
//! ([`RankMessageIn`]); the batch's encoding.
//!
//! Invariant: the wire format is protobuf's own: a `repeated Event` field
//! is a sequence of length-delimited fields, byte for byte what a
//! `repeated bytes` field holding each event's encoding is, so
//! [`AgentBatchWire`] encodes exactly what `AgentBatch` with the decoded
//! events would (tests below), and a `RankMessage` from any client decodes.
//! Protobuf errors fail the stream with INTERNAL, as `SliceCodec` (and
//! tonic's `ProstCodec`) does.

use prost::bytes::{Buf, BufMut, Bytes, BytesMut};
use prost::encoding::{
    bool as pbool, check_wire_type, decode_varint, encode_key, encode_varint, encoded_len_varint,
    key_len, message, skip_field, string, uint64, DecodeContext, WireType,
};
use prost::{DecodeError, Message};
use tonic::codec::{Codec, DecodeBuf, Decoder};
use tonic::Status;

use crate::codec::VecEncoder;
use crate::v1 as proto;

/// The agent's `RankIngest` server, taking [`RankMessageIn`]s (generated
/// by proto/build.rs with tonic-build's manual builder: the same service
/// path and ack type as `proto::rank_ingest_server`).
pub mod server {
    #![allow(clippy::all, missing_docs)]
    include!(concat!(env!("OUT_DIR"), "/rankscope.v1.RankIngest.rs"));
}

/// Events as their encodings: event `i` is `buf[ranges[i]]`. One shared
/// buffer (the received message) and 8 bytes per event: a `Bytes` per
/// event would cost two atomic reference-count updates per event.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WireEvents {
    buf: Bytes,
    /// (start, length) of each event in `buf`.
    ranges: Vec<(u32, u32)>,
}

impl WireEvents {
    /// Encodes `events` into one buffer (events the agent makes itself:
    /// captured Kineto traces; tests).
    pub fn encode(events: &[proto::Event]) -> Self {
        let capacity = events.iter().map(Message::encoded_len).sum();
        Self::written(capacity, events.len(), |i, buf| events[i].encode_raw(buf))
    }

    /// `n` events into one new buffer, event `i` written by `write(i, buf)`.
    fn written(capacity: usize, n: usize, mut write: impl FnMut(usize, &mut BytesMut)) -> Self {
        let mut buf = BytesMut::with_capacity(capacity);
        let ranges = (0..n)
            .map(|i| {
                let start = buf.len();
                write(i, &mut buf);
                (start as u32, (buf.len() - start) as u32)
            })
            .collect();
        Self {
            buf: buf.freeze(),
            ranges,
        }
    }

    pub fn len(&self) -> usize {
        self.ranges.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// Each event's encoding, in order.
    pub fn iter(&self) -> impl Iterator<Item = &[u8]> + '_ {
        (0..self.len()).map(|i| self.event(i))
    }

    /// Event `i`'s encoding.
    fn event(&self, i: usize) -> &[u8] {
        let (start, n) = self.ranges[i];
        &self.buf[start as usize..(start + n) as usize]
    }

    /// Splits off the events from `at` on (sharing the buffer).
    pub fn split_off(&mut self, at: usize) -> Self {
        Self {
            buf: self.buf.clone(),
            ranges: self.ranges.split_off(at),
        }
    }

    /// Keeps the events at `indices` (ascending) only.
    pub fn keep(&mut self, indices: &[usize]) {
        self.ranges = indices.iter().map(|&i| self.ranges[i]).collect();
    }

    /// Bytes of these events as the repeated field `tag`.
    fn field_len(&self, tag: u32) -> usize {
        self.ranges
            .iter()
            .map(|&(_, n)| key_len(tag) + encoded_len_varint(u64::from(n)) + n as usize)
            .sum()
    }

    /// Writes these events as the repeated field `tag`.
    fn encode_field(&self, tag: u32, out: &mut impl BufMut) {
        for e in self.iter() {
            encode_key(tag, WireType::LengthDelimited, out);
            encode_varint(e.len() as u64, out);
            out.put_slice(e);
        }
    }
}

/// A received `RankMessage`: `events[i]` is decoded from the `i`-th of `raw`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RankMessageIn {
    pub identity: Option<proto::RankIdentity>,
    pub seq: u64,
    pub names: Option<proto::NameTable>,
    pub events: Vec<proto::Event>,
    /// The events' encodings, slices of the received message.
    pub raw: WireEvents,
}

/// The fields of `RankMessage` but its events.
#[derive(Clone, PartialEq, Message)]
struct RankMessageHead {
    #[prost(message, optional, tag = "1")]
    identity: Option<proto::RankIdentity>,
    #[prost(uint64, tag = "2")]
    seq: u64,
    #[prost(message, optional, tag = "3")]
    names: Option<proto::NameTable>,
}

/// Field number of `RankMessage.events` (proto/rankscope/v1/ingest.proto).
const RANK_MESSAGE_EVENTS: u32 = 4;

impl RankMessageIn {
    /// Decodes a `RankMessage` of at most 4 GiB (as every gRPC message is:
    /// its length prefix has 32 bits); the events' encodings share `bytes`.
    pub fn decode(bytes: Bytes) -> Result<Self, DecodeError> {
        debug_assert!(u32::try_from(bytes.len()).is_ok());
        let mut head = RankMessageHead::default();
        let n = crate::codec::count_field(&bytes, RANK_MESSAGE_EVENTS)?;
        let (mut events, mut ranges) = (Vec::with_capacity(n), Vec::with_capacity(n));
        let mut buf: &[u8] = &bytes;
        while buf.has_remaining() {
            let (tag, wire_type) = prost::encoding::decode_key(&mut buf)?;
            if tag != RANK_MESSAGE_EVENTS {
                head.merge_field(tag, wire_type, &mut buf, DecodeContext::default())?;
                continue;
            }
            check_wire_type(WireType::LengthDelimited, wire_type)?;
            // `skip_field` checks the length against what is left.
            let mut at = buf;
            skip_field(wire_type, tag, &mut buf, DecodeContext::default())?;
            let len = decode_varint(&mut at)? as usize;
            events.push(proto::Event::decode(&at[..len])?);
            ranges.push(((bytes.len() - at.len()) as u32, len as u32));
        }
        let raw = WireEvents { buf: bytes, ranges }.bounded(&events);
        Ok(Self {
            identity: head.identity,
            seq: head.seq,
            names: head.names,
            events,
            raw,
        })
    }
}

/// Event encodings longer than this are checked against their canonical
/// encoding ([`WireEvents::bounded`]); the events ranks send are shorter
/// (a kernel with launch times: about 60 B).
const CHECK_LONGER_THAN: usize = 128;

impl WireEvents {
    /// These events of `decoded` (`decoded[i]` from event `i`), holding at
    /// most twice the bytes of their encodings and no event longer than
    /// [`CHECK_LONGER_THAN`] or its canonical encoding: bytes that decoding
    /// drops (unknown fields, a field repeated, the message's other fields
    /// around few events) are not kept alive and forwarded while the events
    /// wait in the agent's queue, which is bounded by events, not bytes. In
    /// the common case (canonical events, a message that is mostly events)
    /// nothing is copied.
    fn bounded(self, decoded: &[proto::Event]) -> Self {
        let mut kept = 0usize;
        let mut canonical = Vec::new();
        for (i, (&(_, n), e)) in self.ranges.iter().zip(decoded).enumerate() {
            let n = n as usize;
            if n > CHECK_LONGER_THAN && n > e.encoded_len() {
                canonical.push(i);
            }
            kept += n;
        }
        if canonical.is_empty() && self.buf.len() <= 2 * kept {
            return self;
        }
        let mut next = canonical.iter().peekable();
        Self::written(kept, self.len(), |i, buf| {
            if next.next_if_eq(&&i).is_some() {
                decoded[i].encode_raw(buf);
            } else {
                buf.extend_from_slice(self.event(i));
            }
        })
    }

    /// Bytes held: the events' encodings and what they share a buffer with.
    pub fn retained_bytes(&self) -> usize {
        self.buf.len()
    }
}

impl From<proto::RankMessage> for RankMessageIn {
    /// A message built in process, as if it had been received.
    fn from(m: proto::RankMessage) -> Self {
        Self {
            identity: m.identity,
            seq: m.seq,
            names: m.names,
            raw: WireEvents::encode(&m.events),
            events: m.events,
        }
    }
}

/// `RankEvents` with its events as their encodings, in parts. Encodes
/// field by field as prost encodes `RankEvents`. Decoding one (nothing
/// does) keeps each event as its own part.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RankEventsWire {
    pub identity: Option<proto::RankIdentity>,
    pub names: Vec<proto::InternedName>,
    pub events: Vec<WireEvents>,
    pub stream_closed: bool,
    pub trace_id: String,
    pub trace_last: bool,
    pub trace_events: u64,
}

impl Message for RankEventsWire {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        if let Some(identity) = &self.identity {
            message::encode(1, identity, buf);
        }
        message::encode_repeated(2, &self.names, buf);
        for part in &self.events {
            part.encode_field(3, buf);
        }
        if self.stream_closed {
            pbool::encode(4, &self.stream_closed, buf);
        }
        if !self.trace_id.is_empty() {
            string::encode(5, &self.trace_id, buf);
        }
        if self.trace_last {
            pbool::encode(6, &self.trace_last, buf);
        }
        if self.trace_events != 0 {
            uint64::encode(7, &self.trace_events, buf);
        }
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), DecodeError> {
        match tag {
            1 => message::merge(
                wire_type,
                self.identity.get_or_insert_with(Default::default),
                buf,
                ctx,
            ),
            2 => message::merge_repeated(wire_type, &mut self.names, buf, ctx),
            3 => {
                let mut e = Bytes::new();
                prost::encoding::bytes::merge(wire_type, &mut e, buf, ctx)?;
                let n = e.len() as u32;
                self.events.push(WireEvents {
                    buf: e,
                    ranges: vec![(0, n)],
                });
                Ok(())
            }
            4 => pbool::merge(wire_type, &mut self.stream_closed, buf, ctx),
            5 => string::merge(wire_type, &mut self.trace_id, buf, ctx),
            6 => pbool::merge(wire_type, &mut self.trace_last, buf, ctx),
            7 => uint64::merge(wire_type, &mut self.trace_events, buf, ctx),
            _ => skip_field(wire_type, tag, buf, ctx),
        }
    }

    fn encoded_len(&self) -> usize {
        self.identity
            .as_ref()
            .map_or(0, |i| message::encoded_len(1, i))
            + message::encoded_len_repeated(2, &self.names)
            + self.events.iter().map(|p| p.field_len(3)).sum::<usize>()
            + if self.stream_closed {
                pbool::encoded_len(4, &self.stream_closed)
            } else {
                0
            }
            + if self.trace_id.is_empty() {
                0
            } else {
                string::encoded_len(5, &self.trace_id)
            }
            + if self.trace_last {
                pbool::encoded_len(6, &self.trace_last)
            } else {
                0
            }
            + if self.trace_events == 0 {
                0
            } else {
                uint64::encoded_len(7, &self.trace_events)
            }
    }

    fn clear(&mut self) {
        *self = Self::default();
    }
}

/// `AgentBatch` whose ranks' events are their encodings.
#[derive(Clone, PartialEq, Message)]
pub struct AgentBatchWire {
    #[prost(string, tag = "1")]
    pub agent_id: String,
    #[prost(uint64, tag = "2")]
    pub agent_session: u64,
    #[prost(uint64, tag = "3")]
    pub seq: u64,
    #[prost(string, tag = "4")]
    pub node: String,
    #[prost(uint64, tag = "5")]
    pub sent_at_ns: u64,
    #[prost(message, repeated, tag = "6")]
    pub ranks: Vec<RankEventsWire>,
    #[prost(message, repeated, tag = "7")]
    pub gpu_samples: Vec<proto::GpuSample>,
    #[prost(message, repeated, tag = "8")]
    pub host_samples: Vec<proto::HostSample>,
}

/// The codec of the agent's `RankIngest` server: acks encoded as
/// `SliceCodec` does, messages decoded into [`RankMessageIn`].
#[derive(Debug, Clone, Default)]
pub struct RankMessageCodec;

impl Codec for RankMessageCodec {
    type Encode = proto::RankAck;
    type Decode = RankMessageIn;
    type Encoder = VecEncoder<proto::RankAck>;
    type Decoder = RankMessageDecoder;

    fn encoder(&mut self) -> Self::Encoder {
        VecEncoder::default()
    }

    fn decoder(&mut self) -> Self::Decoder {
        RankMessageDecoder
    }
}

/// See [`RankMessageCodec`].
#[derive(Debug)]
pub struct RankMessageDecoder;

impl Decoder for RankMessageDecoder {
    type Item = RankMessageIn;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<RankMessageIn>, Status> {
        // tonic's buffer hands the message out without a copy.
        let bytes = buf.copy_to_bytes(buf.remaining());
        RankMessageIn::decode(bytes)
            .map(Some)
            .map_err(|e| Status::internal(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proto::event::Kind;

    fn events() -> Vec<proto::Event> {
        let kernel = |t: u64| proto::Event {
            kind: Some(Kind::Kernel(proto::Kernel {
                kind: proto::KernelKind::Kernel as i32,
                name_id: 3,
                start_ns: t,
                end_ns: t + 17,
                stream: 7,
                correlation: 99,
                config: Some(Box::new(proto::KernelConfig {
                    grid: vec![4, 1, 1],
                    block: vec![128, 1, 1],
                    ..Default::default()
                })),
                ..Default::default()
            })),
        };
        vec![
            proto::Event {
                kind: Some(Kind::StepBegin(proto::StepBegin {
                    step: 4,
                    ts_ns: 1_700_000_000_000_000_000,
                })),
            },
            kernel(1_700_000_000_000_000_100),
            proto::Event { kind: None },
            proto::Event {
                kind: Some(Kind::Collective(proto::Collective {
                    process_group_id: 2,
                    group_ranks: vec![0, 5, 9],
                    group_size: 3,
                    ..Default::default()
                })),
            },
            kernel(u64::MAX - 17),
        ]
    }

    #[test]
    fn a_rank_message_decodes_with_each_events_bytes() {
        let msg = proto::RankMessage {
            identity: Some(proto::RankIdentity {
                job_id: "j".into(),
                rank: 1,
                world_size: 2,
                ..Default::default()
            }),
            seq: 12,
            names: Some(proto::NameTable {
                names: vec![proto::InternedName {
                    id: 3,
                    name: "gemm".into(),
                }],
            }),
            events: events(),
        };
        let got = RankMessageIn::decode(Bytes::from(msg.encode_to_vec())).unwrap();
        assert_eq!(got.identity, msg.identity);
        assert_eq!((got.seq, &got.names), (12, &msg.names));
        assert_eq!(got.events, msg.events);
        assert_eq!(got.raw.len(), msg.events.len());
        for (raw, e) in got.raw.iter().zip(&msg.events) {
            assert_eq!(raw, &e.encode_to_vec()[..]);
        }
        // Unknown fields are skipped; fields in any order.
        let mut shuffled = proto::RankMessage {
            events: msg.events.clone(),
            ..Default::default()
        }
        .encode_to_vec();
        shuffled.extend_from_slice(&[0x78, 0x05]); // field 15, varint
        uint64::encode(2, &msg.seq, &mut shuffled);
        let got = RankMessageIn::decode(Bytes::from(shuffled)).unwrap();
        assert_eq!((got.seq, &got.events), (12, &msg.events));
        // A malformed event fails the message.
        let mut bad = msg.encode_to_vec();
        bad.extend_from_slice(&[0x22, 0x02, 0xff, 0xff]);
        assert!(RankMessageIn::decode(Bytes::from(bad)).is_err());
        // So does an event longer than what is left, or of another wire type.
        for tail in [&[0x22, 0x10, 0x08][..], &[0x20, 0x01]] {
            let mut bad = msg.encode_to_vec();
            bad.extend_from_slice(tail);
            assert!(RankMessageIn::decode(Bytes::from(bad)).is_err(), "{tail:?}");
        }
    }

    #[test]
    fn bytes_decoding_drops_are_neither_kept_nor_forwarded() {
        let msg = proto::RankMessage {
            seq: 1,
            events: events(),
            ..Default::default()
        };
        let wire = msg.encode_to_vec();
        let canonical: usize = msg.events.iter().map(Message::encoded_len).sum();
        // A canonical message that is mostly events: its own buffer, no copy.
        let bytes = Bytes::from(wire.clone());
        let got = RankMessageIn::decode(bytes.clone()).unwrap();
        assert_eq!(got.raw.retained_bytes(), bytes.len());
        assert_eq!(got.raw.buf.as_ptr(), bytes.as_ptr());

        // 1 MiB of an unknown field around the events: not kept.
        let mut padded = wire.clone();
        prost::encoding::bytes::encode(15, &vec![7u8; 1 << 20], &mut padded);
        let got = RankMessageIn::decode(Bytes::from(padded)).unwrap();
        assert_eq!(got.events, msg.events);
        assert_eq!(got.raw.retained_bytes(), canonical);

        // An event padded with an unknown field, and one with a field
        // repeated: forwarded as their canonical encodings.
        let step = proto::Event {
            kind: Some(Kind::StepEnd(proto::StepEnd { step: 4, ts_ns: 9 })),
        };
        let mut junk = step.encode_to_vec();
        prost::encoding::bytes::encode(99, &vec![1u8; 4096], &mut junk);
        let mut repeated = Vec::new();
        for _ in 0..100 {
            step.encode_raw(&mut repeated);
        }
        let mut m = wire;
        prost::encoding::bytes::encode(4, &junk, &mut m);
        prost::encoding::bytes::encode(4, &repeated, &mut m);
        let got = RankMessageIn::decode(Bytes::from(m)).unwrap();
        let n = got.events.len();
        assert_eq!(&got.events[n - 2..], [step.clone(), step.clone()]);
        let raw: Vec<&[u8]> = got.raw.iter().collect();
        assert_eq!(raw[n - 2], &step.encode_to_vec()[..]);
        assert_eq!(raw[n - 1], &step.encode_to_vec()[..]);
        for (r, e) in raw.iter().zip(&msg.events) {
            assert_eq!(*r, &e.encode_to_vec()[..], "the others as they came");
        }
        assert!(got.raw.retained_bytes() <= canonical + 2 * step.encoded_len());
    }

    #[test]
    fn a_wire_batch_encodes_exactly_as_the_decoded_batch() {
        let evs = events();
        let batch = proto::AgentBatch {
            agent_id: "node-1".into(),
            agent_session: 42,
            seq: 3,
            node: "node-1".into(),
            sent_at_ns: 5,
            ranks: vec![
                proto::RankEvents {
                    identity: Some(proto::RankIdentity {
                        job_id: "j".into(),
                        rank: 0,
                        world_size: 2,
                        ..Default::default()
                    }),
                    names: vec![proto::InternedName {
                        id: 3,
                        name: "gemm".into(),
                    }],
                    events: evs.clone(),
                    stream_closed: true,
                    trace_id: "t".into(),
                    trace_last: true,
                    trace_events: 8,
                },
                proto::RankEvents::default(),
            ],
            gpu_samples: vec![proto::GpuSample {
                gpu_index: 2,
                ..Default::default()
            }],
            host_samples: vec![proto::HostSample {
                cpu_util_pct: Some(3.5),
                ..Default::default()
            }],
        };
        let wire = AgentBatchWire {
            agent_id: batch.agent_id.clone(),
            agent_session: 42,
            seq: 3,
            node: batch.node.clone(),
            sent_at_ns: 5,
            ranks: batch
                .ranks
                .iter()
                .map(|r| RankEventsWire {
                    identity: r.identity.clone(),
                    names: r.names.clone(),
                    events: vec![WireEvents::encode(&r.events)],
                    stream_closed: r.stream_closed,
                    trace_id: r.trace_id.clone(),
                    trace_last: r.trace_last,
                    trace_events: r.trace_events,
                })
                .collect(),
            gpu_samples: batch.gpu_samples.clone(),
            host_samples: batch.host_samples.clone(),
        };
        assert_eq!(wire.encode_to_vec(), batch.encode_to_vec());
        assert_eq!(wire.encoded_len(), batch.encoded_len());
        // Events in several parts (as the batcher gathers a rank's
        // messages) encode as one repeated field.
        let mut parts = WireEvents::encode(&evs);
        let tail = parts.split_off(2);
        let mut split = wire.clone();
        split.ranks[0].events = vec![parts, tail];
        assert_eq!(split.encode_to_vec(), batch.encode_to_vec());
        // Decoding one keeps every event.
        let back = AgentBatchWire::decode(&batch.encode_to_vec()[..]).unwrap();
        assert_eq!(back.encode_to_vec(), batch.encode_to_vec());
        let mut some = WireEvents::encode(&evs);
        some.keep(&[1, 3]);
        let kept: Vec<Vec<u8>> = some.iter().map(<[u8]>::to_vec).collect();
        assert_eq!(kept, [evs[1].encode_to_vec(), evs[3].encode_to_vec()]);
    }
}
