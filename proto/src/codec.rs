//! The gRPC codec of every rankscope service: protobuf (prost), like
//! `tonic_prost::ProstCodec`, with cheaper buffer access.
//!
//! In: messages to encode, or the bytes of one received message. Out: the
//! same wire bytes and the same decoded messages as `ProstCodec` (a test
//! holds that), at less CPU per byte:
//! * encoding writes into a `Vec<u8>` sized by `encoded_len` and hands tonic
//!   one slice: prost writes varints a byte at a time, and each byte written
//!   straight into tonic's `EncodeBuf` is a forwarded `BytesMut::put_slice`
//!   (the agent's largest profile entry, 22 % of its CPU);
//! * decoding reads from the received message as one contiguous `&[u8]`
//!   when tonic holds it that way (it does for a whole message), instead of
//!   advancing a `BytesMut` per field; otherwise it decodes from the buffer
//!   as `ProstCodec` does.
//!
//! Invariant: the wire format is plain protobuf (prost's own encoder writes
//! it); peers using any other gRPC implementation interoperate unchanged.
//! Every gRPC exchange of the test suite goes through this codec.

use std::any::{Any, TypeId};
use std::marker::PhantomData;

use prost::bytes::{Buf, BufMut, Bytes};
use prost::encoding::{decode_key, decode_varint, skip_field, DecodeContext, WireType};
use prost::{DecodeError, Message};
use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::Status;

use crate::v1;

/// See the module docs.
#[derive(Debug, Clone)]
pub struct SliceCodec<T, U>(PhantomData<(T, U)>);

impl<T, U> Default for SliceCodec<T, U> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

impl<T, U> Codec for SliceCodec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = VecEncoder<T>;
    type Decoder = SliceDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        VecEncoder(PhantomData)
    }

    fn decoder(&mut self) -> Self::Decoder {
        SliceDecoder(PhantomData)
    }
}

/// First buffer of a call's encoded messages ([`VecEncoder`]).
const ENCODE_BUFFER_BYTES: usize = 256;
/// tonic's default: a stream's encoded messages are handed on at this size.
const ENCODE_YIELD_BYTES: usize = 32 * 1024;

/// Encodes into a right-sized `Vec<u8>`, then copies it out once.
#[derive(Debug)]
pub struct VecEncoder<T>(PhantomData<T>);

impl<T> Default for VecEncoder<T> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

impl<T: Message> Encoder for VecEncoder<T> {
    type Item = T;
    type Error = Status;

    /// tonic allocates this much for every call's (or stream's) encoded
    /// messages, 8 KiB by default; most of ours are a few bytes (acks), and
    /// a larger one reserves its size when it is encoded. An 8 KiB request
    /// per acknowledgement was 2 % of the collector's CPU when 2,048 node
    /// batches arrived at once (glibc consolidates its small free chunks on
    /// every allocation that size).
    fn buffer_settings(&self) -> BufferSettings {
        BufferSettings::new(ENCODE_BUFFER_BYTES, ENCODE_YIELD_BYTES)
    }

    fn encode(&mut self, item: T, buf: &mut EncodeBuf<'_>) -> Result<(), Status> {
        let mut v = Vec::with_capacity(item.encoded_len());
        item.encode(&mut v)
            .map_err(|e| Status::internal(format!("encoding: {e}")))?;
        buf.reserve(v.len());
        buf.put_slice(&v);
        Ok(())
    }
}

/// Decodes from the message's bytes as one slice.
#[derive(Debug)]
pub struct SliceDecoder<U>(PhantomData<U>);

impl<U: Message + Default + 'static> Decoder for SliceDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        let len = buf.remaining();
        let item = if buf.chunk().len() == len {
            let item = decode_sized::<U>(buf.chunk());
            buf.advance(len);
            item
        } else {
            U::decode(buf)
        };
        // Protobuf parse errors are INTERNAL, as in ProstCodec (gRPC's
        // status code guide).
        item.map(Some).map_err(|e| Status::internal(e.to_string()))
    }
}

/// `U` decoded from `bytes`; an `AgentBatch` with each rank's event vector
/// sized before its events are decoded ([`decode_agent_batch`]), every other
/// message as prost decodes it. (The generated services name the message
/// type only through this codec's parameter, hence the type check.)
fn decode_sized<U: Message + Default + 'static>(bytes: &[u8]) -> Result<U, DecodeError> {
    if TypeId::of::<U>() == TypeId::of::<v1::AgentBatch>() {
        let batch: Box<dyn Any> = Box::new(decode_agent_batch(bytes)?);
        if let Ok(batch) = batch.downcast::<U>() {
            return Ok(*batch);
        }
    }
    U::decode(bytes)
}

/// Field number of `AgentBatch.ranks` (proto/rankscope/v1/ingest.proto).
const AGENT_BATCH_RANKS: u32 = 6;
/// Field number of `RankEvents.events`.
const RANK_EVENTS_EVENTS: u32 = 3;

/// Decodes an `AgentBatch` into the message prost decodes (malformed input
/// is an error too, its text without prost's field path), but each
/// `RankEvents.events` vector is reserved for its events first (one pass
/// over the field keys) instead of growing by doubling: a 50,000-event
/// batch's events are ~4.8 MB of `Event`s, and the copies and reallocations
/// of the growth were ~3-6 % of the collector's CPU at full ingest
/// (bench/RESULTS-alternations.md, session 28).
pub fn decode_agent_batch(mut buf: &[u8]) -> Result<v1::AgentBatch, DecodeError> {
    let mut batch = v1::AgentBatch::default();
    while buf.has_remaining() {
        let (tag, wire_type) = decode_key(&mut buf)?;
        if tag == AGENT_BATCH_RANKS && wire_type == WireType::LengthDelimited {
            // `skip_field` checks the length against what is left.
            let mut at = buf;
            skip_field(wire_type, tag, &mut buf, DecodeContext::default())?;
            let len = decode_varint(&mut at)? as usize;
            let group = &at[..len];
            let mut ranks = v1::RankEvents::default();
            ranks
                .events
                .reserve_exact(count_field(group, RANK_EVENTS_EVENTS)?);
            ranks.merge(group)?;
            batch.ranks.push(ranks);
        } else {
            batch.merge_field(tag, wire_type, &mut buf, DecodeContext::default())?;
        }
    }
    Ok(batch)
}

/// How many times field `tag` occurs in the encoded message `buf` (its
/// other fields skipped; malformed input is an error, as decoding it is).
pub fn count_field(mut buf: &[u8], tag: u32) -> Result<usize, DecodeError> {
    let mut n = 0;
    while buf.has_remaining() {
        let (t, wire_type) = decode_key(&mut buf)?;
        n += usize::from(t == tag);
        skip_field(wire_type, t, &mut buf, DecodeContext::default())?;
    }
    Ok(n)
}

/// A message already encoded, sent as its bytes: the agent encodes a batch
/// once and re-sends the same bytes on a retry, instead of cloning and
/// encoding the whole batch again. Decoding one skips every field.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Encoded(pub Bytes);

impl Encoded {
    /// Encodes `m`.
    pub fn of(m: &impl Message) -> Self {
        Self(Bytes::from(m.encode_to_vec()))
    }
}

impl Message for Encoded {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        buf.put_slice(&self.0);
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), DecodeError> {
        skip_field(wire_type, tag, buf, ctx)
    }

    fn encoded_len(&self) -> usize {
        self.0.len()
    }

    fn clear(&mut self) {
        self.0 = Bytes::new();
    }
}

/// An `AgentBatch` encoded without `sent_at_ns`, sent with that field
/// appended: a batch is encoded once when it is cut, and each call stamps
/// its own send time (a protobuf parser keeps the last value of a scalar
/// field, and proto3 leaves a zero `sent_at_ns` out of the body).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StampedBatch {
    pub body: Bytes,
    pub sent_at_ns: u64,
}

/// The codec of a call that sends a [`StampedBatch`]: its body is copied
/// into tonic's buffer once, in one slice (not through a `Vec` first, as
/// [`VecEncoder`] does for messages prost writes field by field).
#[derive(Debug, Clone)]
pub struct StampedCodec<U>(PhantomData<U>);

impl<U> Default for StampedCodec<U> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

impl<U: Message + Default + Send + 'static> Codec for StampedCodec<U> {
    type Encode = StampedBatch;
    type Decode = U;
    type Encoder = StampedEncoder;
    type Decoder = SliceDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        StampedEncoder
    }

    fn decoder(&mut self) -> Self::Decoder {
        SliceDecoder(PhantomData)
    }
}

/// See [`StampedCodec`].
#[derive(Debug)]
pub struct StampedEncoder;

impl Encoder for StampedEncoder {
    type Item = StampedBatch;
    type Error = Status;

    fn encode(&mut self, item: StampedBatch, buf: &mut EncodeBuf<'_>) -> Result<(), Status> {
        buf.reserve(item.encoded_len());
        item.encode_raw(buf);
        Ok(())
    }
}

/// `CollectorIngest.Ingest` with a pre-encoded batch (what the generated
/// client does, minus encoding): the agent's uplink, spool and dump replay
/// send their batches this way, and so does the straggler benchmark.
pub async fn ingest_stamped(
    channel: tonic::transport::Channel,
    request: tonic::Request<StampedBatch>,
) -> Result<v1::IngestAck, Status> {
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready()
        .await
        .map_err(|e| Status::unknown(format!("Service was not ready: {e}")))?;
    let path = tonic::codegen::http::uri::PathAndQuery::from_static(INGEST_PATH);
    grpc.unary(request, path, StampedCodec::<v1::IngestAck>::default())
        .await
        .map(tonic::Response::into_inner)
}

/// The gRPC path of `CollectorIngest.Ingest` (proto/rankscope/v1/ingest.proto).
const INGEST_PATH: &str = "/rankscope.v1.CollectorIngest/Ingest";

/// Field number of `AgentBatch.sent_at_ns` (proto/rankscope/v1/ingest.proto).
const SENT_AT_NS_FIELD: u32 = 5;

impl Message for StampedBatch {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        buf.put_slice(&self.body);
        if self.sent_at_ns != 0 {
            prost::encoding::uint64::encode(SENT_AT_NS_FIELD, &self.sent_at_ns, buf);
        }
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), DecodeError> {
        skip_field(wire_type, tag, buf, ctx)
    }

    fn encoded_len(&self) -> usize {
        self.body.len()
            + if self.sent_at_ns != 0 {
                prost::encoding::uint64::encoded_len(SENT_AT_NS_FIELD, &self.sent_at_ns)
            } else {
                0
            }
    }

    fn clear(&mut self) {
        *self = Self::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::v1 as proto;

    fn kernel(t: u64) -> proto::Event {
        proto::Event {
            kind: Some(proto::event::Kind::Kernel(proto::Kernel {
                kind: proto::KernelKind::Kernel as i32,
                name_id: 1 + (t % 3) as u32,
                start_ns: t,
                end_ns: t + 5,
                stream: 7,
                correlation: t,
                ..Default::default()
            })),
        }
    }

    fn batch() -> proto::AgentBatch {
        let ranks = (0..3u32)
            .map(|r| proto::RankEvents {
                identity: Some(proto::RankIdentity {
                    job_id: "j".into(),
                    rank: r,
                    world_size: 3,
                    ..Default::default()
                }),
                names: vec![proto::InternedName {
                    id: 1,
                    name: "gemm".into(),
                }],
                events: (0..100 * u64::from(r)).map(kernel).collect(),
                stream_closed: r == 2,
                trace_id: String::new(),
                trace_last: false,
                trace_events: 0,
            })
            .collect();
        proto::AgentBatch {
            agent_id: "node-1".into(),
            agent_session: 42,
            seq: 3,
            node: "n1".into(),
            sent_at_ns: 9,
            ranks,
            gpu_samples: vec![proto::GpuSample::default()],
            host_samples: Vec::new(),
        }
    }

    #[test]
    fn an_agent_batch_decodes_as_prost_decodes_it_with_event_vectors_sized() {
        let want = batch();
        let wire = want.encode_to_vec();
        let got = decode_agent_batch(&wire).unwrap();
        assert_eq!(got, want);
        for r in &got.ranks {
            assert_eq!(r.events.capacity(), r.events.len());
        }
        // Through the codec's generic entry point too, and other messages
        // as prost decodes them.
        assert_eq!(decode_sized::<proto::AgentBatch>(&wire).unwrap(), want);
        let ack = proto::IngestAck {
            seq: 4,
            rows: 5,
            duplicate: true,
        };
        assert_eq!(
            decode_sized::<proto::IngestAck>(&ack.encode_to_vec()).unwrap(),
            ack
        );
    }

    #[test]
    fn unusual_encodings_decode_as_prost_decodes_them() {
        let one = batch();
        // Two batches' bytes concatenated: protobuf merges them (scalars
        // take the last value, repeated fields append).
        let mut wire = one.encode_to_vec();
        let mut second = batch();
        second.seq = 4;
        second.ranks.truncate(1);
        wire.extend(second.encode_to_vec());
        // An unknown field (number 99, varint) after everything.
        prost::encoding::uint64::encode(99, &7, &mut wire);
        let want = proto::AgentBatch::decode(&wire[..]).unwrap();
        assert_eq!(want.seq, 4);
        assert_eq!(want.ranks.len(), 4);
        assert_eq!(decode_agent_batch(&wire).unwrap(), want);
        // `ranks` with the wrong wire type, and cut short: errors, as in prost.
        let mut bad = Vec::new();
        prost::encoding::uint64::encode(AGENT_BATCH_RANKS, &1, &mut bad);
        assert!(proto::AgentBatch::decode(&bad[..]).is_err());
        assert!(decode_agent_batch(&bad).is_err());
        let cut = &one.encode_to_vec()[..200];
        assert!(proto::AgentBatch::decode(cut).is_err());
        assert!(decode_agent_batch(cut).is_err());
    }

    #[test]
    fn a_field_is_counted_wherever_it_occurs() {
        let r = &batch().ranks[2];
        let wire = r.encode_to_vec();
        assert_eq!(count_field(&wire, RANK_EVENTS_EVENTS).unwrap(), 200);
        assert_eq!(count_field(&wire, 2).unwrap(), 1);
        assert_eq!(count_field(&wire, 50).unwrap(), 0);
        assert!(count_field(&wire[..wire.len() - 1], 3).is_err());
    }

    #[test]
    fn an_encoded_message_is_its_bytes_on_the_wire() {
        let batch = proto::AgentBatch {
            agent_id: "node-1".into(),
            agent_session: 42,
            seq: 3,
            ..Default::default()
        };
        let e = Encoded::of(&batch);
        assert_eq!(e.encoded_len(), batch.encoded_len());
        let wire = e.encode_to_vec();
        assert_eq!(proto::AgentBatch::decode(&wire[..]).unwrap(), batch);
    }

    #[test]
    fn a_stamped_batch_decodes_as_the_batch_with_its_send_time() {
        let batch = proto::AgentBatch {
            agent_id: "node-1".into(),
            seq: 9,
            ranks: vec![proto::RankEvents::default()],
            ..Default::default()
        };
        let body = Encoded::of(&batch).0;
        for sent_at_ns in [0, 1, u64::MAX] {
            let s = StampedBatch {
                body: body.clone(),
                sent_at_ns,
            };
            let wire = s.encode_to_vec();
            assert_eq!(wire.len(), s.encoded_len());
            let got = proto::AgentBatch::decode(&wire[..]).unwrap();
            assert_eq!(
                got,
                proto::AgentBatch {
                    sent_at_ns,
                    ..batch.clone()
                }
            );
        }
    }
}
