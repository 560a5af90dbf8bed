//! Queries of the goodput view (`api::goodput`).

use clickhouse::Row;
use serde::Deserialize;

use super::sql::{query_file, QueryFile};
use super::{Store, StoreError};

const GOODPUT_STEPS_SQL: QueryFile = query_file!("goodput_steps");
const GOODPUT_JOB_SQL: QueryFile = query_file!("goodput_job");
const JOB_GPU_NAME_SQL: QueryFile = query_file!("job_gpu_name");
const JOB_GPU_NAME_NVML_SQL: QueryFile = query_file!("job_gpu_name_nvml");

/// One finalized step's figures.
#[derive(Debug, Clone, PartialEq, Row, Deserialize)]
pub struct GoodputStep {
    pub step: u64,
    pub step_time_ns: u64,
    pub compute_ns: f64,
    pub input_ns: f64,
    pub exposed_comm_ns: f64,
}

/// A job's wall-clock facts.
#[derive(Debug, Clone, PartialEq, Row, Deserialize)]
pub struct GoodputJob {
    pub first_ns: u64,
    pub last_ns: u64,
    pub world_size: u32,
    pub longest_hang_ns: u64,
}

#[derive(Debug, Row, Deserialize)]
struct Name {
    name: String,
}

impl Store {
    /// Per-step figures of `job`, by step.
    pub async fn goodput_steps(&self, job: &str) -> Result<Vec<GoodputStep>, StoreError> {
        self.read(GOODPUT_STEPS_SQL)
            .bind(job)
            .fetch_all()
            .await
            .map_err(StoreError::query("goodput steps"))
    }

    /// Wall time, devices and longest hang of `job`.
    pub async fn goodput_job(&self, job: &str) -> Result<GoodputJob, StoreError> {
        self.read(GOODPUT_JOB_SQL)
            .bind(job)
            .bind(job)
            .bind(job)
            .bind(job)
            .fetch_one()
            .await
            .map_err(StoreError::query("goodput job"))
    }

    /// The GPU model the job ran on, when known: an imported rank's `gpu`
    /// label, else the NVML name of a GPU its ranks ran on.
    pub async fn job_gpu_name(&self, job: &str) -> Result<Option<String>, StoreError> {
        for sql in [JOB_GPU_NAME_SQL, JOB_GPU_NAME_NVML_SQL] {
            let rows: Vec<Name> = self
                .read(sql)
                .bind(job)
                .fetch_all()
                .await
                .map_err(StoreError::query("job GPU name"))?;
            if let Some(r) = rows.into_iter().next() {
                return Ok(Some(r.name));
            }
        }
        Ok(None)
    }
}
