//! Thresholds of the straggler detector ([`StragglerPolicy`]), validated
//! once by [`StragglerPolicy::try_new`] (errors name the field and value).

use std::fmt;

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
    min_gain_pct: f64,
}

/// Default [`StragglerPolicy::min_gain_pct`]: a rank flagged only by its own
/// time must have cost the step at least 2% of its time.
pub const DEFAULT_MIN_GAIN_PCT: f64 = 2.0;

impl Default for StragglerPolicy {
    /// z >= 3.5 (Iglewicz & Hoaglin), >= 10% slower than the median, flagged
    /// in 3 of the last 5 steps, at least 4 ranks, MAD floored at 1% of the
    /// median, a rank flagged by its own time only when it cost the step at
    /// least [`DEFAULT_MIN_GAIN_PCT`] of its time.
    fn default() -> Self {
        Self {
            z_threshold: 3.5,
            min_slowdown: 1.10,
            window_steps: 5,
            min_flagged: 3,
            min_ranks: 4,
            mad_floor_frac: 0.01,
            min_gain_pct: DEFAULT_MIN_GAIN_PCT,
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
    /// `min_gain_pct` must be finite, >= 0 and < 100.
    MinGainPct(f64),
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
            Self::MinGainPct(v) => {
                write!(f, "min_gain_pct must be finite, >= 0 and < 100, got {v}")
            }
        }
    }
}

impl std::error::Error for PolicyError {}

impl StragglerPolicy {
    /// Validated policy (see [`PolicyError`] for the rules), with the
    /// default `min_gain_pct` (set it with [`StragglerPolicy::with_min_gain_pct`]).
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
            min_gain_pct: DEFAULT_MIN_GAIN_PCT,
        })
    }

    /// The policy with `min_gain_pct` (validated: finite, >= 0, < 100).
    pub fn with_min_gain_pct(self, min_gain_pct: f64) -> Result<Self, PolicyError> {
        if !(min_gain_pct.is_finite() && (0.0..100.0).contains(&min_gain_pct)) {
            return Err(PolicyError::MinGainPct(min_gain_pct));
        }
        Ok(Self {
            min_gain_pct,
            ..self
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
    /// Least what-if cost, in percent of the step's median step time, of a
    /// rank flagged by its own time (step time minus collective wait) when
    /// its compute and input do not stand out.
    pub fn min_gain_pct(&self) -> f64 {
        self.min_gain_pct
    }
}
