//! What-if gain of a straggler: how much faster the job's steps would be if
//! that rank ran like the others.
//!
//! In: per (step, rank) the step time, the rank's work (compute + input
//! time, what the straggler detector scores) and its collective wait (the
//! PyTorch Profiler's "synchronizing" time: a collective's duration minus
//! its shortest duration on any rank, summed over the step's collectives).
//! Out: `expected_gain_pct`.
//!
//! In a synchronous job every rank's step ends together, gated by the last
//! rank to reach each collective. Let the straggler S run like its peers and
//! the step is gated by the next-slowest rank instead. Two bounds on what S
//! cost the step, and the estimate is the smaller:
//! - the wait it causes: the peer that waited the *least* for S is the
//!   next-slowest, and its wait minus S's own is the time S kept it idle:
//!   `min_{r != S} wait_{r,s} - wait_{S,s}`. Exact when collectives do not
//!   overlap compute (e.g. gloo on CPU); with overlapped collectives waits
//!   are partly hidden behind compute and this over-counts;
//! - S's excess work over the next-slowest rank: `work_{S,s} - max_{r != S}
//!   work_{r,s}` (what shrinks from the critical path).
//!
//! `gain_s = max(0, min(both))`, capped at the step time; over the verdict's
//! steps `expected_gain_pct = 100 * sum(gain_s) / sum(step_time_s)`, where
//! `step_time_s` is the median step time of the step's ranks.

use std::collections::BTreeMap;

/// One rank's figures in one step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RankStepWait {
    pub step: u64,
    pub rank: u32,
    pub step_time_ns: u64,
    /// Compute + input time (the straggler detector's work).
    pub work_ns: u64,
    pub wait_ns: u64,
}

/// The job's expected step-time reduction in percent without the straggler
/// `rank`'s slowness, over the steps in `rows` holding it and at least one
/// other rank; `None` when there is no such step.
pub fn expected_gain_pct(rows: &[RankStepWait], rank: u32) -> Option<f64> {
    let own = rows.iter().filter(|r| r.rank == rank);
    expected_gain_pct_of(&step_peers(rows), own, rank)
}

/// Per step holding `rank` and another rank: (what `rank` cost the step,
/// the step's median step time), ns.
pub fn gain_per_step(rows: &[RankStepWait], rank: u32) -> BTreeMap<u64, (u64, u64)> {
    let peers = step_peers(rows);
    let own = rows.iter().filter(|r| r.rank == rank);
    gain_per_step_of(&peers, own, rank)
}

/// What the gain needs of every rank of one step: the median step time and
/// the two ranks that waited least and worked most. A verdict's gain then
/// reads its own rows and these, not every rank's rows again (a 16,384-rank
/// job has hundreds of verdicts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepPeers {
    pub step: u64,
    /// Ranks with a row in the step.
    pub ranks: u64,
    /// `step_time_ns` of the `ranks / 2`-th rank in ascending order (0-based).
    pub median_step_ns: u64,
    /// Least and second-least wait, of two different ranks (the second is
    /// meaningful only when `ranks >= 2`).
    pub min_wait: (u32, u64),
    pub second_min_wait_ns: u64,
    /// Most and second-most work, of two different ranks.
    pub max_work: (u32, u64),
    pub second_max_work_ns: u64,
}

impl StepPeers {
    /// Least wait of a rank other than `rank`.
    fn next_wait(&self, rank: u32) -> u64 {
        if self.min_wait.0 == rank {
            self.second_min_wait_ns
        } else {
            self.min_wait.1
        }
    }

    /// Most work of a rank other than `rank`.
    fn next_work(&self, rank: u32) -> u64 {
        if self.max_work.0 == rank {
            self.second_max_work_ns
        } else {
            self.max_work.1
        }
    }
}

/// [`StepPeers`] of every step in `rows` (one row per (step, rank)).
pub fn step_peers(rows: &[RankStepWait]) -> BTreeMap<u64, StepPeers> {
    let mut steps: BTreeMap<u64, Vec<RankStepWait>> = BTreeMap::new();
    for r in rows {
        steps.entry(r.step).or_default().push(*r);
    }
    steps
        .into_iter()
        .filter_map(|(step, ranks)| Some((step, peers_of_step(step, &ranks)?)))
        .collect()
}

/// [`StepPeers`] of one step from its rows (one per rank; their own `step`
/// is not looked at); `None` without rows. Linear: a selection for the
/// median, one pass for the extremes (ties: the least wait goes to the
/// lowest rank, the most work to the highest, as sorting (value, rank)
/// would give).
pub fn peers_of_step(step: u64, rows: &[RankStepWait]) -> Option<StepPeers> {
    let first = rows.first()?;
    let mut times: Vec<u64> = rows.iter().map(|r| r.step_time_ns).collect();
    let mid = times.len() / 2;
    let (_, &mut median_step_ns, _) = times.select_nth_unstable(mid);
    // The least and second-least (wait, rank), the greatest and
    // second-greatest (work, rank).
    let mut low = ((first.wait_ns, first.rank), None);
    let mut high = ((first.work_ns, first.rank), None);
    for r in &rows[1..] {
        let w = (r.wait_ns, r.rank);
        if w < low.0 {
            low = (w, Some(low.0));
        } else if low.1.is_none_or(|second| w < second) {
            low.1 = Some(w);
        }
        let k = (r.work_ns, r.rank);
        if k > high.0 {
            high = (k, Some(high.0));
        } else if high.1.is_none_or(|second| k > second) {
            high.1 = Some(k);
        }
    }
    Some(StepPeers {
        step,
        ranks: rows.len() as u64,
        median_step_ns,
        min_wait: (low.0 .1, low.0 .0),
        second_min_wait_ns: low.1.map_or(0, |w| w.0),
        max_work: (high.0 .1, high.0 .0),
        second_max_work_ns: high.1.map_or(0, |w| w.0),
    })
}

/// Per step of `own` (the rows of `rank`) whose peers are known and hold
/// another rank: (what `rank` cost the step, the step's median step time).
pub fn gain_per_step_of<'a>(
    peers: &BTreeMap<u64, StepPeers>,
    own: impl IntoIterator<Item = &'a RankStepWait>,
    rank: u32,
) -> BTreeMap<u64, (u64, u64)> {
    let mut out = BTreeMap::new();
    for s in own {
        let Some(p) = peers.get(&s.step).filter(|p| p.ranks >= 2) else {
            continue;
        };
        if out.contains_key(&s.step) {
            continue; // the first row of the rank counts
        }
        let by_wait = p.next_wait(rank).saturating_sub(s.wait_ns);
        let by_work = s.work_ns.saturating_sub(p.next_work(rank));
        let step_time = p.median_step_ns;
        out.insert(s.step, (by_wait.min(by_work).min(step_time), step_time));
    }
    out
}

/// `expected_gain_pct` from [`gain_per_step_of`]: 100 x summed gain /
/// summed median step time; `None` when no step counts.
pub fn expected_gain_pct_of<'a>(
    peers: &BTreeMap<u64, StepPeers>,
    own: impl IntoIterator<Item = &'a RankStepWait>,
    rank: u32,
) -> Option<f64> {
    let per_step = gain_per_step_of(peers, own, rank);
    let gain: u128 = per_step.values().map(|g| u128::from(g.0)).sum();
    let time: u128 = per_step.values().map(|g| u128::from(g.1)).sum();
    gain_pct(gain, time)
}

/// `expected_gain_pct` from the per-step costs and median step times summed
/// over a verdict's steps (ns); `None` when no step counts (`time` 0).
pub fn gain_pct(gain: u128, time: u128) -> Option<f64> {
    (time > 0).then(|| 100.0 * gain as f64 / time as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(step: u64, rank: u32, wait_ns: u64) -> RankStepWait {
        RankStepWait {
            step,
            rank,
            step_time_ns: 1000,
            // Work mirrors the wait: whoever waits less worked more.
            work_ns: 800 - wait_ns.min(800),
            wait_ns,
        }
    }

    #[test]
    fn the_gain_is_what_the_next_slowest_rank_waited_for_the_straggler() {
        // Rank 3 arrives 200 ns after the next-slowest (rank 1, wait 200).
        let rows = [row(0, 0, 250), row(0, 1, 200), row(0, 2, 260), row(0, 3, 0)];
        assert_eq!(expected_gain_pct(&rows, 3), Some(20.0));
        // A healthy rank "costs" nothing: others waited less than it.
        assert_eq!(expected_gain_pct(&rows, 1), Some(0.0));
        // Steps without the rank or without peers do not count.
        assert_eq!(expected_gain_pct(&[row(0, 3, 0)], 3), None);
        assert_eq!(expected_gain_pct(&rows, 9), None);
    }

    #[test]
    fn hidden_waits_do_not_count_beyond_the_excess_work() {
        // Overlapped collectives: peers "wait" 500 ns but S worked only
        // 100 ns more than the next-slowest.
        let r = |rank, work_ns, wait_ns| RankStepWait {
            step: 0,
            rank,
            step_time_ns: 1000,
            work_ns,
            wait_ns,
        };
        let rows = [r(0, 700, 500), r(1, 690, 520), r(2, 800, 0)];
        assert_eq!(expected_gain_pct(&rows, 2), Some(10.0));
    }

    #[test]
    fn steps_are_weighted_by_their_time_and_the_gain_is_capped() {
        let mut rows = vec![row(0, 0, 100), row(0, 1, 0)];
        rows.push(RankStepWait {
            step: 1,
            rank: 0,
            step_time_ns: 3000,
            work_ns: 0,
            wait_ns: 9000,
        });
        rows.push(RankStepWait {
            step: 1,
            rank: 1,
            step_time_ns: 3000,
            work_ns: 9000,
            wait_ns: 0,
        });
        // (100 + min(9000, 3000)) / (1000 + 3000)
        let g = expected_gain_pct(&rows, 1).unwrap();
        assert!((g - 77.5).abs() < 1e-9, "{g}");
    }

    /// The definition, rank by rank (what `gain_per_step` computed before
    /// the per-step peers were factored out).
    fn reference(rows: &[RankStepWait], rank: u32) -> BTreeMap<u64, (u64, u64)> {
        let mut out = BTreeMap::new();
        let steps: std::collections::BTreeSet<u64> = rows.iter().map(|r| r.step).collect();
        for step in steps {
            let ranks: Vec<&RankStepWait> = rows.iter().filter(|r| r.step == step).collect();
            let Some(s) = ranks.iter().find(|r| r.rank == rank) else {
                continue;
            };
            let others = ranks.iter().filter(|r| r.rank != rank);
            let Some(next_wait) = others.clone().map(|r| r.wait_ns).min() else {
                continue;
            };
            let next_work = others.map(|r| r.work_ns).max().unwrap_or(0);
            let mut times: Vec<u64> = ranks.iter().map(|r| r.step_time_ns).collect();
            times.sort_unstable();
            let t = times[times.len() / 2];
            let g = next_wait
                .saturating_sub(s.wait_ns)
                .min(s.work_ns.saturating_sub(next_work));
            out.insert(step, (g.min(t), t));
        }
        out
    }

    #[test]
    fn per_step_peers_give_the_definitions_gain_for_every_rank() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = |m: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % m
        };
        for case in 0..300 {
            let ranks = 1 + next(6) as u32;
            let mut rows = Vec::new();
            for step in 0..1 + next(4) {
                for rank in 0..ranks {
                    if next(5) == 0 {
                        continue; // a rank missing from a step
                    }
                    // Small ranges: ties are common.
                    rows.push(RankStepWait {
                        step,
                        rank,
                        step_time_ns: 1 + next(8),
                        work_ns: next(6),
                        wait_ns: next(6),
                    });
                }
            }
            for rank in 0..ranks + 1 {
                assert_eq!(
                    gain_per_step(&rows, rank),
                    reference(&rows, rank),
                    "case {case}, rank {rank}: {rows:?}"
                );
            }
        }
    }

    /// The sorting definition of [`StepPeers`] (what `step_peers` computed
    /// before the linear pass).
    fn sorted_peers(step: u64, rows: &[RankStepWait]) -> StepPeers {
        let mut times: Vec<u64> = rows.iter().map(|r| r.step_time_ns).collect();
        times.sort_unstable();
        let mut by_wait: Vec<(u64, u32)> = rows.iter().map(|r| (r.wait_ns, r.rank)).collect();
        by_wait.sort_unstable();
        let mut by_work: Vec<(u64, u32)> = rows.iter().map(|r| (r.work_ns, r.rank)).collect();
        by_work.sort_unstable_by(|a, b| b.cmp(a));
        StepPeers {
            step,
            ranks: rows.len() as u64,
            median_step_ns: times[times.len() / 2],
            min_wait: (by_wait[0].1, by_wait[0].0),
            second_min_wait_ns: by_wait.get(1).map_or(0, |w| w.0),
            max_work: (by_work[0].1, by_work[0].0),
            second_max_work_ns: by_work.get(1).map_or(0, |w| w.0),
        }
    }

    #[test]
    fn one_pass_peers_equal_the_sorted_ones_in_any_row_order() {
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = |m: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % m
        };
        assert_eq!(peers_of_step(0, &[]), None);
        for case in 0..2000 {
            let n = 1 + next(9) as usize;
            let mut rows: Vec<RankStepWait> = (0..n as u32)
                .map(|rank| RankStepWait {
                    step: 7,
                    rank,
                    step_time_ns: next(5),
                    work_ns: next(4),
                    wait_ns: next(4),
                })
                .collect();
            // Any order: shuffled.
            for i in (1..rows.len()).rev() {
                rows.swap(i, next(i as u64 + 1) as usize);
            }
            assert_eq!(
                peers_of_step(7, &rows),
                Some(sorted_peers(7, &rows)),
                "case {case}: {rows:?}"
            );
        }
    }
}
