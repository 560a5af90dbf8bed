//! Kernel launch statistics (HTA 0.5.0 `get_cuda_kernel_launch_stats`,
//! `hta/analyzers/cuda_kernel_analysis.py`, defaults `runtime_cutoff` 50 us
//! and `launch_delay_cutoff` 100 us, memory events included).
//!
//! In: per GPU activity launched by one of HTA's launch calls
//! ([`HTA_LAUNCH_APIS`]) with the same correlation id: the CPU call's
//! duration, the GPU activity's duration and the launch delay, HTA's
//! `max(0, gpu start - cpu end)`. Out: per rank, the counts HTA's three
//! plots show — short kernels (`cpu_duration <= runtime_cutoff` and
//! `gpu_duration < cpu_duration`), runtime outliers (`cpu_duration >
//! runtime_cutoff`), launch-delay outliers (`launch_delay >
//! launch_delay_cutoff`) — with means and the worst cases.

/// The host calls HTA 0.5.0 pairs with GPU activities for launch stats
/// (`cudaLaunchKernel`, `cudaLaunchKernelExC`, MTIA's run function, and,
/// with memory events, `cudaMemcpyAsync`, `cudaMemsetAsync`).
pub const HTA_LAUNCH_APIS: [&str; 5] = [
    "cudaLaunchKernel",
    "cudaLaunchKernelExC",
    "runFunction - job_prep_and_submit_for_execution",
    "cudaMemcpyAsync",
    "cudaMemsetAsync",
];

/// One launched activity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchObs<'a> {
    pub name: &'a str,
    /// The launch call's duration.
    pub cpu_ns: u64,
    /// The GPU activity's duration.
    pub gpu_ns: u64,
    /// `max(0, gpu start - cpu end)`.
    pub delay_ns: u64,
}

impl<'a> LaunchObs<'a> {
    /// From the call's and the activity's times.
    pub fn new(name: &'a str, call: (u64, u64), gpu: (u64, u64)) -> Self {
        Self {
            name,
            cpu_ns: call.1.saturating_sub(call.0),
            gpu_ns: gpu.1.saturating_sub(gpu.0),
            delay_ns: gpu.0.saturating_sub(call.1),
        }
    }
}

/// Launch statistics of one rank.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LaunchStats {
    pub launches: u64,
    pub short_kernels: u64,
    pub runtime_outliers: u64,
    pub launch_delay_outliers: u64,
    pub mean_cpu_ns: f64,
    pub mean_delay_ns: f64,
    /// The longest launch call: (kernel name, ns).
    pub max_cpu: Option<(String, u64)>,
    /// The longest launch delay: (kernel name, ns).
    pub max_delay: Option<(String, u64)>,
}

/// The statistics of `obs` (see the module doc).
pub fn launch_stats(
    obs: &[LaunchObs<'_>],
    runtime_cutoff_ns: u64,
    delay_cutoff_ns: u64,
) -> LaunchStats {
    let mut s = LaunchStats {
        launches: obs.len() as u64,
        ..LaunchStats::default()
    };
    if obs.is_empty() {
        return s;
    }
    let (mut cpu, mut delay) = (0u128, 0u128);
    for o in obs {
        if o.cpu_ns <= runtime_cutoff_ns && o.gpu_ns < o.cpu_ns {
            s.short_kernels += 1;
        }
        if o.cpu_ns > runtime_cutoff_ns {
            s.runtime_outliers += 1;
        }
        if o.delay_ns > delay_cutoff_ns {
            s.launch_delay_outliers += 1;
        }
        cpu += u128::from(o.cpu_ns);
        delay += u128::from(o.delay_ns);
        if s.max_cpu.as_ref().is_none_or(|m| o.cpu_ns > m.1) {
            s.max_cpu = Some((o.name.to_owned(), o.cpu_ns));
        }
        if s.max_delay.as_ref().is_none_or(|m| o.delay_ns > m.1) {
            s.max_delay = Some((o.name.to_owned(), o.delay_ns));
        }
    }
    s.mean_cpu_ns = cpu as f64 / obs.len() as f64;
    s.mean_delay_ns = delay as f64 / obs.len() as f64;
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_follow_htas_three_filters() {
        let us = 1000;
        let obs = [
            // short: cpu 10 us <= 50, gpu 4 us < cpu
            LaunchObs::new("a", (0, 10 * us), (12 * us, 16 * us)),
            // runtime outlier: cpu 80 us; delay 150 us is an outlier too
            LaunchObs::new("b", (0, 80 * us), (230 * us, 300 * us)),
            // gpu started before the call ended: delay clipped to 0
            LaunchObs::new("c", (0, 20 * us), (5 * us, 60 * us)),
        ];
        let s = launch_stats(&obs, 50 * us, 100 * us);
        assert_eq!(
            (
                s.launches,
                s.short_kernels,
                s.runtime_outliers,
                s.launch_delay_outliers
            ),
            (3, 1, 1, 1)
        );
        assert_eq!(s.max_cpu, Some(("b".into(), 80 * us)));
        assert_eq!(s.max_delay, Some(("b".into(), 150 * us)));
        assert_eq!(obs[2].delay_ns, 0);
        assert!((s.mean_delay_ns - (2_000.0 + 150_000.0) / 3.0).abs() < 1e-9);
        assert_eq!(launch_stats(&[], 1, 1).launches, 0);
    }
}
