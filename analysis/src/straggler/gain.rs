//! What-if gain of a straggler: how much faster the job's steps would be if
//! that rank ran like the others.
//!
//! In: per (step, rank) the step time, the rank's work (compute + input
//! time, what the straggler detector scores) and its collective wait (the
//! PyTorch Profiler's "synchronizing" time: a collective's duration minus
//! its shortest duration on any rank, summed over the step's collectives),
//! which callers cap at the rank's time in collectives
//! ([`super::wait_wall_ns`]: waits of collectives in flight together, e.g.
//! DDP's gradient buckets, would count the same wall time once each).
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
//!
//! A verdict of cause `other` (its excess is outside the phases, so its
//! work does not show it) takes its own time `step_time - wait` in place of
//! its work: S's own-time excess over the next-slowest rank. With every
//! rank's step equally long (synchronous training) that equals the wait
//! bound, `(T - wait_S) - (T - min_{r != S} wait_r)`, so its gain is the
//! wait bound alone (`*_for` with [`StragglerCause::Other`]); like that
//! bound it over-counts where collectives overlap compute.

use std::collections::BTreeMap;

use super::StragglerCause;

/// One rank's figures in one step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RankStepWait {
    pub step: u64,
    pub rank: u32,
    pub step_time_ns: u64,
    /// Compute + input time (the straggler detector's work).
    pub work_ns: u64,
    /// Collective wait, at most the time in collectives (ns).
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
/// another rank: (what `rank` cost the step, the step's median step time),
/// for a verdict whose cause is not `other`.
pub fn gain_per_step_of<'a>(
    peers: &BTreeMap<u64, StepPeers>,
    own: impl IntoIterator<Item = &'a RankStepWait>,
    rank: u32,
) -> BTreeMap<u64, (u64, u64)> {
    gain_per_step_for(peers, own, rank, StragglerCause::Compute)
}

/// [`gain_per_step_of`] for a verdict of `cause` (`other`: the wait bound
/// alone, see the module doc).
pub fn gain_per_step_for<'a>(
    peers: &BTreeMap<u64, StepPeers>,
    own: impl IntoIterator<Item = &'a RankStepWait>,
    rank: u32,
    cause: StragglerCause,
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
        let by_work = match cause {
            StragglerCause::Other => by_wait,
            _ => s.work_ns.saturating_sub(p.next_work(rank)),
        };
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
    expected_gain_pct_for(peers, own, rank, StragglerCause::Compute)
}

/// [`expected_gain_pct_of`] for a verdict of `cause`.
pub fn expected_gain_pct_for<'a>(
    peers: &BTreeMap<u64, StepPeers>,
    own: impl IntoIterator<Item = &'a RankStepWait>,
    rank: u32,
    cause: StragglerCause,
) -> Option<f64> {
    let per_step = gain_per_step_for(peers, own, rank, cause);
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
mod tests;
