//! Where a rank's unexplained time sits in its step: the longest stretch of
//! the step covered by none of its instrumented spans (phases, input,
//! collectives), named by the spans around it.
//!
//! In: the step's `[start_ns, end_ns)` and the rank's labelled spans in it
//! (any order, overlapping or nested). Out: [`Gap`] with the label of the
//! span that ends where the gap begins (`after`, `None` at the step start)
//! and of the span that begins where it ends (`before`, `None` at the step
//! end). Spans are clipped to the step; where two spans end (begin) at the
//! same instant, the later-starting (earlier-ending) one names the edge —
//! the innermost of nested spans — and, on a full tie, the smallest label.
//!
//! Invariants: the result does not depend on the order of the spans; the
//! gap lies inside the step and meets no span; on equal lengths the
//! earliest gap wins. Pure: no I/O.

/// The longest uncovered stretch of a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gap {
    pub start_ns: u64,
    pub len_ns: u64,
    /// The span ending where the gap starts (`None`: the step's start).
    pub after: Option<&'static str>,
    /// The span starting where the gap ends (`None`: the step's end).
    pub before: Option<&'static str>,
}

impl Gap {
    /// e.g. "after backward, before optimizer", "at the step's start,
    /// before forward", "after optimizer, at the step's end".
    pub fn describe(&self) -> String {
        let after = self
            .after
            .map_or("at the step's start".to_owned(), |a| format!("after {a}"));
        let before = self
            .before
            .map_or("at the step's end".to_owned(), |b| format!("before {b}"));
        format!("{after}, {before}")
    }
}

/// The longest part of `[start_ns, end_ns)` no span of `spans` covers, as
/// `(start, end, label)`; `None` when the spans cover the whole step or it
/// is empty.
pub fn longest_gap(start_ns: u64, end_ns: u64, spans: &[(u64, u64, &'static str)]) -> Option<Gap> {
    if end_ns <= start_ns {
        return None;
    }
    let mut v: Vec<(u64, u64, &'static str)> = spans
        .iter()
        .map(|&(s, e, l)| (s.max(start_ns), e.min(end_ns), l))
        .filter(|&(s, e, _)| s < e)
        .collect();
    v.sort_unstable();
    // The union's pieces in order, each with the label that opens and the
    // one that closes it; the gaps lie between them.
    let mut best: Option<Gap> = None;
    let mut consider = |gap: Gap| {
        if gap.len_ns > 0 && best.is_none_or(|b| gap.len_ns > b.len_ns) {
            best = Some(gap);
        }
    };
    let mut cursor = start_ns;
    let mut last_label: Option<&'static str> = None;
    let mut i = 0;
    while i < v.len() {
        let (s, _, _) = v[i];
        // Spans starting at `s`: the innermost (earliest end, then smallest
        // label) names the edge.
        let opener = v[i..]
            .iter()
            .take_while(|x| x.0 == s)
            .min_by_key(|x| (x.1, x.2))
            .map(|x| x.2);
        consider(Gap {
            start_ns: cursor,
            len_ns: s.saturating_sub(cursor),
            after: last_label,
            before: opener,
        });
        // Extend the piece over every span that starts within it; the span
        // ending last (latest start, then smallest label, among equal ends)
        // closes it.
        let from = i;
        let mut end = v[i].1;
        while i < v.len() && v[i].0 <= end {
            end = end.max(v[i].1);
            i += 1;
        }
        let closer = v[from..i]
            .iter()
            .filter(|x| x.1 == end)
            .max_by_key(|x| (x.0, std::cmp::Reverse(x.2)))
            .map(|x| x.2);
        cursor = end;
        last_label = closer;
    }
    consider(Gap {
        start_ns: cursor,
        len_ns: end_ns.saturating_sub(cursor),
        after: last_label,
        before: None,
    });
    best
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_rng::Rng;

    #[test]
    fn names_the_spans_around_the_longest_gap() {
        let spans = [
            (10, 40, "forward"),
            (40, 80, "backward"),
            (45, 50, "all_reduce"),
            (150, 170, "optimizer"),
        ];
        let g = longest_gap(0, 180, &spans).unwrap();
        assert_eq!(
            g,
            Gap {
                start_ns: 80,
                len_ns: 70,
                after: Some("backward"),
                before: Some("optimizer")
            }
        );
        assert_eq!(g.describe(), "after backward, before optimizer");
        // At the step's edges.
        let g = longest_gap(0, 300, &spans).unwrap();
        assert_eq!((g.start_ns, g.len_ns), (170, 130));
        assert_eq!(g.describe(), "after optimizer, at the step's end");
        let g = longest_gap(0, 100, &[(90, 100, "forward")]).unwrap();
        assert_eq!(g.describe(), "at the step's start, before forward");
        // Covered or empty steps have none.
        assert_eq!(longest_gap(0, 10, &[(0, 10, "x")]), None);
        assert_eq!(longest_gap(5, 5, &[]), None);
        let g = longest_gap(0, 10, &[]).unwrap();
        assert_eq!((g.after, g.before, g.len_ns), (None, None, 10));
    }

    #[test]
    fn nested_spans_name_the_innermost_edge() {
        // A module's forward inside the model's: the gap after them is
        // "after forward" either way; the outer span ends last.
        let spans = [
            (0, 50, "forward"),
            (10, 50, "linear"),
            (80, 90, "optimizer"),
        ];
        let g = longest_gap(0, 90, &spans).unwrap();
        assert_eq!(g.describe(), "after linear, before optimizer");
    }

    #[test]
    fn order_does_not_matter_and_the_gap_meets_no_span() {
        let mut rng = Rng::new(11);
        const LABELS: [&str; 4] = ["a", "b", "c", "d"];
        for _ in 0..500 {
            let n = rng.below(6) as usize;
            let mut spans: Vec<(u64, u64, &'static str)> = (0..n)
                .map(|_| {
                    let s = rng.below(100);
                    (s, s + rng.below(30), LABELS[rng.below(4) as usize])
                })
                .collect();
            let want = longest_gap(5, 110, &spans);
            if let Some(g) = want {
                assert!(g.start_ns >= 5 && g.start_ns + g.len_ns <= 110);
                for &(s, e, _) in &spans {
                    assert!(e <= g.start_ns || s >= g.start_ns + g.len_ns || s >= e);
                }
                // Nothing uncovered is longer.
                let covered = |t: u64| spans.iter().any(|&(s, e, _)| s <= t && t < e);
                let mut run = 0u64;
                for t in 5..110 {
                    run = if covered(t) { 0 } else { run + 1 };
                    assert!(run <= g.len_ns, "{spans:?} {g:?}");
                }
            }
            for i in (1..spans.len()).rev() {
                spans.swap(i, rng.below(i as u64 + 1) as usize);
            }
            assert_eq!(longest_gap(5, 110, &spans), want, "{spans:?}");
        }
    }
}
