//! Lenient, streaming deserialization of a Kineto Chrome-trace document.
//!
//! In: the values of the (decompressed) file, one at a time, as the
//! [`frame`](super::frame) reader cuts them out. Out: the document's small
//! top-level metadata ([`TopMeta`]) and, one at a time, every element of
//! `traceEvents` as a [`RawEvent`] handed to an [`EventHandler`], with its
//! ordinal (index in the array). [`TopSeed`] (tests only) reads a whole
//! document with `serde` alone: the reference the frame reader is checked
//! against.
//!
//! Invariants: the document is never held in memory: the top-level map is
//! visited key by key (any order; `traceEvents` may come before
//! `distributedInfo`), the event array element by element, and every field
//! we do not need is skipped with `IgnoredAny`. Per-event fields are
//! lenient: a value of an unexpected JSON type reads as [`Scalar::Other`]
//! instead of failing the whole stream, so one odd event is skipped by the
//! caller, not fatal. Only malformed JSON (syntax, truncation) and a
//! top-level value that is not an object or array fail the parse.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;

pub(crate) use super::scalar::{Num, Scalar};
use super::shapes::{InputDims, InputTypes};

/// Implements the visitor methods that turn every JSON type a lenient
/// visitor does not want into `Default::default()` (draining containers).
macro_rules! ignore_other_types {
    () => {
        fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
            Ok(Default::default())
        }
        fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
            Ok(Default::default())
        }
        fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
            Ok(Default::default())
        }
        fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
            Ok(Default::default())
        }
        fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
            Ok(Default::default())
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(Default::default())
        }
        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(Default::default())
        }
        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            IgnoredAny::deserialize(d)?;
            Ok(Default::default())
        }
    };
}

/// The `args` fields the importer reads (everything else is skipped).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct RawArgs {
    pub correlation: Scalar,
    pub external_id: Scalar,
    pub device: Scalar,
    pub stream: Scalar,
    pub bytes: Scalar,
    pub bandwidth_gbps: Scalar,
    pub coll_name: Scalar,
    pub in_nelems: Scalar,
    pub out_nelems: Scalar,
    pub group_size: Scalar,
    pub dtype: Scalar,
    pub pg_name: Scalar,
    pub pg_ranks: Scalar,
    /// ONNX Runtime `Node` events: the operator type and execution provider.
    pub op_name: Scalar,
    pub provider: Scalar,
    /// ONNX Runtime GPU `Kernel` events: the name of the `Node` event that
    /// launched them.
    pub parent_name: Scalar,
    /// PaddlePaddle `[memory]` events: the process's peak allocated bytes.
    pub peak_allocated: Scalar,
    /// Kernel launch configuration (issue 29): `blocks per SM`,
    /// `est. achieved occupancy %`, `grid`, `block`, `registers per thread`,
    /// `shared memory`.
    pub blocks_per_sm: Scalar,
    pub occupancy_pct: Scalar,
    pub grid: Scalar,
    pub block: Scalar,
    pub registers: Scalar,
    pub shared_memory: Scalar,
    /// `[memory]` instant events (`profile_memory=True`).
    pub mem_bytes: Scalar,
    pub mem_addr: Scalar,
    pub total_allocated: Scalar,
    pub total_reserved: Scalar,
    pub device_type: Scalar,
    pub device_id: Scalar,
    /// `Call stack` of a cpu_op (`;`-joined frames).
    pub call_stack: Scalar,
    /// `Python module id` of a python_function (an nn.Module's forward).
    pub python_module_id: Scalar,
    pub input_dims: InputDims,
    pub input_types: InputTypes,
    /// `Input Dims` as Python prints it (`shapes::shape_text`; empty when
    /// absent): the group key of `ops --group-by shape`.
    pub input_shape: String,
}

/// One element of `traceEvents`, with only the fields the importer uses.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct RawEvent {
    pub ph: Scalar,
    pub cat: Scalar,
    pub name: Scalar,
    pub ts: Scalar,
    pub dur: Scalar,
    pub pid: Scalar,
    pub tid: Scalar,
    pub args: RawArgs,
}

/// Reads a map key without allocating (nor UTF-8 validation: the key is
/// only compared with known ASCII names) and maps it to a field index
/// (`usize::MAX` = a key we skip).
struct KeySeed(fn(&[u8]) -> usize);

impl<'de> DeserializeSeed<'de> for KeySeed {
    type Value = usize;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<usize, D::Error> {
        d.deserialize_bytes(self)
    }
}

impl<'de> Visitor<'de> for KeySeed {
    type Value = usize;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a key")
    }
    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<usize, E> {
        Ok((self.0)(v))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<usize, E> {
        Ok((self.0)(v.as_bytes()))
    }
}

pub(crate) fn event_key(k: &[u8]) -> usize {
    match k {
        b"ph" => 0,
        b"cat" => 1,
        b"name" => 2,
        b"ts" => 3,
        b"dur" => 4,
        b"pid" => 5,
        b"tid" => 6,
        b"args" => 7,
        _ => usize::MAX,
    }
}

/// [`event_key`] of `args`; the keys below it are [`event_scalar`]s.
pub(crate) const EVENT_ARGS: usize = 7;

/// The scalar field of [`event_key`] index `k` (`None`: `args` or skipped).
pub(crate) fn event_scalar(e: &mut RawEvent, k: usize) -> Option<&mut Scalar> {
    Some(match k {
        0 => &mut e.ph,
        1 => &mut e.cat,
        2 => &mut e.name,
        3 => &mut e.ts,
        4 => &mut e.dur,
        5 => &mut e.pid,
        6 => &mut e.tid,
        _ => return None,
    })
}

/// [`arg_key`] indexes of the two shapes; the keys below them are
/// [`arg_scalar`]s.
pub(crate) const ARG_INPUT_DIMS: usize = 31;
pub(crate) const ARG_INPUT_TYPES: usize = 32;

/// The scalar field of [`arg_key`] index `k` (`None`: a shape or skipped).
pub(crate) fn arg_scalar(a: &mut RawArgs, k: usize) -> Option<&mut Scalar> {
    Some(match k {
        0 => &mut a.correlation,
        1 => &mut a.external_id,
        2 => &mut a.device,
        3 => &mut a.stream,
        4 => &mut a.bytes,
        5 => &mut a.bandwidth_gbps,
        6 => &mut a.coll_name,
        7 => &mut a.in_nelems,
        8 => &mut a.out_nelems,
        9 => &mut a.group_size,
        10 => &mut a.dtype,
        11 => &mut a.pg_name,
        12 => &mut a.pg_ranks,
        13 => &mut a.op_name,
        14 => &mut a.provider,
        15 => &mut a.peak_allocated,
        16 => &mut a.blocks_per_sm,
        17 => &mut a.occupancy_pct,
        18 => &mut a.grid,
        19 => &mut a.block,
        20 => &mut a.registers,
        21 => &mut a.shared_memory,
        22 => &mut a.mem_bytes,
        23 => &mut a.mem_addr,
        24 => &mut a.total_allocated,
        25 => &mut a.total_reserved,
        26 => &mut a.device_type,
        27 => &mut a.device_id,
        28 => &mut a.call_stack,
        29 => &mut a.python_module_id,
        30 => &mut a.parent_name,
        _ => return None,
    })
}

pub(crate) fn arg_key(k: &[u8]) -> usize {
    match k {
        // PaddlePaddle writes `correlation id`.
        b"correlation" | b"correlation id" => 0,
        b"External id" => 1,
        b"device" => 2,
        b"stream" => 3,
        b"bytes" => 4,
        b"memory bandwidth (GB/s)" => 5,
        b"Collective name" => 6,
        b"In msg nelems" => 7,
        b"Out msg nelems" => 8,
        b"Group size" => 9,
        b"dtype" => 10,
        b"Process Group Name" => 11,
        b"Process Group Ranks" => 12,
        b"op_name" => 13,
        b"provider" => 14,
        b"peak_allocated" => 15,
        b"blocks per SM" => 16,
        b"est. achieved occupancy %" => 17,
        b"grid" => 18,
        b"block" => 19,
        b"registers per thread" => 20,
        b"shared memory" => 21,
        b"Bytes" => 22,
        b"Addr" => 23,
        b"Total Allocated" => 24,
        b"Total Reserved" => 25,
        b"Device Type" => 26,
        b"Device Id" => 27,
        b"Call stack" => 28,
        b"Python module id" => 29,
        b"parent_name" => 30,
        b"Input Dims" => ARG_INPUT_DIMS,
        b"Input type" => ARG_INPUT_TYPES,
        _ => usize::MAX,
    }
}

/// Deserializes `args` into a default [`RawArgs`] in place; a value that
/// is not an object leaves it default.
struct ArgsSeed<'a>(&'a mut RawArgs);

impl<'de> DeserializeSeed<'de> for ArgsSeed<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ArgsSeed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an args object")
    }
    ignore_other_types!();
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let a = self.0;
        while let Some(k) = map.next_key_seed(KeySeed(arg_key))? {
            match k {
                ARG_INPUT_DIMS => {
                    let v: serde_json::Value = map.next_value()?;
                    a.input_dims =
                        InputDims::deserialize(&v).map_err(<A::Error as de::Error>::custom)?;
                    a.input_shape.clear();
                    super::shapes::shape_text_of(&v, &mut a.input_shape);
                }
                ARG_INPUT_TYPES => a.input_types = map.next_value()?,
                _ => match arg_scalar(a, k) {
                    Some(slot) => *slot = map.next_value()?,
                    None => {
                        map.next_value::<IgnoredAny>()?;
                    }
                },
            }
        }
        Ok(())
    }
}

impl<'de> Deserialize<'de> for RawArgs {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let mut a = RawArgs::default();
        ArgsSeed(&mut a).deserialize(d)?;
        Ok(a)
    }
}

/// Deserializes one trace event into an existing [`RawEvent`], which it
/// resets first (the frame reuses one event for the whole array, so the
/// ~800 bytes are written in place, never moved).
pub(crate) struct EventSeed<'a>(pub &'a mut RawEvent);

impl<'de> DeserializeSeed<'de> for EventSeed<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        *self.0 = RawEvent::default();
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for EventSeed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a trace event object")
    }
    ignore_other_types!();
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let e = self.0;
        let mut args_seen = false;
        while let Some(k) = map.next_key_seed(KeySeed(event_key))? {
            if k == EVENT_ARGS {
                // In place: `RawArgs` is most of the event's size. A
                // repeated `args` replaces the first (the last wins).
                if args_seen {
                    e.args = RawArgs::default();
                }
                args_seen = true;
                map.next_value_seed(ArgsSeed(&mut e.args))?;
                continue;
            }
            match event_scalar(e, k) {
                Some(slot) => *slot = map.next_value()?,
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
}

impl<'de> Deserialize<'de> for RawEvent {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let mut e = RawEvent::default();
        EventSeed(&mut e).deserialize(d)?;
        Ok(e)
    }
}

/// One entry of `distributedInfo.pg_config`.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct PgConfig {
    #[serde(default)]
    pub pg_name: Scalar,
    #[serde(default)]
    pub pg_size: Scalar,
    #[serde(default)]
    pub ranks: Scalar,
}

/// `distributedInfo`.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct DistInfo {
    #[serde(default)]
    pub rank: Scalar,
    #[serde(default)]
    pub world_size: Scalar,
    #[serde(default)]
    pub backend: Scalar,
    #[serde(default)]
    pub nccl_version: Scalar,
    #[serde(default)]
    pub pg_config: Option<Vec<PgConfig>>,
}

/// One entry of `deviceProperties`.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct DeviceProp {
    #[serde(default)]
    pub id: Scalar,
    #[serde(default)]
    pub name: Scalar,
}

/// The document's top-level metadata (everything but `traceEvents`).
#[derive(Debug, Clone, Default)]
pub(crate) struct TopMeta {
    pub dist: Option<DistInfo>,
    pub devices: Vec<DeviceProp>,
    pub base_time_ns: Option<u64>,
    /// Whether a `traceEvents` array (or a bare top-level array) was seen.
    pub has_events: bool,
    /// Number of elements of `traceEvents`.
    pub event_count: u64,
    /// The producer the content shows, and its per-event rewriting.
    pub format: super::format::Normaliser,
}

/// Receives the events of `traceEvents`, in order.
pub(crate) trait EventHandler {
    fn event(&mut self, ordinal: u64, ev: &RawEvent);
}

/// A top-level key, as its [`top_key`] index (`usize::MAX`: skipped).
pub(crate) struct TopKey(pub usize);

impl<'de> Deserialize<'de> for TopKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        KeySeed(top_key).deserialize(d).map(TopKey)
    }
}

/// Visits a whole trace document with `serde` alone: fills `meta` and feeds
/// `handler`. The reference the [`Frame`](super::frame::Frame) reader
/// is checked against (tests only: over an `io::Read` it is several times
/// slower).
#[cfg(test)]
pub(crate) struct TopSeed<'a, H> {
    pub meta: &'a mut TopMeta,
    pub handler: &'a mut H,
    pub read_meta: bool,
}

/// The top-level keys read, as [`TopKey`] indexes.
fn top_key(k: &[u8]) -> usize {
    match k {
        b"traceEvents" => 0,
        b"distributedInfo" => 1,
        b"deviceProperties" => 2,
        b"baseTimeNanoseconds" => 3,
        // Only PaddlePaddle's exporter writes these (older ones misspelt it).
        b"span_index" | b"span_indx" | b"ExtraInfo" => 4,
        _ => usize::MAX,
    }
}
#[cfg(test)]
impl<'de, H: EventHandler> DeserializeSeed<'de> for TopSeed<'_, H> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

#[cfg(test)]
impl<'de, H: EventHandler> Visitor<'de> for TopSeed<'_, H> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a trace object with a traceEvents array")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(k) = map.next_key_seed(KeySeed(top_key))? {
            match k {
                0 => {
                    self.meta.has_events = true;
                    map.next_value_seed(EventsSeed {
                        meta: &mut *self.meta,
                        handler: &mut *self.handler,
                    })?;
                }
                1 if self.read_meta => self.meta.dist = Some(map.next_value()?),
                2 if self.read_meta => {
                    self.meta.devices = map.next_value::<LenientVec<DeviceProp>>()?.0;
                }
                3 if self.read_meta => {
                    self.meta.base_time_ns = map.next_value::<Scalar>()?.as_u64();
                }
                4 => {
                    self.meta.format.paddle_key();
                    map.next_value::<IgnoredAny>()?;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
    /// A bare array of events (the Chrome trace "JSON array format").
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<(), A::Error> {
        self.meta.has_events = true;
        EventsSeed {
            meta: self.meta,
            handler: self.handler,
        }
        .visit_seq(seq)
    }
}

#[cfg(test)]
struct EventsSeed<'a, H> {
    meta: &'a mut TopMeta,
    handler: &'a mut H,
}

#[cfg(test)]
impl<'de, H: EventHandler> DeserializeSeed<'de> for EventsSeed<'_, H> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

#[cfg(test)]
impl<'de, H: EventHandler> Visitor<'de> for EventsSeed<'_, H> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("traceEvents to be an array")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut ordinal = 0u64;
        while let Some(mut ev) = seq.next_element::<RawEvent>()? {
            self.meta.format.apply(&mut ev);
            self.handler.event(ordinal, &ev);
            ordinal += 1;
        }
        self.meta.event_count = ordinal;
        Ok(())
    }
}

/// An array of `T`; a value that is not an array reads as empty (an element
/// that is not a `T` still fails the parse).
pub(crate) struct LenientVec<T>(pub Vec<T>);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for LenientVec<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = LenientVec<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an array")
            }
            ignore_other_types!();
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut out = Vec::new();
                while let Some(x) = seq.next_element()? {
                    out.push(x);
                }
                Ok(LenientVec(out))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(LenientVec(Vec::new()))
            }
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

impl<T> Default for LenientVec<T> {
    fn default() -> Self {
        Self(Vec::new())
    }
}

#[cfg(test)]
#[path = "raw_tests.rs"]
mod tests;
