//! Queries of `rankscope diff` (`api::diff`).

use clickhouse::Row;
use serde::Deserialize;

use super::sql::{query_file, QueryFile};
use super::{Store, StoreError};

const DIFF_KERNELS_SQL: QueryFile = query_file!("diff_kernels");
const DIFF_STEPS_SQL: QueryFile = query_file!("diff_steps");

/// One kernel name of one side.
#[derive(Debug, Clone, PartialEq, Row, Deserialize)]
pub struct DiffKernel {
    pub name: String,
    pub kind: i8,
    pub calls: u64,
    pub sum_ns: u64,
}

/// A rank's steps in a range.
#[derive(Debug, Clone, Copy, PartialEq, Row, Deserialize)]
pub struct StepWindow {
    pub from_ns: u64,
    pub to_ns: u64,
    pub steps: u64,
}

impl Store {
    /// The window of `rank`'s steps `first..=last`.
    pub async fn step_window(
        &self,
        job: &str,
        rank: u32,
        first: u64,
        last: u64,
    ) -> Result<StepWindow, StoreError> {
        self.read(DIFF_STEPS_SQL)
            .bind(job)
            .bind(rank)
            .bind(first)
            .bind(last)
            .fetch_one()
            .await
            .map_err(StoreError::query("diff steps"))
    }

    /// `rank`'s kernels that started in `from_ns..=to_ns`, by name and kind.
    pub async fn diff_kernels(
        &self,
        job: &str,
        rank: u32,
        from_ns: u64,
        to_ns: u64,
    ) -> Result<Vec<DiffKernel>, StoreError> {
        self.read(DIFF_KERNELS_SQL)
            .bind(job)
            .bind(rank)
            .bind(from_ns)
            .bind(to_ns)
            .fetch_all()
            .await
            .map_err(StoreError::query("diff kernels"))
    }
}
