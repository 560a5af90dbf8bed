//! The PyTorch Profiler TensorBoard plugin's kernel view and GPU summary
//! (`torch-tb-profiler` 0.4.3), issue 29.
//!
//! In: one rank's kernels ([`PluginKernel`]: name, device times and the
//! launch figures Kineto records, `blocks per SM` and `est. achieved
//! occupancy %`) and the plugin's "all steps" span. Out: [`kernel_view`]
//! (the plugin's "group by Kernel" table) and [`gpu_summary`] (GPU
//! Utilization, Est. SM Efficiency, Est. Achieved Occupancy, kernel time
//! using Tensor Cores).
//!
//! Definitions (`torch_tb_profiler/profiler/`, 0.4.3 = pytorch/kineto
//! `tb_plugin` @ `afdaf508`):
//! - kernel view (`kernel_parser.KernelParser`): per kernel name calls,
//!   total, unweighted mean, max, min duration; Mean Blocks Per SM and Mean
//!   Est. Achieved Occupancy are `numpy.average(x.fillna(0), weights=dur)`
//!   (missing figures count as 0; 0 when the durations sum to 0); Tensor
//!   Cores Used = the name contains one of [`TC_ALLOWLIST`]
//!   (`tensor_core.TC_Allowlist`, from NVIDIA PyProf);
//! - GPU Utilization (`gpu_metrics_parser.calculate_gpu_utilization`): the
//!   union of the kernels' intervals inside the steps span over the span;
//! - Est. SM Efficiency (`calculate_approximated_sm_efficiency`,
//!   `range_utils.merge_ranges_with_value`): kernels with a positive
//!   `blocks per SM` only; a sweep over their start / end points (a start before an end
//!   at the same time) gives, for each stretch, `min(Σ blocks per SM of the
//!   running kernels, 1)`; Σ value · length inside the span over the span;
//!   absent when no such stretch is in the span;
//! - Est. Achieved Occupancy (`calculate_occupancy`): over kernels with an
//!   occupancy >= 0, Σ occupancy · (length inside the span) / Σ length
//!   inside the span; absent when that length is 0;
//! - Tensor Cores: `tc_used_ratio` of the kernel view (Σ duration of Tensor
//!   Core kernels / Σ duration of all kernels). The plugin's overview figure
//!   ("Kernel Time using Tensor Cores") counts only kernels it links to an
//!   operator, which 0.4.3 cannot do for `cuda_runtime` launches (every
//!   current trace); rankscope shows the kernel view's ratio.
//!
//! The plugin works per GPU id; a rank here is one process, whose kernels
//! are taken together (one device per rank in every trace we import).

use std::collections::BTreeMap;

/// The kernel-name substrings of Tensor Core kernels (`TC_Allowlist`).
pub const TC_ALLOWLIST: [&str; 18] = [
    "h884",
    "s884",
    "h1688",
    "s1688",
    "hmma",
    "i8816",
    "16816",
    "dgrad_1x1_stride_2x2",
    "first_layer_wgrad_kernel",
    "conv1x1",
    "conv2d_c1_k1",
    "direct_group",
    "xmma_implicit_gemm",
    "xmma_sparse_conv",
    "xmma_warp_specialized_implicit_gemm",
    "xmma_gemm",
    "xmma_sparse_gemm",
    "c1688",
];

/// Whether the plugin counts a kernel as using Tensor Cores.
pub fn uses_tensor_cores(name: &str) -> bool {
    TC_ALLOWLIST.iter().any(|p| name.contains(p))
}

/// One kernel (not memcpy / memset) of a rank.
#[derive(Debug, Clone, PartialEq)]
pub struct PluginKernel<'a> {
    pub name: &'a str,
    pub start_ns: u64,
    pub end_ns: u64,
    /// `blocks per SM`, when recorded.
    pub blocks_per_sm: Option<f64>,
    /// `est. achieved occupancy %`, when recorded.
    pub occupancy_pct: Option<f64>,
}

impl PluginKernel<'_> {
    fn dur(&self) -> u64 {
        self.end_ns.saturating_sub(self.start_ns)
    }
}

/// One row of the kernel view.
#[derive(Debug, Clone, PartialEq)]
pub struct KernelViewRow {
    pub name: String,
    pub tensor_cores_used: bool,
    pub calls: u64,
    pub total_ns: u64,
    pub mean_ns: f64,
    pub max_ns: u64,
    pub min_ns: u64,
    pub mean_blocks_per_sm: f64,
    pub mean_est_achieved_occupancy_pct: f64,
}

/// The plugin's "group by Kernel" table, by total descending, then name.
pub fn kernel_view(kernels: &[PluginKernel<'_>]) -> Vec<KernelViewRow> {
    let mut by_name: BTreeMap<&str, Vec<&PluginKernel<'_>>> = BTreeMap::new();
    for k in kernels {
        by_name.entry(k.name).or_default().push(k);
    }
    let mut rows: Vec<KernelViewRow> = by_name
        .into_iter()
        .map(|(name, ks)| {
            let total: u64 = ks.iter().map(|k| k.dur()).sum();
            let weighted = |f: fn(&PluginKernel<'_>) -> Option<f64>| {
                if total == 0 {
                    return 0.0;
                }
                let s: f64 = ks
                    .iter()
                    .map(|k| f(k).unwrap_or(0.0) * k.dur() as f64)
                    .sum();
                s / total as f64
            };
            KernelViewRow {
                name: name.to_owned(),
                tensor_cores_used: uses_tensor_cores(name),
                calls: ks.len() as u64,
                total_ns: total,
                mean_ns: total as f64 / ks.len() as f64,
                max_ns: ks.iter().map(|k| k.dur()).max().unwrap_or(0),
                min_ns: ks.iter().map(|k| k.dur()).min().unwrap_or(0),
                mean_blocks_per_sm: weighted(|k| k.blocks_per_sm),
                mean_est_achieved_occupancy_pct: weighted(|k| k.occupancy_pct),
            }
        })
        .collect();
    rows.sort_by(|a, b| {
        b.total_ns
            .cmp(&a.total_ns)
            .then_with(|| a.name.cmp(&b.name))
    });
    rows
}

/// The plugin's GPU summary of one rank (fractions as percentages).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct GpuSummary {
    pub gpu_util_pct: Option<f64>,
    pub sm_efficiency_pct: Option<f64>,
    pub achieved_occupancy_pct: Option<f64>,
    pub tensor_core_pct: Option<f64>,
}

/// Length of the union of `spans` clipped to `[s, e]`.
fn union_within(mut spans: Vec<(u64, u64)>, s: u64, e: u64) -> u64 {
    spans.sort_unstable();
    let mut total = 0;
    let mut cur: Option<(u64, u64)> = None;
    for (a, b) in spans {
        let (a, b) = (a.max(s), b.min(e));
        if a >= b {
            continue;
        }
        match cur {
            Some((ca, cb)) if a <= cb => cur = Some((ca, cb.max(b))),
            Some((ca, cb)) => {
                total += cb - ca;
                cur = Some((a, b));
            }
            None => cur = Some((a, b)),
        }
    }
    total + cur.map_or(0, |(a, b)| b - a)
}

/// The GPU summary of `kernels` over the steps span `[s, e]` (module doc);
/// every figure is absent for an empty span.
pub fn gpu_summary(kernels: &[PluginKernel<'_>], (s, e): (u64, u64)) -> GpuSummary {
    let mut out = GpuSummary::default();
    let total_dur: u64 = kernels.iter().map(|k| k.dur()).sum();
    if total_dur > 0 {
        // Once per distinct name (18 substring searches each): a rank's
        // thousands of kernels share a few dozen names, usually one string
        // each (the collector's reads intern them), so the memo is keyed by
        // where the name is; a name held twice is only searched twice.
        let mut memo: std::collections::HashMap<(usize, usize), bool> = Default::default();
        let tc: u64 = kernels
            .iter()
            .filter(|k| {
                *memo
                    .entry((k.name.as_ptr() as usize, k.name.len()))
                    .or_insert_with(|| uses_tensor_cores(k.name))
            })
            .map(|k| k.dur())
            .sum();
        out.tensor_core_pct = Some(100.0 * tc as f64 / total_dur as f64);
    }
    if e <= s || kernels.is_empty() {
        return out;
    }
    let span = (e - s) as f64;
    let busy = union_within(
        kernels.iter().map(|k| (k.start_ns, k.end_ns)).collect(),
        s,
        e,
    );
    out.gpu_util_pct = Some(100.0 * busy as f64 / span);

    // Est. SM Efficiency: sweep, a start before an end at the same time.
    let mut points: Vec<(u64, u8, f64)> = Vec::new();
    for k in kernels {
        if let Some(b) = k.blocks_per_sm.filter(|b| *b > 0.0) {
            points.push((k.start_ns, 0, b));
            points.push((k.end_ns, 1, b));
        }
    }
    points.sort_by_key(|x| (x.0, x.1));
    if let Some(first) = points.first() {
        let (mut last_t, mut value) = (first.0, first.2);
        let (mut weighted, mut any) = (0.0, false);
        for &(t, kind, v) in &points[1..] {
            if t > last_t && value > 0.0 {
                let (a, b) = (last_t.max(s), t.min(e));
                if a < b {
                    weighted += value.min(1.0) * (b - a) as f64;
                    any = true;
                }
            }
            last_t = t;
            if kind == 0 {
                value += v;
            } else {
                value -= v;
            }
        }
        if any {
            out.sm_efficiency_pct = Some(100.0 * weighted / span);
        }
    }

    let (mut occ, mut len) = (0.0, 0u64);
    for k in kernels {
        if let Some(o) = k.occupancy_pct.filter(|o| *o >= 0.0) {
            let (a, b) = (k.start_ns.max(s), k.end_ns.min(e));
            if a < b {
                occ += o * (b - a) as f64;
                len += b - a;
            }
        }
    }
    if len > 0 {
        out.achieved_occupancy_pct = Some(occ / len as f64);
    }
    out
}

/// The plugin's step-time roles in priority order
/// (`overall_parser.OverallParser`, `consts.py`).
pub const ROLES: [&str; 8] = [
    "kernel",
    "memcpy",
    "memset",
    "communication",
    "runtime",
    "dataloader",
    "cpu_exec",
    "other",
];

/// The plugin's step-time breakdown over `[s, e]`
/// (`OverallParser.Statistics.create_from_range`): `roles` are the
/// intervals of the first seven [`ROLES`]; role k's time is the length of
/// its union inside the span minus every earlier role's; `other` is the
/// rest of the span. Returns the eight times in [`ROLES`] order.
pub fn role_times(roles: &[Vec<(u64, u64)>; 7], (s, e): (u64, u64)) -> [u64; 8] {
    let mut out = [0u64; 8];
    // The union of the roles so far inside the span, disjoint and sorted:
    // each role is sorted once and merged into it (the union of a union and
    // more intervals is the union of all of them), not every earlier role
    // sorted again with it.
    let mut taken: Vec<(u64, u64)> = Vec::new();
    let mut taken_len = 0;
    for (i, spans) in roles.iter().enumerate() {
        if !spans.is_empty() {
            let mut add: Vec<(u64, u64)> = spans
                .iter()
                .map(|&(a, b)| (a.max(s), b.min(e)))
                .filter(|(a, b)| a < b)
                .collect();
            add.sort_unstable();
            taken = merge_disjoint(&taken, &add);
        }
        let len: u64 = taken.iter().map(|(a, b)| b - a).sum();
        out[i] = len - taken_len;
        taken_len = len;
    }
    out[7] = e.saturating_sub(s).saturating_sub(taken_len);
    out
}

/// The union of two sorted lists of non-empty intervals, disjoint and
/// sorted (touching intervals joined).
fn merge_disjoint(a: &[(u64, u64)], b: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(a.len() + b.len());
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        let next = if j >= b.len() || (i < a.len() && a[i] <= b[j]) {
            i += 1;
            a[i - 1]
        } else {
            j += 1;
            b[j - 1]
        };
        match out.last_mut() {
            Some(last) if next.0 <= last.1 => last.1 = last.1.max(next.1),
            _ => out.push(next),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    /// [`super::role_times`] as first written (every earlier role sorted
    /// again with each role), against the merging version on random roles.
    #[test]
    fn role_times_equal_the_union_of_every_earlier_role() {
        fn reference(roles: &[Vec<(u64, u64)>; 7], (s, e): (u64, u64)) -> [u64; 8] {
            let mut out = [0u64; 8];
            let mut taken: Vec<(u64, u64)> = Vec::new();
            let mut taken_len = 0;
            for (i, spans) in roles.iter().enumerate() {
                taken.extend(spans.iter().copied());
                let len = super::union_within(taken.clone(), s, e);
                out[i] = len - taken_len;
                taken_len = len;
            }
            out[7] = e.saturating_sub(s).saturating_sub(taken_len);
            out
        }
        let mut rng = crate::test_rng::Rng::new(11);
        let mut next = |m: u64| rng.below(m);
        for _ in 0..2_000 {
            let mut roles: [Vec<(u64, u64)>; 7] = Default::default();
            for r in &mut roles {
                for _ in 0..next(12) {
                    let a = next(1_000);
                    r.push((a, a + next(120)));
                }
            }
            let (s, e) = (next(300), 700 + next(400));
            assert_eq!(
                super::role_times(&roles, (s, e)),
                reference(&roles, (s, e)),
                "{roles:?} in {s}..{e}"
            );
        }
    }

    #[test]
    fn roles_take_time_in_priority_order() {
        // The worked example of SEED-VIEWS.md §5.3 with `runtime` events:
        // kernels 400..600, 700..800; runtimes 250..300, 620..650; CPU
        // ops 200..500, 600..700; step 100..1100.
        let roles = [
            vec![(400, 600), (700, 800)],
            vec![],
            vec![],
            vec![],
            vec![(250, 300), (620, 650)],
            vec![],
            vec![(200, 500), (600, 700)],
        ];
        assert_eq!(
            super::role_times(&roles, (100, 1100)),
            [300, 0, 0, 0, 80, 0, 220, 400]
        );
    }

    use super::*;

    fn k(
        name: &str,
        start_ns: u64,
        end_ns: u64,
        bps: Option<f64>,
        occ: Option<f64>,
    ) -> PluginKernel<'_> {
        PluginKernel {
            name,
            start_ns,
            end_ns,
            blocks_per_sm: bps,
            occupancy_pct: occ,
        }
    }

    /// The worked example of ../shared/SEED-VIEWS.md §5.3, run with the
    /// real 0.4.3 code: one step 100..1100 µs, `volta_sgemm_128x64_nn`
    /// 400..600 (0.5 blocks/SM, 25 %), `elementwise_kernel` 700..800 (2.0,
    /// 100 %): GPU util 0.3, SM efficiency 0.2, occupancy 50.
    #[test]
    fn seed_worked_example() {
        let ks = [
            k(
                "volta_sgemm_128x64_nn",
                400_000,
                600_000,
                Some(0.5),
                Some(25.0),
            ),
            k(
                "elementwise_kernel",
                700_000,
                800_000,
                Some(2.0),
                Some(100.0),
            ),
        ];
        let g = gpu_summary(&ks, (100_000, 1_100_000));
        assert!((g.gpu_util_pct.unwrap() - 30.0).abs() < 1e-9);
        assert!((g.sm_efficiency_pct.unwrap() - 20.0).abs() < 1e-9);
        assert!((g.achieved_occupancy_pct.unwrap() - 50.0).abs() < 1e-9);
        assert_eq!(g.tensor_core_pct, Some(0.0));
    }

    #[test]
    fn overlap_caps_blocks_per_sm_at_one_and_missing_figures_count_as_zero_in_means() {
        let ks = [
            k("a_xmma_gemm", 0, 100, Some(0.6), Some(40.0)),
            k("b", 50, 150, Some(0.6), None),
            k("a_xmma_gemm", 200, 300, None, Some(60.0)),
        ];
        let g = gpu_summary(&ks, (0, 400));
        // Busy 0..150 and 200..300 = 250 of 400.
        assert!((g.gpu_util_pct.unwrap() - 62.5).abs() < 1e-9);
        // 0..50: 0.6, 50..100: min(1.2, 1) = 1, 100..150: 0.6 -> 30 + 50 + 30.
        assert!((g.sm_efficiency_pct.unwrap() - 110.0 / 400.0 * 100.0).abs() < 1e-9);
        // Occupancy over kernels that have it: (40*100 + 60*100) / 200.
        assert!((g.achieved_occupancy_pct.unwrap() - 50.0).abs() < 1e-9);
        assert!((g.tensor_core_pct.unwrap() - 200.0 / 300.0 * 100.0).abs() < 1e-9);
        let v = kernel_view(&ks);
        assert_eq!(v[0].name, "a_xmma_gemm");
        assert!(v[0].tensor_cores_used && !v[1].tensor_cores_used);
        assert_eq!(
            (v[0].calls, v[0].total_ns, v[0].max_ns, v[0].min_ns),
            (2, 200, 100, 100)
        );
        // (0.6 * 100 + 0 * 100) / 200: a missing figure is 0 in the mean.
        assert!((v[0].mean_blocks_per_sm - 0.3).abs() < 1e-12);
        assert!((v[0].mean_est_achieved_occupancy_pct - 50.0).abs() < 1e-12);
        assert_eq!(v[1].mean_est_achieved_occupancy_pct, 0.0);
        // Kernels outside the span count for none of the span figures.
        let g = gpu_summary(&ks, (1000, 2000));
        assert_eq!(
            (
                g.gpu_util_pct,
                g.sm_efficiency_pct,
                g.achieved_occupancy_pct
            ),
            (Some(0.0), None, None)
        );
        assert_eq!(gpu_summary(&ks, (5, 5)).gpu_util_pct, None);
    }
}
