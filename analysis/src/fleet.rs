//! Fleet recurrence score: how unlikely a node's (or GPU's, or link's)
//! straggler verdicts are, given how often it was exposed and how often the
//! fleet as a whole is flagged — so a machine that is in many jobs is not
//! blamed for being busy, and a machine that is flagged in job after job
//! stands out from one-off bad luck.
//!
//! In: one [`Exposure`] per unit (node, GPU UUID or link) over a window:
//! `placements` = rank placements on it (one per (job, rank) that ran there),
//! `flagged` = how many of those placements got at least one straggler
//! verdict, and `jobs` = distinct jobs seen on it. Out: [`Scored`] units,
//! ranked worst first, with the units of too little exposure marked and
//! left unranked.
//!
//! Definition (a one-sided exact binomial test, e.g. NIST/SEMATECH
//! e-Handbook of Statistical Methods §7.2.4, "Does the proportion of
//! defectives meet requirements?"; Wikipedia, "Binomial test"):
//! the fleet base rate is `p = Σ flagged / Σ placements` over all units of
//! the window; for a unit with `n` placements of which `k` were flagged,
//! under the null hypothesis "this unit is flagged at the fleet rate" the
//! count is `X ~ Binomial(n, p)`, and
//!
//! ```text
//! score = -log10 P[X >= k]
//! ```
//!
//! `score = 0` when `k = 0` (nothing to explain) and grows by about one per
//! tenfold drop in the probability of seeing that many verdicts by chance.
//! The tail is summed term by term in log space from the pmf at `k` (or, when
//! `k` is at or below the mean, as one minus the lower tail), so it stays
//! exact for tails far below `f64`'s smallest normal number.
//!
//! Why placements and not rank-hours: a verdict is raised per (job, rank),
//! so a placement is the trial a verdict can happen in; rank-hours are
//! reported beside the score but do not enter it.
//!
//! Motivation for recurrence as the signal: Gunawi et al., "Fail-Slow at
//! Scale", FAST '18; Meta's Llama 3 report (2024), §3.3.4 (419 unexpected
//! interruptions in 54 days on 16,384 GPUs).

/// One unit's exposure and verdicts over the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Exposure {
    /// Rank placements on the unit (distinct (job, rank)).
    pub placements: u64,
    /// Placements with at least one straggler verdict (`<= placements`).
    pub flagged: u64,
    /// Distinct jobs seen on the unit.
    pub jobs: u64,
}

/// Thresholds of the fleet ranking.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FleetPolicy {
    /// Units seen in fewer jobs are `low_exposure`: scored, not ranked.
    pub min_jobs: u64,
}

impl Default for FleetPolicy {
    /// Three jobs: one job is an anecdote, two can share a bad day.
    fn default() -> Self {
        Self { min_jobs: 3 }
    }
}

/// One unit's score and place.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scored {
    /// Index of the unit in the input.
    pub index: usize,
    /// `-log10 P[X >= k]`, >= 0.
    pub score: f64,
    /// Seen in fewer than `min_jobs` jobs.
    pub low_exposure: bool,
    /// 1-based place among the units with enough exposure; `None` when
    /// `low_exposure`.
    pub rank: Option<usize>,
}

/// The fleet base rate: flagged placements per placement (0 when there are
/// no placements).
pub fn base_rate(units: &[Exposure]) -> f64 {
    let n: u64 = units.iter().map(|u| u.placements).sum();
    let k: u64 = units.iter().map(|u| u.flagged.min(u.placements)).sum();
    if n == 0 {
        0.0
    } else {
        k as f64 / n as f64
    }
}

/// `ln` of the Binomial(n, p) pmf at `k` (`0 < p < 1`, `k <= n`).
fn ln_pmf(n: u64, k: u64, p: f64) -> f64 {
    // ln C(n, k) = Σ_{i=1..m} ln((n - m + i) / i), m = min(k, n - k).
    let m = k.min(n - k);
    let ln_choose: f64 = (1..=m).map(|i| ((n - m + i) as f64 / i as f64).ln()).sum();
    ln_choose + k as f64 * p.ln() + (n - k) as f64 * (-p).ln_1p()
}

/// `ln Σ` of the pmf from `from` stepping by `dir` (+1 up to `n`, -1 down
/// to 0), in log space relative to the pmf at `from`; stops once a term no
/// longer changes the sum.
fn ln_tail_from(n: u64, from: u64, p: f64, up: bool) -> f64 {
    let odds = p / (1.0 - p);
    let (mut sum, mut term, mut i) = (1.0f64, 1.0f64, from);
    loop {
        if up {
            if i >= n {
                break;
            }
            // pmf(i+1)/pmf(i) = (n-i)/(i+1) * p/(1-p)
            term *= (n - i) as f64 / (i + 1) as f64 * odds;
            i += 1;
        } else {
            if i == 0 {
                break;
            }
            // pmf(i-1)/pmf(i) = i/(n-i+1) * (1-p)/p
            term *= i as f64 / (n - i + 1) as f64 / odds;
            i -= 1;
        }
        sum += term;
        if term < sum * 1e-17 {
            break;
        }
    }
    ln_pmf(n, from, p) + sum.ln()
}

/// `-log10 P[X >= k]` for `X ~ Binomial(n, p)`: the recurrence score.
/// `k` above `n` is taken as `n`; `p` outside `(0, 1)` gives the limits
/// (`p <= 0`: any verdict is impossible by chance, scored as `f64::INFINITY`
/// when `k > 0`; `p >= 1`: 0).
pub fn recurrence_score(n: u64, k: u64, p: f64) -> f64 {
    let k = k.min(n);
    if k == 0 || p >= 1.0 || p.is_nan() {
        return 0.0;
    }
    if p <= 0.0 {
        return f64::INFINITY;
    }
    let mean = n as f64 * p;
    let ln_p = if k as f64 > mean {
        ln_tail_from(n, k, p, true)
    } else {
        // P[X >= k] = 1 - P[X <= k-1]; the lower tail is below ~1/2 here.
        let lower = ln_tail_from(n, k - 1, p, false).exp();
        (1.0 - lower).max(0.0).ln()
    };
    (-ln_p / std::f64::consts::LN_10).max(0.0)
}

/// Scores every unit against the fleet base rate of `units` and ranks those
/// with enough exposure worst first (score, then flagged, then placements,
/// then input order: total, so the order does not depend on input order
/// for distinct units). Low-exposure units follow, by score.
pub fn rank_fleet(units: &[Exposure], policy: FleetPolicy) -> Vec<Scored> {
    let p = base_rate(units);
    let mut out: Vec<Scored> = units
        .iter()
        .enumerate()
        .map(|(index, u)| Scored {
            index,
            score: recurrence_score(u.placements, u.flagged, p),
            low_exposure: u.jobs < policy.min_jobs,
            rank: None,
        })
        .collect();
    out.sort_by(|a, b| {
        let (ua, ub) = (&units[a.index], &units[b.index]);
        a.low_exposure
            .cmp(&b.low_exposure)
            .then(b.score.total_cmp(&a.score))
            .then(ub.flagged.cmp(&ua.flagged))
            .then(ub.placements.cmp(&ua.placements))
            .then(a.index.cmp(&b.index))
    });
    let mut place = 0;
    for s in &mut out {
        if !s.low_exposure {
            place += 1;
            s.rank = Some(place);
        }
    }
    out
}

#[cfg(test)]
#[path = "fleet_tests.rs"]
mod tests;
