//! Straggler detection: which rank do the others wait for, and why.
//!
//! In: per finalized step, one [`RankStepStats`] per rank (durations only,
//! never cross-node timestamps). Out: per step, [`StepFlag`]s from
//! [`score_step`]; over time, [`Verdict`]s from the [`StragglerTracker`]
//! (persistence: K flagged steps out of the last N).
//!
//! Per step, across the ranks that reported it (robust statistics,
//! Iglewicz & Hoaglin's modified z-score, see [`crate::stats`]):
//! - work `w` = `compute_ns + dataloader_ns` (GPU compute plus input time);
//!   `slowdown = w / median(w)` (= rank compute / median compute when there
//!   is no dataloader time); `z = 0.6745 (w - median(w)) / MAD'`, where
//!   `MAD' = max(MAD(w), mad_floor_frac * median(w))`, so a perfectly
//!   balanced job with one slightly slower rank (MAD = 0) is not flagged;
//! - a rank is flagged when `slowdown >= min_slowdown` **and**
//!   `z >= z_threshold` **and** its collective wait is at most the median
//!   wait (it is the one the others wait for). The cause is `input` when its
//!   dataloader excess over the median exceeds its compute excess over the
//!   median, `compute` otherwise;
//! - otherwise, with normal work, a rank is flagged with cause
//!   `communication` when its own transfer time `comm_ns - comm_wait_ns`
//!   (collective time not spent waiting for other ranks) has slowdown
//!   `>= min_slowdown` and z-score `>= z_threshold` against the same
//!   statistics of the transfer times;
//! - otherwise, a rank is flagged by its **own time** `o = step_time_ns -
//!   min(comm_wait_ns, comm_ns)` (everything in the step not spent waiting
//!   for other ranks; the wait is summed per collective, so it is capped at
//!   the time in collectives, [`wait_wall_ns`]; in synchronous training
//!   every rank's step is equally long, so the rank that waits least has
//!   the most own time) when `o` has slowdown
//!   `>= min_slowdown` and z-score `>= z_threshold` against the step's own
//!   times, **and** its wait is the step's least (the others wait for it),
//!   **and** it cost the step at least `min_gain_pct` of the median step
//!   time: the least wait of the other ranks minus its own, the wait bound
//!   of the what-if gain ([`gain`]). Cause: `compute` / `input` (as above)
//!   when the rank's compute and input excess over the medians make up at
//!   least half of its own-time excess, `other` otherwise: host or device
//!   time outside forward / backward / optimizer / input, e.g. work between
//!   `backward()` and `optimizer.step()` that the phases do not see. The
//!   flag carries the own-time excess over the median (`excess_ns`), and
//!   [`place::longest_gap`] says where in the step such time sits.
//!
//! A balanced job where some rank is last by a hair in every step gives no
//! flag: its own time is within `min_slowdown` of the median and its cost is
//! under `min_gain_pct`.
//!
//! Invariants: no flags for steps with fewer than `min_ranks` ranks or a
//! zero median; results do not depend on the order of the input ranks
//! (one entry per rank; duplicates keep a deterministic one); scores are
//! finite. Limitation: robust statistics need a majority of healthy ranks;
//! if half the job slows down together, no rank stands out.

pub mod fill;
pub mod gain;
pub mod place;
pub mod policy;
pub mod tracker;

pub use fill::{gap_fill, GapFill, HostOp};
pub use gain::{
    expected_gain_pct, expected_gain_pct_for, expected_gain_pct_of, gain_pct, gain_per_step,
    gain_per_step_for, gain_per_step_of, peers_of_step, step_peers, RankStepWait, StepPeers,
};
pub use place::{longest_gap, Gap};
pub use policy::{PolicyError, StragglerPolicy, DEFAULT_MIN_GAIN_PCT, MAX_WINDOW_STEPS};
pub use tracker::{StragglerTracker, Verdict, VerdictChange};

use std::fmt;

use crate::stats::RobustStats;

/// One rank's durations in one step.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RankStepStats {
    /// Global rank.
    pub rank: u32,
    /// Node (host) the rank runs on.
    pub node: String,
    /// Step number.
    pub step: u64,
    /// GPU compute time in the step (union of COMPUTATION kernels), ns.
    pub compute_ns: u64,
    /// Dataloader / input time in the step, ns.
    pub dataloader_ns: u64,
    /// Step duration from the rank's step markers, ns (context only: in
    /// synchronous training every rank's step takes about as long).
    pub step_time_ns: u64,
    /// Time spent in collectives waiting for other ranks, ns.
    pub comm_wait_ns: u64,
    /// Total time in collectives (wait + transfer), ns.
    pub comm_ns: u64,
}

/// Why a rank is slow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum StragglerCause {
    /// Its GPU compute takes longer.
    Compute,
    /// Its dataloader / CPU input time takes longer.
    Input,
    /// Its own collective transfers take longer while its compute is normal.
    Communication,
    /// Its own time (step time minus collective wait) is longer while its
    /// compute and input do not explain it: host or device time outside
    /// forward / backward / optimizer / input (e.g. work between
    /// `backward()` and `optimizer.step()`).
    Other,
}

impl StragglerCause {
    /// Every cause, in the tracker's tie order.
    pub const ALL: [Self; 4] = [Self::Compute, Self::Input, Self::Communication, Self::Other];

    /// `compute`, `input`, `communication` or `other`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Compute => "compute",
            Self::Input => "input",
            Self::Communication => "communication",
            Self::Other => "other",
        }
    }

    /// The cause named `s` (as [`StragglerCause::as_str`] writes it).
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.as_str() == s)
    }
}

impl fmt::Display for StragglerCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A rank that stood out in one step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepFlag {
    /// Global rank.
    pub rank: u32,
    /// Step number (from the input).
    pub step: u64,
    /// Rank's value / median value of the metric that flagged it.
    pub slowdown: f64,
    /// Modified z-score of that metric.
    pub score: f64,
    /// Cause.
    pub cause: StragglerCause,
    /// The rank's own time (step time minus collective wait) over the
    /// step's median own time, ns (0 when not above it).
    pub excess_ns: u64,
}

/// Flag the ranks of one step (rules in the module doc), sorted by rank.
pub fn score_step(policy: &StragglerPolicy, stats: &[RankStepStats]) -> Vec<StepFlag> {
    let ranks = canonical_ranks(stats);
    if ranks.len() < policy.min_ranks() as usize {
        return Vec::new();
    }
    let col =
        |f: fn(&RankStepStats) -> u64| ranks.iter().map(|r| f(r) as f64).collect::<Vec<f64>>();
    let work = col(|r| r.compute_ns.saturating_add(r.dataloader_ns));
    let transfer = col(|r| r.comm_ns.saturating_sub(r.comm_wait_ns));
    let own = col(own_ns);
    let (Some(w), Some(t), Some(o), Some(wait), Some(c), Some(d), Some(step)) = (
        RobustStats::of(&work),
        RobustStats::of(&transfer),
        RobustStats::of(&own),
        RobustStats::of(&col(|r| r.comm_wait_ns)),
        RobustStats::of(&col(|r| r.compute_ns)),
        RobustStats::of(&col(|r| r.dataloader_ns)),
        RobustStats::of(&col(|r| r.step_time_ns)),
    ) else {
        return Vec::new();
    };
    let outlier = |s: &RobustStats, x: f64| -> Option<(f64, f64)> {
        if s.median <= 0.0 {
            return None;
        }
        let slowdown = x / s.median;
        let z = s.z(x, policy.mad_floor_frac() * s.median);
        (slowdown >= policy.min_slowdown() && z >= policy.z_threshold()).then_some((slowdown, z))
    };
    // The least and second-least wait (of two different ranks): the rank
    // the others wait for, and what its next peer waited for it.
    let mut waits: Vec<u64> = ranks.iter().map(|r| wait_wall_ns(r)).collect();
    waits.sort_unstable();
    let (least_wait, next_wait) = (waits[0], waits[1]);
    let mut flags = Vec::new();
    for (i, r) in ranks.iter().enumerate() {
        let excess_ns = (own[i] - o.median).max(0.0) as u64;
        let base = |(slowdown, score), cause| StepFlag {
            rank: r.rank,
            step: r.step,
            slowdown,
            score,
            cause,
            excess_ns,
        };
        let excess_compute = r.compute_ns as f64 - c.median;
        let excess_input = r.dataloader_ns as f64 - d.median;
        let phase_cause = if excess_input > excess_compute {
            StragglerCause::Input
        } else {
            StragglerCause::Compute
        };
        if let Some(hit) = outlier(&w, work[i]) {
            if r.comm_wait_ns as f64 <= wait.median {
                flags.push(base(hit, phase_cause));
            }
        } else if let Some(hit) = outlier(&t, transfer[i]) {
            flags.push(base(hit, StragglerCause::Communication));
        } else if let Some(hit) = outlier(&o, own[i]) {
            // Its own time stands out: flagged when the others wait for it
            // (least wait) and it cost the step `min_gain_pct` of its time
            // (the wait bound of the what-if gain, `gain::gain_per_step`).
            let cost = next_wait.saturating_sub(wait_wall_ns(r)) as f64;
            if wait_wall_ns(r) == least_wait && cost * 100.0 >= policy.min_gain_pct() * step.median
            {
                let explained = excess_compute.max(0.0) + excess_input.max(0.0);
                let cause = if 2.0 * explained >= excess_ns as f64 {
                    phase_cause
                } else {
                    StragglerCause::Other
                };
                flags.push(base(hit, cause));
            }
        }
    }
    flags
}

/// A rank's own time in a step: everything not spent waiting for other
/// ranks (`step_time_ns - wait_wall_ns`).
pub fn own_ns(r: &RankStepStats) -> u64 {
    r.step_time_ns.saturating_sub(wait_wall_ns(r))
}

/// The wall time a rank waited for others in a step: its collective wait,
/// at most its time in collectives. The wait is summed per collective, so
/// collectives in flight together (DDP's gradient buckets) count their
/// common wait once each and the sum can exceed the wall time.
pub fn wait_wall_ns(r: &RankStepStats) -> u64 {
    r.comm_wait_ns.min(r.comm_ns)
}

/// One entry per rank, sorted by rank; of duplicates, the smallest by
/// content is kept so the result does not depend on input order.
fn canonical_ranks(stats: &[RankStepStats]) -> Vec<&RankStepStats> {
    let mut v: Vec<&RankStepStats> = stats.iter().collect();
    v.sort_unstable_by(|a, b| {
        let key = |r: &RankStepStats| {
            (
                r.rank,
                r.compute_ns,
                r.dataloader_ns,
                r.comm_wait_ns,
                r.comm_ns,
                r.step_time_ns,
                r.step,
            )
        };
        key(a).cmp(&key(b)).then_with(|| a.node.cmp(&b.node))
    });
    v.dedup_by_key(|r| r.rank);
    v
}

#[cfg(test)]
mod tests;
