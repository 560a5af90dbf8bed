//! The overview's kept per-rank figures (`overview_ranks`, migration 0018)
//! and what each rank's figures are computed from.
//!
//! In: a job id; rows computed by `api::overview`. Out: per rank the
//! [`RankInputs`] of the overview's input tables now
//! (`job_overview_inputs.sql`: rows and a time sum per table), the stored
//! [`KeptRank`] rows (`job_overview_ranks.sql`, the latest per rank), and
//! the write of new ones. The route uses a kept row only while its inputs
//! equal the ones read now (module doc of `api::overview::kept`).

use std::collections::BTreeMap;

use clickhouse::Row;
use serde::{Deserialize, Serialize};

use super::sql::{query_file, QueryFile};
use super::{Store, StoreError};

const INPUTS_SQL: QueryFile = query_file!("job_overview_inputs");
const KEPT_SQL: QueryFile = query_file!("job_overview_ranks");

/// The input tables of `job_overview_inputs.sql`, in the order of
/// [`RankInputs`].
pub const INPUTS: [&str; 6] = [
    "kernels",
    "kernel_launches",
    "kernel_configs",
    "dataloader",
    "step_breakdown",
    "ranks",
];

/// Per input table ([`INPUTS`] order) one rank's rows and time sum.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RankInputs {
    pub n: [u64; 6],
    pub sum: [u64; 6],
}

#[derive(Debug, Row, Deserialize)]
struct InputRow {
    input: String,
    rank: u32,
    n: u64,
    time_sum: u64,
}

/// One rank's kept figures (also the row written; field order = the
/// table's columns).
#[derive(Debug, Clone, PartialEq, Row, Serialize, Deserialize)]
pub struct KeptRank {
    pub rank: u32,
    pub computed_ns: u64,
    pub input_n: Vec<u64>,
    pub input_sum: Vec<u64>,
    pub steps: u64,
    pub span_from: String,
    pub gpu_util_pct: Option<f64>,
    pub sm_efficiency_pct: Option<f64>,
    pub achieved_occupancy_pct: Option<f64>,
    pub tensor_core_pct: Option<f64>,
    pub roles_us: Vec<f64>,
    pub step_us: f64,
    pub kernel_total_ns: u64,
    pub gemm_conv_ns: u64,
    pub launched: u64,
    pub short_launches: u64,
}

impl KeptRank {
    /// Whether this row was computed from `inputs`.
    pub fn computed_from(&self, inputs: &RankInputs) -> bool {
        self.input_n == inputs.n && self.input_sum == inputs.sum
    }
}

/// A [`KeptRank`] with its job, as written.
#[derive(Debug, Row, Serialize)]
struct KeptRow<'a> {
    job_id: &'a str,
    rank: u32,
    computed_ns: u64,
    input_n: &'a [u64],
    input_sum: &'a [u64],
    steps: u64,
    span_from: &'a str,
    gpu_util_pct: Option<f64>,
    sm_efficiency_pct: Option<f64>,
    achieved_occupancy_pct: Option<f64>,
    tensor_core_pct: Option<f64>,
    roles_us: &'a [f64],
    step_us: f64,
    kernel_total_ns: u64,
    gemm_conv_ns: u64,
    launched: u64,
    short_launches: u64,
}

impl Store {
    /// Per rank of `job` with any input row: its [`RankInputs`] now.
    pub async fn overview_inputs(
        &self,
        job: &str,
    ) -> Result<BTreeMap<u32, RankInputs>, StoreError> {
        let mut read = self.read(INPUTS_SQL);
        for _ in 0..INPUTS.len() {
            read = read.bind(job);
        }
        let rows: Vec<InputRow> = read
            .fetch_all()
            .await
            .map_err(StoreError::query("the overview's inputs per rank"))?;
        let mut out: BTreeMap<u32, RankInputs> = BTreeMap::new();
        for r in rows {
            let Some(i) = INPUTS.iter().position(|x| *x == r.input) else {
                continue;
            };
            let e = out.entry(r.rank).or_default();
            e.n[i] = r.n;
            e.sum[i] = r.time_sum;
        }
        Ok(out)
    }

    /// The latest kept figures of each rank of `job`.
    pub async fn kept_overviews(&self, job: &str) -> Result<BTreeMap<u32, KeptRank>, StoreError> {
        let rows: Vec<KeptRank> = self
            .read(KEPT_SQL)
            .bind(job)
            .fetch_all()
            .await
            .map_err(StoreError::query("kept overview figures"))?;
        let mut out: BTreeMap<u32, KeptRank> = BTreeMap::new();
        for r in rows {
            match out.get(&r.rank) {
                Some(k) if k.computed_ns >= r.computed_ns => {}
                _ => {
                    out.insert(r.rank, r);
                }
            }
        }
        Ok(out)
    }

    /// Writes `rows` of `job` (they replace earlier ones).
    pub async fn keep_overviews(&self, job: &str, rows: &[KeptRank]) -> Result<(), StoreError> {
        if rows.is_empty() {
            return Ok(());
        }
        let what = "keep overview figures";
        let mut insert = self
            .client()
            .insert::<KeptRow<'_>>("overview_ranks")
            .await
            .map_err(StoreError::query(what))?;
        for r in rows {
            let row = KeptRow {
                job_id: job,
                rank: r.rank,
                computed_ns: r.computed_ns,
                input_n: &r.input_n,
                input_sum: &r.input_sum,
                steps: r.steps,
                span_from: &r.span_from,
                gpu_util_pct: r.gpu_util_pct,
                sm_efficiency_pct: r.sm_efficiency_pct,
                achieved_occupancy_pct: r.achieved_occupancy_pct,
                tensor_core_pct: r.tensor_core_pct,
                roles_us: &r.roles_us,
                step_us: r.step_us,
                kernel_total_ns: r.kernel_total_ns,
                gemm_conv_ns: r.gemm_conv_ns,
                launched: r.launched,
                short_launches: r.short_launches,
            };
            insert.write(&row).await.map_err(StoreError::query(what))?;
        }
        insert.end().await.map_err(StoreError::query(what))
    }
}
