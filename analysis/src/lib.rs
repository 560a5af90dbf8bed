//! Pure analytics over the timelines of the ranks of a distributed GPU
//! training job. No I/O, no clock, no async, no wire types: plain values in,
//! plain values out, deterministic and independent of input order.
//!
//! In: GPU events of one rank (classified kernels, memcpys, collectives),
//! per-rank collective observations, per-rank step durations.
//! Out: the numbers users compare with the peers whose definitions we follow:
//! - [`interval`]: union / intersection / length of `[start_ns, end_ns)` spans
//!   (HTA's `merge`);
//! - [`classify`]: HTA 0.5.0 kernel classes (COMMUNICATION, MEMORY,
//!   COMPUTATION, OTHER);
//! - [`breakdown`](mod@breakdown): HTA temporal breakdown (span, busy, idle, compute,
//!   non-compute) and comm/comp overlap, per step or per rank;
//! - [`collectives`]: nccl-tests algbw/busbw, power-of-two size buckets,
//!   cross-rank matching by `(process_group, seq)` with PyTorch Profiler's
//!   transfer vs synchronizing (wait) split, grouped statistics;
//! - [`straggler`]: median/MAD (Iglewicz–Hoaglin modified z-score) straggler
//!   flags per step and a persistence tracker (K of the last N steps) that
//!   issues verdicts with a cause (compute, input, communication, other);
//! - [`stats`]: median, MAD, modified z-score, nearest-rank percentiles;
//! - [`kernels`]: HTA kernel breakdown (time per kernel type with overlaps as
//!   their own types, top kernels per type with `others`);
//! - [`idle`]: HTA idle-time breakdown (host_wait / kernel_wait / other) and
//!   CUDA queue length per stream;
//! - [`hta_load`]: HTA's trace-loading rules (ProfilerStep window, whole
//!   microseconds rounded inward) applied before the HTA-defined views;
//! - [`memcpy`]: memcpy / memset calls, bytes, time and GB/s per direction;
//! - [`optree`]: the PyTorch Profiler TensorBoard plugin's operator tree
//!   (host/device self and total per operator) and its Memory view
//!   (per-operator memory table, peaks);
//! - [`describe`]: pandas `describe()` (count, mean, std, quartiles);
//! - [`clocks`]: node clock offsets of a job from the ends of its blocking
//!   collectives (median of residuals, MAD outlier rejection);
//! - [`fleet`]: the fleet recurrence score (binomial upper tail of a unit's
//!   verdicts given its placements and the fleet's base rate).
//!
//! Units: times are `u64` nanoseconds (`*_ns`); bandwidths are GB/s with
//! GB = 1e9 bytes (`*_gbps`); percentages are 0..=100 (`*_pct`).
//!
//! This crate depends on nothing of ours (and only on `std`); the collector
//! and the trace importer convert their inputs into these types.

pub mod annotations;
pub mod breakdown;
pub mod classify;
pub mod clocks;
pub mod collectives;
pub mod describe;
pub mod fleet;
pub mod goodput;
pub mod hta_load;
pub mod hta_temporal;
pub mod idle;
pub mod inductor;
pub mod interval;
pub mod kernels;
pub mod launches;
pub mod memcpy;
pub mod optree;
pub mod stats;
pub mod straggler;
pub mod tb_plugin;

#[cfg(test)]
mod test_rng;

pub use breakdown::{assign_to_steps, breakdown, Breakdown, GpuEvent, StepBreakdown};
pub use classify::{classify_kernel, classify_name, GpuEventKind, KernelClass};
pub use collectives::matching::{match_collectives, MatchedCollective, Participant};
pub use collectives::stats::{
    collective_stats, job_collective_stats, rank_collective_stats, CollectiveStats, UniformMatch,
};
pub use collectives::summary::{job_collective_stats_of_groups, CallSummary, GroupSummary};
pub use collectives::{
    algbw_gbps, busbw_factor, busbw_gbps, nccl_tests_bytes, size_bucket, CollOp, CollectiveObs,
    SizeBucket, UnknownCollOp,
};
pub use describe::{describe, Describe};
pub use goodput::{goodput, peak_flops, Goodput, StepTime};
pub use idle::{idle_breakdown, queue_length, IdleCategory, IdleRow, QueueRow};
pub use interval::{
    difference, intersect_len, intersection, total_len, union, union_vec, Interval,
};
pub use kernels::{
    is_enqueue_launch, kernel_table, kernel_type_times, GpuOp, KernelRow, LaunchCall,
};
pub use launches::{launch_stats, LaunchObs, LaunchStats, HTA_LAUNCH_APIS};
pub use memcpy::{memcpy_kind, memcpy_summary, MemcpyRow};
pub use straggler::{
    expected_gain_pct, expected_gain_pct_for, expected_gain_pct_of, gain_pct, gain_per_step,
    gain_per_step_for, gain_per_step_of, gap_fill, longest_gap, own_ns, peers_of_step, score_step,
    step_peers, wait_wall_ns, Gap, GapFill, HostOp, PolicyError, RankStepStats, RankStepWait,
    StepFlag, StepPeers, StragglerCause, StragglerPolicy, StragglerTracker, Verdict, VerdictChange,
};
