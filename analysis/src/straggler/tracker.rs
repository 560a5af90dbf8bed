//! Persistence over steps: turns per-step [`StepFlag`]s into [`Verdict`]s.
//!
//! In: finalized steps of one job, in increasing step order, via
//! [`StragglerTracker::observe`]. Out: [`VerdictChange`]s per step and the
//! current [`Verdict`]s. Pure and deterministic: no clock, no I/O.
//!
//! Rules (policy `K = min_flagged`, `N = window_steps`):
//! - the window holds the flags of the last N observed steps of the job (a
//!   step a rank did not report counts as not flagged for it);
//! - a rank becomes a straggler (verdict `active`) when it is flagged in at
//!   least K steps of the window; the verdict starts at the earliest flagged
//!   step in the window and counts all flags the window holds for it;
//! - while active, every step that flags it updates the verdict:
//!   `last_step`, `steps_flagged`, `slowdown` = mean over its flagged steps,
//!   `score` = mean modified z-score over its flagged steps (a mean, not a
//!   max, so one extreme step does not dominate), `cause` = the most
//!   frequent cause (ties: compute, then input, then communication, then
//!   other), `excess_ns` = mean own-time excess over the flagged steps;
//! - it clears (`active = false`, kept in the history) once the rank has not
//!   been flagged in any of the last N steps. A later episode is a new verdict.
//!
//! Invariants: memory is O(N x flagged ranks) plus the history, capped at
//! [`MAX_CLEARED_VERDICTS`] cleared verdicts (oldest dropped); steps at or
//! before the last observed one are ignored (counted in
//! [`StragglerTracker::ignored_steps`]); results do not depend on the order
//! of ranks within a step.

use std::collections::{BTreeMap, VecDeque};

use super::{score_step, RankStepStats, StepFlag, StragglerCause, StragglerPolicy};

/// Cleared verdicts kept by a tracker (oldest dropped first).
pub const MAX_CLEARED_VERDICTS: usize = 1024;

/// A straggler verdict for one rank over a run of steps.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// Global rank.
    pub rank: u32,
    /// Node the rank runs on (as last reported in a flagged step).
    pub node: String,
    /// First flagged step of the episode.
    pub first_step: u64,
    /// Last flagged step of the episode.
    pub last_step: u64,
    /// Flagged steps in the episode.
    pub steps_flagged: u64,
    /// Mean slowdown over the flagged steps.
    pub slowdown: f64,
    /// Mean modified z-score over the flagged steps.
    pub score: f64,
    /// Most frequent cause over the flagged steps.
    pub cause: StragglerCause,
    /// Mean over the flagged steps of the rank's own time (step time minus
    /// collective wait) above the step's median, ns: the amount per step
    /// (for cause `other`, the time no phase explains).
    pub excess_ns: u64,
    /// True while the rank is still a straggler.
    pub active: bool,
}

/// What one observed step changed.
#[derive(Debug, Clone, PartialEq)]
pub enum VerdictChange {
    /// A rank became a straggler.
    Activated(Verdict),
    /// An active straggler was flagged again (new numbers).
    Updated(Verdict),
    /// A straggler recovered (`active == false`).
    Cleared(Verdict),
}

impl VerdictChange {
    /// The verdict after the change.
    pub fn verdict(&self) -> &Verdict {
        match self {
            Self::Activated(v) | Self::Updated(v) | Self::Cleared(v) => v,
        }
    }
}

#[derive(Debug, Clone)]
struct Episode {
    node: String,
    first_step: u64,
    last_step: u64,
    steps_flagged: u64,
    sum_slowdown: f64,
    sum_score: f64,
    sum_excess_ns: u128,
    /// Indexed like `CAUSES`.
    cause_counts: [u64; CAUSES.len()],
}

const CAUSES: [StragglerCause; 4] = StragglerCause::ALL;

impl Episode {
    fn new(node: &str, first_step: u64) -> Self {
        Self {
            node: node.to_owned(),
            first_step,
            last_step: first_step,
            steps_flagged: 0,
            sum_slowdown: 0.0,
            sum_score: 0.0,
            sum_excess_ns: 0,
            cause_counts: [0; CAUSES.len()],
        }
    }

    fn add(&mut self, flag: &StepFlag) {
        self.last_step = self.last_step.max(flag.step);
        self.first_step = self.first_step.min(flag.step);
        self.steps_flagged += 1;
        self.sum_slowdown += flag.slowdown;
        self.sum_score += flag.score;
        self.sum_excess_ns += u128::from(flag.excess_ns);
        let idx = CAUSES.iter().position(|c| *c == flag.cause).unwrap_or(0);
        self.cause_counts[idx] += 1;
    }

    fn verdict(&self, rank: u32, active: bool) -> Verdict {
        let n = self.steps_flagged.max(1) as f64;
        // Strictly greater keeps the earlier cause on ties.
        let mut best = 0;
        for i in 1..CAUSES.len() {
            if self.cause_counts[i] > self.cause_counts[best] {
                best = i;
            }
        }
        Verdict {
            rank,
            node: self.node.clone(),
            first_step: self.first_step,
            last_step: self.last_step,
            steps_flagged: self.steps_flagged,
            slowdown: self.sum_slowdown / n,
            score: self.sum_score / n,
            cause: CAUSES[best],
            excess_ns: (self.sum_excess_ns / u128::from(self.steps_flagged.max(1))) as u64,
            active,
        }
    }
}

/// Per-job straggler state (see the module doc).
#[derive(Debug, Clone)]
pub struct StragglerTracker {
    policy: StragglerPolicy,
    /// Flags of the last N observed steps, oldest first.
    window: VecDeque<Vec<StepFlag>>,
    last_step: Option<u64>,
    active: BTreeMap<u32, Episode>,
    cleared: VecDeque<Verdict>,
    ignored_steps: u64,
}

impl StragglerTracker {
    /// An empty tracker.
    pub fn new(policy: StragglerPolicy) -> Self {
        Self {
            policy,
            window: VecDeque::with_capacity(policy.window_steps() as usize + 1),
            last_step: None,
            active: BTreeMap::new(),
            cleared: VecDeque::new(),
            ignored_steps: 0,
        }
    }

    /// The policy in use.
    pub fn policy(&self) -> &StragglerPolicy {
        &self.policy
    }

    /// Steps ignored because they did not come after the last observed step.
    pub fn ignored_steps(&self) -> u64 {
        self.ignored_steps
    }

    /// Last step observed, if any.
    pub fn last_step(&self) -> Option<u64> {
        self.last_step
    }

    /// Consume finalized step `step` (one entry per rank that reported it;
    /// the entries' own `step` field is overridden by `step`). Returns the
    /// changes, sorted by rank.
    pub fn observe(&mut self, step: u64, stats: &[RankStepStats]) -> Vec<VerdictChange> {
        if self.last_step.is_some_and(|last| step <= last) {
            self.ignored_steps += 1;
            return Vec::new();
        }
        self.last_step = Some(step);
        let flags: Vec<StepFlag> = score_step(&self.policy, stats)
            .into_iter()
            .map(|f| StepFlag { step, ..f })
            .collect();
        self.window.push_back(flags);
        while self.window.len() > self.policy.window_steps() as usize {
            self.window.pop_front();
        }

        let mut counts: BTreeMap<u32, u32> = BTreeMap::new();
        for f in self.window.iter().flatten() {
            *counts.entry(f.rank).or_default() += 1;
        }
        let mut changes = Vec::new();
        let current = self.window.back().cloned().unwrap_or_default();
        for flag in &current {
            let node = node_of(stats, flag.rank);
            if let Some(ep) = self.active.get_mut(&flag.rank) {
                ep.node = node.to_owned();
                ep.add(flag);
                changes.push(VerdictChange::Updated(ep.verdict(flag.rank, true)));
            } else if counts.get(&flag.rank).copied().unwrap_or(0) >= self.policy.min_flagged() {
                let mut ep = Episode::new(node, flag.step);
                for f in self.window.iter().flatten().filter(|f| f.rank == flag.rank) {
                    ep.add(f);
                }
                changes.push(VerdictChange::Activated(ep.verdict(flag.rank, true)));
                self.active.insert(flag.rank, ep);
            }
        }
        let recovered: Vec<u32> = self
            .active
            .keys()
            .copied()
            .filter(|r| !counts.contains_key(r))
            .collect();
        for rank in recovered {
            if let Some(ep) = self.active.remove(&rank) {
                let v = ep.verdict(rank, false);
                changes.push(VerdictChange::Cleared(v.clone()));
                self.cleared.push_back(v);
                if self.cleared.len() > MAX_CLEARED_VERDICTS {
                    self.cleared.pop_front();
                }
            }
        }
        changes.sort_by_key(|c| c.verdict().rank);
        changes
    }

    /// Active verdicts and the cleared history, sorted by (rank, first_step).
    pub fn verdicts(&self) -> Vec<Verdict> {
        let mut all: Vec<Verdict> = self.cleared.iter().cloned().collect();
        all.extend(self.active.iter().map(|(rank, ep)| ep.verdict(*rank, true)));
        all.sort_by_key(|v| (v.rank, v.first_step));
        all
    }

    /// Only the active verdicts, sorted by rank.
    pub fn active_verdicts(&self) -> Vec<Verdict> {
        self.active
            .iter()
            .map(|(rank, ep)| ep.verdict(*rank, true))
            .collect()
    }
}

/// The node of `rank` in `stats` (the smallest name if duplicated, so the
/// result does not depend on input order).
fn node_of(stats: &[RankStepStats], rank: u32) -> &str {
    stats
        .iter()
        .filter(|s| s.rank == rank)
        .map(|s| s.node.as_str())
        .min()
        .unwrap_or("")
}

#[cfg(test)]
mod tests;
