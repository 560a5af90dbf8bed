//! The job-wide memory answer kept proportionate to what the UI shows
//! (issue 38): in, every rank's curve samples and operator rows; out, a
//! bounded part of them. Every point and row sent is a stored one, never an
//! interpolation, so each figure keeps the PyTorch Profiler memory view's
//! definition (TensorBoard plugin 0.4.3: the curve is Kineto's
//! `Total Allocated` / `Total Reserved` after each `[memory]` event).
//!
//! - Curve: the [`CURVE_SERIES`] (rank, device) series with the largest
//!   allocated peak, each cut to [`CURVE_POINTS`] / series points by
//!   min/max decimation (per time bucket the sample with the lowest and the
//!   one with the highest allocated bytes, in time order, plus the series'
//!   first and last sample), so no series' peak is lost.
//! - Operators: the [`OPS_ROWS`] rows with the largest size increase, in the
//!   stored (rank, device, name) order.
//!
//! A job whose curve or operator table fits the bound gets all of it.

use std::collections::BTreeMap;

use crate::store::views::{MemSeries, MemStat};

/// Most curve points in a job-wide answer.
pub const CURVE_POINTS: usize = 2_000;
/// Most (rank, device) series in a job-wide curve (the UI draws 8).
pub const CURVE_SERIES: usize = 8;
/// Most operator rows in a job-wide answer.
pub const OPS_ROWS: usize = 2_000;
/// Most live (step, rank) peaks in a job-wide answer.
pub const LIVE_STEPS: usize = 2_000;

/// `points` of one series (time order) cut to at most `max` (>= 4) by
/// min/max decimation: the first and last point, and per bucket of equal
/// point count its lowest and highest `allocated_bytes`, in time order.
pub fn decimate(points: Vec<MemStat>, max: usize) -> Vec<MemStat> {
    let n = points.len();
    let max = max.max(4);
    if n <= max {
        return points;
    }
    let inner = n - 2;
    let buckets = (max - 2) / 2;
    let mut keep = vec![false; n];
    keep[0] = true;
    keep[n - 1] = true;
    for b in 0..buckets {
        let lo = 1 + b * inner / buckets;
        let hi = 1 + (b + 1) * inner / buckets;
        if lo >= hi {
            continue;
        }
        let by = |i: &usize| points[*i].allocated_bytes;
        let min = (lo..hi).min_by_key(by).unwrap_or(lo);
        let max_at = (lo..hi).max_by_key(by).unwrap_or(lo);
        keep[min] = true;
        keep[max_at] = true;
    }
    points
        .into_iter()
        .zip(keep)
        .filter_map(|(p, k)| k.then_some(p))
        .collect()
}

/// The series of a job-wide curve: `None` when all of them fit
/// [`CURVE_POINTS`], else the [`CURVE_SERIES`] with the largest allocated
/// peak (ties to the lower (rank, device)), in (rank, device) order.
pub fn choose(series: &[MemSeries]) -> Option<Vec<(u32, i32)>> {
    if series.iter().map(|s| s.points).sum::<u64>() <= CURVE_POINTS as u64 {
        return None;
    }
    let mut by_peak: Vec<&MemSeries> = series.iter().collect();
    by_peak.sort_by(|a, b| {
        b.peak_bytes
            .cmp(&a.peak_bytes)
            .then((a.rank, a.device).cmp(&(b.rank, b.device)))
    });
    let mut chosen: Vec<(u32, i32)> = by_peak
        .into_iter()
        .take(CURVE_SERIES)
        .map(|s| (s.rank, s.device))
        .collect();
    chosen.sort_unstable();
    Some(chosen)
}

/// The points of the `chosen` series among `samples` ((rank, device, ts)
/// order), each min/max decimated to its share of [`CURVE_POINTS`].
pub fn chosen_curve(samples: Vec<MemStat>, chosen: &[(u32, i32)]) -> Vec<MemStat> {
    let per = CURVE_POINTS / chosen.len().max(1);
    let mut series: BTreeMap<(u32, i32), Vec<MemStat>> = BTreeMap::new();
    for s in samples {
        if chosen.contains(&(s.rank, s.device)) {
            series.entry((s.rank, s.device)).or_default().push(s);
        }
    }
    series
        .into_values()
        .flat_map(|v| decimate(v, per))
        .collect()
}

/// A job's curve samples (in (rank, device, ts) order) bounded as the
/// module says; the second value is whether anything was left out. The
/// in-memory reference of what the route reads in SQL ([`choose`] over
/// `job_memory_series.sql`, then the chosen ranks' points).
#[cfg(test)]
pub fn curve(samples: Vec<MemStat>) -> (Vec<MemStat>, bool) {
    let mut series: BTreeMap<(u32, i32), MemSeries> = BTreeMap::new();
    for s in &samples {
        let e = series.entry((s.rank, s.device)).or_insert(MemSeries {
            rank: s.rank,
            device: s.device,
            peak_bytes: i64::MIN,
            points: 0,
        });
        e.peak_bytes = e.peak_bytes.max(s.allocated_bytes);
        e.points += 1;
    }
    let series: Vec<MemSeries> = series.into_values().collect();
    match choose(&series) {
        None => (samples, false),
        Some(chosen) => (chosen_curve(samples, &chosen), true),
    }
}

/// The top rows (largest size increase first, as `job_memory_ops_top.sql`
/// reads them) back in the stored (rank, device, ts, name, step) order.
pub fn stored_order(mut rows: Vec<MemStat>) -> Vec<MemStat> {
    rows.sort_by(|a, b| {
        (a.rank, a.device, a.ts_ns, &a.name, a.step)
            .cmp(&(b.rank, b.device, b.ts_ns, &b.name, b.step))
    });
    rows
}

/// A job's operator rows bounded as the module says; the second value is
/// whether anything was left out. The in-memory reference of
/// `job_memory_ops_top.sql` + [`stored_order`].
#[cfg(test)]
pub fn ops(rows: Vec<MemStat>) -> (Vec<MemStat>, bool) {
    if rows.len() <= OPS_ROWS {
        return (rows, false);
    }
    let mut order: Vec<usize> = (0..rows.len()).collect();
    order.sort_by(|&a, &b| {
        rows[b]
            .size_increase_bytes
            .cmp(&rows[a].size_increase_bytes)
            .then(a.cmp(&b))
    });
    let mut keep = vec![false; rows.len()];
    for &i in order.iter().take(OPS_ROWS) {
        keep[i] = true;
    }
    let out = rows
        .into_iter()
        .zip(keep)
        .filter_map(|(r, k)| k.then_some(r))
        .collect();
    (out, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(rank: u32, ts: u64, bytes: i64) -> MemStat {
        MemStat {
            rank,
            device: 0,
            name: String::new(),
            calls: 0,
            size_increase_bytes: bytes,
            self_size_increase_bytes: 0,
            allocation_count: 0,
            self_allocation_count: 0,
            allocation_size_bytes: 0,
            self_allocation_size_bytes: 0,
            allocated_bytes: bytes,
            reserved_bytes: bytes,
            device_total_bytes: 0,
            step: 0,
            per_step: 0,
            ts_ns: ts,
        }
    }

    #[test]
    fn decimation_keeps_every_spike_the_ends_and_time_order() {
        // A flat series with one-sample spikes up and down.
        let mut v: Vec<MemStat> = (0..10_000).map(|t| point(0, t, 100)).collect();
        v[1_234].allocated_bytes = 9_999;
        v[7_777].allocated_bytes = -5;
        let out = decimate(v, 250);
        assert!(out.len() <= 250, "{}", out.len());
        assert_eq!(out.first().map(|p| p.ts_ns), Some(0));
        assert_eq!(out.last().map(|p| p.ts_ns), Some(9_999));
        assert!(out
            .iter()
            .any(|p| p.ts_ns == 1_234 && p.allocated_bytes == 9_999));
        assert!(out
            .iter()
            .any(|p| p.ts_ns == 7_777 && p.allocated_bytes == -5));
        assert!(out.windows(2).all(|w| w[0].ts_ns < w[1].ts_ns));
        let short: Vec<MemStat> = (0..10).map(|t| point(0, t, 1)).collect();
        assert_eq!(decimate(short, 250).len(), 10, "short series are whole");
    }

    #[test]
    fn a_large_job_curve_keeps_the_largest_peaks_ranks_within_the_bound() {
        // 1,024 ranks x 100 samples; rank r peaks at r bytes, so the 8
        // largest are ranks 1016..=1023.
        let samples: Vec<MemStat> = (0..1_024u32)
            .flat_map(|r| (0..100u64).map(move |t| point(r, t, i64::from(r) * (t as i64 % 7))))
            .collect();
        let (out, cut) = curve(samples);
        assert!(cut);
        assert!(out.len() <= CURVE_POINTS);
        let ranks: std::collections::BTreeSet<u32> = out.iter().map(|p| p.rank).collect();
        assert_eq!(ranks, (1_016..1_024).collect());
        assert_eq!(out.len(), 800, "100-point series fit whole");
        let small: Vec<MemStat> = (0..3u32).map(|r| point(r, 0, 1)).collect();
        assert_eq!(
            curve(small),
            (vec![point(0, 0, 1), point(1, 0, 1), point(2, 0, 1)], false)
        );
    }

    #[test]
    fn a_large_operator_table_keeps_the_largest_increases_in_stored_order() {
        let rows: Vec<MemStat> = (0..5_000u32)
            .map(|i| point(i, 0, i64::from(i % 2_500)))
            .collect();
        let (out, cut) = ops(rows);
        assert!(cut);
        assert_eq!(out.len(), OPS_ROWS);
        assert!(out.iter().all(|r| r.size_increase_bytes >= 1_500));
        assert!(out.windows(2).all(|w| w[0].rank < w[1].rank));
        // The SQL path: the top rows largest first, put back in stored order.
        let mut top = out.clone();
        top.reverse();
        assert_eq!(stored_order(top), out);
    }
}
