//! Queries of the trace hub (collector/src/traces.rs): reload of recent
//! traces at start-up, the ranks a job has streamed, its highest step.

use clickhouse::Row;
use serde::Deserialize;

use super::sql::{query_file, QueryFile};
use super::{Store, StoreError, TraceRankRow};

const TRACE_RANKS_SINCE_SQL: QueryFile = query_file!("trace_ranks_since");
const JOB_RANK_LIST_SQL: QueryFile = query_file!("job_rank_list");
const JOB_MAX_STEP_SQL: QueryFile = query_file!("job_max_step");
const TRACE_OPS_SQL: QueryFile = query_file!("trace_ops");
const TRACE_OP_STEPS_SQL: QueryFile = query_file!("trace_op_steps");

/// One operator of one rank of a trace, summed over the rank's steps.
#[derive(Debug, Clone, PartialEq, Eq, Row, Deserialize)]
pub struct TraceOpSum {
    pub rank: u32,
    pub category: String,
    pub name: String,
    pub calls: u64,
    pub self_ns: u64,
}

#[derive(Debug, Row, Deserialize)]
struct RankSteps {
    rank: u32,
    steps: u64,
}

/// One rank a job streamed events from.
#[derive(Debug, Clone, PartialEq, Eq, Row, Deserialize)]
pub struct JobRank {
    pub rank: u32,
    pub world_size: u32,
    pub node: String,
}

#[derive(Debug, Row, Deserialize)]
struct MaxStep {
    max_step: u64,
    n: u64,
}

impl Store {
    /// Latest state of every (trace, rank) requested at or after `since_ns`
    /// (newest first, at most `limit`).
    pub async fn trace_ranks_since(
        &self,
        since_ns: u64,
        limit: u64,
    ) -> Result<Vec<TraceRankRow>, StoreError> {
        self.read(TRACE_RANKS_SINCE_SQL)
            .bind(since_ns)
            .bind(limit)
            .fetch_all()
            .await
            .map_err(StoreError::query("read trace states"))
    }

    /// Ranks of `job` that streamed events, by rank.
    pub async fn job_rank_list(&self, job: &str) -> Result<Vec<JobRank>, StoreError> {
        self.read(JOB_RANK_LIST_SQL)
            .bind(job)
            .fetch_all()
            .await
            .map_err(StoreError::query("read the job's ranks"))
    }

    /// Operator sums of one trace per rank, and the steps each rank holds.
    pub async fn trace_ops(
        &self,
        job: &str,
        trace_id: &str,
    ) -> Result<(Vec<TraceOpSum>, Vec<(u32, u64)>), StoreError> {
        let ops = self
            .read(TRACE_OPS_SQL)
            .bind(job)
            .bind(trace_id)
            .fetch_all()
            .await
            .map_err(StoreError::query("read a trace's operators"))?;
        let steps: Vec<RankSteps> = self
            .read(TRACE_OP_STEPS_SQL)
            .bind(job)
            .bind(trace_id)
            .fetch_all()
            .await
            .map_err(StoreError::query("read a trace's steps"))?;
        Ok((ops, steps.into_iter().map(|r| (r.rank, r.steps)).collect()))
    }

    /// Highest step stored for `job` (None: no step at all).
    pub async fn job_max_step(&self, job: &str) -> Result<Option<u64>, StoreError> {
        let r: MaxStep = self
            .read(JOB_MAX_STEP_SQL)
            .bind(job)
            .fetch_one()
            .await
            .map_err(StoreError::query("read the job's highest step"))?;
        Ok((r.n > 0).then_some(r.max_step))
    }
}
