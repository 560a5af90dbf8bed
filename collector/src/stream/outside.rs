//! Evidence for straggler verdicts of cause `other`: how much of the rank's
//! own time no phase explains, where in its step that time sits, and which
//! host operators fill it when a trace of the rank is held.
//!
//! In: the verdict (its `excess_ns`, the mean own-time excess over the
//! median rank), the rank's latest finalized step's longest stretch
//! outside its phase, input and collective spans
//! (`rankscope_analysis::longest_gap`, computed by step assembly) and the
//! [`Fill`] of its trace, if any. Out: an [`EvidenceRow`] keyed like the
//! verdict (the `straggler_evidence` table, without GPU fields), whose text
//! the alert and the stragglers route carry. [`GapWindows`] keeps the gap
//! windows of ranks with an active `other` verdict, since the verdict, at
//! most [`MAX_WINDOWS`] per rank (the newest): what a trace's operators are
//! matched against. Pure: no I/O, no clock.

use std::collections::{HashMap, VecDeque};

use rankscope_analysis::{Gap, StragglerCause, Verdict};

use crate::store::rows::EvidenceRow;
use crate::traces::gap_ops::Fill;

/// Gap windows kept per rank with an active `other` verdict (a trace is
/// imported within this many steps of its capture).
pub const MAX_WINDOWS: usize = 512;

/// The gap windows `[start_ns, end_ns)` of the ranks with an active `other`
/// verdict, since it.
#[derive(Debug, Default)]
pub struct GapWindows {
    ranks: HashMap<u32, VecDeque<(u64, u64)>>,
}

impl GapWindows {
    /// A finalized step's gap of `rank`, kept while its verdict is followed.
    pub fn record(&mut self, rank: u32, gap: &Gap) {
        if let Some(w) = self.ranks.get_mut(&rank) {
            if w.len() == MAX_WINDOWS {
                w.pop_front();
            }
            w.push_back((gap.start_ns, gap.start_ns.saturating_add(gap.len_ns)));
        }
    }

    /// Follows the rank of an active `other` verdict (its windows so far),
    /// forgets it otherwise.
    pub fn follow(&mut self, v: &Verdict) -> Option<Vec<(u64, u64)>> {
        if v.active && v.cause == StragglerCause::Other {
            Some(
                self.ranks
                    .entry(v.rank)
                    .or_default()
                    .iter()
                    .copied()
                    .collect(),
            )
        } else {
            self.ranks.remove(&v.rank);
            None
        }
    }
}

/// e.g. "171.2 ms per step of its own time (step time minus collective
/// wait) above the median rank's, outside forward, backward, optimizer and
/// input; in step 12 the longest stretch outside its spans was 170.9 ms,
/// after backward, before optimizer".
/// With a held trace of the rank, "; in that stretch, kineto trace ..."
/// follows ([`Fill::describe`]).
pub fn outside_text(v: &Verdict, gap: Option<(u64, Gap)>, fill: Option<&Fill>) -> String {
    let mut text = format!(
        "{:.1} ms per step of its own time (step time minus collective wait) above the \
         median rank's, outside forward, backward, optimizer and input",
        v.excess_ns as f64 / 1e6
    );
    if let Some((step, g)) = gap {
        text.push_str(&format!(
            "; in step {step} the longest stretch outside its spans was {:.1} ms, {}",
            g.len_ns as f64 / 1e6,
            g.describe()
        ));
    }
    if let Some(f) = fill {
        text.push_str(&format!("; in that stretch, {}", f.describe()));
    }
    text
}

/// The evidence row of an active `other` verdict `v` of `job`; `gap`: the
/// rank's latest step and its longest uncovered stretch, if known.
pub fn outside_evidence(
    job: &str,
    v: &Verdict,
    gap: Option<(u64, Gap)>,
    fill: Option<&Fill>,
    first_seen_ns: u64,
    now_ns: u64,
) -> Option<EvidenceRow> {
    if !v.active || v.cause != StragglerCause::Other {
        return None;
    }
    Some(EvidenceRow {
        job_id: job.to_owned(),
        rank: v.rank,
        first_step: v.first_step,
        node: v.node.clone(),
        evidence: outside_text(v, gap, fill),
        gpu_indexes: Vec::new(),
        gpu_uuids: Vec::new(),
        sm_clock_mhz: None,
        peer_sm_clock_mhz: None,
        throttle_reasons: Vec::new(),
        temp_c: None,
        peer_temp_c: None,
        power_w: None,
        peer_power_w: None,
        samples: 0,
        peer_gpus: 0,
        first_seen_ns,
        updated_ns: now_ns,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verdict(cause: StragglerCause, active: bool) -> Verdict {
        Verdict {
            rank: 2,
            node: "n1".into(),
            first_step: 3,
            last_step: 9,
            steps_flagged: 7,
            slowdown: 5.8,
            score: 40.0,
            cause,
            excess_ns: 171_230_000,
            active,
        }
    }

    #[test]
    fn other_verdicts_say_how_much_and_where() {
        let gap = Gap {
            start_ns: 0,
            len_ns: 170_900_000,
            after: Some("backward"),
            before: Some("optimizer"),
        };
        let row = outside_evidence(
            "j",
            &verdict(StragglerCause::Other, true),
            Some((12, gap)),
            None,
            5,
            6,
        )
        .expect("row");
        assert_eq!(
            row.evidence,
            "171.2 ms per step of its own time (step time minus collective wait) above the \
             median rank's, outside forward, backward, optimizer and input; in step 12 the \
             longest stretch outside its spans was 170.9 ms, after backward, before optimizer"
        );
        assert_eq!(
            (row.rank, row.first_step, row.first_seen_ns, row.updated_ns),
            (2, 3, 5, 6)
        );
        assert!(row.gpu_indexes.is_empty() && row.sm_clock_mhz.is_none());
        // Without a gap: the amount alone.
        let row =
            outside_evidence("j", &verdict(StragglerCause::Other, true), None, None, 5, 6).unwrap();
        assert!(
            row.evidence.ends_with("optimizer and input"),
            "{}",
            row.evidence
        );
        // Other causes and cleared verdicts have none.
        assert!(outside_evidence(
            "j",
            &verdict(StragglerCause::Compute, true),
            None,
            None,
            5,
            6
        )
        .is_none());
        assert!(outside_evidence(
            "j",
            &verdict(StragglerCause::Other, false),
            None,
            None,
            5,
            6
        )
        .is_none());
    }

    #[test]
    fn the_operators_of_a_held_trace_follow_and_windows_are_kept_per_verdict() {
        let fill = Fill {
            trace_id: "t-1".into(),
            first_step: 3,
            steps: 4,
            gap_ms_per_step: 170.9,
            ops_ms_per_step: 2.5,
            operators: vec![crate::traces::gap_ops::GapOperator {
                name: "aten::mm".into(),
                ms_per_step: 2.0,
            }],
        };
        let text = outside_text(&verdict(StragglerCause::Other, true), None, Some(&fill));
        assert!(
            text.ends_with(
                "optimizer and input; in that stretch, kineto trace t-1 (4 steps): host operators \
                 take 2.5 of its 170.9 ms per step, aten::mm 2.0 ms"
            ),
            "{text}"
        );
        // Windows are kept from the verdict on, for its rank only, until it
        // clears or changes cause.
        let gap = |start_ns| Gap {
            start_ns,
            len_ns: 10,
            after: None,
            before: None,
        };
        let mut w = GapWindows::default();
        w.record(2, &gap(0));
        let other = verdict(StragglerCause::Other, true);
        assert_eq!(w.follow(&other), Some(vec![]));
        w.record(2, &gap(100));
        w.record(1, &gap(100));
        assert_eq!(w.follow(&other), Some(vec![(100, 110)]));
        assert_eq!(w.follow(&verdict(StragglerCause::Other, false)), None);
        w.record(2, &gap(200));
        assert!(w.ranks.is_empty());
        w.follow(&other);
        for k in 0..=MAX_WINDOWS as u64 {
            w.record(2, &gap(k));
        }
        let kept = w.follow(&other).unwrap();
        assert_eq!((kept.len(), kept[0]), (MAX_WINDOWS, (1, 11)));
    }
}
