//! Evidence for straggler verdicts of cause `other`: how much of the rank's
//! own time no phase explains, and where in its step that time sits.
//!
//! In: the verdict (its `excess_ns`, the mean own-time excess over the
//! median rank) and the rank's latest finalized step's longest stretch
//! outside its phase, input and collective spans
//! (`rankscope_analysis::longest_gap`, computed by step assembly). Out: an
//! [`EvidenceRow`] keyed like the verdict (the `straggler_evidence` table,
//! without GPU fields), whose text the alert and the stragglers route carry.
//! Pure: no I/O, no clock.

use rankscope_analysis::{Gap, StragglerCause, Verdict};

use crate::store::rows::EvidenceRow;

/// e.g. "171.2 ms per step of its own time (step time minus collective
/// wait) above the median rank's, outside forward, backward, optimizer and
/// input; in step 12 the longest stretch outside its spans was 170.9 ms,
/// after backward, before optimizer".
pub fn outside_text(v: &Verdict, gap: Option<(u64, Gap)>) -> String {
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
    text
}

/// The evidence row of an active `other` verdict `v` of `job`; `gap`: the
/// rank's latest step and its longest uncovered stretch, if known.
pub fn outside_evidence(
    job: &str,
    v: &Verdict,
    gap: Option<(u64, Gap)>,
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
        evidence: outside_text(v, gap),
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
        let row = outside_evidence("j", &verdict(StragglerCause::Other, true), None, 5, 6).unwrap();
        assert!(
            row.evidence.ends_with("optimizer and input"),
            "{}",
            row.evidence
        );
        // Other causes and cleared verdicts have none.
        assert!(
            outside_evidence("j", &verdict(StragglerCause::Compute, true), None, 5, 6).is_none()
        );
        assert!(
            outside_evidence("j", &verdict(StragglerCause::Other, false), None, 5, 6).is_none()
        );
    }
}
