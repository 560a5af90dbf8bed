//! Robust summary statistics used across the crate.
//!
//! In: slices of samples. Out: median, MAD, modified z-scores, nearest-rank
//! percentiles. NaN samples are ignored; empty input gives `None`.
//!
//! - median: middle sample of the sorted samples; mean of the two middle
//!   samples for an even count;
//! - MAD (median absolute deviation, unscaled): `median(|x_i - median(x)|)`;
//! - modified z-score (Iglewicz & Hoaglin, 1993):
//!   `M_i = 0.6745 * (x_i - median) / MAD`; 0.6745 is the 0.75 quantile of
//!   the standard normal, so `M` is comparable to a z-score for normal data
//!   and `|M| > 3.5` is their recommended outlier cut-off;
//! - percentile (nearest-rank method): the `p`-th percentile of `n` sorted
//!   samples is the sample at 1-based rank `ceil(p / 100 * n)` (at least 1),
//!   so it is always an observed value (p50 of `[1, 2, 3, 4]` is 2).

/// Constant of the modified z-score, `Φ⁻¹(0.75)`.
pub const MODIFIED_Z_CONSTANT: f64 = 0.6745;

/// Median of `values` (NaNs ignored); `None` when there is no sample.
pub fn median(values: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| !x.is_nan()).collect();
    median_in_place(&mut v)
}

fn median_in_place(v: &mut [f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_unstable_by(f64::total_cmp);
    let mid = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    })
}

/// Median absolute deviation of `values` around `center` (unscaled; usually
/// `center` = [`median`] of the same values). `None` when there is no sample.
pub fn median_abs_deviation(values: &[f64], center: f64) -> Option<f64> {
    let mut dev: Vec<f64> = values
        .iter()
        .filter(|x| !x.is_nan())
        .map(|x| (x - center).abs())
        .collect();
    median_in_place(&mut dev)
}

/// Median and MAD of one set of samples.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RobustStats {
    /// Median of the samples.
    pub median: f64,
    /// Median absolute deviation around the median.
    pub mad: f64,
}

impl RobustStats {
    /// Median and MAD of `values`; `None` when there is no (non-NaN) sample.
    pub fn of(values: &[f64]) -> Option<Self> {
        let median = median(values)?;
        let mad = median_abs_deviation(values, median)?;
        Some(Self { median, mad })
    }

    /// Modified z-score of `x` with the MAD floored at `mad_floor`
    /// (see [`modified_z_score`]).
    pub fn z(&self, x: f64, mad_floor: f64) -> f64 {
        modified_z_score(x, self.median, self.mad.max(mad_floor))
    }
}

/// `0.6745 * (x - median) / mad`. A zero MAD gives 0 for `x == median` and
/// ±infinity otherwise; callers floor the MAD to avoid that.
pub fn modified_z_score(x: f64, median: f64, mad: f64) -> f64 {
    let d = x - median;
    if d == 0.0 {
        0.0
    } else {
        MODIFIED_Z_CONSTANT * d / mad
    }
}

/// Nearest-rank percentile of **sorted** `sorted` (ascending), `pct` in
/// `[0, 100]` (clamped). `None` for an empty slice.
pub fn percentile_nearest_rank(sorted: &[u64], pct: f64) -> Option<u64> {
    debug_assert!(sorted.windows(2).all(|w| w[0] <= w[1]));
    nearest_rank_index(sorted.len(), pct).map(|i| sorted[i])
}

/// [`percentile_nearest_rank`] of `values` in any order, by selection
/// (O(n), no full sort); reorders `values`.
pub fn percentile_nearest_rank_unsorted(values: &mut [u64], pct: f64) -> Option<u64> {
    let i = nearest_rank_index(values.len(), pct)?;
    Some(*values.select_nth_unstable(i).1)
}

/// 0-based index of the nearest-rank `pct` percentile of `n` sorted values:
/// rank `ceil(pct / 100 x n)`, at least 1.
fn nearest_rank_index(n: usize, pct: f64) -> Option<usize> {
    if n == 0 {
        return None;
    }
    let p = if pct.is_nan() {
        0.0
    } else {
        pct.clamp(0.0, 100.0)
    };
    // p * n first: exact for integral p, so ceil() sees no rounding noise.
    let rank = (p * n as f64 / 100.0).ceil() as usize;
    Some(rank.clamp(1, n) - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_table() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[f64::NAN]), None);
        assert_eq!(median(&[3.0]), Some(3.0));
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[1.0, f64::NAN, 5.0, 3.0]), Some(3.0));
    }

    #[test]
    fn mad_and_z() {
        // x = [1, 2, 3, 4, 100]: median 3, |dev| = [2, 1, 0, 1, 97] -> MAD 1.
        let x = [1.0, 2.0, 3.0, 4.0, 100.0];
        let s = RobustStats::of(&x).unwrap();
        assert_eq!(
            s,
            RobustStats {
                median: 3.0,
                mad: 1.0
            }
        );
        assert!((s.z(100.0, 0.0) - 0.6745 * 97.0).abs() < 1e-9);
        assert_eq!(s.z(3.0, 0.0), 0.0);
        // Floor applies when larger than the MAD.
        assert!((s.z(5.0, 2.0) - 0.6745).abs() < 1e-12);
        assert_eq!(modified_z_score(5.0, 5.0, 0.0), 0.0);
        assert_eq!(modified_z_score(6.0, 5.0, 0.0), f64::INFINITY);
        assert_eq!(RobustStats::of(&[]), None);
    }

    #[test]
    fn percentile_table() {
        let v = [1, 2, 3, 4];
        assert_eq!(percentile_nearest_rank(&v, 50.0), Some(2));
        assert_eq!(percentile_nearest_rank(&v, 51.0), Some(3));
        assert_eq!(percentile_nearest_rank(&v, 99.0), Some(4));
        assert_eq!(percentile_nearest_rank(&v, 0.0), Some(1));
        assert_eq!(percentile_nearest_rank(&v, 100.0), Some(4));
        assert_eq!(percentile_nearest_rank(&[], 50.0), None);
        let hundred: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile_nearest_rank(&hundred, 99.0), Some(99));
        assert_eq!(percentile_nearest_rank(&hundred, 50.0), Some(50));
        let ten: Vec<u64> = (1..=10).collect();
        assert_eq!(percentile_nearest_rank(&ten, 99.0), Some(10));
        assert_eq!(percentile_nearest_rank_unsorted(&mut [], 50.0), None);
    }

    #[test]
    fn selection_gives_the_sorted_percentile() {
        let mut rng = crate::test_rng::Rng::new(7);
        for n in [1usize, 2, 3, 10, 99, 100, 101, 1000] {
            let values: Vec<u64> = (0..n).map(|_| rng.below(50)).collect();
            let mut sorted = values.clone();
            sorted.sort_unstable();
            for pct in [0.0, 1.0, 25.0, 50.0, 51.0, 99.0, 99.9, 100.0, f64::NAN] {
                let mut scratch = values.clone();
                assert_eq!(
                    percentile_nearest_rank_unsorted(&mut scratch, pct),
                    percentile_nearest_rank(&sorted, pct),
                    "n={n} pct={pct}"
                );
            }
        }
    }

    #[test]
    fn median_is_order_independent() {
        let mut rng = crate::test_rng::Rng::new(3);
        for _ in 0..100 {
            let mut v: Vec<f64> = (0..1 + rng.below(30)).map(|_| rng.unit() * 100.0).collect();
            let m = median(&v);
            rng.shuffle(&mut v);
            assert_eq!(median(&v), m);
            let mut sorted = v.clone();
            sorted.sort_by(f64::total_cmp);
            let m = m.unwrap();
            let below = sorted.iter().filter(|&&x| x <= m).count();
            assert!(2 * below >= sorted.len());
        }
    }
}
