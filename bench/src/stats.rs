//! Order statistics of repeated measurements.
//!
//! In: samples (any order). Out: median and nearest-rank percentiles; `NaN`
//! for no samples (rendered as `null` / "n/a" by the report).

/// The median (mean of the two middle values for an even count).
pub fn median(samples: &[f64]) -> f64 {
    let mut v: Vec<f64> = samples.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// The nearest-rank `p`-th percentile (`p` in 0..=100).
pub fn percentile(samples: &[f64], p: f64) -> f64 {
    let mut v: Vec<f64> = samples.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}

/// Smallest and largest finite sample.
pub fn min_max(samples: &[f64]) -> (f64, f64) {
    samples
        .iter()
        .copied()
        .filter(|x| x.is_finite())
        .fold((f64::NAN, f64::NAN), |(lo, hi), x| {
            (
                if lo.is_nan() { x } else { lo.min(x) },
                if hi.is_nan() { x } else { hi.max(x) },
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&[]).is_nan());
    }

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), 50.0);
        assert_eq!(percentile(&v, 99.0), 99.0);
        assert_eq!(percentile(&v, 100.0), 100.0);
        assert_eq!(percentile(&[7.0], 99.0), 7.0);
        assert_eq!(min_max(&[3.0, 1.0, 2.0]), (1.0, 3.0));
    }
}
