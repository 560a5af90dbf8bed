//! The per-rank figures of a job's last finalized steps: the what-if gain
//! (`rankscope_analysis::expected_gain_pct_of`, analysis/src/straggler/gain.rs)
//! of a straggler verdict as it is raised, for its alert and for the API,
//! which serves a live verdict's gain from memory instead of reading every
//! rank's breakdown of the verdict's steps back from ClickHouse while it
//! stores them (`live`).
//!
//! In: the rows of each finalized step, in step order ([`RecentSteps::push`]:
//! the assembler finalizes steps in ascending order, all ranks of a step at
//! once). Out: [`RecentSteps::gain`] of a verdict version (rank,
//! first..=last).
//!
//! The gain is 100 x the summed per-step cost of the rank / the summed
//! median step time over the verdict's steps, so a verdict's sums are kept
//! and each version adds only its new steps: a verdict longer than the
//! steps held keeps an exact gain as long as its versions came while their
//! steps were held (a version per finalized step while it is active).
//!
//! Memory: the last `cap` steps (one [`RankStepWait`] per rank and step:
//! 16 steps of 16,384 ranks are 8 MiB) and two sums per open verdict
//! ([`RecentSteps::forget`] when it clears). A step's peers ([`StepPeers`]:
//! median step time, least wait, most work) and its rows sorted by rank are
//! computed once, the first time a verdict needs them.

use std::collections::{BTreeMap, HashMap, VecDeque};

use rankscope_analysis::{RankStepWait, StepPeers, StragglerCause};

/// The last finalized steps of one job.
#[derive(Debug)]
pub struct RecentSteps {
    steps: VecDeque<Step>,
    cap: usize,
    /// (rank, first step) of an open verdict -> its sums so far.
    verdicts: HashMap<(u32, u64), Sums>,
}

/// A verdict's summed cost and median step time (ns) over its steps up to
/// `through`.
#[derive(Debug, Clone, Copy)]
struct Sums {
    gain: u128,
    time: u128,
    through: u64,
    /// No step of the verdict was missed.
    complete: bool,
    /// The cause the sums were computed for (a verdict of cause `other`
    /// takes the wait bound alone, `gain_per_step_for`).
    cause: StragglerCause,
}

impl Sums {
    fn pct(&self) -> Option<f64> {
        rankscope_analysis::gain_pct(self.gain, self.time)
    }
}

#[derive(Debug)]
struct Step {
    step: u64,
    rows: Vec<RankStepWait>,
    /// The step's peers, with `rows` sorted by rank; `None` until a verdict
    /// asks (and again after a row is added).
    peers: Option<StepPeers>,
}

impl Step {
    fn peers(&mut self) -> Option<StepPeers> {
        if self.peers.is_none() {
            // Stable: a rank's first row stays first (the one that counts).
            self.rows.sort_by_key(|r| r.rank);
            self.peers = rankscope_analysis::peers_of_step(self.step, &self.rows);
        }
        self.peers
    }

    /// The first row of `rank` (after [`Step::peers`] sorted the rows).
    fn own(&self, rank: u32) -> Option<&RankStepWait> {
        let at = self.rows.partition_point(|r| r.rank < rank);
        self.rows.get(at).filter(|r| r.rank == rank)
    }
}

/// What memory knows of a verdict's what-if gain.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Gain {
    /// `expected_gain_pct` over the verdict's steps held in memory; `None`
    /// when none of them counts (no peers, or the rank has no row).
    pub pct: Option<f64>,
    /// Whether every step of the verdict is held: then `pct` is the
    /// verdict's gain, as the API computes it from the stored breakdowns.
    pub complete: bool,
}

impl RecentSteps {
    /// Holds the last `cap` (>= 1) steps.
    pub fn new(cap: usize) -> Self {
        Self {
            steps: VecDeque::new(),
            cap: cap.max(1),
            verdicts: HashMap::new(),
        }
    }

    /// Adds a finalized row (rows come step by step, in step order).
    pub fn push(&mut self, row: RankStepWait) {
        match self.steps.back_mut() {
            Some(s) if s.step == row.step => {
                s.rows.push(row);
                s.peers = None;
            }
            _ => {
                self.steps.push_back(Step {
                    step: row.step,
                    rows: vec![row],
                    peers: None,
                });
                if self.steps.len() > self.cap {
                    self.steps.pop_front();
                }
            }
        }
    }

    /// Steps held.
    pub fn steps_held(&self) -> usize {
        self.steps.len()
    }

    /// The latest step held.
    pub fn last_step(&self) -> Option<u64> {
        self.steps.back().map(|s| s.step)
    }

    /// The what-if gain of the verdict version (`rank`, `first..=last`,
    /// `cause`): its sums so far plus the steps after them, which must be
    /// held; a verdict seen for the first time, or whose cause changed,
    /// sums the steps held. Complete when no
    /// step of the verdict was missed: the oldest step held was at or before
    /// each step to add (steps are finalized in order, so every finalized
    /// step since then is held; after a restart the steps before the first
    /// one replayed may have been finalized by the previous process).
    pub fn gain(&mut self, rank: u32, first: u64, last: u64, cause: StragglerCause) -> Gain {
        let sums = match self.verdicts.get(&(rank, first)) {
            Some(s) if s.through <= last && s.cause == cause => *s,
            // New, a version that went back (none does) or a new cause:
            // from scratch.
            _ => Sums {
                gain: 0,
                time: 0,
                through: first.wrapping_sub(1),
                complete: true,
                cause,
            },
        };
        let from = sums.through.wrapping_add(1);
        let mut sums = Sums {
            through: last,
            ..sums
        };
        if from <= last {
            sums.complete &= self.steps.front().is_some_and(|s| s.step <= from);
            let mut peers = BTreeMap::new();
            let mut own = Vec::new();
            for s in self
                .steps
                .iter_mut()
                .filter(|s| (from..=last).contains(&s.step))
            {
                if let Some(p) = s.peers() {
                    peers.insert(s.step, p);
                }
                own.extend(s.own(rank).copied());
            }
            let per_step = rankscope_analysis::gain_per_step_for(&peers, &own, rank, cause);
            for (cost, time) in per_step.values() {
                sums.gain += u128::from(*cost);
                sums.time += u128::from(*time);
            }
        }
        self.verdicts.insert((rank, first), sums);
        Gain {
            pct: sums.pct(),
            complete: sums.complete,
        }
    }

    /// Drops the sums of a verdict that cleared.
    pub fn forget(&mut self, rank: u32, first: u64) {
        self.verdicts.remove(&(rank, first));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(step: u64, rank: u32, wait_ns: u64) -> RankStepWait {
        RankStepWait {
            step,
            rank,
            step_time_ns: 1000,
            work_ns: 800 - wait_ns.min(800),
            wait_ns,
        }
    }

    /// Steps 10..20 of 6 ranks (in any order, one sometimes missing), and
    /// the rows.
    fn steps(mut on_step: impl FnMut(&mut RecentSteps, u64, &[RankStepWait])) {
        let mut x: u64 = 0x853c_49e6_748f_ea9b;
        let mut next = |m: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % m
        };
        let mut recent = RecentSteps::new(4);
        let mut all = Vec::new();
        for step in 10..20u64 {
            let mut ranks: Vec<u32> = (0..6).filter(|_| next(7) != 0).collect();
            for i in (1..ranks.len()).rev() {
                ranks.swap(i, next(i as u64 + 1) as usize);
            }
            for rank in ranks {
                let r = RankStepWait {
                    step,
                    rank,
                    step_time_ns: 1 + next(9),
                    work_ns: next(5),
                    wait_ns: next(5),
                };
                recent.push(r);
                all.push(r);
            }
            assert!(recent.steps_held() <= 4);
            assert_eq!(recent.last_step(), Some(step));
            on_step(&mut recent, step, &all);
        }
    }

    fn defined(
        all: &[RankStepWait],
        rank: u32,
        steps: std::ops::RangeInclusive<u64>,
    ) -> Option<f64> {
        let span: Vec<RankStepWait> = all
            .iter()
            .filter(|r| steps.contains(&r.step))
            .copied()
            .collect();
        rankscope_analysis::expected_gain_pct(&span, rank)
    }

    #[test]
    fn a_verdict_with_a_version_every_step_has_the_definitions_gain_over_all_its_steps() {
        // Verdicts of every rank from every step on, a version per step:
        // exact over their whole span though only 4 steps are held.
        steps(|recent, step, all| {
            for rank in 0..7 {
                for first in 10..=step {
                    let g = recent.gain(rank, first, step, StragglerCause::Compute);
                    assert!(g.complete, "rank {rank} steps {first}..={step}");
                    let want = defined(all, rank, first..=step);
                    match (g.pct, want) {
                        (Some(a), Some(b)) => assert!((a - b).abs() < 1e-9, "{a} vs {b}"),
                        (a, b) => assert_eq!(a, b, "rank {rank} steps {first}..={step}"),
                    }
                }
            }
        });
    }

    #[test]
    fn a_verdict_whose_steps_left_memory_is_summed_over_those_held_and_incomplete() {
        steps(|recent, step, all| {
            let oldest = step.saturating_sub(3).max(10);
            if step == 12 {
                // A version of rank 2's verdict now, the next at step 19.
                assert!(recent.gain(2, 11, 12, StragglerCause::Compute).complete);
            }
            if step == 19 {
                // First seen with steps already gone.
                let g = recent.gain(1, 10, 19, StragglerCause::Compute);
                assert!(!g.complete);
                assert_eq!(g.pct, defined(all, 1, oldest..=19));
                // Steps 13..15 left before its next version.
                assert!(!recent.gain(2, 11, 19, StragglerCause::Compute).complete);
                // Once incomplete, always.
                assert!(!recent.gain(1, 10, 19, StragglerCause::Compute).complete);
                // A cleared verdict starts over.
                recent.forget(1, 10);
                assert!(!recent.gain(1, 10, 19, StragglerCause::Compute).complete);
                recent.forget(1, 16);
                assert!(recent.gain(1, 16, 19, StragglerCause::Compute).complete);
                assert_eq!(
                    recent.gain(1, 16, 19, StragglerCause::Compute).pct,
                    defined(all, 1, 16..=19)
                );
            }
        });
    }

    #[test]
    fn a_row_added_after_the_peers_were_computed_counts() {
        let mut recent = RecentSteps::new(2);
        recent.push(row(0, 0, 300));
        recent.push(row(0, 3, 0));
        // Rank 0 alone waited 300 for rank 3.
        assert_eq!(
            recent.gain(3, 0, 0, StragglerCause::Compute).pct,
            Some(30.0)
        );
        // Rank 1 waited only 100: rank 3 cost the step 100 (for a verdict
        // summed afresh: a step's rows all come before its verdicts).
        recent.push(row(0, 1, 100));
        recent.forget(3, 0);
        assert_eq!(
            recent.gain(3, 0, 0, StragglerCause::Compute).pct,
            Some(10.0)
        );
        assert_eq!(recent.gain(9, 0, 0, StragglerCause::Compute).pct, None);
        assert!(
            !RecentSteps::new(2)
                .gain(3, 0, 0, StragglerCause::Compute)
                .complete
        );
    }

    #[test]
    fn an_other_verdict_takes_the_wait_bound_and_a_new_cause_sums_afresh() {
        let mut recent = RecentSteps::new(4);
        for (rank, work_ns, wait_ns) in [(0, 500, 300), (1, 520, 320), (3, 100, 0)] {
            recent.push(RankStepWait {
                step: 0,
                rank,
                step_time_ns: 1000,
                work_ns,
                wait_ns,
            });
        }
        // Its work is the smallest: no gain by the work bound.
        assert_eq!(recent.gain(3, 0, 0, StragglerCause::Compute).pct, Some(0.0));
        // The same verdict now of cause `other`: 300 of 1000.
        let g = recent.gain(3, 0, 0, StragglerCause::Other);
        assert_eq!((g.pct, g.complete), (Some(30.0), true));
    }
}
