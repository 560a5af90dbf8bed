use super::*;
use crate::test_rng::Rng;

/// P[X >= k] by direct summation of the pmf with f64 binomial coefficients
/// (small n only): the reference the log-space sum must match.
fn brute_tail(n: u64, k: u64, p: f64) -> f64 {
    let mut total = 0.0;
    for i in k..=n {
        let mut c = 1.0f64;
        for j in 0..i {
            c = c * (n - j) as f64 / (j + 1) as f64;
        }
        total += c * p.powi(i as i32) * (1.0 - p).powi((n - i) as i32);
    }
    total
}

#[test]
fn the_score_matches_the_binomial_tail_by_direct_summation() {
    let mut rng = Rng::new(37);
    for _ in 0..2_000 {
        let n = rng.below(60);
        let k = rng.below(n + 1);
        let p = 0.001 + 0.998 * rng.unit();
        let want = -brute_tail(n, k, p).log10();
        let got = recurrence_score(n, k, p);
        assert!(
            (got - want.max(0.0)).abs() < 1e-9 * want.abs().max(1.0),
            "n={n} k={k} p={p}: {got} vs {want}"
        );
    }
}

#[test]
fn known_values() {
    // All 12 of 12 placements flagged at p = 0.1: P = 1e-12.
    assert!((recurrence_score(12, 12, 0.1) - 12.0).abs() < 1e-9);
    // One of one at p = 0.5: P = 0.5.
    assert!((recurrence_score(1, 1, 0.5) - 0.5f64.log10().abs()).abs() < 1e-12);
    // No verdict: nothing to explain.
    assert_eq!(recurrence_score(1_000, 0, 0.2), 0.0);
    // A fleet without verdicts makes any verdict impossible by chance.
    assert_eq!(recurrence_score(5, 1, 0.0), f64::INFINITY);
    assert_eq!(recurrence_score(5, 5, 1.0), 0.0);
}

#[test]
fn tails_far_below_the_smallest_f64_stay_finite_and_exact_in_log_space() {
    // 5,000 of 5,000 at p = 0.01: log10 P = 5000 * -2.
    let s = recurrence_score(5_000, 5_000, 0.01);
    assert!((s - 10_000.0).abs() < 1e-6, "{s}");
    // A huge busy unit at the fleet rate: about a coin flip, never blamed.
    let s = recurrence_score(1_000_000, 10_000, 0.01);
    assert!(s.is_finite() && s < 0.5, "{s}");
}

#[test]
fn more_verdicts_at_the_same_exposure_score_higher_and_more_exposure_lower() {
    let mut rng = Rng::new(7);
    for _ in 0..500 {
        let n = 1 + rng.below(400);
        let k = rng.below(n);
        let p = 0.001 + 0.5 * rng.unit();
        let (a, b) = (recurrence_score(n, k, p), recurrence_score(n, k + 1, p));
        assert!(b >= a - 1e-12, "k up: n={n} k={k} p={p}: {a} -> {b}");
        let c = recurrence_score(n + 1, k, p);
        assert!(c <= a + 1e-9, "n up: n={n} k={k} p={p}: {a} -> {c}");
        assert!(a >= 0.0 && a.is_finite());
    }
}

#[test]
fn a_busy_healthy_unit_scores_zero_and_a_single_job_is_low_exposure() {
    let units = [
        // Slow GPU: flagged in every one of its 12 jobs.
        Exposure {
            placements: 12,
            flagged: 12,
            jobs: 12,
        },
        // Busy, healthy: in every job, never flagged.
        Exposure {
            placements: 240,
            flagged: 0,
            jobs: 30,
        },
        // One-off: one verdict in 4 jobs.
        Exposure {
            placements: 4,
            flagged: 1,
            jobs: 4,
        },
        // Seen once, flagged once.
        Exposure {
            placements: 1,
            flagged: 1,
            jobs: 1,
        },
    ];
    let ranked = rank_fleet(&units, FleetPolicy::default());
    let order: Vec<usize> = ranked.iter().map(|s| s.index).collect();
    assert_eq!(order, [0, 2, 1, 3]);
    assert_eq!(ranked[0].rank, Some(1));
    assert_eq!(ranked[2].score, 0.0);
    assert!(ranked[3].low_exposure && ranked[3].rank.is_none());
    assert!(ranked[0].score > 6.0 && ranked[1].score < 1.0, "{ranked:?}");
}

#[test]
fn ranking_does_not_depend_on_input_order() {
    let mut rng = Rng::new(11);
    for _ in 0..100 {
        let units: Vec<Exposure> = (0..20)
            .map(|_| {
                let placements = 1 + rng.below(50);
                Exposure {
                    placements,
                    flagged: rng.below(placements + 1) / 3,
                    jobs: 1 + rng.below(placements),
                }
            })
            .collect();
        let key = |u: &[Exposure]| {
            let mut v: Vec<(Exposure, Option<usize>, u64)> = rank_fleet(u, FleetPolicy::default())
                .iter()
                .map(|s| (u[s.index], s.rank, s.score.to_bits()))
                .collect();
            v.sort_by_key(|(e, r, s)| (e.placements, e.flagged, e.jobs, *r, *s));
            v
        };
        let mut shuffled = units.clone();
        for i in (1..shuffled.len()).rev() {
            shuffled.swap(i, rng.below(i as u64 + 1) as usize);
        }
        // Equal units may swap places with each other; their multiset of
        // (unit, place, score) is the same.
        let places = |u: &[Exposure]| {
            let mut v: Vec<(u64, u64, u64, u64)> = key(u)
                .into_iter()
                .map(|(e, _, s)| (e.placements, e.flagged, e.jobs, s))
                .collect();
            v.sort();
            v
        };
        assert_eq!(places(&units), places(&shuffled));
        // Ranked units come first, places 1..=m without gaps, scores falling.
        let r = rank_fleet(&units, FleetPolicy::default());
        let ranked: Vec<&Scored> = r.iter().filter(|s| !s.low_exposure).collect();
        for (i, s) in ranked.iter().enumerate() {
            assert_eq!(s.rank, Some(i + 1));
            assert_eq!(r[i].index, s.index);
        }
        assert!(ranked.windows(2).all(|w| w[0].score >= w[1].score));
    }
}

#[test]
fn the_base_rate_is_flagged_over_placements() {
    assert_eq!(base_rate(&[]), 0.0);
    let u = [
        Exposure {
            placements: 10,
            flagged: 1,
            jobs: 3,
        },
        Exposure {
            placements: 30,
            flagged: 3,
            jobs: 3,
        },
    ];
    assert!((base_rate(&u) - 0.1).abs() < 1e-15);
}
