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
//! - type time: each type's intervals are merged (union); a sweep over the
//!   three unions gives, for every stretch of time, the set of types running;
//!   the stretch counts for that set, named by its types in the order
//!   COMPUTATION, COMMUNICATION, MEMORY joined by `" overlapping "` (e.g.
//!   `"COMPUTATION overlapping COMMUNICATION"`);
//! - kernel table: per type, kernels grouped by name with sum / max / min /
//!   mean / sample stddev (ddof = 1, 0 for one call) of their durations,
//!   sorted by sum descending. When a type has more than `num_kernels`
//!   names, the running sum over that order is computed, and a name goes to
//!   `others` when its running sum is above the `duration_ratio` quantile
//!   (pandas' linear interpolation) of the running sums, or when it is at
//!   position `num_kernels` or later. HTA then aggregates the rows again by
//!   name over their sums, so in such a type every kept name's max / min /
//!   mean equal its sum (stddev 0) and `others` has the max / min / mean /
//!   stddev of the folded names' sums; we keep that, to print HTA's numbers,
//!   and add `calls` (the real number of calls).

use std::collections::BTreeMap;

use crate::classify::{classify_kernel, GpuEventKind, KernelClass};
use crate::describe::{quantile_linear, sample_std};
use crate::interval::{union_vec, Interval};

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

/// One GPU activity of one rank.
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
    pub fn dur_ns(&self) -> u64 {
        self.end_ns.saturating_sub(self.start_ns)
    }
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
        let spans: Vec<Interval> = ops
            .iter()
            .filter(|o| classify_kernel(o.name, o.kind) == *class)
            .map(|o| Interval {
                start_ns: o.start_ns,
                end_ns: o.end_ns.max(o.start_ns),
            })
            .collect();
        for iv in union_vec(spans) {
            edges.push((iv.start_ns, 1 << i));
            edges.push((iv.end_ns, -(1 << i)));
        }
    }
    edges.sort_unstable();
    let mut per_mask: BTreeMap<u8, u64> = BTreeMap::new();
    let mut running: i8 = 0;
    for pair in edges.windows(2) {
        running += pair[0].1;
        let dur = pair[1].0 - pair[0].0;
        if running > 0 && dur > 0 {
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

/// One row of the kernel table.
#[derive(Debug, Clone, PartialEq)]
pub struct KernelRow {
    pub kernel_type: &'static str,
    /// Kernel name, or `others`.
    pub name: String,
    pub calls: u64,
    pub sum_ns: u64,
    pub max_ns: u64,
    pub min_ns: u64,
    pub mean_ns: f64,
    pub stddev_ns: f64,
}

/// Defaults of HTA's `get_gpu_kernel_breakdown`.
pub const DEFAULT_DURATION_RATIO: f64 = 0.8;
pub const DEFAULT_NUM_KERNELS: usize = 10;

/// The kernel table of one rank: per type (COMPUTATION, COMMUNICATION,
/// MEMORY), rows by sum descending (`others` last).
pub fn kernel_table(ops: &[GpuOp<'_>], duration_ratio: f64, num_kernels: usize) -> Vec<KernelRow> {
    let mut out = Vec::new();
    for class in TYPES {
        let mut by_name: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
        for o in ops
            .iter()
            .filter(|o| classify_kernel(o.name, o.kind) == class)
        {
            by_name.entry(o.name).or_default().push(o.dur_ns());
        }
        let mut rows: Vec<KernelRow> = by_name
            .into_iter()
            .map(|(name, durs)| {
                let sum: u64 = durs.iter().sum();
                let f: Vec<f64> = durs.iter().map(|&d| d as f64).collect();
                KernelRow {
                    kernel_type: type_name(class),
                    name: name.to_owned(),
                    calls: durs.len() as u64,
                    sum_ns: sum,
                    max_ns: durs.iter().copied().max().unwrap_or(0),
                    min_ns: durs.iter().copied().min().unwrap_or(0),
                    mean_ns: sum as f64 / durs.len() as f64,
                    stddev_ns: sample_std(&f).unwrap_or(0.0),
                }
            })
            .collect();
        rows.sort_by(|a, b| b.sum_ns.cmp(&a.sum_ns).then_with(|| a.name.cmp(&b.name)));
        if rows.len() > num_kernels {
            rows = fold_others(rows, duration_ratio, num_kernels);
        }
        out.extend(rows);
    }
    out
}

/// HTA's `_aggr_gpu_kernel_time` folding (see the module doc).
fn fold_others(rows: Vec<KernelRow>, duration_ratio: f64, num_kernels: usize) -> Vec<KernelRow> {
    let cumsum: Vec<f64> = rows
        .iter()
        .scan(0u64, |acc, r| {
            *acc += r.sum_ns;
            Some(*acc as f64)
        })
        .collect();
    // The running sums are ascending already.
    let q = quantile_linear(&cumsum, duration_ratio).unwrap_or(f64::INFINITY);
    let mut kept = Vec::new();
    let mut folded: Vec<KernelRow> = Vec::new();
    for (i, r) in rows.into_iter().enumerate() {
        if cumsum[i] > q || i >= num_kernels {
            folded.push(r);
        } else {
            kept.push(KernelRow {
                max_ns: r.sum_ns,
                min_ns: r.sum_ns,
                mean_ns: r.sum_ns as f64,
                stddev_ns: 0.0,
                ..r
            });
        }
    }
    if let Some(first) = folded.first() {
        let sums: Vec<f64> = folded.iter().map(|r| r.sum_ns as f64).collect();
        let sum: u64 = folded.iter().map(|r| r.sum_ns).sum();
        kept.push(KernelRow {
            kernel_type: first.kernel_type,
            name: "others".to_owned(),
            calls: folded.iter().map(|r| r.calls).sum(),
            sum_ns: sum,
            max_ns: folded.iter().map(|r| r.sum_ns).max().unwrap_or(0),
            min_ns: folded.iter().map(|r| r.sum_ns).min().unwrap_or(0),
            mean_ns: sum as f64 / folded.len() as f64,
            stddev_ns: sample_std(&sums).unwrap_or(0.0),
        });
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(name: &str, start_ns: u64, end_ns: u64) -> GpuOp<'_> {
        GpuOp {
            name,
            kind: GpuEventKind::Kernel,
            stream: 7,
            start_ns,
            end_ns,
            launch: None,
        }
    }

    #[test]
    fn overlapping_time_is_its_own_type() {
        let ops = [
            op("gemm", 0, 100),
            op("relu", 50, 120),
            op("ncclKernel_AllReduce", 80, 300),
            op("Memcpy DtoD", 290, 310),
        ];
        let t = kernel_type_times(&ops);
        let get = |n: &str| t.iter().find(|(k, _)| k == n).map(|(_, v)| *v);
        assert_eq!(get("COMPUTATION"), Some(80));
        assert_eq!(get("COMPUTATION overlapping COMMUNICATION"), Some(40));
        assert_eq!(get("COMMUNICATION"), Some(170));
        assert_eq!(get("COMMUNICATION overlapping MEMORY"), Some(10));
        assert_eq!(get("MEMORY"), Some(10));
        // The parts add up to the union of all GPU time.
        assert_eq!(t.iter().map(|(_, v)| v).sum::<u64>(), 310);
        let mut rev = ops.to_vec();
        rev.reverse();
        assert_eq!(kernel_type_times(&rev), t);
    }

    #[test]
    fn table_folds_the_tail_into_others_as_hta() {
        // 12 names, sums 12, 11, ..., 1: more than 10, so folding applies.
        let names: Vec<String> = (1..=12).map(|i| format!("k{i:02}")).collect();
        let mut ops = Vec::new();
        let mut t = 0;
        for (i, n) in names.iter().enumerate() {
            let d = 12 - i as u64;
            ops.push(op(n, t, t + d));
            t += 100;
        }
        let rows = kernel_table(&ops, 0.8, 10);
        // Running sums 12, 23, 33, 42, 50, 57, 63, 68, 72, 75, 77, 78; the
        // 0.8 quantile is 72 + 0.8 * 3 = 74.4: k10.. go to others.
        let names_kept: Vec<&str> = rows.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(
            names_kept,
            ["k01", "k02", "k03", "k04", "k05", "k06", "k07", "k08", "k09", "others"]
        );
        let others = rows.last().unwrap();
        assert_eq!((others.sum_ns, others.calls), (3 + 2 + 1, 3));
        assert_eq!((others.max_ns, others.min_ns, others.mean_ns), (3, 1, 2.0));
        assert_eq!(rows[0].max_ns, 12);
        // Few names: real per-call statistics, no folding.
        let rows = kernel_table(&[op("a", 0, 10), op("a", 20, 40)], 0.8, 10);
        assert_eq!(rows.len(), 1);
        assert_eq!((rows[0].calls, rows[0].max_ns, rows[0].min_ns), (2, 20, 10));
        assert!((rows[0].stddev_ns - 50f64.sqrt()).abs() < 1e-9);
    }
}
