//! GPU time per user annotation, as Holistic Trace Analysis (HTA) 0.5.0
//! `get_gpu_user_annotation_breakdown` computes it
//! (`hta/analyzers/breakdown_analysis.py`, `use_gpu_annotation=True`),
//! issue 29.
//!
//! In: one rank's `gpu_user_annotation` ranges (name, duration; Kineto
//! writes one per (device, stream, CPU annotation) from the first to the
//! last GPU activity it covers). Out: per name `sum`, `max`, `min`, `mean`
//! and the sample standard deviation (pandas `std`, ddof = 1, 0 for one
//! range) of the durations, sorted by name (HTA sorts its frame by
//! `[rank, name]`). Nested annotations count independently, as in HTA.
//! Not reproduced: HTA's folding of names past `num_kernels` (1000 by
//! default) into `others`.

use std::collections::BTreeMap;

use crate::describe::sample_std;

/// One row of the breakdown.
#[derive(Debug, Clone, PartialEq)]
pub struct AnnotationRow {
    pub name: String,
    pub count: u64,
    /// Signed: HTA's inward rounding can make a sub-µs range -1 µs long.
    pub sum_ns: i64,
    pub max_ns: i64,
    pub min_ns: i64,
    pub mean_ns: f64,
    pub stddev_ns: f64,
}

/// The breakdown of `(name, duration ns)` ranges (module doc).
pub fn annotation_breakdown<'a>(
    ranges: impl IntoIterator<Item = (&'a str, i64)>,
) -> Vec<AnnotationRow> {
    let mut by_name: BTreeMap<&str, Vec<i64>> = BTreeMap::new();
    for (name, dur) in ranges {
        by_name.entry(name).or_default().push(dur);
    }
    by_name
        .into_iter()
        .map(|(name, d)| {
            let sum: i64 = d.iter().sum();
            let f: Vec<f64> = d.iter().map(|&x| x as f64).collect();
            AnnotationRow {
                name: name.to_owned(),
                count: d.len() as u64,
                sum_ns: sum,
                max_ns: d.iter().copied().max().unwrap_or(0),
                min_ns: d.iter().copied().min().unwrap_or(0),
                mean_ns: sum as f64 / d.len() as f64,
                stddev_ns: sample_std(&f).unwrap_or(0.0),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_name_statistics_as_pandas() {
        let rows = annotation_breakdown([("fwd", 10), ("bwd", 30), ("fwd", 20), ("fwd", 30)]);
        assert_eq!(rows.len(), 2);
        assert_eq!(
            (rows[0].name.as_str(), rows[0].count, rows[0].sum_ns),
            ("bwd", 1, 30)
        );
        assert_eq!(rows[0].stddev_ns, 0.0);
        let f = &rows[1];
        assert_eq!(
            (f.sum_ns, f.max_ns, f.min_ns, f.mean_ns),
            (60, 30, 10, 20.0)
        );
        assert!((f.stddev_ns - 10.0).abs() < 1e-12);
    }
}
