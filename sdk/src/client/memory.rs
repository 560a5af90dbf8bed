//! [`Client::memory_peak`]: a rank's per-step device memory peak.
//!
//! In: what the caller read at the end of a step (the Python SDK reads
//! `torch.cuda.max_memory_allocated` / `max_memory_reserved` of the current
//! device, then `reset_peak_memory_stats`, when CUDA is initialised). Out:
//! one `MemoryPeak { per_step: true }` event in the rank's queue, like any
//! other event (drop newest when full). The collector keeps it as a
//! `memory_stats` row of kind `peak` (the live memory view) and feeds it to
//! the `memory_headroom` alert rule.

use rankscope_proto::v1::{self as proto, event::Kind};

use super::{CallError, Client};

impl Client {
    /// Records the peak allocated / reserved bytes of CUDA device `device`
    /// during step `step`; `device_total_bytes` is the device's memory (0 =
    /// unknown: no headroom and no alert for it).
    pub fn memory_peak(
        &self,
        step: u64,
        device: i32,
        peak_allocated_bytes: u64,
        peak_reserved_bytes: u64,
        device_total_bytes: u64,
    ) -> Result<(), CallError> {
        if device < 0 {
            return self.invalid(CallError::BadValue(format!(
                "memory_peak: device must be a CUDA device index >= 0, got {device} \
                 (CPU ranks are measured by the agent's RSS samples)"
            )));
        }
        let cap = |b: u64, what: &str| {
            i64::try_from(b).map_err(|_| {
                CallError::BadValue(format!("memory_peak: {what} = {b} is over i64::MAX"))
            })
        };
        let allocated = match cap(peak_allocated_bytes, "peak_allocated_bytes") {
            Ok(v) => v,
            Err(e) => return self.invalid(e),
        };
        let reserved = match cap(peak_reserved_bytes, "peak_reserved_bytes") {
            Ok(v) => v,
            Err(e) => return self.invalid(e),
        };
        self.enqueue(Kind::MemoryPeak(proto::MemoryPeak {
            device,
            peak_allocated_bytes: allocated,
            peak_reserved_bytes: reserved,
            device_total_bytes,
            step,
            per_step: true,
        }))
    }
}
