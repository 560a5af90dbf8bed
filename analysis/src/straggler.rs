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
//!   statistics of the transfer times.
//!
//! Invariants: no flags for steps with fewer than `min_ranks` ranks or a
//! zero median; results do not depend on the order of the input ranks
//! (one entry per rank; duplicates keep a deterministic one); scores are
//! finite. Limitation: robust statistics need a majority of healthy ranks;
//! if half the job slows down together, no rank stands out.

pub mod gain;
pub mod tracker;

pub use gain::{
    expected_gain_pct, expected_gain_pct_of, gain_pct, gain_per_step, gain_per_step_of,
    peers_of_step, step_peers, RankStepWait, StepPeers,
};
pub use tracker::{StragglerTracker, Verdict, VerdictChange};

use std::fmt;

use crate::stats::RobustStats;

/// Most steps a [`StragglerPolicy`] window may hold (bounds tracker memory).
pub const MAX_WINDOW_STEPS: u32 = 1024;

/// Thresholds of the straggler detector; build with [`StragglerPolicy::try_new`]
/// or take the [`Default`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StragglerPolicy {
    z_threshold: f64,
    min_slowdown: f64,
    window_steps: u32,
    min_flagged: u32,
    min_ranks: u32,
    mad_floor_frac: f64,
}

impl Default for StragglerPolicy {
    /// z >= 3.5 (Iglewicz & Hoaglin), >= 10% slower than the median, flagged
    /// in 3 of the last 5 steps, at least 4 ranks, MAD floored at 1% of the
    /// median.
    fn default() -> Self {
        Self {
            z_threshold: 3.5,
            min_slowdown: 1.10,
            window_steps: 5,
            min_flagged: 3,
            min_ranks: 4,
            mad_floor_frac: 0.01,
        }
    }
}

/// An invalid [`StragglerPolicy`] value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PolicyError {
    /// `z_threshold` must be finite and > 0.
    ZThreshold(f64),
    /// `min_slowdown` must be finite and >= 1.
    MinSlowdown(f64),
    /// `window_steps` must be in `1..=MAX_WINDOW_STEPS`.
    WindowSteps(u32),
    /// `min_flagged` must be in `1..=window_steps`.
    MinFlagged {
        /// The value given.
        min_flagged: u32,
        /// The window it must fit in.
        window_steps: u32,
    },
    /// `min_ranks` must be >= 3 (a median/MAD of 2 ranks flags nobody).
    MinRanks(u32),
    /// `mad_floor_frac` must be finite, > 0 and <= 1.
    MadFloorFrac(f64),
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ZThreshold(v) => write!(f, "z_threshold must be finite and > 0, got {v}"),
            Self::MinSlowdown(v) => write!(f, "min_slowdown must be finite and >= 1, got {v}"),
            Self::WindowSteps(v) => {
                write!(f, "window_steps must be in 1..={MAX_WINDOW_STEPS}, got {v}")
            }
            Self::MinFlagged {
                min_flagged,
                window_steps,
            } => {
                write!(
                    f,
                    "min_flagged must be in 1..={window_steps} (window_steps), got {min_flagged}"
                )
            }
            Self::MinRanks(v) => write!(f, "min_ranks must be >= 3, got {v}"),
            Self::MadFloorFrac(v) => {
                write!(f, "mad_floor_frac must be finite, > 0 and <= 1, got {v}")
            }
        }
    }
}

impl std::error::Error for PolicyError {}

impl StragglerPolicy {
    /// Validated policy (see [`PolicyError`] for the rules).
    pub fn try_new(
        z_threshold: f64,
        min_slowdown: f64,
        window_steps: u32,
        min_flagged: u32,
        min_ranks: u32,
        mad_floor_frac: f64,
    ) -> Result<Self, PolicyError> {
        if !(z_threshold.is_finite() && z_threshold > 0.0) {
            return Err(PolicyError::ZThreshold(z_threshold));
        }
        if !(min_slowdown.is_finite() && min_slowdown >= 1.0) {
            return Err(PolicyError::MinSlowdown(min_slowdown));
        }
        if !(1..=MAX_WINDOW_STEPS).contains(&window_steps) {
            return Err(PolicyError::WindowSteps(window_steps));
        }
        if !(1..=window_steps).contains(&min_flagged) {
            return Err(PolicyError::MinFlagged {
                min_flagged,
                window_steps,
            });
        }
        if min_ranks < 3 {
            return Err(PolicyError::MinRanks(min_ranks));
        }
        if !(mad_floor_frac.is_finite() && mad_floor_frac > 0.0 && mad_floor_frac <= 1.0) {
            return Err(PolicyError::MadFloorFrac(mad_floor_frac));
        }
        Ok(Self {
            z_threshold,
            min_slowdown,
            window_steps,
            min_flagged,
            min_ranks,
            mad_floor_frac,
        })
    }

    /// Modified z-score a rank must reach.
    pub fn z_threshold(&self) -> f64 {
        self.z_threshold
    }
    /// Ratio to the median a rank must reach (1.10 = 10% slower).
    pub fn min_slowdown(&self) -> f64 {
        self.min_slowdown
    }
    /// N: steps in the persistence window.
    pub fn window_steps(&self) -> u32 {
        self.window_steps
    }
    /// K: flagged steps within the window that make a verdict.
    pub fn min_flagged(&self) -> u32 {
        self.min_flagged
    }
    /// Fewest ranks a step needs to be scored.
    pub fn min_ranks(&self) -> u32 {
        self.min_ranks
    }
    /// MAD floor as a fraction of the median.
    pub fn mad_floor_frac(&self) -> f64 {
        self.mad_floor_frac
    }
}

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
}

impl StragglerCause {
    /// `compute`, `input` or `communication`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Compute => "compute",
            Self::Input => "input",
            Self::Communication => "communication",
        }
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
}

/// Flag the ranks of one step (rules in the module doc), sorted by rank.
pub fn score_step(policy: &StragglerPolicy, stats: &[RankStepStats]) -> Vec<StepFlag> {
    let ranks = canonical_ranks(stats);
    if ranks.len() < policy.min_ranks as usize {
        return Vec::new();
    }
    let col =
        |f: fn(&RankStepStats) -> u64| ranks.iter().map(|r| f(r) as f64).collect::<Vec<f64>>();
    let work = col(|r| r.compute_ns.saturating_add(r.dataloader_ns));
    let transfer = col(|r| r.comm_ns.saturating_sub(r.comm_wait_ns));
    let (Some(w), Some(t), Some(wait), Some(c), Some(d)) = (
        RobustStats::of(&work),
        RobustStats::of(&transfer),
        RobustStats::of(&col(|r| r.comm_wait_ns)),
        RobustStats::of(&col(|r| r.compute_ns)),
        RobustStats::of(&col(|r| r.dataloader_ns)),
    ) else {
        return Vec::new();
    };
    let outlier = |s: &RobustStats, x: f64| -> Option<(f64, f64)> {
        if s.median <= 0.0 {
            return None;
        }
        let slowdown = x / s.median;
        let z = s.z(x, policy.mad_floor_frac * s.median);
        (slowdown >= policy.min_slowdown && z >= policy.z_threshold).then_some((slowdown, z))
    };
    let mut flags = Vec::new();
    for (i, r) in ranks.iter().enumerate() {
        let base = |(slowdown, score), cause| StepFlag {
            rank: r.rank,
            step: r.step,
            slowdown,
            score,
            cause,
        };
        if let Some(hit) = outlier(&w, work[i]) {
            if r.comm_wait_ns as f64 <= wait.median {
                let excess_compute = r.compute_ns as f64 - c.median;
                let excess_input = r.dataloader_ns as f64 - d.median;
                let cause = if excess_input > excess_compute {
                    StragglerCause::Input
                } else {
                    StragglerCause::Compute
                };
                flags.push(base(hit, cause));
            }
        } else if let Some(hit) = outlier(&t, transfer[i]) {
            flags.push(base(hit, StragglerCause::Communication));
        }
    }
    flags
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
