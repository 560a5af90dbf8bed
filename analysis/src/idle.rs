//! Idle-time breakdown and CUDA queue length of one rank, per GPU stream, as
//! Holistic Trace Analysis (HTA) 0.5.0 computes them
//! (`hta/analyzers/breakdown_analysis.py` `_analyze_idle_time_for_stream` /
//! `get_idle_time_breakdown`; `hta/analyzers/trace_counters.py`
//! `_get_queue_length_time_series_for_rank` / `get_queue_length_summary`).
//!
//! In: the GPU activities of one rank ([`GpuOp`], with their launch call
//! where the trace has it). Out: [`IdleRow`]s and [`QueueRow`]s.
//!
//! Idle time (per stream, activities sorted by start): the gap before an
//! activity is its start minus the previous activity's end (it can be
//! negative when they overlap; HTA sums it as is). It is `host_wait` when
//! the activity's launch call started after the previous activity ended (the
//! CPU did not enqueue fast enough), else `kernel_wait` when the gap is below
//! `consecutive_kernel_delay_ns` (default 30 us: launch overhead between
//! back-to-back kernels), else `other`. An activity whose launch call is not
//! in the trace (launched before the profiler started) has no launch time;
//! HTA 0.5.0 then joins it to the trace's first event (its `index_correlation`
//! is 0, a row label), which starts after such early activities, so their
//! gaps are `host_wait`: we do the same when the rank has launch calls at
//! all (it is what reproduces HTA's numbers on the DLRM reference), and
//! claim no `host_wait` for a rank without any (live data without launch
//! records). The first activity of a stream has no
//! gap but is counted in `other` with none, as HTA does (so every stream has
//! an `other` row). `ratio` = the category's idle time / the stream's.
//!
//! Queue length (per stream): +1 at the start of every launch call that
//! enqueues work ([`LaunchCall::enqueues`]) and -1 at the start of the GPU
//! activity it launched; the running sum is sampled after every change
//! (launches first among equal times) and summarised with pandas'
//! `describe()`. Activities without such a launch are left out.

use std::collections::BTreeMap;

use crate::describe::{describe, Describe};
use crate::kernels::GpuOp;

/// HTA's default `consecutive_kernel_delay`: 30 us.
pub const DEFAULT_CONSECUTIVE_KERNEL_DELAY_NS: u64 = 30_000;

/// Idle category.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum IdleCategory {
    HostWait,
    KernelWait,
    Other,
}

impl IdleCategory {
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::HostWait => "host_wait",
            Self::KernelWait => "kernel_wait",
            Self::Other => "other",
        }
    }
}

/// Idle time of one category on one stream.
#[derive(Debug, Clone, PartialEq)]
pub struct IdleRow {
    pub stream: u32,
    pub category: IdleCategory,
    /// Sum of the gaps, ns (negative gaps included, as HTA).
    pub idle_ns: i64,
    /// `idle_ns` / the stream's idle time; `None` when that is 0.
    pub ratio: Option<f64>,
    /// Statistics of the gaps, ns.
    pub gaps: Describe,
}

/// Idle-time breakdown of one rank, by stream then category.
pub fn idle_breakdown(ops: &[GpuOp<'_>], consecutive_kernel_delay_ns: u64) -> Vec<IdleRow> {
    let mut streams: BTreeMap<u32, Vec<&GpuOp<'_>>> = BTreeMap::new();
    for o in ops {
        streams.entry(o.stream).or_default().push(o);
    }
    let delay = i64::try_from(consecutive_kernel_delay_ns).unwrap_or(i64::MAX);
    // See the module doc: HTA's join of unlinked activities.
    let unlinked_wait_on_host = ops.iter().any(|o| o.launch.is_some());
    let mut out = Vec::new();
    for (stream, mut list) in streams {
        list.sort_by_key(|o| (o.start_ns, o.end_ns));
        let mut gaps: BTreeMap<IdleCategory, Vec<i64>> = BTreeMap::new();
        gaps.entry(IdleCategory::Other).or_default();
        for pair in list.windows(2) {
            let (prev, cur) = (pair[0], pair[1]);
            let gap = cur.start_ns as i64 - prev.end_ns as i64;
            let host_wait = match cur.launch {
                Some(l) => l.start_ns > prev.end_ns,
                None => unlinked_wait_on_host,
            };
            let cat = if host_wait {
                IdleCategory::HostWait
            } else if gap < delay {
                IdleCategory::KernelWait
            } else {
                IdleCategory::Other
            };
            gaps.entry(cat).or_default().push(gap);
        }
        let total: i64 = gaps.values().flatten().sum();
        for (category, g) in gaps {
            let idle_ns: i64 = g.iter().sum();
            let f: Vec<f64> = g.iter().map(|&v| v as f64).collect();
            out.push(IdleRow {
                stream,
                category,
                idle_ns,
                ratio: (total != 0).then(|| idle_ns as f64 / total as f64),
                gaps: describe(&f),
            });
        }
    }
    out
}

/// Queue-length statistics of one stream.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueRow {
    pub stream: u32,
    pub queue: Describe,
}

/// Queue-length summary of one rank, by stream (streams with no enqueuing
/// launch are left out).
pub fn queue_length(ops: &[GpuOp<'_>]) -> Vec<QueueRow> {
    // (time, order: launches (0) before activities (1), delta)
    let mut streams: BTreeMap<u32, Vec<(u64, u8, i64)>> = BTreeMap::new();
    for o in ops {
        if let Some(l) = o.launch.filter(|l| l.enqueues) {
            let s = streams.entry(o.stream).or_default();
            s.push((l.start_ns, 0, 1));
            s.push((o.start_ns, 1, -1));
        }
    }
    streams
        .into_iter()
        .map(|(stream, mut changes)| {
            changes.sort_unstable();
            let mut q = 0i64;
            let samples: Vec<f64> = changes
                .iter()
                .map(|&(_, _, d)| {
                    q += d;
                    q as f64
                })
                .collect();
            QueueRow {
                stream,
                queue: describe(&samples),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::GpuEventKind;
    use crate::kernels::LaunchCall;

    fn op(stream: u32, start_ns: u64, end_ns: u64, launch_ns: Option<u64>) -> GpuOp<'static> {
        GpuOp {
            name: "k",
            kind: GpuEventKind::Kernel,
            stream,
            start_ns,
            end_ns,
            launch: launch_ns.map(|t| LaunchCall {
                start_ns: t,
                end_ns: t + 5,
                enqueues: true,
            }),
        }
    }

    #[test]
    fn gaps_are_host_wait_kernel_wait_or_other() {
        let us = 1000;
        let ops = [
            op(7, 0, 10 * us, Some(0)),
            // launched after the previous ended: host wait of 5 us
            op(7, 15 * us, 20 * us, Some(12 * us)),
            // launched early, small gap: kernel wait of 2 us
            op(7, 22 * us, 30 * us, Some(13 * us)),
            // launched early, long gap: other, 100 us
            op(7, 130 * us, 140 * us, Some(14 * us)),
            op(9, 0, 1, None),
            // no launch known on a rank that has launches: host wait, as HTA
            op(9, 10, 11, None),
        ];
        let rows = idle_breakdown(&ops, DEFAULT_CONSECUTIVE_KERNEL_DELAY_NS);
        let get = |s: u32, c: IdleCategory| {
            rows.iter()
                .find(|r| r.stream == s && r.category == c)
                .cloned()
        };
        assert_eq!(
            get(7, IdleCategory::HostWait).unwrap().idle_ns,
            5 * us as i64
        );
        assert_eq!(
            get(7, IdleCategory::KernelWait).unwrap().idle_ns,
            2 * us as i64
        );
        let other = get(7, IdleCategory::Other).unwrap();
        assert_eq!((other.idle_ns, other.gaps.count), (100 * us as i64, 1));
        assert!((other.ratio.unwrap() - 100.0 / 107.0).abs() < 1e-12);
        assert_eq!(get(9, IdleCategory::HostWait).unwrap().idle_ns, 9);
        // Without any launch on the rank: no host wait is claimed, and a
        // stream with one kernel has an empty `other` row, no ratio.
        let rows = idle_breakdown(&[op(9, 0, 1, None), op(9, 10, 11, None)], 30_000);
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].category, IdleCategory::KernelWait);
        let rows = idle_breakdown(&[op(9, 0, 1, None)], 30_000);
        let lone = &rows[0];
        assert_eq!((lone.idle_ns, lone.gaps.count, lone.ratio), (0, 0, None));
    }

    #[test]
    fn queue_length_counts_launched_not_started() {
        // Three launches at 0, 1, 2; kernels start at 3, 4, 5.
        let ops = [
            op(7, 3, 4, Some(0)),
            op(7, 4, 5, Some(1)),
            op(7, 5, 6, Some(2)),
            op(8, 5, 6, None),
        ];
        let rows = queue_length(&ops);
        assert_eq!(rows.len(), 1);
        let q = rows[0].queue;
        // Samples 1, 2, 3, 2, 1, 0.
        assert_eq!(
            (q.count, q.max, q.min, q.mean),
            (6, Some(3.0), Some(0.0), Some(1.5))
        );
    }
}
