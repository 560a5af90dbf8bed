//! Reads for the TensorBoard-plugin and Inductor views (issue 29): each
//! imported rank's "all steps" span, the kernels' launch figures, the
//! data-loading spans.
//!
//! In: a job id. Out: per rank [`PluginSpan`] (`job_plugin_spans.sql`: the
//! `tbp_*` labels the importer writes), the launch figures of kernels keyed
//! like `kernel_launches` by (rank, correlation, kernel start)
//! (`job_kernel_configs.sql`, table `kernel_configs`, migration 0012), and
//! the `dataloader` spans (`job_dataloader_spans.sql`) and the GPU-side
//! user annotations (`job_gpu_annotations.sql`).

use std::collections::HashMap;

use clickhouse::Row;
use serde::Deserialize;

use super::by_kernel::{self, ByKernel};
use super::sql::{query_file, QueryFile};
use super::{Store, StoreError};

const SPANS_SQL: QueryFile = query_file!("job_plugin_spans");
const CONFIGS_SQL: QueryFile = query_file!("job_kernel_configs");
const DATALOADER_SQL: QueryFile = query_file!("job_dataloader_spans");
const ANNOTATIONS_SQL: QueryFile = query_file!("job_gpu_annotations");
const VIEW_INPUTS_SQL: QueryFile = query_file!("job_view_inputs");

/// One input table of the overview and advice routes, summarised
/// (`job_view_inputs.sql`): its rows of the job and the sum of a time column.
#[derive(Debug, Clone, PartialEq, Eq, Row, Deserialize)]
pub struct ViewInput {
    pub input: String,
    pub n: u64,
    pub time_sum: u64,
}

/// The plugin's "all steps" span of one rank (absolute ns) and its steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PluginSpan {
    pub start_ns: u64,
    pub end_ns: u64,
    pub steps: u64,
}

/// A kernel's launch figures (`None`: not recorded).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct LaunchFigures {
    pub blocks_per_sm: Option<f64>,
    pub occupancy_pct: Option<f64>,
}

#[derive(Debug, Row, Deserialize)]
struct SpanRow {
    rank: u32,
    start_ns: String,
    end_ns: String,
    steps: String,
}

#[derive(Debug, Row, Deserialize)]
struct ConfigRow {
    rank: u32,
    correlation: u64,
    kernel_start_ns: u64,
    blocks_per_sm: f64,
    est_achieved_occupancy_pct: f64,
}

#[derive(Debug, Row, Deserialize)]
struct IntervalRow {
    rank: u32,
    start_ns: u64,
    end_ns: u64,
}

/// One GPU-side user annotation range.
#[derive(Debug, Clone, PartialEq, Eq, Row, Deserialize)]
pub struct GpuAnnotation {
    pub rank: u32,
    pub name: String,
    pub start_ns: u64,
    pub end_ns: u64,
}

fn figure(v: f64) -> Option<f64> {
    (v >= 0.0).then_some(v)
}

impl Store {
    /// The plugin's steps span of each rank of `job` whose trace has one.
    pub async fn plugin_spans(&self, job: &str) -> Result<HashMap<u32, PluginSpan>, StoreError> {
        let rows: Vec<SpanRow> = self
            .read(SPANS_SQL)
            .bind(job)
            .fetch_all()
            .await
            .map_err(StoreError::query("plugin step spans"))?;
        Ok(rows
            .into_iter()
            .filter_map(|r| {
                let span = PluginSpan {
                    start_ns: r.start_ns.parse().ok()?,
                    end_ns: r.end_ns.parse().ok()?,
                    steps: r.steps.parse().unwrap_or(1),
                };
                Some((r.rank, span))
            })
            .collect())
    }

    /// The launch figures of `job`'s kernels by (rank, start, correlation).
    pub async fn kernel_figures(&self, job: &str) -> Result<ByKernel<LaunchFigures>, StoreError> {
        let mut cursor = self
            .read(CONFIGS_SQL)
            .bind(job)
            .fetch::<ConfigRow>()
            .map_err(StoreError::query("kernel launch figures"))?;
        let mut rows = by_kernel::Builder::default();
        while let Some(r) = cursor
            .next()
            .await
            .map_err(StoreError::query("kernel launch figures"))?
        {
            rows.push(
                (r.rank, r.kernel_start_ns, r.correlation),
                LaunchFigures {
                    blocks_per_sm: figure(r.blocks_per_sm),
                    occupancy_pct: figure(r.est_achieved_occupancy_pct),
                },
            );
        }
        Ok(rows.finish())
    }

    /// The `dataloader` spans of `job`, per rank.
    pub async fn dataloader_spans(
        &self,
        job: &str,
    ) -> Result<HashMap<u32, Vec<(u64, u64)>>, StoreError> {
        let rows: Vec<IntervalRow> = self
            .read(DATALOADER_SQL)
            .bind(job)
            .fetch_all()
            .await
            .map_err(StoreError::query("data-loading spans"))?;
        let mut out: HashMap<u32, Vec<(u64, u64)>> = HashMap::new();
        for r in rows {
            out.entry(r.rank).or_default().push((r.start_ns, r.end_ns));
        }
        Ok(out)
    }

    /// What the overview reads of `job`, summarised per table (sorted by
    /// table): any write to those inputs changes it.
    pub async fn view_inputs(&self, job: &str) -> Result<Vec<ViewInput>, StoreError> {
        let mut read = self.read(VIEW_INPUTS_SQL);
        for _ in 0..6 {
            read = read.bind(job);
        }
        let mut rows: Vec<ViewInput> = read
            .fetch_all()
            .await
            .map_err(StoreError::query("the overview's inputs"))?;
        rows.sort_by(|a, b| a.input.cmp(&b.input));
        Ok(rows)
    }

    /// The GPU-side user annotations of `job` (`gpu_user_annotation`), by
    /// rank and start.
    pub async fn gpu_annotations(&self, job: &str) -> Result<Vec<GpuAnnotation>, StoreError> {
        self.read(ANNOTATIONS_SQL)
            .bind(job)
            .fetch_all()
            .await
            .map_err(StoreError::query("GPU user annotations"))
    }
}
