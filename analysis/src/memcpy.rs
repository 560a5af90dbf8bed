//! Memcpy / memset summary of one rank: calls, bytes, time and achieved
//! bandwidth per direction.
//!
//! In: (name, kind, duration ns, bytes) of a rank's GPU activities. Out:
//! [`MemcpyRow`]s for the kinds present, in the order HtoD, DtoH, DtoD, PtoP,
//! other memcpy, memset.
//!
//! Kind: memsets are `memset`; a memcpy's direction is the prefix of its
//! name as CUPTI / Kineto write it (`Memcpy HtoD (Pageable -> Device)`), as
//! HTA 0.5.0 `get_memory_kernel_type` reads it (`hta/utils/utils.py`);
//! a memcpy without one is `memcpy`. Bandwidth: `gbps` = bytes / busy ns
//! (GB/s with GB = 1e9 bytes, as nccl-tests and `nvidia-smi` count), `None`
//! without time.

use crate::classify::GpuEventKind;

/// One kind's totals.
#[derive(Debug, Clone, PartialEq)]
pub struct MemcpyRow {
    /// `HtoD`, `DtoH`, `DtoD`, `PtoP`, `memcpy` (unknown direction), `memset`.
    pub kind: &'static str,
    pub calls: u64,
    pub bytes: u64,
    pub sum_ns: u64,
    pub gbps: Option<f64>,
}

const KINDS: [&str; 6] = ["HtoD", "DtoH", "DtoD", "PtoP", "memcpy", "memset"];

/// The kind of a memory activity, `None` for kernels.
pub fn memcpy_kind(name: &str, kind: GpuEventKind) -> Option<&'static str> {
    let memset = kind == GpuEventKind::Memset || name.starts_with("Memset");
    if memset {
        return Some("memset");
    }
    let memcpy = kind == GpuEventKind::Memcpy || name.starts_with("Memcpy");
    if !memcpy {
        return None;
    }
    let dir = name.strip_prefix("Memcpy ").unwrap_or("");
    Some(
        KINDS[..4]
            .iter()
            .find(|k| dir.starts_with(**k))
            .copied()
            .unwrap_or("memcpy"),
    )
}

/// Totals per kind of `(name, kind, dur_ns, bytes)` activities.
pub fn memcpy_summary<'a>(
    ops: impl IntoIterator<Item = (&'a str, GpuEventKind, u64, u64)>,
) -> Vec<MemcpyRow> {
    let mut acc = [(0u64, 0u64, 0u64); 6];
    for (name, kind, dur, bytes) in ops {
        if let Some(k) = memcpy_kind(name, kind) {
            let i = KINDS.iter().position(|x| *x == k).unwrap_or(4);
            acc[i].0 += 1;
            acc[i].1 += bytes;
            acc[i].2 += dur;
        }
    }
    KINDS
        .iter()
        .zip(acc)
        .filter(|(_, a)| a.0 > 0)
        .map(|(kind, (calls, bytes, sum_ns))| MemcpyRow {
            kind,
            calls,
            bytes,
            sum_ns,
            gbps: (sum_ns > 0).then(|| bytes as f64 / sum_ns as f64),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use GpuEventKind::*;

    #[test]
    fn kinds_and_bandwidth() {
        let rows = memcpy_summary([
            ("Memcpy HtoD (Pinned -> Device)", Memcpy, 1_000, 12_000),
            ("Memcpy HtoD (Pageable -> Device)", Memcpy, 1_000, 4_000),
            ("Memcpy DtoH (Device -> Pageable)", Memcpy, 500, 1_000),
            ("Memset (Device)", Memset, 100, 64),
            ("gemm", Kernel, 9_000, 0),
            ("Memcpy", Memcpy, 10, 0),
        ]);
        let kinds: Vec<&str> = rows.iter().map(|r| r.kind).collect();
        assert_eq!(kinds, ["HtoD", "DtoH", "memcpy", "memset"]);
        assert_eq!(
            (rows[0].calls, rows[0].bytes, rows[0].sum_ns),
            (2, 16_000, 2_000)
        );
        assert_eq!(rows[0].gbps, Some(8.0));
        assert!(memcpy_summary([("gemm", Kernel, 1, 0)]).is_empty());
    }
}
