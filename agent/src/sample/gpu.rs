//! GPU sampling through NVML (nvml-wrapper).
//!
//! In: an initialised [`Nvml`] and the time of each tick. Out: one
//! `proto::GpuSample` per GPU per tick ([`GpuSampler::sample`]).
//!
//! Invariants:
//! * a metric the GPU does not support (`NotSupported`, a missing symbol, no
//!   permission) is left unset and not asked again for that GPU;
//! * one GPU failing never stops the others: a GPU that is lost (fell off
//!   the bus) or errors on its handle gives a sample with state LOST / ERROR
//!   and is retried at the next tick; state changes are logged once;
//! * rates (GPM metrics, NVLink counters) and the error counts of an
//!   interval (`*_new`: increase of the ECC and PCIe replay totals) need two
//!   ticks: the first sample of a GPU leaves them unset;
//! * `nvmlDeviceGetPcieThroughput` blocks ~20 ms per call on real drivers,
//!   so without GPM it is read at most about once a second; so are the
//!   cumulative error counters (ECC, PCIe replays) and the enforced power
//!   limit, which the other ticks repeat ([`SlowReads`]): on an H200
//!   (driver 580.159.04, `deploy/gpu-kit/nvml-cost.py`)
//!   `nvmlDeviceGetPcieReplayCounter` took 177 us of CPU per call, the
//!   other per-tick reads 1.6-52 us each.

mod read;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enum_wrappers::device::Clock;
use nvml_wrapper::enums::event::XidError;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, EventSet, GpmSample, Nvml};
use rankscope_proto::v1 as proto;

use read::{read, read_all, Metric};

/// Clocks-event (throttle) reason bits of NVML and their names.
pub const THROTTLE_REASONS: [(u64, &str); 9] = [
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
];

/// The names of the reasons set in `mask` (unknown bits are skipped).
pub fn throttle_names(mask: u64) -> Vec<String> {
    THROTTLE_REASONS
        .iter()
        .filter(|(bit, _)| mask & bit != 0)
        .map(|(_, name)| (*name).to_owned())
        .collect()
}

/// What stays the same for a GPU.
#[derive(Debug, Default, Clone)]
struct Info {
    name: String,
    uuid: String,
    pci_bus_id: String,
    sm_clock_max_mhz: Option<u32>,
    mem_clock_max_mhz: Option<u32>,
}

/// The reads of a slow tick (every `pcie_every`-th, about once a second),
/// repeated by the ticks between: they change rarely or are cumulative
/// (an error shows in the `*_new` counts of the next slow tick).
#[derive(Debug, Default, Clone, Copy)]
struct SlowReads {
    power_limit_w: Option<f32>,
    ecc_corrected_total: Option<u64>,
    ecc_uncorrected_total: Option<u64>,
    pcie_replays_total: Option<u64>,
}

/// Per-GPU state between ticks.
#[derive(Default)]
struct DeviceState<'n> {
    info: Option<Info>,
    unsupported: u32,
    gpm_supported: bool,
    gpm_prev: Option<GpmSample<'n>>,
    /// (tx KiB, rx KiB, ts_ns) of the last NVLink counter read.
    nvlink_prev: Option<(u64, u64, u64)>,
    last_ts_ns: u64,
    xid_supported: bool,
    xids: u32,
    last_xid: Option<u32>,
    /// ECC corrected, ECC uncorrected and PCIe replay totals of the last
    /// sample that read the GPU.
    totals: Option<[Option<u64>; 3]>,
    /// The last slow tick's reads; `None` until the first, and after the
    /// GPU could not be read.
    slow: Option<SlowReads>,
    /// Last reported state (for logging transitions).
    state: i32,
}

/// Samples every GPU NVML reports; see the module docs.
pub struct GpuSampler<'n> {
    nvml: &'n Nvml,
    devices: BTreeMap<u32, DeviceState<'n>>,
    events: Option<EventSet<'n>>,
    /// A slow tick (the blocking PCIe counters, [`SlowReads`]) every
    /// `pcie_every` ticks.
    pcie_every: u64,
    tick: u64,
    count_failed: bool,
}

impl<'n> GpuSampler<'n> {
    /// A sampler ticking every `interval_ms`.
    pub fn new(nvml: &'n Nvml, interval_ms: u64) -> Self {
        Self {
            nvml,
            devices: BTreeMap::new(),
            events: nvml.create_event_set().ok(),
            pcie_every: 1000_u64.div_ceil(interval_ms.max(1)).max(1),
            tick: 0,
            count_failed: false,
        }
    }

    /// One sample per GPU, taken now (`now_ns`). `errors` counts NVML calls
    /// that failed unexpectedly.
    pub fn sample(&mut self, now_ns: u64, errors: &AtomicU64) -> Vec<proto::GpuSample> {
        let count = match self.nvml.device_count() {
            Ok(n) => {
                self.count_failed = false;
                n
            }
            Err(e) => {
                errors.fetch_add(1, Relaxed);
                if !self.count_failed {
                    tracing::warn!(error = %e, "NVML cannot count GPUs; retrying every tick");
                }
                self.count_failed = true;
                return Vec::new();
            }
        };
        self.devices.retain(|i, _| *i < count);
        self.drain_xids();
        // Every `pcie_every`-th tick, starting with the first.
        let slow = self.tick == 0;
        self.tick = (self.tick + 1) % self.pcie_every;
        (0..count)
            .map(|i| self.sample_device(i, now_ns, slow, errors))
            .collect()
    }

    fn sample_device(
        &mut self,
        index: u32,
        now_ns: u64,
        slow: bool,
        errors: &AtomicU64,
    ) -> proto::GpuSample {
        let nvml = self.nvml;
        let mut st = self.devices.remove(&index).unwrap_or_default();
        let period_ns = if st.last_ts_ns == 0 {
            0
        } else {
            now_ns.saturating_sub(st.last_ts_ns)
        };
        let mut s = proto::GpuSample {
            ts_ns: now_ns,
            period_ns,
            gpu_index: index,
            state: proto::GpuState::Ok as i32,
            ..Default::default()
        };
        let result = nvml.device_by_index(index).and_then(|dev| {
            if st.info.is_none() {
                st.info = Some(self.first_look(&dev, &mut st, errors)?);
            }
            read_all(nvml, &dev, &mut st, &mut s, now_ns, slow, errors)
        });
        if let Some(info) = &st.info {
            s.name.clone_from(&info.name);
            s.uuid.clone_from(&info.uuid);
            s.pci_bus_id.clone_from(&info.pci_bus_id);
            s.sm_clock_max_mhz = info.sm_clock_max_mhz;
            s.mem_clock_max_mhz = info.mem_clock_max_mhz;
        }
        if let Err(e) = result {
            let state = if matches!(e, NvmlError::GpuLost) {
                proto::GpuState::Lost
            } else {
                proto::GpuState::Error
            };
            s = proto::GpuSample {
                ts_ns: now_ns,
                period_ns,
                gpu_index: index,
                uuid: s.uuid,
                name: s.name,
                pci_bus_id: s.pci_bus_id,
                state: state as i32,
                error: e.to_string(),
                ..Default::default()
            };
            // Rates restart when the GPU comes back, and it is read whole.
            st.gpm_prev = None;
            st.nvlink_prev = None;
            st.slow = None;
        }
        if st.xid_supported {
            s.xid_errors = Some(std::mem::take(&mut st.xids));
            s.last_xid = st.last_xid;
        }
        if s.state == proto::GpuState::Ok as i32 {
            let now = [
                s.ecc_corrected_total,
                s.ecc_uncorrected_total,
                s.pcie_replays_total,
            ];
            [
                s.ecc_corrected_new,
                s.ecc_uncorrected_new,
                s.pcie_replays_new,
            ] = increases(st.totals, now);
            st.totals = Some(now);
        }
        if s.state != st.state {
            if s.state == proto::GpuState::Ok as i32 {
                tracing::info!(gpu = index, uuid = %s.uuid, "GPU sampled");
            } else {
                tracing::warn!(gpu = index, uuid = %s.uuid, error = %s.error, "GPU cannot be read; reporting it and retrying every tick");
            }
            st.state = s.state;
        }
        st.last_ts_ns = now_ns;
        self.devices.insert(index, st);
        s
    }

    /// Static facts of a GPU, GPM support and Xid event registration.
    fn first_look(
        &mut self,
        dev: &Device<'n>,
        st: &mut DeviceState<'n>,
        errors: &AtomicU64,
    ) -> Result<Info, NvmlError> {
        let name = read(st, Metric::Name, errors, || dev.name())?.unwrap_or_default();
        let uuid = read(st, Metric::Uuid, errors, || dev.uuid())?.unwrap_or_default();
        let pci = read(st, Metric::Pci, errors, || dev.pci_info())?;
        let sm_max = read(st, Metric::MaxClocks, errors, || {
            dev.max_clock_info(Clock::SM)
        })?;
        let mem_max = read(st, Metric::MaxClocks, errors, || {
            dev.max_clock_info(Clock::Memory)
        })?;
        st.gpm_supported = dev.gpm_support().unwrap_or(false);
        let xid = dev
            .supported_event_types()
            .is_ok_and(|t| t.contains(EventTypes::CRITICAL_XID_ERROR));
        if xid {
            if let Some(set) = self.events.take() {
                match dev.register_events(EventTypes::CRITICAL_XID_ERROR, set) {
                    Ok(set) => {
                        self.events = Some(set);
                        st.xid_supported = true;
                    }
                    // The set is released on failure: Xid counts stop for
                    // every GPU rather than being wrong.
                    Err(e) => tracing::warn!(uuid = %uuid, error = %e, "cannot watch Xid events"),
                }
            }
        }
        tracing::debug!(gpu = ?dev.index().ok(), %name, %uuid, gpm = st.gpm_supported, xid = st.xid_supported, "GPU found");
        Ok(Info {
            name,
            uuid,
            pci_bus_id: pci.map(|p| p.bus_id).unwrap_or_default(),
            sm_clock_max_mhz: sm_max,
            mem_clock_max_mhz: mem_max,
        })
    }

    /// Counts the critical Xid events delivered since the last tick.
    fn drain_xids(&mut self) {
        let Some(set) = &self.events else { return };
        for _ in 0..1024 {
            match set.wait(0) {
                Ok(ev) => {
                    let Ok(index) = ev.device.index() else {
                        continue;
                    };
                    let st = self.devices.entry(index).or_default();
                    st.xids = st.xids.saturating_add(1);
                    if let Some(XidError::Value(code)) = ev.event_data {
                        st.last_xid = u32::try_from(code).ok();
                        tracing::warn!(gpu = index, xid = code, "critical Xid event");
                    }
                }
                Err(NvmlError::Timeout) => return,
                Err(e) => {
                    tracing::debug!(error = %e, "waiting for NVML events failed");
                    return;
                }
            }
        }
    }
}

/// Per total, its increase from `prev` to `now` (`now` itself when the
/// counter went down: a driver reload resets NVML's volatile counters);
/// `None` where either is missing.
fn increases(prev: Option<[Option<u64>; 3]>, now: [Option<u64>; 3]) -> [Option<u64>; 3] {
    let prev = prev.unwrap_or([None; 3]);
    std::array::from_fn(|i| match (prev[i], now[i]) {
        (Some(p), Some(n)) => Some(if n >= p { n - p } else { n }),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn increases_need_two_readings_and_survive_a_reset() {
        assert_eq!(increases(None, [Some(3), None, Some(0)]), [None; 3]);
        assert_eq!(
            increases(Some([Some(3), None, Some(0)]), [Some(8), Some(1), Some(0)]),
            [Some(5), None, Some(0)]
        );
        // A driver reload reset the counter: 2 since the reload.
        assert_eq!(
            increases(Some([Some(8), Some(1), Some(4)]), [Some(2), Some(1), None]),
            [Some(2), Some(0), None]
        );
    }

    #[test]
    fn throttle_reasons_decode_to_names() {
        assert!(throttle_names(0).is_empty());
        assert_eq!(
            throttle_names(0x60),
            ["sw_thermal_slowdown", "hw_thermal_slowdown"]
        );
        assert_eq!(throttle_names(0x4 | 0x1000), ["sw_power_cap"]);
    }
}
