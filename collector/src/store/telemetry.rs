//! Reads of the agent telemetry: the latest sample per GPU, the GPU
//! telemetry of each (step, rank) of a job, and straggler evidence.
//!
//! In: a job or node and ranges from the API. Out: typed rows ready for
//! JSON. SQL in `collector/queries/`, arguments bound with `?`.
//!
//! The step join is done here, at query time: per (step, rank) it averages
//! the samples of the GPUs mapped to the rank (`rank_gpu_samples`, tagged by
//! the agent) whose interval `(ts_ns - period_ns, ts_ns]` overlaps the step
//! `[step_start_ns, step_start_ns + step_time_ns)`. ClickHouse 18.16 has no
//! inequality joins, so one range read per request feeds [`join_steps`].
//! Step times come from the ranks' clocks, samples from the agent's clock of
//! the same node.

pub mod rows;

use std::collections::{BTreeSet, HashMap};

use clickhouse::Row;
use serde::{Deserialize, Serialize};

use super::sql::{query_file, QueryFile};
use super::{Store, StoreError};
use rows::GpuSampleRow;

const GPUS_LATEST_SQL: QueryFile = query_file!("gpus_latest");
const GPUS_LATEST_JOB_SQL: QueryFile = query_file!("gpus_latest_job");
const STEP_WINDOWS_SQL: QueryFile = query_file!("step_windows");
const RANK_GPU_WINDOW_SQL: QueryFile = query_file!("rank_gpu_window");
const EVIDENCE_SQL: QueryFile = query_file!("straggler_evidence");

/// Samples are read this far past the last step end: a sample taken after
/// the step may cover its tail (periods are at most the sampling interval).
const SAMPLE_LOOKAHEAD_NS: u64 = 60_000_000_000;

/// One (step, rank) window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Row, Deserialize)]
pub struct StepWindow {
    pub step: u64,
    pub rank: u32,
    pub step_start_ns: u64,
    pub step_time_ns: u64,
}

/// One GPU sample of a rank (column order of `rank_gpu_window.sql`).
#[derive(Debug, Clone, PartialEq, Row, Deserialize)]
pub struct RankGpuSample {
    pub rank: u32,
    pub ts_ns: u64,
    pub period_ns: u64,
    pub gpu_util_pct: Option<f32>,
    pub sm_active_pct: Option<f32>,
    pub sm_clock_mhz: Option<u32>,
    pub power_w: Option<f32>,
    pub temp_c: Option<f32>,
    pub throttle_reasons: Vec<String>,
}

/// GPU telemetry of one (step, rank): means over the samples of its GPUs
/// during the step; `None` when no sample reported the metric.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct StepGpu {
    pub gpu_util_pct: Option<f64>,
    pub sm_active_pct: Option<f64>,
    pub sm_clock_mhz: Option<f64>,
    pub power_w: Option<f64>,
    pub temp_c: Option<f64>,
    /// Every throttle reason seen during the step (sorted); `None` without
    /// samples.
    pub throttle_reasons: Option<Vec<String>>,
    /// GPU samples averaged.
    pub gpu_samples: u32,
}

/// The latest evidence of one verdict (column order of `straggler_evidence.sql`).
#[derive(Debug, Clone, PartialEq, Row, Serialize, Deserialize)]
pub struct EvidenceReadRow {
    pub rank: u32,
    pub first_step: u64,
    pub evidence: String,
    pub gpu_indexes: Vec<u32>,
    pub gpu_uuids: Vec<String>,
    pub sm_clock_mhz: Option<f64>,
    pub peer_sm_clock_mhz: Option<f64>,
    pub throttle_reasons: Vec<String>,
    pub temp_c: Option<f64>,
    pub peer_temp_c: Option<f64>,
    pub power_w: Option<f64>,
    pub peer_power_w: Option<f64>,
    pub samples: u32,
    pub peer_gpus: u32,
}

impl Store {
    /// The latest sample of each GPU: of the GPUs `job` ran on when given,
    /// else of every GPU sampled since `since_ns`; `node` ("" = all) filters.
    pub async fn gpus_latest(
        &self,
        job: Option<&str>,
        node: &str,
        since_ns: u64,
    ) -> Result<Vec<GpuSampleRow>, StoreError> {
        let q = match job {
            Some(job) => self.read(GPUS_LATEST_JOB_SQL).bind(job),
            None => self.read(GPUS_LATEST_SQL).bind(since_ns),
        };
        q.bind(node)
            .bind(node)
            .fetch_all()
            .await
            .map_err(StoreError::query("latest GPU samples"))
    }

    /// GPU telemetry per (step, rank) of `job`'s steps `from..=to`.
    pub async fn step_gpu(
        &self,
        job: &str,
        from_step: u64,
        to_step: u64,
    ) -> Result<HashMap<(u64, u32), StepGpu>, StoreError> {
        let windows: Vec<StepWindow> = self
            .read(STEP_WINDOWS_SQL)
            .bind(job)
            .bind(from_step)
            .bind(to_step)
            .fetch_all()
            .await
            .map_err(StoreError::query("step windows"))?;
        let (Some(lo), Some(hi)) = (
            windows.iter().map(|w| w.step_start_ns).min(),
            windows
                .iter()
                .map(|w| w.step_start_ns.saturating_add(w.step_time_ns))
                .max(),
        ) else {
            return Ok(HashMap::new());
        };
        let samples: Vec<RankGpuSample> = self
            .read(RANK_GPU_WINDOW_SQL)
            .bind(job)
            .bind(lo)
            .bind(hi.saturating_add(SAMPLE_LOOKAHEAD_NS))
            .fetch_all()
            .await
            .map_err(StoreError::query("rank GPU samples"))?;
        Ok(join_steps(&windows, &samples))
    }

    /// The latest evidence of every straggler verdict of `job`.
    pub async fn straggler_evidence(&self, job: &str) -> Result<Vec<EvidenceReadRow>, StoreError> {
        self.read(EVIDENCE_SQL)
            .bind(job)
            .fetch_all()
            .await
            .map_err(StoreError::query("straggler evidence"))
    }
}

/// Whether a sample's interval overlaps `[start, end)`.
fn overlaps(s: &RankGpuSample, start: u64, end: u64) -> bool {
    s.ts_ns > start && s.ts_ns.saturating_sub(s.period_ns) < end.max(start + 1)
}

/// Averages, per window, the samples of the window's rank that overlap it.
/// `samples` must be sorted by (rank, ts_ns).
pub fn join_steps(
    windows: &[StepWindow],
    samples: &[RankGpuSample],
) -> HashMap<(u64, u32), StepGpu> {
    let mut by_rank: HashMap<u32, &[RankGpuSample]> = HashMap::new();
    let mut i = 0;
    while i < samples.len() {
        let rank = samples[i].rank;
        let n = samples[i..].iter().take_while(|s| s.rank == rank).count();
        by_rank.insert(rank, &samples[i..i + n]);
        i += n;
    }
    let max_period = samples.iter().map(|s| s.period_ns).max().unwrap_or(0);
    let mut out = HashMap::with_capacity(windows.len());
    for w in windows {
        let start = w.step_start_ns;
        let end = start.saturating_add(w.step_time_ns);
        let Some(rank) = by_rank.get(&w.rank) else {
            continue;
        };
        // Candidates: start < ts <= end + max_period.
        let first = rank.partition_point(|s| s.ts_ns <= start);
        let hits: Vec<&RankGpuSample> = rank[first..]
            .iter()
            .take_while(|s| s.ts_ns <= end.saturating_add(max_period))
            .filter(|s| overlaps(s, start, end))
            .collect();
        if hits.is_empty() {
            continue;
        }
        let mean = |f: &dyn Fn(&RankGpuSample) -> Option<f64>| {
            let v: Vec<f64> = hits.iter().filter_map(|s| f(s)).collect();
            (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
        };
        let reasons: BTreeSet<String> = hits
            .iter()
            .flat_map(|s| s.throttle_reasons.iter().cloned())
            .collect();
        out.insert(
            (w.step, w.rank),
            StepGpu {
                gpu_util_pct: mean(&|s| s.gpu_util_pct.map(f64::from)),
                sm_active_pct: mean(&|s| s.sm_active_pct.map(f64::from)),
                sm_clock_mhz: mean(&|s| s.sm_clock_mhz.map(f64::from)),
                power_w: mean(&|s| s.power_w.map(f64::from)),
                temp_c: mean(&|s| s.temp_c.map(f64::from)),
                throttle_reasons: Some(reasons.into_iter().collect()),
                gpu_samples: u32::try_from(hits.len()).unwrap_or(u32::MAX),
            },
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(rank: u32, ts_ns: u64, clock: Option<u32>, reasons: &[&str]) -> RankGpuSample {
        RankGpuSample {
            rank,
            ts_ns,
            period_ns: 100,
            gpu_util_pct: Some(50.0),
            sm_active_pct: None,
            sm_clock_mhz: clock,
            power_w: Some(300.0),
            temp_c: Some(60.0),
            throttle_reasons: reasons.iter().map(|r| r.to_string()).collect(),
        }
    }

    fn window(step: u64, rank: u32, start: u64, len: u64) -> StepWindow {
        StepWindow {
            step,
            rank,
            step_start_ns: start,
            step_time_ns: len,
        }
    }

    #[test]
    fn samples_overlapping_the_step_are_averaged() {
        let samples = vec![
            sample(0, 1000, Some(1000), &[]),
            // Covers (1050, 1150]: overlaps step [1100, 1300).
            sample(0, 1150, Some(1200), &["sw_power_cap"]),
            sample(0, 1250, Some(1400), &[]),
            // Covers (1300, 1400]: starts when the step ended.
            sample(0, 1400, Some(9999), &["hw_slowdown"]),
            sample(1, 1200, None, &[]),
        ];
        let windows = [
            window(7, 0, 1100, 200),
            window(7, 1, 1100, 200),
            window(8, 2, 0, 10),
        ];
        let j = join_steps(&windows, &samples);
        let r0 = &j[&(7, 0)];
        assert_eq!(r0.gpu_samples, 2);
        assert_eq!(r0.sm_clock_mhz, Some(1300.0));
        assert_eq!(r0.gpu_util_pct, Some(50.0));
        assert_eq!(r0.sm_active_pct, None, "not reported: missing, not 0");
        assert_eq!(
            r0.throttle_reasons.as_deref(),
            Some(&["sw_power_cap".to_string()][..])
        );
        let r1 = &j[&(7, 1)];
        assert_eq!(r1.sm_clock_mhz, None);
        assert_eq!(r1.throttle_reasons.as_deref(), Some(&[][..]));
        assert!(!j.contains_key(&(8, 2)), "no samples: no entry");
    }

    #[test]
    fn a_sample_after_a_short_step_describes_it() {
        // One sample per 1000 ns, steps of 100 ns: the sample taken after
        // the step covers it.
        let mut s = sample(3, 2000, Some(1500), &[]);
        s.period_ns = 1000;
        let j = join_steps(&[window(1, 3, 1400, 100)], &[s]);
        assert_eq!(j[&(1, 3)].sm_clock_mhz, Some(1500.0));
    }
}
