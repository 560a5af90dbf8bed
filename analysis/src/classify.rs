//! Kernel classification, exactly as Holistic Trace Analysis (HTA) 0.5.0
//! `get_temporal_breakdown` does it.
//!
//! In: a GPU event's name and kind. Out: its [`KernelClass`].
//!
//! HTA's rules (Python `re.search` semantics, first match wins):
//! 1. COMMUNICATION: the name matches `^nccl.*Kernel` (covers
//!    `ncclKernel_*` and NCCL >= 2.19's `ncclDevKernel_*`);
//! 2. MEMORY: the name matches `^(?:Memcpy|Memset|dma)`;
//! 3. COMPUTATION: the name does **not** match
//!    `^(?:nccl.*Kernel)|.*(?:Memcpy|Memset)|.*Sync`, i.e. it contains neither
//!    `Memcpy`, `Memset` nor `Sync` anywhere;
//! 4. OTHER: everything else (e.g. `Event Sync`, `Context Sync`, or a kernel
//!    with `Memcpy` in the middle of its name).
//!
//! Our additions, for events that are not Kineto kernels: a [`GpuEventKind::Collective`]
//! event (a rank-reported NCCL collective) is COMMUNICATION, and a
//! memcpy/memset activity record is MEMORY whatever its name.
//! No regex crate: the patterns are implemented with `str` methods
//! (`.` in Python's `re` does not match `\n`, which is honoured).

/// What kind of GPU activity an event records (mirrors the wire protocol's
/// `KernelKind`, plus rank-reported collectives).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GpuEventKind {
    /// A kernel launch (compute or NCCL); classified by name.
    Kernel,
    /// A memory copy (HtoD, DtoH, DtoD, PtoP).
    Memcpy,
    /// A memset.
    Memset,
    /// A collective reported by the rank (not a kernel record).
    Collective,
}

/// HTA's kernel type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum KernelClass {
    /// Compute kernels: everything not matched by the other classes.
    Computation,
    /// NCCL kernels and collectives.
    Communication,
    /// Memcpy / memset / DMA.
    Memory,
    /// Synchronisation records and oddly named memory kernels.
    Other,
}

impl KernelClass {
    /// Lower-case name for storage and JSON (`computation`, `communication`,
    /// `memory`, `other`); HTA prints the same names upper-case.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Computation => "computation",
            Self::Communication => "communication",
            Self::Memory => "memory",
            Self::Other => "other",
        }
    }
}

/// Classify one GPU event (see the module doc for the rules).
pub fn classify_kernel(name: &str, kind: GpuEventKind) -> KernelClass {
    match kind {
        GpuEventKind::Collective => KernelClass::Communication,
        GpuEventKind::Memcpy | GpuEventKind::Memset => KernelClass::Memory,
        GpuEventKind::Kernel => classify_name(name),
    }
}

/// HTA's name-only classification (rules 1-4 of the module doc).
pub fn classify_name(name: &str) -> KernelClass {
    if is_nccl_kernel_name(name) {
        KernelClass::Communication
    } else if is_memory_name(name) {
        KernelClass::Memory
    } else if name.contains("Memcpy") || name.contains("Memset") || name.contains("Sync") {
        KernelClass::Other
    } else {
        KernelClass::Computation
    }
}

/// `re.search(r"^nccl.*Kernel", name)`: starts with `nccl` and `Kernel`
/// follows on the same line.
pub fn is_nccl_kernel_name(name: &str) -> bool {
    name.strip_prefix("nccl").is_some_and(|rest| {
        let first_line = rest.split('\n').next().unwrap_or("");
        first_line.contains("Kernel")
    })
}

/// `re.search(r"^(?:Memcpy|Memset|dma)", name)`.
pub fn is_memory_name(name: &str) -> bool {
    name.starts_with("Memcpy") || name.starts_with("Memset") || name.starts_with("dma")
}

#[cfg(test)]
mod tests {
    use super::*;
    use KernelClass::*;

    #[test]
    fn hta_table() {
        let k = GpuEventKind::Kernel;
        let cases = [
            ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", Communication),
            ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", Communication),
            ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", Communication),
            ("ncclDevKernel_Generic", Communication),
            ("nccl_something_else", Computation),
            ("ncclKerne", Computation),
            ("nccl\nKernel", Computation),
            ("xncclKernel", Computation),
            ("Memcpy HtoD (Pageable -> Device)", Memory),
            ("Memset (Device)", Memory),
            ("dma_copy", Memory),
            ("Memcpy DtoD Sync", Memory),
            ("Event Sync", Other),
            ("Context Sync", Other),
            ("void at::native::Memcpy_kernel", Other),
            ("cudaMemset_helper", Other),
            ("ncclKernelSync", Communication),
            ("volta_sgemm_128x64_nn", Computation),
            ("void at::native::vectorized_elementwise_kernel<4, ...>", Computation),
            ("", Computation),
        ];
        for (name, want) in cases {
            assert_eq!(classify_kernel(name, k), want, "{name:?}");
        }
    }

    #[test]
    fn kind_overrides_name() {
        assert_eq!(
            classify_kernel("anything", GpuEventKind::Collective),
            Communication
        );
        assert_eq!(
            classify_kernel("all_reduce", GpuEventKind::Collective),
            Communication
        );
        assert_eq!(classify_kernel("copy", GpuEventKind::Memcpy), Memory);
        assert_eq!(classify_kernel("fill", GpuEventKind::Memset), Memory);
        assert_eq!(Communication.as_str(), "communication");
        assert_eq!(Other.as_str(), "other");
    }
}
