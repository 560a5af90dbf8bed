//! NCCL kernels to collective descriptions.
//!
//! In: an NCCL kernel's name and the NCCL metadata PyTorch records
//! (`Collective name`, `In msg nelems`, `Out msg nelems`, `Group size`,
//! `dtype`, `Process Group Name`, `Process Group Ranks`), found on the
//! kernel itself (PyTorch >= ~2.3) or on the `record_param_comms` CPU op
//! with the same `External id`. Out: op, element type, element count and
//! nccl-tests bytes.
//!
//! Rules:
//! - metadata wins over the kernel name; the name is the fallback
//!   (`ncclKernel_AllReduce_RING_LL_Sum_float`,
//!   `ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL`, ...);
//! - a `SendRecv` kernel without metadata is an **all_to_all** (the usual
//!   source of SendRecv kernels in data-parallel jobs: `all_to_all` and
//!   `all_to_all_single` run as grouped send/recv); a genuine
//!   pipeline-parallel send/recv is only recognised through metadata;
//! - `ncclDevKernel_Generic` (RCCL, NCCL >= 2.19 fused kernels) without
//!   metadata has **no known op**: the kernel is still imported (it is
//!   communication time) but no `Collective` event is emitted for it;
//! - bytes follow nccl-tests: `max(in, out) elements * element size`
//!   (all_gather's output, reduce_scatter's input, the buffer otherwise);
//!   0 when the element count or size is unknown (traces without metadata);
//! - traces do not record a send/recv peer: `Collective.peer` is 0.

use rankscope_proto::v1 as proto;

use proto::{CollectiveOp as Op, DataType as Dt};

/// A c10d collective name (`allreduce`, `_allgather_base`,
/// `reduce_scatter_tensor_coalesced`, `all_to_allv`, `send`, ...) to an op.
pub(crate) fn op_from_collective_name(name: &str) -> Option<Op> {
    let n: String = name
        .chars()
        .filter(|c| *c != '_')
        .map(|c| c.to_ascii_lowercase())
        .collect();
    let table = [
        ("allreduce", Op::AllReduce),
        ("reducescatter", Op::ReduceScatter),
        ("allgather", Op::AllGather),
        ("alltoall", Op::AllToAll),
        ("broadcast", Op::Broadcast),
        ("barrier", Op::Barrier),
        ("recv", Op::Recv),
        ("send", Op::Send),
        ("reduce", Op::Reduce),
    ];
    table
        .into_iter()
        .find(|(key, _)| n.contains(key))
        .map(|(_, op)| op)
}

/// The part of an NCCL kernel name between the `ncclKernel_` /
/// `ncclDevKernel_` prefix and the argument list, split at `_`.
fn name_tokens(kernel: &str) -> Option<impl Iterator<Item = &str>> {
    let rest = kernel
        .strip_prefix("ncclKernel_")
        .or_else(|| kernel.strip_prefix("ncclDevKernel_"))?;
    let rest = rest.split('(').next().unwrap_or(rest);
    Some(rest.split('_'))
}

/// The op encoded in an NCCL kernel name (`None` for `Generic` and unknown
/// names).
pub(crate) fn op_from_kernel_name(kernel: &str) -> Option<Op> {
    match name_tokens(kernel)?.next()? {
        "AllReduce" => Some(Op::AllReduce),
        "ReduceScatter" => Some(Op::ReduceScatter),
        "AllGather" => Some(Op::AllGather),
        "AllToAll" | "SendRecv" => Some(Op::AllToAll),
        "Broadcast" => Some(Op::Broadcast),
        "Reduce" => Some(Op::Reduce),
        "Send" => Some(Op::Send),
        "Recv" => Some(Op::Recv),
        _ => None,
    }
}

/// The element type encoded in an NCCL kernel name, e.g. `float`, `bf16`,
/// `int8_t`, `__nv_bfloat16`.
pub(crate) fn dtype_from_kernel_name(kernel: &str) -> Option<Dt> {
    let mut tokens = name_tokens(kernel)?;
    tokens.next(); // the op
    tokens.find_map(|t| match t {
        "float" | "f32" => Some(Dt::Float32),
        "half" | "f16" => Some(Dt::Float16),
        "double" | "f64" => Some(Dt::Float64),
        "bf16" | "bfloat16" => Some(Dt::Bfloat16),
        "int8" | "i8" => Some(Dt::Int8),
        "uint8" | "u8" => Some(Dt::Uint8),
        "int32" | "i32" => Some(Dt::Int32),
        "uint32" | "u32" => Some(Dt::Uint32),
        "int64" | "i64" => Some(Dt::Int64),
        "uint64" | "u64" => Some(Dt::Uint64),
        "f8e4m3" | "e4m3" => Some(Dt::Float8E4m3),
        "f8e5m2" | "e5m2" => Some(Dt::Float8E5m2),
        _ => None,
    })
}

/// A c10 scalar type name as PyTorch writes it in `dtype` (`Float`,
/// `BFloat16`, `Long`, ...) to the wire type and its size in bytes. Types
/// the wire protocol lacks (`Short`, `Bool`, complex) keep their size with
/// `DATA_TYPE_UNSPECIFIED`.
pub(crate) fn dtype_from_c10(name: &str) -> Option<(Dt, u64)> {
    let t = match name {
        "Float" | "float" | "float32" => (Dt::Float32, 4),
        "Double" | "double" | "float64" => (Dt::Float64, 8),
        "Half" | "half" | "float16" | "c10::Half" => (Dt::Float16, 2),
        "BFloat16" | "bfloat16" | "c10::BFloat16" => (Dt::Bfloat16, 2),
        "Char" | "int8" | "signed char" => (Dt::Int8, 1),
        "Byte" | "uint8" | "unsigned char" => (Dt::Uint8, 1),
        "Int" | "int" | "int32" => (Dt::Int32, 4),
        "UInt32" | "uint32" => (Dt::Uint32, 4),
        "Long" | "long int" | "int64" => (Dt::Int64, 8),
        "UInt64" | "uint64" => (Dt::Uint64, 8),
        "Float8_e4m3fn" | "Float8_e4m3fnuz" => (Dt::Float8E4m3, 1),
        "Float8_e5m2" | "Float8_e5m2fnuz" => (Dt::Float8E5m2, 1),
        "Short" | "UInt16" | "short int" => (Dt::Unspecified, 2),
        "Bool" | "bool" => (Dt::Unspecified, 1),
        "ComplexHalf" => (Dt::Unspecified, 4),
        "ComplexFloat" => (Dt::Unspecified, 8),
        "ComplexDouble" => (Dt::Unspecified, 16),
        _ => return None,
    };
    Some(t)
}

/// Size of one element of a wire type (0 when unspecified).
pub(crate) fn dtype_size(dt: Dt) -> u64 {
    match dt {
        Dt::Unspecified => 0,
        Dt::Int8 | Dt::Uint8 | Dt::Float8E4m3 | Dt::Float8E5m2 => 1,
        Dt::Float16 | Dt::Bfloat16 => 2,
        Dt::Int32 | Dt::Uint32 | Dt::Float32 => 4,
        Dt::Int64 | Dt::Uint64 | Dt::Float64 => 8,
    }
}

/// NCCL metadata of one collective, as far as the trace records it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct CommMeta {
    pub collective_name: Option<String>,
    pub in_nelems: Option<u64>,
    pub out_nelems: Option<u64>,
    pub group_size: Option<u32>,
    pub dtype: Option<String>,
    pub pg_name: Option<String>,
    pub pg_ranks: Option<Vec<u32>>,
}

impl CommMeta {
    /// The metadata in an event's args; `None` when it has none.
    pub(crate) fn from_args(a: &super::raw::RawArgs) -> Option<Self> {
        let m = Self {
            collective_name: a.coll_name.as_str().map(str::to_owned),
            in_nelems: a.in_nelems.as_u64(),
            out_nelems: a.out_nelems.as_u64(),
            group_size: a.group_size.as_u64().and_then(|g| u32::try_from(g).ok()),
            dtype: a.dtype.as_str().map(str::to_owned),
            pg_name: a.pg_name.as_str().map(str::to_owned),
            pg_ranks: a.pg_ranks.as_ranks(),
        };
        (m != Self::default()).then_some(m)
    }

    /// Fills the fields `self` lacks from `other`.
    pub(crate) fn fill_from(&mut self, other: &Self) {
        fn fill<T: Clone>(a: &mut Option<T>, b: &Option<T>) {
            if a.is_none() {
                a.clone_from(b);
            }
        }
        fill(&mut self.collective_name, &other.collective_name);
        fill(&mut self.in_nelems, &other.in_nelems);
        fill(&mut self.out_nelems, &other.out_nelems);
        fill(&mut self.group_size, &other.group_size);
        fill(&mut self.dtype, &other.dtype);
        fill(&mut self.pg_name, &other.pg_name);
        fill(&mut self.pg_ranks, &other.pg_ranks);
    }
}

/// What a collective moved, resolved from metadata and kernel name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Payload {
    pub op: Option<Op>,
    pub dtype: Dt,
    /// Elements: max(in, out); 0 when unknown.
    pub count: u64,
    /// nccl-tests bytes: count * element size; 0 when unknown.
    pub bytes: u64,
}

/// Resolves op, dtype, count and bytes of one NCCL kernel.
pub(crate) fn payload(kernel_name: &str, meta: &CommMeta) -> Payload {
    let op = meta
        .collective_name
        .as_deref()
        .and_then(op_from_collective_name)
        .or_else(|| op_from_kernel_name(kernel_name));
    let (dtype, size) = match meta.dtype.as_deref().and_then(dtype_from_c10) {
        Some(t) => t,
        None => {
            let dt = dtype_from_kernel_name(kernel_name).unwrap_or(Dt::Unspecified);
            (dt, dtype_size(dt))
        }
    };
    let count = meta
        .in_nelems
        .unwrap_or(0)
        .max(meta.out_nelems.unwrap_or(0));
    Payload {
        op,
        dtype,
        count,
        bytes: count.saturating_mul(size),
    }
}

#[cfg(test)]
#[path = "nccl_tests.rs"]
mod tests;
