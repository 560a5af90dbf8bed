//! Retry delay policy of the uplink: jittered exponential backoff as a value.
//!
//! In: the number of the failed attempt (0 = first failure) and a random
//! number generator. Out: how long to wait before the next attempt.
//!
//! Policy: `base = min(max_ms, initial_ms * multiplier^attempt)`; the delay is
//! drawn uniformly from `[base * (1 - jitter), base]`. With the default
//! `jitter = 0.5` this is AWS's "equal jitter": agents that lost the collector
//! at the same moment spread their retries over half the interval, yet every
//! agent waits at least half the base delay, so an overloaded collector is
//! never hammered by near-zero "full jitter" draws. `jitter = 1.0` gives full
//! jitter, `0.0` a deterministic delay.
//!
//! Invariants (checked by [`Backoff::try_new`]): `1 <= initial_ms <= max_ms`,
//! `multiplier >= 1` and finite, `0 <= jitter <= 1`. Hence delays never exceed
//! `max_ms` and never decrease in their upper bound as attempts grow.

use std::time::Duration;

use rand::Rng;

/// Invalid backoff parameters.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BackoffError {
    #[error("retry initial delay is {initial_ms} ms; it must be >= 1")]
    ZeroInitial { initial_ms: u64 },
    #[error("retry max delay {max_ms} ms is below the initial delay {initial_ms} ms")]
    MaxBelowInitial { initial_ms: u64, max_ms: u64 },
    #[error("backoff multiplier is {0}; it must be finite and >= 1")]
    BadMultiplier(f64),
    #[error("backoff jitter is {0}; it must be within [0, 1]")]
    BadJitter(f64),
}

/// Jittered exponential backoff (see the module docs for the formula).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    initial_ms: u64,
    max_ms: u64,
    multiplier: f64,
    jitter: f64,
}

impl Default for Backoff {
    /// 100 ms doubling up to 10 s, equal jitter.
    fn default() -> Self {
        Self {
            initial_ms: 100,
            max_ms: 10_000,
            multiplier: 2.0,
            jitter: 0.5,
        }
    }
}

impl Backoff {
    /// Validates and builds a policy.
    pub fn try_new(
        initial_ms: u64,
        max_ms: u64,
        multiplier: f64,
        jitter: f64,
    ) -> Result<Self, BackoffError> {
        if initial_ms == 0 {
            return Err(BackoffError::ZeroInitial { initial_ms });
        }
        if max_ms < initial_ms {
            return Err(BackoffError::MaxBelowInitial { initial_ms, max_ms });
        }
        if !multiplier.is_finite() || multiplier < 1.0 {
            return Err(BackoffError::BadMultiplier(multiplier));
        }
        if !(0.0..=1.0).contains(&jitter) {
            return Err(BackoffError::BadJitter(jitter));
        }
        Ok(Self {
            initial_ms,
            max_ms,
            multiplier,
            jitter,
        })
    }

    /// Upper bound of the delay after failed attempt `attempt` (0-based).
    pub fn base(&self, attempt: u32) -> Duration {
        let exp = i32::try_from(attempt).unwrap_or(i32::MAX);
        let ms = (self.initial_ms as f64 * self.multiplier.powi(exp)).min(self.max_ms as f64);
        Duration::from_micros((ms * 1000.0) as u64)
    }

    /// Delay before the next attempt after failed attempt `attempt`
    /// (0-based), drawn from `[base * (1 - jitter), base]`.
    pub fn delay(&self, attempt: u32, rng: &mut impl Rng) -> Duration {
        let base = self.base(attempt).as_secs_f64();
        let u: f64 = rng.random();
        Duration::from_secs_f64(base * (1.0 - self.jitter * u))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::SeedableRng;

    fn ms(d: Duration) -> f64 {
        d.as_secs_f64() * 1000.0
    }

    #[test]
    fn try_new_rejects_bad_parameters() {
        assert_eq!(
            Backoff::try_new(0, 10, 2.0, 0.5),
            Err(BackoffError::ZeroInitial { initial_ms: 0 })
        );
        assert_eq!(
            Backoff::try_new(100, 50, 2.0, 0.5),
            Err(BackoffError::MaxBelowInitial {
                initial_ms: 100,
                max_ms: 50
            })
        );
        assert!(matches!(
            Backoff::try_new(1, 10, 0.5, 0.5),
            Err(BackoffError::BadMultiplier(_))
        ));
        assert!(matches!(
            Backoff::try_new(1, 10, f64::NAN, 0.5),
            Err(BackoffError::BadMultiplier(_))
        ));
        assert!(matches!(
            Backoff::try_new(1, 10, 2.0, 1.5),
            Err(BackoffError::BadJitter(_))
        ));
        assert!(matches!(
            Backoff::try_new(1, 10, 2.0, -0.1),
            Err(BackoffError::BadJitter(_))
        ));
        assert!(Backoff::try_new(1, 1, 1.0, 0.0).is_ok());
    }

    #[test]
    fn without_jitter_delays_grow_geometrically_up_to_the_cap() {
        let b = Backoff::try_new(100, 1_000, 2.0, 0.0).unwrap();
        let mut rng = SmallRng::seed_from_u64(1);
        let got: Vec<f64> = (0..6).map(|a| ms(b.delay(a, &mut rng))).collect();
        let want = [100.0, 200.0, 400.0, 800.0, 1_000.0, 1_000.0];
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() < 1e-6, "got {got:?}, want {want:?}");
        }
    }

    #[test]
    fn jittered_delays_stay_within_bounds_and_cap() {
        let b = Backoff::default();
        let mut rng = SmallRng::seed_from_u64(7);
        for attempt in 0..40 {
            let base = ms(b.base(attempt));
            assert!(base <= 10_000.0);
            for _ in 0..200 {
                let d = ms(b.delay(attempt, &mut rng));
                assert!(d <= base + 1e-6, "attempt {attempt}: {d} > {base}");
                assert!(d >= base * 0.5 - 1e-6, "attempt {attempt}: {d} < {base}/2");
            }
        }
        // Huge attempt numbers neither overflow nor exceed the cap.
        assert_eq!(b.base(u32::MAX), Duration::from_millis(10_000));
    }

    #[test]
    fn jitter_actually_spreads_delays() {
        let b = Backoff::try_new(1_000, 1_000, 2.0, 1.0).unwrap();
        let mut rng = SmallRng::seed_from_u64(3);
        let draws: Vec<f64> = (0..100).map(|_| ms(b.delay(0, &mut rng))).collect();
        let min = draws.iter().cloned().fold(f64::MAX, f64::min);
        let max = draws.iter().cloned().fold(0.0, f64::max);
        // Full jitter over [0, 1000]: 100 draws cover most of the range.
        assert!(min < 200.0 && max > 800.0, "min {min} max {max}");
    }

    #[test]
    fn same_seed_gives_same_delays() {
        let b = Backoff::default();
        let run = |seed| {
            let mut rng = SmallRng::seed_from_u64(seed);
            (0..10).map(|a| b.delay(a, &mut rng)).collect::<Vec<_>>()
        };
        assert_eq!(run(42), run(42));
        assert_ne!(run(42), run(43));
    }
}
