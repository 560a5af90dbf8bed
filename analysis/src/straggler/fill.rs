//! Which host operators fill the stretch of a step where an `other`
//! straggler's time sits ([`super::place::longest_gap`]), from a trace of
//! that rank.
//!
//! In: the rank's gap windows `[start_ns, end_ns)` of the steps the trace
//! covers (absolute ns, any order), and the trace's host operators
//! ([`HostOp`]: name, absolute start and end, self time: duration minus the
//! operators nested in it on the same thread, the PyTorch Profiler's "Self
//! CPU"). Out: [`GapFill`]: the steps whose window lies inside the trace
//! (from the first operator's start to the last one's end), and per
//! operator its self time inside those windows per such step, largest
//! first. An operator partly inside a window counts its self time in
//! proportion to the part of its duration inside (exact for operators
//! wholly inside or outside, the usual case: the gap is bounded by
//! instrumented spans, not by operators).
//!
//! Overlapping windows are merged (a step's time counts once), and each
//! operator finds its windows by binary search: O((ops + windows) log
//! windows).
//!
//! Invariants: the result does not depend on the order of the inputs;
//! every operator's figure is at most its self time per step; no steps, no
//! operators. Pure: no I/O.

/// One host operator of a trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostOp {
    pub name: String,
    pub start_ns: u64,
    pub end_ns: u64,
    pub self_ns: u64,
}

/// The operators inside a rank's gap windows.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct GapFill {
    /// Windows inside the trace's time span.
    pub steps: u64,
    /// Mean window length over those steps, ns.
    pub gap_ns_per_step: f64,
    /// (operator, self time inside the windows per step, ns), largest
    /// first (then by name); at most `top`.
    pub ops: Vec<(String, f64)>,
    /// Self time of every operator inside the windows per step, ns.
    pub ops_ns_per_step: f64,
}

/// The operators of `ops` inside `windows` (module doc), the `top` largest.
pub fn gap_fill(windows: &[(u64, u64)], ops: &[HostOp], top: usize) -> GapFill {
    let (Some(first), Some(last)) = (
        ops.iter().map(|o| o.start_ns).min(),
        ops.iter().map(|o| o.end_ns).max(),
    ) else {
        return GapFill::default();
    };
    let mut inside: Vec<(u64, u64)> = windows
        .iter()
        .copied()
        .filter(|&(s, e)| s < e && s >= first && e <= last)
        .collect();
    inside.sort_unstable();
    inside.dedup();
    // Gap windows of different steps do not overlap; should some, they are
    // merged so that ends are sorted too and no time counts twice.
    let mut merged: Vec<(u64, u64)> = Vec::with_capacity(inside.len());
    for (s, e) in inside {
        match merged.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => merged.push((s, e)),
        }
    }
    let inside = merged;
    if inside.is_empty() {
        return GapFill::default();
    }
    let steps = inside.len() as f64;
    let mut per_name: std::collections::BTreeMap<&str, f64> = Default::default();
    for o in ops.iter().filter(|o| o.end_ns > o.start_ns) {
        // The windows meeting [start, end): ending after its start and
        // starting before its end.
        let from = inside.partition_point(|w| w.1 <= o.start_ns);
        let upto = inside.partition_point(|w| w.0 < o.end_ns);
        let overlap: u64 = inside[from..upto.max(from)]
            .iter()
            .map(|&(s, e)| e.min(o.end_ns).saturating_sub(s.max(o.start_ns)))
            .sum();
        if overlap > 0 {
            let share = o.self_ns as f64 * overlap as f64 / (o.end_ns - o.start_ns) as f64;
            *per_name.entry(o.name.as_str()).or_default() += share / steps;
        }
    }
    let ops_ns_per_step = per_name.values().sum();
    let mut ranked: Vec<(String, f64)> = per_name
        .into_iter()
        .filter(|&(_, ns)| ns > 0.0)
        .map(|(n, ns)| (n.to_owned(), ns))
        .collect();
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    ranked.truncate(top);
    GapFill {
        steps: inside.len() as u64,
        gap_ns_per_step: inside.iter().map(|w| (w.1 - w.0) as f64).sum::<f64>() / steps,
        ops: ranked,
        ops_ns_per_step,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_rng::Rng;

    fn op(name: &str, start_ns: u64, end_ns: u64, self_ns: u64) -> HostOp {
        HostOp {
            name: name.into(),
            start_ns,
            end_ns,
            self_ns,
        }
    }

    #[test]
    fn names_the_operators_inside_the_windows_per_step() {
        // Two steps of 100 ns; the gap is [40, 90) in each.
        let ops = [
            op("aten::addmm", 0, 40, 30),     // forward: outside
            op("aten::mm", 50, 60, 10),       // gap of step 0
            op("aten::mm", 150, 170, 20),     // gap of step 1
            op("aten::norm", 60, 62, 2),      // gap of step 0
            op("Optimizer.step", 90, 100, 8), // outside
            op("aten::copy_", 85, 95, 10),    // half inside
            op("aten::zero_", 195, 200, 5),   // the trace's end
        ];
        let f = gap_fill(&[(40, 90), (140, 190), (240, 290)], &ops, 5);
        // Step 2's window is past the trace's last operator: not counted.
        assert_eq!(f.steps, 2);
        assert_eq!(f.gap_ns_per_step, 50.0);
        assert_eq!(
            f.ops,
            vec![
                ("aten::mm".to_owned(), 15.0),
                ("aten::copy_".to_owned(), 2.5),
                ("aten::norm".to_owned(), 1.0)
            ]
        );
        assert_eq!(f.ops_ns_per_step, 18.5);
        assert_eq!(gap_fill(&[(40, 90)], &ops, 1).ops.len(), 1);
        // No operators or no window inside the trace: nothing.
        assert_eq!(gap_fill(&[(40, 90)], &[], 5), GapFill::default());
        assert_eq!(gap_fill(&[(300, 400)], &ops, 5), GapFill::default());
    }

    #[test]
    fn order_does_not_matter_and_no_operator_exceeds_its_self_time() {
        let mut rng = Rng::new(7);
        const NAMES: [&str; 3] = ["a", "b", "c"];
        for _ in 0..300 {
            let mut ops: Vec<HostOp> = (0..rng.below(12))
                .map(|_| {
                    let s = rng.below(1000);
                    let e = s + rng.below(80);
                    op(NAMES[rng.below(3) as usize], s, e, rng.below(e - s + 1))
                })
                .collect();
            let mut windows: Vec<(u64, u64)> = (0..rng.below(6))
                .map(|_| {
                    let s = rng.below(1000);
                    (s, s + rng.below(100))
                })
                .collect();
            let want = gap_fill(&windows, &ops, 3);
            let (ops0, windows0) = (ops.clone(), windows.clone());
            // Against counting time points: an operator's share is its self
            // time times the fraction of its duration inside a window
            // (windows inside the trace's span only).
            if let (Some(first), Some(last)) = (
                ops.iter().map(|o| o.start_ns).min(),
                ops.iter().map(|o| o.end_ns).max(),
            ) {
                let kept: Vec<&(u64, u64)> = windows
                    .iter()
                    .filter(|w| w.0 < w.1 && w.0 >= first && w.1 <= last)
                    .collect();
                let covered = |t: u64| kept.iter().any(|w| w.0 <= t && t < w.1);
                let mut brute: std::collections::BTreeMap<&str, f64> = Default::default();
                for o in ops.iter().filter(|o| o.end_ns > o.start_ns) {
                    let inside = (o.start_ns..o.end_ns).filter(|&t| covered(t)).count();
                    if inside > 0 {
                        *brute.entry(o.name.as_str()).or_default() +=
                            o.self_ns as f64 * inside as f64 / (o.end_ns - o.start_ns) as f64;
                    }
                }
                let all = gap_fill(&windows, &ops, NAMES.len());
                for (name, ns) in &all.ops {
                    let b = brute.get(name.as_str()).copied().unwrap_or(0.0);
                    assert!(
                        (ns * all.steps as f64 - b).abs() < 1e-6,
                        "{name}: {ns} vs {b}"
                    );
                }
                assert_eq!(
                    all.ops.len(),
                    brute.values().filter(|&&v| v > 0.0).count(),
                    "{ops:?} {windows:?}"
                );
            }
            let total: u64 = ops.iter().map(|o| o.self_ns).sum();
            if want.steps > 0 {
                assert!(want.ops_ns_per_step <= total as f64 / want.steps as f64 + 1e-9);
            }
            ops.reverse();
            windows.reverse();
            let got = gap_fill(&windows, &ops, 3);
            assert_eq!(got.steps, want.steps);
            // Equal up to rounding (and the order of near ties).
            let all = |v: &[HostOp], w: &[(u64, u64)]| {
                let mut f = gap_fill(w, v, NAMES.len()).ops;
                f.sort_by(|a, b| a.0.cmp(&b.0));
                f
            };
            let (g, w) = (all(&ops, &windows), all(&ops0, &windows0));
            assert_eq!(got.ops.len(), want.ops.len());
            assert_eq!(g.len(), w.len());
            for (g, w) in g.iter().zip(&w) {
                assert_eq!(g.0, w.0);
                assert!((g.1 - w.1).abs() < 1e-9);
            }
        }
    }
}
