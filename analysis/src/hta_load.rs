//! Holistic Trace Analysis (HTA) 0.5.0's trace-loading rules that change its
//! numbers, applied to a rank's GPU activities before the HTA-defined views
//! (kernel breakdown, idle time, queue length, launch statistics) so they
//! show HTA's figures on the same trace.
//!
//! In: one GPU activity's times and its launch call, and the rank's HTA step
//! window ([`HtaWindow`]). Out: whether HTA keeps the activity
//! ([`keeps`]) and its times as HTA reads them ([`round_inward_us`]).
//!
//! The rules (`hta/common/trace_parser.py`, `hta/common/trace.py`):
//! 1. **Whole microseconds, rounded inward** (`round_down_time_stamps`): a
//!    trace with float (nanosecond-precision) timestamps has every event read
//!    as `ts = ceil(ts)`, `end = floor(ts + dur)` in microseconds, so an
//!    event shorter than a microsecond can end before it starts (`dur` 0 or
//!    -1). Integer-microsecond traces are unchanged by the same rounding, so
//!    it is applied to every time: [`round_inward_us`]. Times here are epoch
//!    nanoseconds; rounding them to whole microseconds equals HTA's rounding
//!    of the trace's `ts` when the trace's `baseTimeNanoseconds` is a whole
//!    microsecond (Kineto writes whole seconds).
//! 2. **The ProfilerStep window** (`Trace._filter_irrelevant_gpu_kernels`,
//!    with `include_last_profiler_step=True`): when the trace has at least
//!    two distinct `ProfilerStep#N` names, CPU events are kept only if they
//!    start at or before the end of the last ProfilerStep, and a GPU event
//!    only if a kept CPU event has its correlation id (its launch call). So
//!    GPU work whose launch was not recorded (launched before the profiler
//!    started) or was launched after the last step is dropped. The importer
//!    records that end per rank ([`HtaWindow::last_step_end_ns`]); without
//!    two steps there is no window and everything is kept.
//!
//! Both rules are the default of the views (a user comparing with HTA sees
//! its figure); the views' `exact` option skips them (every recorded GPU
//! activity at its recorded nanosecond times).

/// One microsecond in nanoseconds.
const US: u64 = 1000;

/// A rank's ProfilerStep window as HTA applies it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HtaWindow {
    /// End of the rank's last `ProfilerStep#N` annotation (CPU or GPU side),
    /// epoch ns, when its trace has at least two distinct ones; `None`: HTA
    /// applies no window.
    pub last_step_end_ns: Option<u64>,
}

/// `(ceil(start), floor(end))` in whole microseconds, as nanoseconds; the
/// end can come out before the start (by less than a microsecond).
pub fn round_inward_us(start_ns: u64, end_ns: u64) -> (u64, u64) {
    (start_ns.div_ceil(US).saturating_mul(US), end_ns / US * US)
}

/// Whether HTA keeps a GPU activity whose launch call started at
/// `launch_start_ns` (`None`: no launch call in the trace).
pub fn keeps(window: HtaWindow, launch_start_ns: Option<u64>) -> bool {
    match window.last_step_end_ns {
        None => true,
        Some(end) => launch_start_ns.is_some_and(|l| {
            // HTA compares the rounded times.
            round_inward_us(l, l).0 <= round_inward_us(end, end).1
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_is_inward_and_keeps_whole_microseconds() {
        assert_eq!(round_inward_us(5_000, 9_000), (5_000, 9_000));
        assert_eq!(round_inward_us(5_001, 8_999), (6_000, 8_000));
        // A 500 ns kernel inside one microsecond: it ends before it starts.
        assert_eq!(round_inward_us(5_300, 5_800), (6_000, 5_000));
        assert_eq!(round_inward_us(5_300, 6_000), (6_000, 6_000));
    }

    #[test]
    fn the_window_keeps_what_was_launched_by_the_last_step_end() {
        let open = HtaWindow::default();
        assert!(keeps(open, None));
        assert!(keeps(open, Some(u64::MAX)));
        let w = HtaWindow {
            last_step_end_ns: Some(10_500),
        };
        assert!(!keeps(w, None), "no launch recorded");
        assert!(keeps(w, Some(10_000)));
        // ceil(10.2 us) = 11 us > floor(10.5 us) = 10 us.
        assert!(!keeps(w, Some(10_200)));
        assert!(!keeps(w, Some(20_000)));
    }
}
