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

use std::marker::PhantomData;

use prost::bytes::{Buf, BufMut, Bytes};
use prost::encoding::{skip_field, DecodeContext, WireType};
use prost::{DecodeError, Message};
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::Status;

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

impl<U: Message + Default> Decoder for SliceDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        let len = buf.remaining();
        let item = if buf.chunk().len() == len {
            let item = U::decode(buf.chunk());
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
