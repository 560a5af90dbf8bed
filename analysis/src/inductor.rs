//! TorchInductor's GPU-kernel categories and its per-category breakdown
//! (`python compiled_module.py -p`), issue 29.
//!
//! In: kernel names with their GPU time. Out: [`inductor_category`] (the
//! category Inductor prints a kernel under), [`kernel_family`] (a finer,
//! rankscope-only label for the kernels Inductor leaves in `unknown` /
//! `triton_unknown`), and [`category_breakdown`] (time and share per category
//! and the "percent of time the GPU is busy").
//!
//! Definitions: `torch/_inductor/wrapper_benchmark.py`,
//! `parse_profile_event_list` (pytorch/pytorch @ `ebfe4437`): an event whose
//! key starts with `triton_poi` is `triton_pointwise`, `triton_red`
//! `triton_reduction`, `triton_per` `triton_persistent_reduction`, any other
//! `triton_` name `triton_unknown` (templates `triton_tem_`, foreach
//! `triton_for_`, split scans `triton_spl_`), everything else `unknown`
//! (extern kernels: cuBLAS, cuDNN, CUTLASS, NCCL, ATen's native kernels,
//! memcpy / memset). Inductor names its kernels in
//! `codegen/triton.py` `define_kernel`: `"triton_" + category[:3] + "_" +
//! fused name`. The busy percent is Inductor's: the **sum** of the
//! categories' kernel times over the wall time (overlapping streams count
//! twice, so it can pass 100 %); here the wall time is the caller's (the
//! profiled span), as Inductor's is its benchmark's.

/// Inductor's categories in the order it prints them.
pub const INDUCTOR_CATEGORIES: [&str; 5] = [
    "triton_pointwise",
    "triton_reduction",
    "triton_persistent_reduction",
    "triton_unknown",
    "unknown",
];

/// The category `parse_profile_event_list` puts a GPU event named `name`
/// under (module doc).
pub fn inductor_category(name: &str) -> &'static str {
    if name.starts_with("triton_poi") {
        "triton_pointwise"
    } else if name.starts_with("triton_red") {
        "triton_reduction"
    } else if name.starts_with("triton_per") {
        "triton_persistent_reduction"
    } else if name.starts_with("triton_") {
        "triton_unknown"
    } else {
        "unknown"
    }
}

/// A finer label (rankscope's, not Inductor's) for where a kernel comes
/// from: `triton_pointwise` / `triton_reduction` /
/// `triton_persistent_reduction` as Inductor, `triton_template`,
/// `triton_foreach`, `triton_split_scan`, `triton_other` for the rest of
/// Inductor's `triton_unknown`, and for its `unknown`: `nccl`, `cudnn`,
/// `cutlass`, `cublas` (cuBLAS / cuBLASLt GEMMs: `*gemm*`, `sm80_xmma_*`,
/// `ampere_*`, `volta_*`, `nvjet_*`), `memcpy`, `memset`, `aten` (ATen's
/// native kernels, `at::native::`), else `other`.
pub fn kernel_family(name: &str) -> &'static str {
    match inductor_category(name) {
        "triton_unknown" => {
            if name.starts_with("triton_tem") {
                "triton_template"
            } else if name.starts_with("triton_for") {
                "triton_foreach"
            } else if name.starts_with("triton_spl") {
                "triton_split_scan"
            } else {
                "triton_other"
            }
        }
        "unknown" => extern_family(name),
        c => c,
    }
}

fn extern_family(name: &str) -> &'static str {
    let lower = name.to_ascii_lowercase();
    if lower.starts_with("nccl") {
        "nccl"
    } else if lower.starts_with("memcpy") {
        "memcpy"
    } else if lower.starts_with("memset") {
        "memset"
    } else if lower.contains("cudnn") {
        "cudnn"
    } else if lower.contains("cutlass") {
        "cutlass"
    } else if lower.contains("gemm")
        || lower.contains("xmma")
        || lower.starts_with("ampere_")
        || lower.starts_with("volta_")
        || lower.starts_with("turing_")
        || lower.starts_with("sm90_")
        || lower.starts_with("nvjet")
        || lower.contains("cublas")
    {
        "cublas"
    } else if lower.contains("at::native") {
        "aten"
    } else {
        "other"
    }
}

/// One row of [`category_breakdown`].
#[derive(Debug, Clone, PartialEq)]
pub struct CategoryRow {
    pub category: &'static str,
    pub calls: u64,
    /// Σ kernel durations of the category.
    pub sum_ns: u64,
    /// `sum_ns` over the wall time, percent (Inductor's "Percent").
    pub pct_of_wall: Option<f64>,
    /// `sum_ns` over all kernels' sum, percent.
    pub pct_of_gpu_time: Option<f64>,
}

/// Inductor's per-category breakdown of `(name, duration ns)` GPU events
/// over `wall_ns` (module doc): rows in Inductor's order (categories
/// without events left out) and the busy percent (Σ of all rows over the
/// wall time; `None` without a wall time).
pub fn category_breakdown<'a>(
    kernels: impl IntoIterator<Item = (&'a str, u64)>,
    wall_ns: u64,
) -> (Vec<CategoryRow>, Option<f64>) {
    let mut sums = [(0u64, 0u64); 5];
    for (name, dur) in kernels {
        let c = inductor_category(name);
        let i = INDUCTOR_CATEGORIES
            .iter()
            .position(|x| *x == c)
            .unwrap_or(4);
        sums[i].0 += 1;
        sums[i].1 += dur;
    }
    let total: u64 = sums.iter().map(|s| s.1).sum();
    let pct = |num: u64, den: u64| (den > 0).then(|| 100.0 * num as f64 / den as f64);
    let rows = INDUCTOR_CATEGORIES
        .iter()
        .zip(sums)
        .filter(|(_, (calls, _))| *calls > 0)
        .map(|(category, (calls, sum_ns))| CategoryRow {
            category,
            calls,
            sum_ns,
            pct_of_wall: pct(sum_ns, wall_ns),
            pct_of_gpu_time: pct(sum_ns, total),
        })
        .collect();
    (rows, pct(total, wall_ns))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Real kernel names (Inductor-generated names from compiled modules and
    /// the extern kernels the vendored traces hold) and the category
    /// `parse_profile_event_list` gives them.
    #[test]
    fn categories_follow_inductors_prefix_rules() {
        let cases = [
            ("triton_poi_fused_add_relu_0", "triton_pointwise", "triton_pointwise"),
            ("triton_red_fused__softmax_1", "triton_reduction", "triton_reduction"),
            (
                "triton_per_fused_native_layer_norm_2",
                "triton_persistent_reduction",
                "triton_persistent_reduction",
            ),
            ("triton_tem_fused_mm_3", "triton_unknown", "triton_template"),
            ("triton_for_fused_4", "triton_unknown", "triton_foreach"),
            ("triton_spl_fused_cumsum_5", "triton_unknown", "triton_split_scan"),
            ("triton_", "triton_unknown", "triton_other"),
            ("triton_unk_fused_6", "triton_unknown", "triton_other"),
            (
                "sm80_xmma_gemm_bf16bf16_bf16f32_f32_nt_n_tilesize128x256x32_stage3_warpsize2x4x1_tensor16x8x16_kernel",
                "unknown",
                "cublas",
            ),
            ("ampere_sgemm_128x64_nn", "unknown", "cublas"),
            ("volta_sgemm_128x64_nt", "unknown", "cublas"),
            (
                "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4>(cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4::Params)",
                "unknown",
                "cutlass",
            ),
            (
                "void cudnn::cnn::conv2d_grouped_direct_kernel<float, float, float, float, float, true, false, 0, 0, 0>(cudnn::cnn::GroupedDirectFpropParams, float const*, float const*, float*, float, float, float const*, float const*, float const*, cudnnActivationStruct)",
                "unknown",
                "cudnn",
            ),
            (
                "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)",
                "unknown",
                "nccl",
            ),
            ("ncclDevKernel_Generic", "unknown", "nccl"),
            ("Memcpy HtoD (Pageable -> Device)", "unknown", "memcpy"),
            ("Memset (Device)", "unknown", "memset"),
            (
                "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)",
                "unknown",
                "aten",
            ),
            // Only the prefix counts: a name that merely contains "triton".
            ("void my_triton_like_kernel()", "unknown", "other"),
        ];
        for (name, category, family) in cases {
            assert_eq!(inductor_category(name), category, "{name}");
            assert_eq!(kernel_family(name), family, "{name}");
        }
    }

    #[test]
    fn breakdown_sums_categories_and_busy_is_a_sum_not_a_union() {
        let k = [
            ("triton_poi_fused_0", 30),
            ("triton_poi_fused_1", 10),
            ("triton_red_fused_2", 20),
            ("ampere_sgemm_128x64_nn", 60),
        ];
        let (rows, busy) = category_breakdown(k, 100);
        let got: Vec<(&str, u64, u64)> = rows
            .iter()
            .map(|r| (r.category, r.calls, r.sum_ns))
            .collect();
        assert_eq!(
            got,
            [
                ("triton_pointwise", 2, 40),
                ("triton_reduction", 1, 20),
                ("unknown", 1, 60)
            ]
        );
        assert_eq!(rows[0].pct_of_wall, Some(40.0));
        assert_eq!(rows[2].pct_of_gpu_time, Some(50.0));
        // 120 ns of kernels in 100 ns of wall time: 120 %, as Inductor prints.
        assert_eq!(busy, Some(120.0));
        assert_eq!(category_breakdown(k, 0).1, None);
    }
}
