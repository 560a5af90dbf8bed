//! NCCL collective vocabulary and bandwidth arithmetic; matching across
//! ranks lives in [`matching`] and the grouped statistics in [`stats`].
//!
//! In: per-rank collective observations ([`CollectiveObs`]: one rank's view of
//! one collective call, its own start/end on its own clock).
//! Out: bandwidths, size buckets, matched collectives, grouped statistics.
//!
//! Bandwidth definitions follow nccl-tests (`doc/PERFORMANCE.md`):
//! - `algbw = S / t`, `S` = the "size" nccl-tests reports for the op (see
//!   [`CollectiveObs::bytes`]), `t` = duration. Bytes per ns equals GB/s with
//!   GB = 1e9 bytes, the unit nccl-tests prints, so `*_gbps` = bytes / ns;
//! - `busbw = algbw * factor(op, n)`, `n` = ranks in the communicator:
//!   all_reduce `2(n-1)/n`; reduce_scatter, all_gather, all_to_all
//!   `(n-1)/n`; broadcast, reduce, send, recv `1`; barrier moves no data
//!   (factor 0, bandwidths `None`).
//!
//! Invariants: bandwidths are `None`, never infinite, for zero durations;
//! `busbw <= 2 * algbw`.

pub mod matching;
pub mod stats;
pub mod summary;

use std::fmt;
use std::str::FromStr;

/// A collective operation (the wire protocol's `CollectiveOp`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CollOp {
    /// `all_reduce`.
    AllReduce,
    /// `reduce_scatter`.
    ReduceScatter,
    /// `all_gather`.
    AllGather,
    /// `all_to_all`.
    AllToAll,
    /// `broadcast`.
    Broadcast,
    /// `reduce`.
    Reduce,
    /// `send` (point-to-point).
    Send,
    /// `recv` (point-to-point).
    Recv,
    /// `barrier` (no payload).
    Barrier,
}

impl CollOp {
    /// Every op, in declaration order.
    pub const ALL: [CollOp; 9] = [
        Self::AllReduce,
        Self::ReduceScatter,
        Self::AllGather,
        Self::AllToAll,
        Self::Broadcast,
        Self::Reduce,
        Self::Send,
        Self::Recv,
        Self::Barrier,
    ];

    /// snake_case name used in storage, JSON and the CLI.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::AllReduce => "all_reduce",
            Self::ReduceScatter => "reduce_scatter",
            Self::AllGather => "all_gather",
            Self::AllToAll => "all_to_all",
            Self::Broadcast => "broadcast",
            Self::Reduce => "reduce",
            Self::Send => "send",
            Self::Recv => "recv",
            Self::Barrier => "barrier",
        }
    }
}

impl fmt::Display for CollOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A string that is not one of [`CollOp::as_str`]'s names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownCollOp(pub String);

impl fmt::Display for UnknownCollOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown collective op {:?}", self.0)
    }
}

impl std::error::Error for UnknownCollOp {}

impl FromStr for CollOp {
    type Err = UnknownCollOp;

    /// Parses the snake_case names of [`CollOp::as_str`].
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|op| op.as_str() == s)
            .ok_or_else(|| UnknownCollOp(s.to_owned()))
    }
}

/// One rank's observation of one collective call.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CollectiveObs {
    /// Global rank that observed the call.
    pub rank: u32,
    /// Process group (communicator) name; with `seq` it identifies the call
    /// across ranks.
    pub process_group: String,
    /// Per-process-group sequence number of the call.
    pub seq: u64,
    /// Operation.
    pub op: CollOp,
    /// Element type name (e.g. `float32`).
    pub dtype: String,
    /// Ranks in the process group (`n` of the busbw factor).
    pub group_size: u32,
    /// The nccl-tests "size" of the call, in bytes: the buffer for
    /// all_reduce, broadcast, reduce, send and recv; the **output**
    /// (n x per-rank input) for all_gather; the **input** (n x per-rank
    /// output) for reduce_scatter; the whole send buffer for all_to_all.
    /// [`nccl_tests_bytes`] derives it from input and output sizes.
    pub bytes: u64,
    /// Start on the rank's clock, ns.
    pub start_ns: u64,
    /// End on the rank's clock, ns.
    pub end_ns: u64,
}

impl CollectiveObs {
    /// `end_ns - start_ns` (0 if inverted).
    pub const fn duration_ns(&self) -> u64 {
        self.end_ns.saturating_sub(self.start_ns)
    }
}

/// nccl-tests "size" from a rank's input and output buffer sizes: the larger
/// of the two covers every op (all_gather's output and reduce_scatter's input
/// are the n-times-larger buffers; the other ops have equal sizes, or one
/// side empty for send/recv).
pub const fn nccl_tests_bytes(in_bytes: u64, out_bytes: u64) -> u64 {
    if in_bytes > out_bytes {
        in_bytes
    } else {
        out_bytes
    }
}

/// nccl-tests bus-bandwidth factor for `op` on `n` ranks (0 for barrier and
/// for `n == 0`).
pub fn busbw_factor(op: CollOp, n: u32) -> f64 {
    if n == 0 {
        return 0.0;
    }
    let n = f64::from(n);
    match op {
        CollOp::AllReduce => 2.0 * (n - 1.0) / n,
        CollOp::ReduceScatter | CollOp::AllGather | CollOp::AllToAll => (n - 1.0) / n,
        CollOp::Broadcast | CollOp::Reduce | CollOp::Send | CollOp::Recv => 1.0,
        CollOp::Barrier => 0.0,
    }
}

/// Algorithm bandwidth `bytes / duration_ns` in GB/s (1 GB = 1e9 bytes, i.e.
/// bytes per ns); `None` when the duration is 0.
pub fn algbw_gbps(bytes: u64, duration_ns: u64) -> Option<f64> {
    (duration_ns > 0).then(|| bytes as f64 / duration_ns as f64)
}

/// Bus bandwidth `algbw * busbw_factor(op, n)` in GB/s; `None` for barrier,
/// `n == 0` or a zero duration.
pub fn busbw_gbps(op: CollOp, n: u32, bytes: u64, duration_ns: u64) -> Option<f64> {
    if op == CollOp::Barrier || n == 0 {
        return None;
    }
    algbw_gbps(bytes, duration_ns).map(|bw| bw * busbw_factor(op, n))
}

/// A power-of-two message-size bucket `[lower_bytes, upper_bytes)`;
/// `upper_bytes = 2 * lower_bytes` (saturating at `u64::MAX` for the top
/// bucket). Zero bytes fall in `[0, 1)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SizeBucket {
    /// Inclusive lower bound, bytes.
    pub lower_bytes: u64,
    /// Exclusive upper bound, bytes.
    pub upper_bytes: u64,
}

impl SizeBucket {
    /// Readable label, e.g. `64KiB-128KiB`, `0B-1B`, `1GiB-2GiB`.
    pub fn label(&self) -> String {
        let upper = if self.lower_bytes == 0 {
            1
        } else {
            u128::from(self.lower_bytes) * 2
        };
        format!(
            "{}-{}",
            format_pow2(u128::from(self.lower_bytes)),
            format_pow2(upper)
        )
    }
}

impl fmt::Display for SizeBucket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.label())
    }
}

/// The power-of-two bucket that holds `bytes`.
pub fn size_bucket(bytes: u64) -> SizeBucket {
    if bytes == 0 {
        return SizeBucket {
            lower_bytes: 0,
            upper_bytes: 1,
        };
    }
    let lower = 1u64 << (63 - bytes.leading_zeros());
    SizeBucket {
        lower_bytes: lower,
        upper_bytes: lower.saturating_mul(2),
    }
}

/// `1024` -> `1KiB`: the largest binary unit that divides `v` exactly.
fn format_pow2(v: u128) -> String {
    const UNITS: [&str; 7] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    let mut v = v;
    let mut unit = 0;
    while unit + 1 < UNITS.len() && v >= 1024 && v & 1023 == 0 {
        v /= 1024;
        unit += 1;
    }
    format!("{v}{}", UNITS[unit])
}

#[cfg(test)]
mod tests;
