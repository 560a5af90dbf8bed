//! pandas' `Series.describe()` over numbers, as Holistic Trace Analysis
//! (HTA) 0.5.0 prints it for idle intervals and queue lengths.
//!
//! In: values. Out: [`Describe`]: count, mean, sample standard deviation
//! (ddof = 1, `None` for fewer than two values), min, the 25/50/75 %
//! quantiles with pandas' default linear interpolation
//! (`q * (n - 1)` between the two nearest order statistics), max.
//! Everything but `count` is `None` for no values.

/// `describe()` of a set of values.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Describe {
    pub count: u64,
    pub mean: Option<f64>,
    pub std: Option<f64>,
    pub min: Option<f64>,
    pub p25: Option<f64>,
    pub p50: Option<f64>,
    pub p75: Option<f64>,
    pub max: Option<f64>,
}

/// pandas' linear-interpolation quantile of ascending `sorted` values.
pub fn quantile_linear(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let pos = q.clamp(0.0, 1.0) * (sorted.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = (lo + 1).min(sorted.len() - 1);
    Some(sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64))
}

/// Sample standard deviation (ddof = 1); `None` for fewer than two values.
pub fn sample_std(values: &[f64]) -> Option<f64> {
    if values.len() < 2 {
        return None;
    }
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    let ss: f64 = values.iter().map(|v| (v - mean) * (v - mean)).sum();
    Some((ss / (n - 1.0)).sqrt())
}

/// `describe()` of `values` (any order).
pub fn describe(values: &[f64]) -> Describe {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    if sorted.is_empty() {
        return Describe::default();
    }
    Describe {
        count: sorted.len() as u64,
        mean: Some(sorted.iter().sum::<f64>() / sorted.len() as f64),
        std: sample_std(&sorted),
        min: sorted.first().copied(),
        p25: quantile_linear(&sorted, 0.25),
        p50: quantile_linear(&sorted, 0.5),
        p75: quantile_linear(&sorted, 0.75),
        max: sorted.last().copied(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_pandas() {
        // The statistics HTA prints for rank 0, stream 22, host_wait of the
        // DLRM reference (count 4, mean 36.25, std 32.88, 16.75 / 22 / 41.5)
        // are those of these intervals.
        let d = describe(&[16.0, 85.0, 17.0, 27.0]);
        assert_eq!(d.count, 4);
        assert_eq!(d.mean, Some(36.25));
        assert!((d.std.unwrap() - 32.88).abs() < 5e-3);
        assert_eq!(d.min, Some(16.0));
        assert_eq!(d.p25, Some(16.75));
        assert_eq!(d.p50, Some(22.0));
        assert_eq!(d.p75, Some(41.5));
        assert_eq!(d.max, Some(85.0));
        let one = describe(&[3.0]);
        assert_eq!((one.count, one.std, one.p75), (1, None, Some(3.0)));
        assert_eq!(describe(&[]).count, 0);
        assert_eq!(describe(&[]).mean, None);
    }
}
