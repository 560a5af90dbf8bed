//! Holistic Trace Analysis (HTA) 0.5.0's temporal breakdown and
//! compute/communication overlap of one rank, with HTA's own arithmetic, so
//! the figures equal HTA's on the same trace (`hta/analyzers/
//! breakdown_analysis.py` `get_temporal_breakdown` and
//! `_get_idle_time_for_kernels`, `hta/analyzers/communication_analysis.py`
//! `get_comm_comp_overlap`, `hta/utils/utils.py` `merge_kernel_intervals`).
//!
//! In: the rank's activities as HTA loads them ([`GpuOp`]s after
//! [`crate::hta_load`]'s rules: every row with a `stream`, which includes a
//! host event that carries a `stream` argument). Out: a [`Breakdown`].
//!
//! Definitions (HTA 0.5.0; `merge(S)` = `merge_kernel_intervals`: sorted by
//! start, a new group where a start is after every earlier end, a group is
//! (least start, greatest end)):
//! - `kernel_time` = end of the last group of merge(all) - start of its
//!   first (our `gpu_span_ns`);
//! - `idle_time` = kernel_time - Σ (end - start) over merge(all) groups;
//! - `compute_time` = Σ (end - start) over merge(COMPUTATION) groups;
//! - `non_compute_time` = kernel_time - compute_time - idle_time;
//! - overlap: a sweep over merge(COMMUNICATION) (+1 at a start, -1 at an
//!   end) and merge(COMPUTATION) (+2 / -2) groups, sorted by time; the time
//!   where the running sum is 3; `comp_comm_overlap_pctg` = 100 × overlap /
//!   Σ (end - start) over merge(COMMUNICATION) groups. HTA rounds the
//!   percentages to 2 decimals; they are returned unrounded.
//!
//! This differs from [`crate::breakdown()`] (the union of intervals) only
//! for an activity shorter than a microsecond that HTA's inward rounding
//! made end before it starts: alone in a group it counts its negative
//! length, as in HTA. `comm_ns` / `memory_ns` (not HTA figures) are the Σ of
//! their merged groups; a negative figure (only such activities) is 0.

use crate::breakdown::Breakdown;
use crate::classify::{classify_kernel, KernelClass};
use crate::kernels::{hta_merge, GpuOp};

/// HTA's temporal breakdown and overlap of one rank's activities (module
/// doc); an empty input gives the empty [`Breakdown`].
pub fn hta_breakdown(ops: &[GpuOp<'_>]) -> Breakdown {
    let spans = |class: Option<KernelClass>| -> Vec<(u64, u64)> {
        hta_merge(
            ops.iter()
                .filter(|o| class.is_none_or(|c| classify_kernel(o.name, o.kind) == c))
                .map(|o| (o.start_ns, o.end_ns))
                .collect(),
        )
    };
    let all = spans(None);
    let (Some(first), Some(last)) = (all.first(), all.last()) else {
        return Breakdown::default();
    };
    let kernel_time = signed(last.1) - signed(first.0);
    let busy = sum_len(&all);
    let idle = kernel_time - busy;
    let compute = spans(Some(KernelClass::Computation));
    let comm = spans(Some(KernelClass::Communication));
    let compute_t = sum_len(&compute);
    let comm_t = sum_len(&comm);
    let overlap = overlap_len(&compute, &comm);
    let non_compute = kernel_time - compute_t - idle;
    let u = |x: i64| u64::try_from(x).unwrap_or(0);
    let pct = |x: i64, whole: i64| (whole != 0).then(|| 100.0 * x as f64 / whole as f64);
    Breakdown {
        gpu_span_ns: u(kernel_time),
        gpu_busy_ns: u(busy),
        idle_ns: u(idle),
        compute_ns: u(compute_t),
        comm_ns: u(comm_t),
        memory_ns: u(sum_len(&spans(Some(KernelClass::Memory)))),
        overlap_ns: u(overlap),
        exposed_comm_ns: u(comm_t - overlap),
        non_compute_ns: u(non_compute),
        overlap_pct: pct(overlap, comm_t),
        idle_pct: pct(idle, kernel_time),
        compute_pct: pct(compute_t, kernel_time),
        non_compute_pct: pct(non_compute, kernel_time),
    }
}

fn signed(t: u64) -> i64 {
    i64::try_from(t).unwrap_or(i64::MAX)
}

/// Σ (end - start) over groups, signed as in HTA.
fn sum_len(groups: &[(u64, u64)]) -> i64 {
    groups.iter().map(|g| signed(g.1) - signed(g.0)).sum()
}

/// HTA's overlap sweep (module doc). Rows at one time: only the sum after
/// the last of them is followed by a non-zero stretch, so the order HTA's
/// unstable sort leaves them in does not matter.
fn overlap_len(compute: &[(u64, u64)], comm: &[(u64, u64)]) -> i64 {
    let mut edges: Vec<(u64, i8)> = Vec::with_capacity(2 * (compute.len() + comm.len()));
    for &(s, e) in comm {
        edges.extend([(s, 1), (e, -1)]);
    }
    for &(s, e) in compute {
        edges.extend([(s, 2), (e, -2)]);
    }
    edges.sort_unstable_by_key(|e| e.0);
    let mut running: i32 = 0;
    let mut total = 0i64;
    for (i, &(t, d)) in edges.iter().enumerate() {
        running += i32::from(d);
        if let Some(&(next, _)) = edges.get(i + 1) {
            if running == 3 {
                total += signed(next) - signed(t);
            }
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::GpuEventKind;

    fn op(name: &str, start_ns: u64, end_ns: u64) -> GpuOp<'_> {
        GpuOp {
            name,
            kind: GpuEventKind::Kernel,
            stream: 7,
            start_ns,
            end_ns,
            launch: None,
        }
    }

    const NCCL: &str = "ncclDevKernel_AllReduce_Sum_f32_RING_LL";

    #[test]
    fn whole_intervals_equal_the_union_breakdown() {
        let ops = [
            op("gemm", 0, 10),
            op("gemm", 5, 20),
            op(NCCL, 15, 40),
            op("Memcpy HtoD", 50, 60),
            op("gemm", 70, 80),
        ];
        let b = hta_breakdown(&ops);
        let events: Vec<crate::GpuEvent> = ops
            .iter()
            .map(|o| crate::GpuEvent {
                start_ns: o.start_ns,
                end_ns: o.end_ns,
                class: classify_kernel(o.name, o.kind),
            })
            .collect();
        assert_eq!(b, crate::breakdown(&events));
        assert_eq!((b.gpu_span_ns, b.idle_ns, b.compute_ns), (80, 20, 30));
        assert_eq!((b.overlap_ns, b.non_compute_ns), (5, 30));
        assert_eq!(b.overlap_pct, Some(20.0));
    }

    #[test]
    fn a_group_that_ends_before_it_starts_counts_its_negative_length() {
        // A 500 ns kernel rounded inward: [6 us, 5 us), alone between two
        // others. HTA: busy = 4 + (-1) + 3 = 6 us, idle = kernel_time - 6.
        let us = 1000;
        let ops = [
            op("gemm", 0, 4 * us),
            op("gemm", 6 * us, 5 * us),
            op("gemm", 7 * us, 10 * us),
        ];
        let b = hta_breakdown(&ops);
        assert_eq!(b.gpu_span_ns, 10 * us);
        assert_eq!(b.gpu_busy_ns, 6 * us);
        assert_eq!(b.idle_ns, 4 * us);
        assert_eq!(b.compute_ns, 6 * us);
        assert_eq!(b.non_compute_ns, 0);
        // The union reading counts it as empty there: idle 3 us.
        let events: Vec<crate::GpuEvent> = ops
            .iter()
            .map(|o| crate::GpuEvent {
                start_ns: o.start_ns,
                end_ns: o.end_ns,
                class: KernelClass::Computation,
            })
            .collect();
        assert_eq!(crate::breakdown(&events).idle_ns, 3 * us);
    }

    #[test]
    fn overlap_does_not_depend_on_order_and_is_at_most_comm() {
        let ops = vec![
            op(NCCL, 10, 30),
            op("gemm", 0, 10),
            op("gemm", 10, 20),
            op(NCCL, 25, 25),
            op("gemm", 25, 35),
        ];
        let b = hta_breakdown(&ops);
        // comp [0, 20) and [25, 35); comm [10, 30): overlap 10 + 5.
        assert_eq!(b.overlap_ns, 15);
        assert_eq!(b.comm_ns, 20);
        let mut rev = ops.clone();
        rev.reverse();
        assert_eq!(hta_breakdown(&rev), b);
        assert!(b.overlap_ns <= b.comm_ns.min(b.compute_ns));
        assert_eq!(hta_breakdown(&[]), Breakdown::default());
        // No communication: no overlap share.
        assert_eq!(hta_breakdown(&ops[1..3]).overlap_pct, None);
    }
}
