//! Temporal breakdown and compute/communication overlap of one rank's GPU
//! events, over one step or over a whole trace.
//!
//! In: [`GpuEvent`]s (`[start_ns, end_ns)` + [`KernelClass`]) of **one rank**,
//! any order. Out: a [`Breakdown`]; per step a [`StepBreakdown`].
//!
//! Definitions (Holistic Trace Analysis 0.5.0 `get_temporal_breakdown` and
//! `get_comm_comp_overlap`; `merge(S)` = length of the union of S):
//! - `gpu_span_ns` = last end - first start over all events (HTA `kernel_time`);
//! - `gpu_busy_ns` = merge(all events);
//! - `idle_ns` = span - busy (HTA `idle_time`);
//! - `compute_ns` = merge(COMPUTATION); `comm_ns` = merge(COMMUNICATION);
//!   `memory_ns` = merge(MEMORY);
//! - `overlap_ns` = |merge(COMPUTATION) ∩ merge(COMMUNICATION)|;
//! - `exposed_comm_ns` = comm - overlap (communication not hidden by compute);
//! - `non_compute_ns` = span - compute - idle (= busy - compute; HTA
//!   `non_compute_time`: communication, memory and OTHER time not under compute);
//! - `overlap_pct` = 100 * overlap / comm (HTA `comp_comm_overlap_pctg`),
//!   `None` when comm = 0;
//! - `idle_pct`, `compute_pct`, `non_compute_pct` = 100 * x / span, `None`
//!   when span = 0. HTA rounds percentages to 2 decimals; we return them
//!   unrounded and leave rounding to presentation.
//!
//! Invariants: busy <= span; compute, comm, memory <= busy;
//! overlap <= min(compute, comm); idle + compute + non_compute = span; the
//! result does not depend on event order.
//!
//! Timestamp rounding is the importer's business: HTA rounds float
//! microsecond timestamps as `ts = ceil(ts)`, `end = floor(ts + dur)`, so
//! importers matching HTA exactly do that before building [`GpuEvent`]s.
//! An event with `end_ns < start_ns` is treated as empty at `start_ns`.
//! Empty events still extend the span (HTA keeps them in `kernel_time`).

use crate::classify::KernelClass;
use crate::interval::{intersect_len, total_len, union_vec, Interval};

/// One GPU activity of one rank, already classified.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GpuEvent {
    /// Start, ns since the Unix epoch (rank-local clock).
    pub start_ns: u64,
    /// End (exclusive), ns.
    pub end_ns: u64,
    /// HTA kernel class.
    pub class: KernelClass,
}

impl GpuEvent {
    fn interval(&self) -> Interval {
        Interval::new(self.start_ns, self.end_ns.max(self.start_ns))
    }
}

/// Temporal breakdown of a set of GPU events (definitions in the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Breakdown {
    /// Last event end - first event start.
    pub gpu_span_ns: u64,
    /// Union of all events.
    pub gpu_busy_ns: u64,
    /// span - busy.
    pub idle_ns: u64,
    /// Union of COMPUTATION events.
    pub compute_ns: u64,
    /// Union of COMMUNICATION events.
    pub comm_ns: u64,
    /// Union of MEMORY events.
    pub memory_ns: u64,
    /// |union(COMPUTATION) ∩ union(COMMUNICATION)|.
    pub overlap_ns: u64,
    /// comm - overlap.
    pub exposed_comm_ns: u64,
    /// span - compute - idle.
    pub non_compute_ns: u64,
    /// 100 * overlap / comm; `None` when comm = 0.
    pub overlap_pct: Option<f64>,
    /// 100 * idle / span; `None` when span = 0.
    pub idle_pct: Option<f64>,
    /// 100 * compute / span; `None` when span = 0.
    pub compute_pct: Option<f64>,
    /// 100 * non_compute / span; `None` when span = 0.
    pub non_compute_pct: Option<f64>,
}

/// Compute the [`Breakdown`] of one rank's events (any order).
pub fn breakdown(events: &[GpuEvent]) -> Breakdown {
    let Some(first_start) = events.iter().map(|e| e.start_ns).min() else {
        return Breakdown::default();
    };
    let last_end = events
        .iter()
        .map(|e| e.end_ns.max(e.start_ns))
        .max()
        .unwrap_or(first_start);
    let gpu_span_ns = last_end - first_start;

    let by_class = |class: KernelClass| {
        union_vec(
            events
                .iter()
                .filter(|e| e.class == class)
                .map(GpuEvent::interval)
                .collect(),
        )
    };
    let compute = by_class(KernelClass::Computation);
    let comm = by_class(KernelClass::Communication);
    let memory = by_class(KernelClass::Memory);
    let all = union_vec(events.iter().map(GpuEvent::interval).collect());

    let gpu_busy_ns = total_len(&all);
    let idle_ns = gpu_span_ns - gpu_busy_ns;
    let compute_ns = total_len(&compute);
    let comm_ns = total_len(&comm);
    let overlap_ns = intersect_len(&compute, &comm);
    let non_compute_ns = gpu_span_ns - compute_ns - idle_ns;
    let pct_of_span = |x: u64| (gpu_span_ns > 0).then(|| pct(x, gpu_span_ns));
    Breakdown {
        gpu_span_ns,
        gpu_busy_ns,
        idle_ns,
        compute_ns,
        comm_ns,
        memory_ns: total_len(&memory),
        overlap_ns,
        exposed_comm_ns: comm_ns - overlap_ns,
        non_compute_ns,
        overlap_pct: (comm_ns > 0).then(|| pct(overlap_ns, comm_ns)),
        idle_pct: pct_of_span(idle_ns),
        compute_pct: pct_of_span(compute_ns),
        non_compute_pct: pct_of_span(non_compute_ns),
    }
}

fn pct(part: u64, whole: u64) -> f64 {
    100.0 * part as f64 / whole as f64
}

/// The breakdown of one rank in one training step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepBreakdown {
    /// Step number (from the step markers).
    pub step: u64,
    /// Global rank.
    pub rank: u32,
    /// Step duration from the rank's step markers (end - start), ns.
    pub step_time_ns: u64,
    /// Breakdown of the GPU events assigned to the step.
    pub breakdown: Breakdown,
}

impl StepBreakdown {
    /// Breakdown of `events` (already assigned to `step`) for `rank`.
    pub fn new(step: u64, rank: u32, step_time_ns: u64, events: &[GpuEvent]) -> Self {
        Self {
            step,
            rank,
            step_time_ns,
            breakdown: breakdown(events),
        }
    }
}

/// Assign one rank's GPU events to its steps by **event start time**: an
/// event belongs to the step whose `[start_ns, end_ns)` contains the event's
/// `start_ns` (if steps overlap, the one that started last). Events starting
/// outside every step are left out (a whole-trace [`breakdown`] still counts
/// them, as HTA's rank-level temporal breakdown does).
///
/// `steps` are `(step, start_ns, end_ns)`; the result has one entry per input
/// step, in input order, with its events in input order (possibly empty).
///
/// GPU work usually runs behind the CPU, so start time can attribute a
/// kernel launched late in step N to step N+1. Importers that know the CPU
/// launch (Kineto `args.correlation`, as HTA does) should assign by the
/// launch's step instead and call [`breakdown`] per step directly.
pub fn assign_to_steps(
    steps: &[(u64, u64, u64)],
    events: &[GpuEvent],
) -> Vec<(u64, Vec<GpuEvent>)> {
    let mut out: Vec<(u64, Vec<GpuEvent>)> = steps.iter().map(|s| (s.0, Vec::new())).collect();
    // Step indices sorted by start (ties: later in input wins, like HTA's loop).
    let mut order: Vec<usize> = (0..steps.len()).collect();
    order.sort_by_key(|&i| (steps[i].1, i));
    // max_end[k] = latest end among order[..=k]: stops the backwards scan
    // early, so non-overlapping steps cost one probe per event.
    let max_end: Vec<u64> = order
        .iter()
        .scan(0u64, |m, &i| {
            *m = (*m).max(steps[i].2);
            Some(*m)
        })
        .collect();
    for ev in events {
        // Steps starting at or before the event, latest first.
        let upto = order.partition_point(|&i| steps[i].1 <= ev.start_ns);
        for k in (0..upto).rev() {
            if max_end[k] <= ev.start_ns {
                break;
            }
            let i = order[k];
            if ev.start_ns < steps[i].2 {
                out[i].1.push(*ev);
                break;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests;
