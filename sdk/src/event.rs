//! The vocabulary of SDK calls: span categories, collective operations and
//! data types by the names bindings use (`"forward"`, `"all_reduce"`,
//! `"float32"`), and [`CollectiveRecord`], one collective as a rank saw it.
//!
//! In: names from callers. Out: `rankscope.v1` enum values, or a
//! [`ParseError`] naming the bad value and the accepted ones.

use rankscope_proto::v1 as proto;

/// A name that is not one of the accepted values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} {value:?}; expected one of: {accepted}")]
pub struct ParseError {
    /// What was being parsed ("span category", "collective op", "dtype").
    pub what: &'static str,
    /// The value given.
    pub value: String,
    /// The accepted values, comma-separated.
    pub accepted: &'static str,
}

/// Span categories by name.
const CATEGORIES: &[(&str, proto::SpanCategory)] = &[
    ("forward", proto::SpanCategory::Forward),
    ("backward", proto::SpanCategory::Backward),
    ("optimizer", proto::SpanCategory::Optimizer),
    ("dataloader", proto::SpanCategory::Dataloader),
    ("compute", proto::SpanCategory::Compute),
    ("communication", proto::SpanCategory::Communication),
    ("memcpy", proto::SpanCategory::Memcpy),
    ("other", proto::SpanCategory::Other),
];

/// The span category called `name` (`forward`, `backward`, `optimizer`,
/// `dataloader`, `compute`, `communication`, `memcpy`, `other`).
pub fn span_category(name: &str) -> Result<proto::SpanCategory, ParseError> {
    lookup(
        CATEGORIES,
        name,
        "span category",
        "forward, backward, optimizer, dataloader, compute, communication, memcpy, other",
    )
}

/// Collective operations by name (torch.distributed's function names map
/// onto these; `_into_tensor` / `_tensor` / `_single` variants are the same op).
const OPS: &[(&str, proto::CollectiveOp)] = &[
    ("all_reduce", proto::CollectiveOp::AllReduce),
    ("reduce_scatter", proto::CollectiveOp::ReduceScatter),
    ("all_gather", proto::CollectiveOp::AllGather),
    ("all_to_all", proto::CollectiveOp::AllToAll),
    ("broadcast", proto::CollectiveOp::Broadcast),
    ("reduce", proto::CollectiveOp::Reduce),
    ("send", proto::CollectiveOp::Send),
    ("recv", proto::CollectiveOp::Recv),
    ("barrier", proto::CollectiveOp::Barrier),
];

/// The collective operation called `name`.
pub fn collective_op(name: &str) -> Result<proto::CollectiveOp, ParseError> {
    lookup(
        OPS,
        name,
        "collective op",
        "all_reduce, reduce_scatter, all_gather, all_to_all, broadcast, reduce, send, recv, barrier",
    )
}

/// Element types by name (torch's dtype names without `torch.`; `""` is
/// unspecified).
const DTYPES: &[(&str, proto::DataType)] = &[
    ("", proto::DataType::Unspecified),
    ("int8", proto::DataType::Int8),
    ("uint8", proto::DataType::Uint8),
    ("int32", proto::DataType::Int32),
    ("uint32", proto::DataType::Uint32),
    ("int64", proto::DataType::Int64),
    ("uint64", proto::DataType::Uint64),
    ("float16", proto::DataType::Float16),
    ("float32", proto::DataType::Float32),
    ("float64", proto::DataType::Float64),
    ("bfloat16", proto::DataType::Bfloat16),
    ("float8_e4m3fn", proto::DataType::Float8E4m3),
    ("float8_e4m3", proto::DataType::Float8E4m3),
    ("float8_e5m2", proto::DataType::Float8E5m2),
];

/// The data type called `name`; types the protocol does not know (bool,
/// complex, int16, ...) are unspecified rather than an error, so a
/// collective on them is still recorded with its bytes.
pub fn dtype(name: &str) -> proto::DataType {
    DTYPES
        .iter()
        .find(|(n, _)| *n == name)
        .map_or(proto::DataType::Unspecified, |(_, d)| *d)
}

fn lookup<T: Copy>(
    table: &[(&str, T)],
    name: &str,
    what: &'static str,
    accepted: &'static str,
) -> Result<T, ParseError> {
    table
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, v)| *v)
        .ok_or_else(|| ParseError {
            what,
            value: name.to_owned(),
            accepted,
        })
}

/// One collective or point-to-point operation as this rank executed it.
/// Matched across ranks by `(process_group, seq)`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CollectiveRecord {
    /// Operation.
    pub op: proto::CollectiveOp,
    /// Name of the process group (e.g. `"0"`); empty = the default group.
    pub process_group: String,
    /// Per-group sequence number, the same on every rank for the same call.
    pub seq: u64,
    /// Ranks in the group (>= 1).
    pub group_size: u32,
    /// Global ranks of the group; empty when it is the whole world.
    pub group_ranks: Vec<u32>,
    /// Element type.
    pub dtype: proto::DataType,
    /// Elements in the buffer.
    pub count: u64,
    /// Bytes as nccl-tests defines them (see `rankscope.v1.Collective.bytes`).
    pub bytes: u64,
    /// When the operation started on this rank.
    pub start_ns: u64,
    /// When it completed on this rank (>= start_ns).
    pub end_ns: u64,
    /// SEND / RECV: the peer's global rank.
    pub peer: u32,
    /// CUDA device index, -1 for a host-side (e.g. gloo) operation.
    pub device: i32,
    /// CUDA stream, 0 for host-side operations.
    pub stream: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_map_to_protocol_values() {
        assert_eq!(span_category("forward"), Ok(proto::SpanCategory::Forward));
        assert_eq!(
            span_category("dataloader"),
            Ok(proto::SpanCategory::Dataloader)
        );
        assert_eq!(
            collective_op("reduce_scatter"),
            Ok(proto::CollectiveOp::ReduceScatter)
        );
        assert_eq!(dtype("bfloat16"), proto::DataType::Bfloat16);
        assert_eq!(dtype("complex64"), proto::DataType::Unspecified);
    }

    #[test]
    fn unknown_names_are_errors_naming_the_value_and_the_choices() {
        let e = span_category("fwd").unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("\"fwd\"") && text.contains("forward"),
            "{text}"
        );
        let e = collective_op("allreduce").unwrap_err();
        assert!(e.to_string().contains("all_reduce"), "{e}");
    }
}
