//! Kernel breakdown of one rank, as Holistic Trace Analysis (HTA) 0.5.0
//! `get_gpu_kernel_breakdown` computes it (`hta/analyzers/breakdown_analysis.py`,
//! `_get_gpu_kernel_type_time` and `_aggr_gpu_kernel_time`).
//!
//! In: the GPU activities of one rank ([`GpuOp`]: kernels, memcpys,
//! memsets with stream and, when the trace has it, their CUDA runtime launch
//! call). Out: [`kernel_type_times`] (time per kernel type where overlapping
//! time is its own type) and [`kernel_table`] (per type the kernels that make
//! up `duration_ratio` of its time, at most `num_kernels`, the rest as one
//! `others` row).
//!
//! Definitions (HTA 0.5.0):
//! - kernel type: [`classify_kernel`](crate::classify_kernel) (COMPUTATION,
//!   COMMUNICATION, MEMORY; OTHER kernels are left out, as HTA does);
//! - type time: each type's intervals are merged as HTA's
//!   `merge_kernel_intervals` does (sorted by start, a new group where a
//!   start is after every earlier end, a group spans its least start to its
//!   greatest end: the union, for intervals that do not end before they
//!   start); a sweep over the three types' groups (+bit at a start, -bit at
//!   an end, `1 << index` per type) gives, for every stretch of time, the
//!   running sum; a stretch with a positive sum counts for the types of its
//!   bits, named in the order COMPUTATION, COMMUNICATION, MEMORY joined by
//!   `" overlapping "` (e.g. `"COMPUTATION overlapping COMMUNICATION"`).
//!   An activity shorter than a microsecond can end before it starts once
//!   rounded as HTA does ([`crate::hta_load`]); HTA's sweep then subtracts
//!   its bit before adding it, and we do the same;
//! - kernel table: per type, kernels grouped by name with sum / max / min /
//!   mean / sample stddev (ddof = 1, 0 for one call) of their durations,
//!   sorted by sum descending. When a type has more than `num_kernels`
//!   names, the running sum over that order is computed, and a name goes to
//!   `others` when its running sum is above the `duration_ratio` quantile
//!   (pandas' linear interpolation) of the running sums, or when it is at
//!   position `num_kernels` or later. HTA then aggregates the rows again by
//!   name over their sums, so in such a type every kept name's max / min /
//!   mean equal its sum (stddev 0) and `others` has the max / min / mean /
//!   stddev of the folded names' sums. Those figures are kept as
//!   [`KernelRow::hta`] (to print HTA's numbers); the row's own `max_ns` /
//!   `min_ns` / `mean_ns` / `stddev_ns` are always per call (over the calls
//!   of that name, or of every folded name for `others`), with `calls` the
//!   real number of calls. (Issue 29: a simulated job's many kernel names
//!   made HTA's folding show max = min = mean = sum for every kept name.)

use std::collections::BTreeMap;

use crate::classify::{classify_kernel, GpuEventKind, KernelClass};
use crate::describe::{quantile_linear, sample_std};

/// The CUDA runtime (or driver) call that launched a GPU activity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchCall {
    pub start_ns: u64,
    pub end_ns: u64,
    /// The call is one of HTA's launch calls that enqueue work on a stream
    /// (`cudaLaunchKernel`, `cudaLaunchKernelExC`, `cuLaunchKernel`,
    /// `cudaMemcpyAsync`, `cudaMemsetAsync` and their HIP / MTIA forms):
    /// only those count for the queue length.
    pub enqueues: bool,
}

/// Whether a host call is one of HTA 0.5.0's launch calls that enqueue work
/// on a stream (`TraceSymbolTable.get_runtime_launch_events_query`).
pub fn is_enqueue_launch(api: &str) -> bool {
    matches!(
        api,
        "cudaLaunchKernel"
            | "cudaLaunchKernelExC"
            | "cuLaunchKernel"
            | "cudaMemcpyAsync"
            | "cudaMemsetAsync"
            | "runFunction - job_prep_and_submit_for_execution"
            | "hipLaunchKernel"
            | "hipExtModuleLaunchKernel"
            | "hipMemsetAsync"
            | "hipMemcpyAsync"
            | "hipMemcpyWithStream"
    )
}

/// One GPU activity of one rank. `end_ns` is before `start_ns` only for an
/// activity shorter than a microsecond rounded inward as HTA does
/// ([`crate::hta_load::round_inward_us`]).
#[derive(Debug, Clone, PartialEq)]
pub struct GpuOp<'a> {
    pub name: &'a str,
    pub kind: GpuEventKind,
    pub stream: u32,
    pub start_ns: u64,
    pub end_ns: u64,
    pub launch: Option<LaunchCall>,
}

impl GpuOp<'_> {
    /// `end - start` (negative only as said on [`GpuOp`]).
    pub fn dur_ns(&self) -> i64 {
        signed(self.end_ns) - signed(self.start_ns)
    }
}

fn signed(t: u64) -> i64 {
    i64::try_from(t).unwrap_or(i64::MAX)
}

/// HTA's `merge_kernel_intervals` over `(start, end)` pairs (see the module
/// doc): the groups' `(least start, greatest end)`.
pub(crate) fn hta_merge(mut spans: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    spans.sort_by_key(|s| s.0);
    let mut out: Vec<(u64, u64)> = Vec::new();
    let mut max_end: Option<u64> = None;
    for (start, end) in spans {
        match (out.last_mut(), max_end) {
            (Some(g), Some(m)) if start <= m => {
                g.0 = g.0.min(start);
                g.1 = g.1.max(end);
            }
            _ => out.push((start, end)),
        }
        max_end = Some(max_end.map_or(end, |m| m.max(end)));
    }
    out
}

/// HTA's upper-case type name.
pub fn type_name(class: KernelClass) -> &'static str {
    match class {
        KernelClass::Computation => "COMPUTATION",
        KernelClass::Communication => "COMMUNICATION",
        KernelClass::Memory => "MEMORY",
        KernelClass::Other => "OTHER",
    }
}

/// The three analysed types in HTA's order (bit `1 << index`).
const TYPES: [KernelClass; 3] = [
    KernelClass::Computation,
    KernelClass::Communication,
    KernelClass::Memory,
];

fn mask_name(mask: u8) -> String {
    TYPES
        .iter()
        .enumerate()
        .filter(|(i, _)| mask & (1 << i) != 0)
        .map(|(_, c)| type_name(*c))
        .collect::<Vec<_>>()
        .join(" overlapping ")
}

/// Time per kernel type of one rank (overlaps as their own types), sorted by
/// time descending, then name; types with no time are left out.
pub fn kernel_type_times(ops: &[GpuOp<'_>]) -> Vec<(String, u64)> {
    let mut edges: Vec<(u64, i8)> = Vec::new();
    for (i, class) in TYPES.iter().enumerate() {
        let spans: Vec<(u64, u64)> = ops
            .iter()
            .filter(|o| classify_kernel(o.name, o.kind) == *class)
            .map(|o| (o.start_ns, o.end_ns))
            .collect();
        for (start, end) in hta_merge(spans) {
            edges.push((start, 1 << i));
            edges.push((end, -(1 << i)));
        }
    }
    edges.sort_unstable();
    let mut per_mask: BTreeMap<u8, u64> = BTreeMap::new();
    let mut running: i8 = 0;
    for pair in edges.windows(2) {
        running += pair[0].1;
        let dur = pair[1].0 - pair[0].0;
        // Between 1 and 7 whenever no group ends before it starts.
        if (1..8).contains(&running) && dur > 0 {
            *per_mask.entry(running as u8).or_default() += dur;
        }
    }
    let mut out: Vec<(String, u64)> = per_mask
        .into_iter()
        .map(|(mask, ns)| (mask_name(mask), ns))
        .collect();
    out.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    out
}

/// Statistics of one kernel-table row as HTA 0.5.0 prints them: per call,
/// unless the row's type was folded (module doc), where they are over the
/// per-name sums.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HtaStats {
    pub max_ns: i64,
    pub min_ns: i64,
    pub mean_ns: f64,
    pub stddev_ns: f64,
}

/// One row of the kernel table.
#[derive(Debug, Clone, PartialEq)]
pub struct KernelRow {
    pub kernel_type: &'static str,
    /// Kernel name, or `others`.
    pub name: String,
    pub calls: u64,
    /// Durations are signed: see [`GpuOp`]. Per call (module doc).
    pub sum_ns: i64,
    pub max_ns: i64,
    pub min_ns: i64,
    pub mean_ns: f64,
    pub stddev_ns: f64,
    /// HTA's own figures for the row (module doc).
    pub hta: HtaStats,
}

impl KernelRow {
    fn of(kernel_type: &'static str, name: String, durs: &[i64]) -> Self {
        let sum: i64 = durs.iter().sum();
        let f: Vec<f64> = durs.iter().map(|&d| d as f64).collect();
        let n = durs.len().max(1) as f64;
        let stats = HtaStats {
            max_ns: durs.iter().copied().max().unwrap_or(0),
            min_ns: durs.iter().copied().min().unwrap_or(0),
            mean_ns: sum as f64 / n,
            stddev_ns: sample_std(&f).unwrap_or(0.0),
        };
        KernelRow {
            kernel_type,
            name,
            calls: durs.len() as u64,
            sum_ns: sum,
            max_ns: stats.max_ns,
            min_ns: stats.min_ns,
            mean_ns: stats.mean_ns,
            stddev_ns: stats.stddev_ns,
            hta: stats,
        }
    }
}

/// Defaults of HTA's `get_gpu_kernel_breakdown`.
pub const DEFAULT_DURATION_RATIO: f64 = 0.8;
pub const DEFAULT_NUM_KERNELS: usize = 10;

/// The kernel table of one rank: per type (COMPUTATION, COMMUNICATION,
/// MEMORY), rows by sum descending (`others` last).
pub fn kernel_table(ops: &[GpuOp<'_>], duration_ratio: f64, num_kernels: usize) -> Vec<KernelRow> {
    let mut out = Vec::new();
    for class in TYPES {
        let mut by_name: BTreeMap<&str, Vec<i64>> = BTreeMap::new();
        for o in ops
            .iter()
            .filter(|o| classify_kernel(o.name, o.kind) == class)
        {
            by_name.entry(o.name).or_default().push(o.dur_ns());
        }
        let mut rows: Vec<(KernelRow, Vec<i64>)> = by_name
            .into_iter()
            .map(|(name, durs)| {
                (
                    KernelRow::of(type_name(class), name.to_owned(), &durs),
                    durs,
                )
            })
            .collect();
        rows.sort_by(|a, b| {
            b.0.sum_ns
                .cmp(&a.0.sum_ns)
                .then_with(|| a.0.name.cmp(&b.0.name))
        });
        if rows.len() > num_kernels {
            out.extend(fold_others(rows, duration_ratio, num_kernels));
        } else {
            out.extend(rows.into_iter().map(|r| r.0));
        }
    }
    out
}

/// HTA's `_aggr_gpu_kernel_time` folding (see the module doc); each row
/// comes with its calls' durations, for the per-call statistics.
fn fold_others(
    rows: Vec<(KernelRow, Vec<i64>)>,
    duration_ratio: f64,
    num_kernels: usize,
) -> Vec<KernelRow> {
    let cumsum: Vec<f64> = rows
        .iter()
        .scan(0i64, |acc, r| {
            *acc += r.0.sum_ns;
            Some(*acc as f64)
        })
        .collect();
    // Ascending unless a name's calls sum below zero (see `GpuOp`).
    let mut sorted = cumsum.clone();
    sorted.sort_by(f64::total_cmp);
    let q = quantile_linear(&sorted, duration_ratio).unwrap_or(f64::INFINITY);
    let mut kept = Vec::new();
    let mut folded: Vec<KernelRow> = Vec::new();
    let mut folded_durs: Vec<i64> = Vec::new();
    for (i, (r, durs)) in rows.into_iter().enumerate() {
        // HTA 0.5.0 keeps `keep_idx = sum < 0` ("always false", its comment
        // says) out of the folding: a name whose calls sum below zero after
        // HTA's inward rounding (sub-microsecond kernels) stays a row of
        // its own even past `num_kernels` (seen on an H200 trace:
        // FillFunctor at -4 us, scal_kernel at -1 us).
        let keep = r.sum_ns < 0;
        if !keep && (cumsum[i] > q || i >= num_kernels) {
            folded.push(r);
            folded_durs.extend(durs);
        } else {
            let s = r.sum_ns;
            kept.push(KernelRow {
                hta: HtaStats {
                    max_ns: s,
                    min_ns: s,
                    mean_ns: s as f64,
                    stddev_ns: 0.0,
                },
                ..r
            });
        }
    }
    if let Some(first) = folded.first() {
        let sums: Vec<f64> = folded.iter().map(|r| r.sum_ns as f64).collect();
        let sum: i64 = folded.iter().map(|r| r.sum_ns).sum();
        let mut others = KernelRow::of(first.kernel_type, "others".to_owned(), &folded_durs);
        others.hta = HtaStats {
            max_ns: folded.iter().map(|r| r.sum_ns).max().unwrap_or(0),
            min_ns: folded.iter().map(|r| r.sum_ns).min().unwrap_or(0),
            mean_ns: sum as f64 / folded.len() as f64,
            stddev_ns: sample_std(&sums).unwrap_or(0.0),
        };
        kept.push(others);
    }
    kept
}

#[cfg(test)]
#[path = "kernels_tests.rs"]
mod tests;
