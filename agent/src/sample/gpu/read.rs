//! Per-tick NVML reads of one GPU (see the parent module for the policy).
//!
//! In: a `Device` and its state. Out: the metrics of one `proto::GpuSample`;
//! `Err` only when the GPU is lost.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use nvml_wrapper::enum_wrappers::device::{
    Clock, EccCounter, MemoryError, PcieUtilCounter, TemperatureSensor,
};
use nvml_wrapper::enums::device::{SampleValue, UsedGpuMemory};
use nvml_wrapper::enums::gpm::GpmMetricId;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::structs::device::FieldId;
use nvml_wrapper::{Device, Nvml};
use rankscope_proto::v1 as proto;

use super::{throttle_names, DeviceState, SlowReads};

/// NVML field ids of the cumulative NVLink data counters (KiB).
const NVLINK_TX_KIB: u32 = 138;
const NVLINK_RX_KIB: u32 = 139;

/// GPM metrics read per tick, in the order [`apply_gpm`] expects.
const GPM_METRICS: [GpmMetricId; 8] = [
    GpmMetricId::SmUtil,
    GpmMetricId::SmOccupancy,
    GpmMetricId::AnyTensorUtil,
    GpmMetricId::DramBwUtil,
    GpmMetricId::PcieTxPerSec,
    GpmMetricId::PcieRxPerSec,
    GpmMetricId::NvlinkTotalTxPerSec,
    GpmMetricId::NvlinkTotalRxPerSec,
];

const MIB: f64 = 1024.0 * 1024.0;

/// Metrics that can be unsupported per GPU (bit positions).
#[derive(Debug, Clone, Copy)]
pub(super) enum Metric {
    Util,
    Memory,
    Power,
    PowerLimit,
    Temp,
    SmClock,
    MemClock,
    MaxClocks,
    Throttle,
    Pcie,
    Nvlink,
    Ecc,
    Processes,
    Name,
    Uuid,
    Pci,
    PcieReplay,
}

/// Calls `f` unless `m` is known unsupported. `Ok(None)`: unsupported or a
/// transient failure (counted in `errors`); `Err`: the GPU is lost.
pub(super) fn read<T>(
    st: &mut DeviceState<'_>,
    m: Metric,
    errors: &AtomicU64,
    f: impl FnOnce() -> Result<T, NvmlError>,
) -> Result<Option<T>, NvmlError> {
    let bit = 1u32 << (m as u32);
    if st.unsupported & bit != 0 {
        return Ok(None);
    }
    match f() {
        Ok(v) => Ok(Some(v)),
        Err(
            NvmlError::NotSupported
            | NvmlError::FunctionNotFound
            | NvmlError::FailedToLoadSymbol(_)
            | NvmlError::NoPermission,
        ) => {
            st.unsupported |= bit;
            Ok(None)
        }
        Err(e @ NvmlError::GpuLost) => Err(e),
        Err(e) => {
            errors.fetch_add(1, Relaxed);
            tracing::debug!(metric = ?m, error = %e, "NVML query failed");
            Ok(None)
        }
    }
}

/// Fills the per-tick metrics of `s`.
pub(super) fn read_all<'n>(
    nvml: &'n Nvml,
    dev: &Device<'n>,
    st: &mut DeviceState<'n>,
    s: &mut proto::GpuSample,
    now_ns: u64,
    slow: bool,
    errors: &AtomicU64,
) -> Result<(), NvmlError> {
    if let Some(u) = read(st, Metric::Util, errors, || dev.utilization_rates())? {
        s.gpu_util_pct = Some(u.gpu as f32);
        s.mem_util_pct = Some(u.memory as f32);
    }
    if let Some(m) = read(st, Metric::Memory, errors, || dev.memory_info())? {
        s.mem_used_bytes = Some(m.used);
        s.mem_total_bytes = Some(m.total);
    }
    let mw = |v: u32| v as f32 / 1000.0;
    s.power_w = read(st, Metric::Power, errors, || dev.power_usage())?.map(mw);
    s.temp_c = read(st, Metric::Temp, errors, || {
        dev.temperature(TemperatureSensor::Gpu)
    })?
    .map(|t| t as f32);
    s.sm_clock_mhz = read(st, Metric::SmClock, errors, || dev.clock_info(Clock::SM))?;
    s.mem_clock_mhz = read(st, Metric::MemClock, errors, || {
        dev.clock_info(Clock::Memory)
    })?;
    if let Some(r) = read(st, Metric::Throttle, errors, || {
        dev.current_throttle_reasons()
    })? {
        s.throttle_mask = Some(r.bits());
        s.throttle_reasons = throttle_names(r.bits());
    }
    if slow || st.slow.is_none() {
        st.slow = Some(read_slow(dev, st, errors)?);
    }
    let slow_reads = st.slow.unwrap_or_default();
    s.power_limit_w = slow_reads.power_limit_w;
    s.ecc_corrected_total = slow_reads.ecc_corrected_total;
    s.ecc_uncorrected_total = slow_reads.ecc_uncorrected_total;
    s.pcie_replays_total = slow_reads.pcie_replays_total;
    if let Some(ps) = read(st, Metric::Processes, errors, || {
        dev.running_compute_processes()
    })? {
        s.processes = ps
            .into_iter()
            .map(|p| proto::GpuProcess {
                pid: p.pid,
                used_memory_bytes: match p.used_gpu_memory {
                    UsedGpuMemory::Used(b) => Some(b),
                    UsedGpuMemory::Unavailable => None,
                },
            })
            .collect();
    }
    if st.gpm_supported {
        read_gpm(nvml, dev, st, s, errors);
    } else if slow {
        let kib = |v: u32| u64::from(v) * 1024;
        s.pcie_tx_bytes_per_s = read(st, Metric::Pcie, errors, || {
            dev.pcie_throughput(PcieUtilCounter::Send)
        })?
        .map(kib);
        s.pcie_rx_bytes_per_s = read(st, Metric::Pcie, errors, || {
            dev.pcie_throughput(PcieUtilCounter::Receive)
        })?
        .map(kib);
    }
    if s.nvlink_tx_bytes_per_s.is_none() {
        read_nvlink(dev, st, s, now_ns, errors)?;
    }
    Ok(())
}

/// The reads of a slow tick (see [`SlowReads`]).
fn read_slow(
    dev: &Device<'_>,
    st: &mut DeviceState<'_>,
    errors: &AtomicU64,
) -> Result<SlowReads, NvmlError> {
    let power_limit_w = read(st, Metric::PowerLimit, errors, || {
        dev.enforced_power_limit()
    })?
    .map(|v| v as f32 / 1000.0);
    let ecc_corrected_total = read(st, Metric::Ecc, errors, || {
        dev.total_ecc_errors(MemoryError::Corrected, EccCounter::Volatile)
    })?;
    let ecc_uncorrected_total = match ecc_corrected_total {
        Some(_) => read(st, Metric::Ecc, errors, || {
            dev.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile)
        })?,
        None => None,
    };
    let pcie_replays_total =
        read(st, Metric::PcieReplay, errors, || dev.pcie_replay_counter())?.map(u64::from);
    Ok(SlowReads {
        power_limit_w,
        ecc_corrected_total,
        ecc_uncorrected_total,
        pcie_replays_total,
    })
}

/// NVLink rates from the cumulative KiB counters (field values).
fn read_nvlink(
    dev: &Device<'_>,
    st: &mut DeviceState<'_>,
    s: &mut proto::GpuSample,
    now_ns: u64,
    errors: &AtomicU64,
) -> Result<(), NvmlError> {
    let ids = [FieldId(NVLINK_TX_KIB), FieldId(NVLINK_RX_KIB)];
    let Some(values) = read(st, Metric::Nvlink, errors, || dev.field_values_for(&ids))? else {
        return Ok(());
    };
    let counter = |k: usize| -> Option<u64> {
        match values
            .get(k)
            .and_then(|v| v.as_ref().ok())
            .map(|v| &v.value)
        {
            Some(Ok(SampleValue::U64(v))) => Some(*v),
            Some(Ok(SampleValue::U32(v))) => Some(u64::from(*v)),
            _ => None,
        }
    };
    let (Some(tx), Some(rx)) = (counter(0), counter(1)) else {
        st.unsupported |= 1 << (Metric::Nvlink as u32);
        return Ok(());
    };
    if let Some((ptx, prx, pts)) = st.nvlink_prev {
        let dt = now_ns.saturating_sub(pts);
        if dt > 0 {
            let rate = |now: u64, prev: u64| {
                (now.saturating_sub(prev) as f64 * 1024.0 * 1e9 / dt as f64).round() as u64
            };
            s.nvlink_tx_bytes_per_s = Some(rate(tx, ptx));
            s.nvlink_rx_bytes_per_s = Some(rate(rx, prx));
        }
    }
    st.nvlink_prev = Some((tx, rx, now_ns));
    Ok(())
}

/// GPM metrics between the previous tick's GPM sample and a new one.
fn read_gpm<'n>(
    nvml: &'n Nvml,
    dev: &Device<'n>,
    st: &mut DeviceState<'n>,
    s: &mut proto::GpuSample,
    errors: &AtomicU64,
) {
    let new = match dev.gpm_sample() {
        Ok(g) => g,
        Err(e) => {
            errors.fetch_add(1, Relaxed);
            tracing::debug!(error = %e, "GPM sample failed");
            st.gpm_prev = None;
            return;
        }
    };
    if let Some(prev) = &st.gpm_prev {
        match nvml_wrapper::gpm::gpm_metrics_get(nvml, prev, &new, &GPM_METRICS) {
            Ok(results) => {
                let v: Vec<Option<f64>> = results
                    .into_iter()
                    .map(|r| r.ok().map(|m| m.value).filter(|x| x.is_finite()))
                    .collect();
                apply_gpm(s, &v);
            }
            Err(e) => {
                errors.fetch_add(1, Relaxed);
                tracing::debug!(error = %e, "GPM metrics failed");
            }
        }
    }
    st.gpm_prev = Some(new);
}

/// Writes GPM values (indexed like [`GPM_METRICS`]) into the sample.
fn apply_gpm(s: &mut proto::GpuSample, v: &[Option<f64>]) {
    let get = |k: usize| v.get(k).copied().flatten();
    let pct = |k: usize| get(k).map(|x| x.clamp(0.0, 100.0) as f32);
    let bytes = |k: usize| get(k).map(|x| (x.max(0.0) * MIB).round() as u64);
    s.sm_active_pct = pct(0);
    s.sm_occupancy_pct = pct(1);
    s.tensor_active_pct = pct(2);
    s.dram_active_pct = pct(3);
    s.pcie_tx_bytes_per_s = bytes(4);
    s.pcie_rx_bytes_per_s = bytes(5);
    s.nvlink_tx_bytes_per_s = bytes(6);
    s.nvlink_rx_bytes_per_s = bytes(7);
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpm_values_are_clamped_and_scaled() {
        let mut s = proto::GpuSample::default();
        let v = [
            Some(75.5),
            Some(140.0),
            None,
            Some(-1.0),
            Some(2.0),
            None,
            Some(0.5),
            None,
        ];
        apply_gpm(&mut s, &v);
        assert_eq!(s.sm_active_pct, Some(75.5));
        assert_eq!(s.sm_occupancy_pct, Some(100.0));
        assert_eq!(s.tensor_active_pct, None);
        assert_eq!(s.dram_active_pct, Some(0.0));
        assert_eq!(s.pcie_tx_bytes_per_s, Some(2 * 1024 * 1024));
        assert_eq!(s.nvlink_tx_bytes_per_s, Some(512 * 1024));
        assert_eq!(s.nvlink_rx_bytes_per_s, None);
    }
}
