//! Stored what-if gains of straggler verdict versions (`straggler_gains`,
//! migration 0017).
//!
//! In: a job id from the stragglers route. Out: per verdict (rank,
//! first_step) the latest stored gain with the version (`updated_ns`,
//! `last_step`) it belongs to. The stream writes a row with each verdict
//! version whose gain it computed over every step of the verdict
//! (`stream::recent`, `rankscope_analysis::expected_gain_pct`); the route
//! uses a row only for the version it names and computes the other versions'
//! gains from `step_breakdown` (rows written before the migration, versions
//! raised while some of their steps were not in memory).

use clickhouse::Row;
use serde::{Deserialize, Serialize};

use super::sql::{query_file, QueryFile};
use super::{Store, StoreError};

const STRAGGLER_GAINS_SQL: QueryFile = query_file!("straggler_gains");

/// One row of `straggler_gains.sql`.
#[derive(Debug, Clone, PartialEq, Row, Serialize, Deserialize)]
pub struct StoredGainRow {
    pub rank: u32,
    pub first_step: u64,
    pub last_step: u64,
    /// `None`: the definition has no value for the version (no peers, or
    /// the rank has no row in its steps), not "unknown".
    pub expected_gain_pct: Option<f64>,
    pub updated_ns: u64,
}

impl Store {
    /// The latest stored gain of every verdict of `job`.
    pub async fn straggler_gains(&self, job: &str) -> Result<Vec<StoredGainRow>, StoreError> {
        self.read(STRAGGLER_GAINS_SQL)
            .bind(job)
            .fetch_all()
            .await
            .map_err(StoreError::query("straggler gains"))
    }
}
