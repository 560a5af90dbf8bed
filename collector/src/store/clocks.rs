//! The node clock estimate of one job (`api::clocks`, the timeline export,
//! the `clock_skew` alert rule), computed at query time from the stored
//! `collectives` rows: `clock_collectives.sql` reduces them to one row per
//! (instance, node) in ClickHouse and `rankscope_analysis::clocks::estimate`
//! does the statistics. Nothing is stored: a job's estimate always reflects
//! every collective stored so far.

use clickhouse::Row;
use rankscope_analysis::clocks::{estimate, ClockEstimate, NodeCall};
use serde::Deserialize;

use super::sql::{query_file, QueryFile};
use super::{Store, StoreError};

const CLOCK_COLLECTIVES_SQL: QueryFile = query_file!("clock_collectives");

/// One node's part of one blocking collective instance.
#[derive(Debug, Clone, PartialEq, Row, Deserialize)]
pub struct ClockCall {
    pub process_group: String,
    pub seq: u64,
    pub node: String,
    pub lowest_rank: u32,
    pub max_start_ns: u64,
    pub min_end_ns: u64,
    pub median_end_ns: u64,
}

impl From<ClockCall> for NodeCall {
    fn from(c: ClockCall) -> Self {
        NodeCall {
            process_group: c.process_group,
            seq: c.seq,
            node: c.node,
            lowest_rank: c.lowest_rank,
            max_start_ns: c.max_start_ns,
            min_end_ns: c.min_end_ns,
            end_ns: c.median_end_ns,
        }
    }
}

impl Store {
    /// The node clock offsets of `job` (empty when it has no blocking
    /// collective).
    pub async fn clock_estimate(&self, job: &str) -> Result<ClockEstimate, StoreError> {
        let rows: Vec<ClockCall> = self
            .read(CLOCK_COLLECTIVES_SQL)
            .bind(job)
            .fetch_all()
            .await
            .map_err(StoreError::query("clock collectives"))?;
        let calls: Vec<NodeCall> = rows.into_iter().map(NodeCall::from).collect();
        Ok(estimate(&calls))
    }
}
