//! The names the simulator interns (span, process group and kernel names, as
//! a PyTorch profiler would record them on an H100 running a bf16 transformer
//! with FSDP) and the kernel recipe of one transformer layer.
//!
//! In: nothing. Out: [`Name`] (a fixed id per name, `1..=Name::ALL.len()`),
//! [`FORWARD_LAYER`] / [`BACKWARD_LAYER`] (kernel name and duration at the
//! reference size) and the hardware constants the timing model uses.
//!
//! Invariant: `Name::ALL[i].id() == i + 1`, so ids are dense and never 0.

/// Hidden size of the simulated transformer.
pub const HIDDEN: u64 = 4096;
/// Parameters per transformer layer (attention 4h^2 + MLP 8h^2).
pub const PARAMS_PER_LAYER: u64 = 12 * HIDDEN * HIDDEN;
/// Tokens per rank per step (micro-batch 4 x sequence 2048).
pub const TOKENS_PER_RANK: u64 = 4 * 2048;
/// NCCL bus bandwidth inside a node (NVLink), bytes/s.
pub const BUSBW_INTRA_NODE: f64 = 180e9;
/// NCCL bus bandwidth across nodes (8 x 400 Gb/s InfiniBand), bytes/s.
pub const BUSBW_INTER_NODE: f64 = 45e9;
/// Fixed cost of every collective, ns.
pub const NCCL_LATENCY_NS: u64 = 15_000;
/// Gap between consecutive kernels on the compute stream (launch), ns.
pub const LAUNCH_GAP_NS: u64 = 4_000;
/// Host time to produce the next batch, ns.
pub const DATALOADER_NS: u64 = 5_000_000;
/// Host-to-device copy bandwidth (pinned memory over PCIe 5), bytes/s.
pub const PCIE_BW: f64 = 25e9;
/// Device memory bandwidth (memset, optimizer), bytes/s.
pub const HBM_BW: f64 = 2.5e12;
/// CUDA stream of compute kernels (PyTorch's default stream as Kineto shows it).
pub const COMPUTE_STREAM: u32 = 7;
/// CUDA stream NCCL runs on.
pub const COMM_STREAM: u32 = 20;

/// Every name the simulator interns. The discriminant is the interned id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum Name {
    SpanDataloader = 1,
    SpanForward,
    SpanBackward,
    SpanOptimizer,
    DefaultPg,
    MemcpyHtoD,
    MemsetDevice,
    NcclAllGather,
    NcclReduceScatter,
    NcclAllReduce,
    LayerNorm,
    GemmQkv,
    FlashFwd,
    GemmOutProj,
    AddBf16,
    GemmMlpUpRelu,
    GemmMlpDown,
    MulBf16,
    GemmDgrad,
    GemmDgradSmall,
    GemmWgrad,
    ReluBwd,
    LayerNormBwd,
    FlashBwd,
    GradNorm,
    ClipScale,
    FusedAdam,
}

impl Name {
    /// All names in id order.
    pub const ALL: [Name; 27] = [
        Name::SpanDataloader,
        Name::SpanForward,
        Name::SpanBackward,
        Name::SpanOptimizer,
        Name::DefaultPg,
        Name::MemcpyHtoD,
        Name::MemsetDevice,
        Name::NcclAllGather,
        Name::NcclReduceScatter,
        Name::NcclAllReduce,
        Name::LayerNorm,
        Name::GemmQkv,
        Name::FlashFwd,
        Name::GemmOutProj,
        Name::AddBf16,
        Name::GemmMlpUpRelu,
        Name::GemmMlpDown,
        Name::MulBf16,
        Name::GemmDgrad,
        Name::GemmDgradSmall,
        Name::GemmWgrad,
        Name::ReluBwd,
        Name::LayerNormBwd,
        Name::FlashBwd,
        Name::GradNorm,
        Name::ClipScale,
        Name::FusedAdam,
    ];

    /// Interned id (>= 1).
    pub fn id(self) -> u32 {
        self as u32
    }

    /// The name for an interned id.
    pub fn from_id(id: u32) -> Option<Name> {
        let index = usize::try_from(id).ok()?.checked_sub(1)?;
        Self::ALL.get(index).copied()
    }

    /// The full text of the name.
    pub fn text(self) -> &'static str {
        match self {
            Name::SpanDataloader => "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__",
            Name::SpanForward => "## forward ##",
            Name::SpanBackward => "## backward ##",
            Name::SpanOptimizer => "Optimizer.step#AdamW.step",
            Name::DefaultPg => "default_pg",
            Name::MemcpyHtoD => "Memcpy HtoD (Pinned -> Device)",
            Name::MemsetDevice => "Memset (Device)",
            Name::NcclAllGather => "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
            Name::NcclReduceScatter => "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
            Name::NcclAllReduce => "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
            Name::LayerNorm => "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>(int, float, c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, float*, float*, c10::BFloat16*)",
            Name::GemmQkv => "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_tn",
            Name::FlashFwd => "void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t, pytorch_flash::Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, false, true, false, false, true, true, false, false>(pytorch_flash::Flash_fwd_params)",
            Name::GemmOutProj => "ampere_bf16_s16816gemm_bf16_64x64_sliced1x2_ldg8_f2f_stages_64x5_tn",
            Name::AddBf16 => "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, at::detail::Array<char*, 3>)",
            Name::GemmMlpUpRelu => "void cutlass::Kernel<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_32x6_tn_align8>(cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_32x6_tn_align8::Params)",
            Name::GemmMlpDown => "ampere_bf16_s16816gemm_bf16_256x128_ldg8_f2f_stages_64x3_nn",
            Name::MulBf16 => "void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor<float> >, at::detail::Array<char*, 3> >(int, at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor<float> >, at::detail::Array<char*, 3>)",
            Name::GemmDgrad => "ampere_bf16_s16816gemm_bf16_256x128_ldg8_f2f_stages_64x3_nt",
            Name::GemmDgradSmall => "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_nn",
            Name::GemmWgrad => "sm80_xmma_gemm_bf16bf16_bf16f32_f32_nt_n_tilesize128x256x32_stage3_warpsize2x4x1_tensor16x8x16_kernel",
            Name::ReluBwd => "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::threshold_kernel_impl<c10::BFloat16>(at::TensorIteratorBase&, c10::BFloat16, c10::BFloat16)::{lambda(c10::BFloat16, c10::BFloat16)#1}, at::detail::Array<char*, 3> >(int, at::native::(anonymous namespace)::threshold_kernel_impl<c10::BFloat16>(at::TensorIteratorBase&, c10::BFloat16, c10::BFloat16)::{lambda(c10::BFloat16, c10::BFloat16)#1}, at::detail::Array<char*, 3>)",
            Name::LayerNormBwd => "void at::native::(anonymous namespace)::layer_norm_grad_input_kernel_vectorized<c10::BFloat16, float>(c10::BFloat16 const*, c10::BFloat16 const*, float const*, float const*, c10::BFloat16 const*, c10::BFloat16*, int)",
            Name::FlashBwd => "void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<pytorch_flash::Flash_bwd_kernel_traits<128, 64, 128, 8, 2, 4, 2, false, false, cutlass::bfloat16_t, pytorch_flash::Flash_kernel_traits<128, 64, 128, 8, cutlass::bfloat16_t> >, false, true, false, false, false, true, false, false>(pytorch_flash::Flash_bwd_params)",
            Name::GradNorm => "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorListMetadata<1>, at::native::(anonymous namespace)::LpNormFunctor<float, 2, float, float>, int>(at::native::(anonymous namespace)::TensorListMetadata<1>, at::native::(anonymous namespace)::LpNormFunctor<float, 2, float, float>, int)",
            Name::ClipScale => "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorListMetadata<1>, at::native::(anonymous namespace)::BinaryOpScalarTensorFunctor<float, 1, 1, 0>, std::multiplies<float>, float const*>(at::native::(anonymous namespace)::TensorListMetadata<1>, at::native::(anonymous namespace)::BinaryOpScalarTensorFunctor<float, 1, 1, 0>, std::multiplies<float>, float const*)",
            Name::FusedAdam => "void at::native::(anonymous namespace)::multi_tensor_apply_for_fused_optimizer<4, at::native::(anonymous namespace)::FusedOptimizerTensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, (at::native::ADAM_MODE)1, false>, double*, double, double, double, double, double, bool, float const*, float const*>(at::native::(anonymous namespace)::FusedOptimizerTensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, (at::native::ADAM_MODE)1, false>, double*, double, double, double, double, double, bool, float const*, float const*)",
        }
    }
}

/// One kernel of a layer: its name and duration at the reference size
/// (hidden 4096, 8192 tokens per rank, bf16 on an H100), ns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelStep {
    /// Kernel name.
    pub name: Name,
    /// Duration before jitter and straggler slowdown, ns.
    pub base_ns: u64,
}

const fn k(name: Name, base_ns: u64) -> KernelStep {
    KernelStep { name, base_ns }
}

/// Forward pass of one layer (pre-norm attention + ReLU MLP), ~11.6 ms.
pub const FORWARD_LAYER: &[KernelStep] = &[
    k(Name::LayerNorm, 110_000),
    k(Name::GemmQkv, 2_350_000),
    k(Name::FlashFwd, 1_900_000),
    k(Name::GemmOutProj, 800_000),
    k(Name::AddBf16, 95_000),
    k(Name::LayerNorm, 110_000),
    k(Name::GemmMlpUpRelu, 3_150_000),
    k(Name::GemmMlpDown, 3_100_000),
    k(Name::AddBf16, 95_000),
];

/// Backward pass of one layer (data and weight gradients), ~24.6 ms.
pub const BACKWARD_LAYER: &[KernelStep] = &[
    k(Name::MulBf16, 120_000),
    k(Name::GemmDgrad, 3_100_000),
    k(Name::GemmWgrad, 3_200_000),
    k(Name::ReluBwd, 180_000),
    k(Name::GemmDgrad, 3_150_000),
    k(Name::GemmWgrad, 3_250_000),
    k(Name::LayerNormBwd, 210_000),
    k(Name::FlashBwd, 4_700_000),
    k(Name::GemmDgradSmall, 800_000),
    k(Name::GemmWgrad, 820_000),
    k(Name::GemmDgradSmall, 2_350_000),
    k(Name::GemmWgrad, 2_400_000),
    k(Name::LayerNormBwd, 210_000),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_dense_and_round_trip() {
        for (i, name) in Name::ALL.iter().enumerate() {
            assert_eq!(name.id() as usize, i + 1, "{name:?}");
            assert_eq!(Name::from_id(name.id()), Some(*name));
            assert!(!name.text().is_empty());
        }
        assert_eq!(Name::from_id(0), None);
        assert_eq!(Name::from_id(Name::ALL.len() as u32 + 1), None);
    }

    #[test]
    fn names_are_distinct() {
        let mut texts: Vec<&str> = Name::ALL.iter().map(|n| n.text()).collect();
        texts.sort_unstable();
        texts.dedup();
        assert_eq!(texts.len(), Name::ALL.len());
    }

    #[test]
    fn backward_is_about_twice_forward() {
        let fwd: u64 = FORWARD_LAYER.iter().map(|k| k.base_ns).sum();
        let bwd: u64 = BACKWARD_LAYER.iter().map(|k| k.base_ns).sum();
        let ratio = bwd as f64 / fwd as f64;
        assert!((1.8..2.4).contains(&ratio), "{ratio}");
    }
}
