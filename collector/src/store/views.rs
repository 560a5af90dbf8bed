//! Reads of the Operator and Memory views (`api::views`): the rows of
//! `operator_stats` (migration 0010) and `memory_stats` (0011), written
//! from the importer's `OperatorStat` / `Memory*` events.

use clickhouse::Row;
use serde::Deserialize;

use super::sql::{query_file, QueryFile};
use super::{Store, StoreError};

const JOB_OPERATOR_STATS_SQL: QueryFile = query_file!("job_operator_stats");
const JOB_MEMORY_STATS_SQL: QueryFile = query_file!("job_memory_stats");
const JOB_RANK_RSS_SQL: QueryFile = query_file!("job_rank_rss");
const JOB_NODE_MEMORY_SQL: QueryFile = query_file!("job_node_memory");
const STEP_WINDOWS_SQL: QueryFile = query_file!("step_windows");
const JOB_MEMORY_EVENTS_SQL: QueryFile = query_file!("job_memory_events");
const JOB_OPERATOR_SHAPES_SQL: QueryFile = query_file!("job_operator_shapes");
const JOB_MEMORY_EVENTS_COUNT_SQL: QueryFile = query_file!("job_memory_events_count");
const JOB_MEMORY_PEAKS_SQL: QueryFile = query_file!("job_memory_peaks");
const JOB_MEMORY_SERIES_SQL: QueryFile = query_file!("job_memory_series");
const JOB_MEMORY_SERIES_POINTS_SQL: QueryFile = query_file!("job_memory_series_points");
const JOB_MEMORY_OPS_TOP_SQL: QueryFile = query_file!("job_memory_ops_top");
const JOB_MEMORY_STATS_COUNT_SQL: QueryFile = query_file!("job_memory_stats_count");

/// One `[memory]` event of a trace (`memory_stats` kind `event`).
#[derive(Debug, Clone, PartialEq, Row, Deserialize, serde::Serialize)]
pub struct MemEvent {
    pub rank: u32,
    pub device: i32,
    pub ts_ns: u64,
    /// > 0 allocation, <= 0 release.
    pub bytes: i64,
    /// Total Allocated / Total Reserved after it (-1: the trace has none).
    pub allocated_bytes: i64,
    pub reserved_bytes: i64,
    /// Its operator ('' when none encloses it).
    pub name: String,
}

#[derive(Debug, Row, Deserialize)]
struct Count {
    n: u64,
}

/// One RSS sample of a rank's process.
#[derive(Debug, Clone, PartialEq, Row, Deserialize)]
pub struct RssSample {
    pub rank: u32,
    pub node: String,
    pub ts_ns: u64,
    pub period_ns: u64,
    pub rss_bytes: u64,
}

/// A node's memory.
#[derive(Debug, Clone, PartialEq, Row, Deserialize)]
pub struct NodeMemory {
    pub node: String,
    pub mem_total_bytes: u64,
}

/// A (step, rank) window.
#[derive(Debug, Clone, PartialEq, Row, Deserialize)]
pub struct Window {
    pub step: u64,
    pub rank: u32,
    pub step_start_ns: u64,
    pub step_time_ns: u64,
}

/// One operator of one rank (summed over that rank's traces).
#[derive(Debug, Clone, PartialEq, Row, Deserialize)]
pub struct OpStat {
    pub rank: u32,
    pub name: String,
    pub call_stack: String,
    pub calls: u64,
    pub host_self_ns: i64,
    pub host_total_ns: u64,
    pub device_self_ns: u64,
    pub device_total_ns: u64,
    pub tc_self_ns: u64,
    pub tc_total_ns: u64,
    pub tc_eligible: u8,
    pub runtime_ns: u64,
    pub host_total_min_ns: u64,
    pub host_total_max_ns: u64,
    pub device_total_min_ns: u64,
    pub device_total_max_ns: u64,
}

/// A `peak` row of `memory_stats`, only the columns peaks use.
#[derive(Debug, Clone, PartialEq, Row, Deserialize)]
struct MemPeak {
    rank: u32,
    device: i32,
    allocated_bytes: i64,
    reserved_bytes: i64,
    device_total_bytes: u64,
    step: u64,
    per_step: u8,
    ts_ns: u64,
}

/// One (rank, device) series of a job's memory curve.
#[derive(Debug, Clone, PartialEq, Row, Deserialize)]
pub struct MemSeries {
    pub rank: u32,
    pub device: i32,
    pub peak_bytes: i64,
    pub points: u64,
}

/// One `memory_stats` row (the columns its kind uses are set).
#[derive(Debug, Clone, PartialEq, Row, Deserialize)]
pub struct MemStat {
    pub rank: u32,
    pub device: i32,
    pub name: String,
    pub calls: u64,
    pub size_increase_bytes: i64,
    pub self_size_increase_bytes: i64,
    pub allocation_count: u64,
    pub self_allocation_count: u64,
    pub allocation_size_bytes: i64,
    pub self_allocation_size_bytes: i64,
    pub allocated_bytes: i64,
    pub reserved_bytes: i64,
    pub device_total_bytes: u64,
    pub step: u64,
    pub per_step: u8,
    pub ts_ns: u64,
}

impl Store {
    /// Per-rank RSS samples of `job`, by (rank, ts).
    pub async fn job_rank_rss(&self, job: &str) -> Result<Vec<RssSample>, StoreError> {
        self.read(JOB_RANK_RSS_SQL)
            .bind(job)
            .fetch_all()
            .await
            .map_err(StoreError::query("job rank RSS"))
    }

    /// Memory of the nodes `job` ran on.
    pub async fn job_node_memory(&self, job: &str) -> Result<Vec<NodeMemory>, StoreError> {
        self.read(JOB_NODE_MEMORY_SQL)
            .bind(job)
            .fetch_all()
            .await
            .map_err(StoreError::query("job node memory"))
    }

    /// Every (step, rank) window of `job`.
    pub async fn job_step_windows(&self, job: &str) -> Result<Vec<Window>, StoreError> {
        self.read(STEP_WINDOWS_SQL)
            .bind(job)
            .bind(0u64)
            .bind(i64::MAX as u64)
            .fetch_all()
            .await
            .map_err(StoreError::query("step windows"))
    }

    /// Every operator row of `job`, by (rank, name, call stack).
    pub async fn job_operator_stats(&self, job: &str) -> Result<Vec<OpStat>, StoreError> {
        self.read(JOB_OPERATOR_STATS_SQL)
            .bind(job)
            .fetch_all()
            .await
            .map_err(StoreError::query("job operator stats"))
    }

    /// The `kind` rows (`op`, `peak`, `sample`) of `job`.
    pub async fn job_memory_stats(
        &self,
        job: &str,
        kind: &str,
    ) -> Result<Vec<MemStat>, StoreError> {
        self.read(JOB_MEMORY_STATS_SQL)
            .bind(job)
            .bind(kind)
            .fetch_all()
            .await
            .map_err(StoreError::query("job memory stats"))
    }

    /// The `peak` rows of `job` (as [`Self::job_memory_stats`] with kind
    /// `peak` answers them, reading only the columns peaks use).
    pub async fn job_memory_peaks(&self, job: &str) -> Result<Vec<MemStat>, StoreError> {
        let rows: Vec<MemPeak> = self
            .read(JOB_MEMORY_PEAKS_SQL)
            .bind(job)
            .fetch_all()
            .await
            .map_err(StoreError::query("job memory peaks"))?;
        Ok(rows
            .into_iter()
            .map(|p| MemStat {
                rank: p.rank,
                device: p.device,
                name: String::new(),
                calls: 0,
                size_increase_bytes: 0,
                self_size_increase_bytes: 0,
                allocation_count: 0,
                self_allocation_count: 0,
                allocation_size_bytes: 0,
                self_allocation_size_bytes: 0,
                allocated_bytes: p.allocated_bytes,
                reserved_bytes: p.reserved_bytes,
                device_total_bytes: p.device_total_bytes,
                step: p.step,
                per_step: p.per_step,
                ts_ns: p.ts_ns,
            })
            .collect())
    }

    /// The (rank, device) series of `job`'s memory curve.
    pub async fn job_memory_series(&self, job: &str) -> Result<Vec<MemSeries>, StoreError> {
        self.read(JOB_MEMORY_SERIES_SQL)
            .bind(job)
            .fetch_all()
            .await
            .map_err(StoreError::query("job memory series"))
    }

    /// The curve points of `ranks` of `job`, by (rank, device, ts).
    pub async fn job_memory_series_points(
        &self,
        job: &str,
        ranks: &[u32],
    ) -> Result<Vec<MemStat>, StoreError> {
        self.read(JOB_MEMORY_SERIES_POINTS_SQL)
            .bind(job)
            .bind(ranks)
            .fetch_all()
            .await
            .map_err(StoreError::query("job memory series points"))
    }

    /// The `limit` operator memory rows of `job` with the largest size
    /// increase (largest first) and how many it has in all.
    pub async fn job_memory_ops_top(
        &self,
        job: &str,
        limit: u64,
    ) -> Result<(Vec<MemStat>, u64), StoreError> {
        let rows = async {
            self.read(JOB_MEMORY_OPS_TOP_SQL)
                .bind(job)
                .bind(limit)
                .fetch_all()
                .await
                .map_err(StoreError::query("job memory top operators"))
        };
        let total = async {
            self.read(JOB_MEMORY_STATS_COUNT_SQL)
                .bind(job)
                .bind("op")
                .fetch_one::<Count>()
                .await
                .map_err(StoreError::query("job memory operator count"))
        };
        let (rows, total) = tokio::try_join!(rows, total)?;
        Ok((rows, total.n))
    }

    /// Operator figures of `job` per (rank, name, input shape), the shape
    /// in `call_stack` (`operator_shapes`, migration 0013).
    pub async fn job_operator_shapes(&self, job: &str) -> Result<Vec<OpStat>, StoreError> {
        self.read(JOB_OPERATOR_SHAPES_SQL)
            .bind(job)
            .fetch_all()
            .await
            .map_err(StoreError::query("job operator shapes"))
    }

    /// `limit` `[memory]` events of `job` (one rank or all) from `offset`
    /// in (rank, device, time) order, and how many there are in all.
    pub async fn job_memory_events(
        &self,
        job: &str,
        rank: Option<u32>,
        offset: u64,
        limit: u64,
    ) -> Result<(Vec<MemEvent>, u64), StoreError> {
        let all = u8::from(rank.is_none());
        let r = rank.unwrap_or(0);
        // The count and the page are independent: read side by side.
        let total = async {
            self.read(JOB_MEMORY_EVENTS_COUNT_SQL)
                .bind(job)
                .bind(all)
                .bind(r)
                .fetch_one::<Count>()
                .await
                .map_err(StoreError::query("job memory event count"))
        };
        let rows = async {
            self.read(JOB_MEMORY_EVENTS_SQL)
                .bind(job)
                .bind(all)
                .bind(r)
                .bind(offset)
                .bind(limit)
                .fetch_all()
                .await
                .map_err(StoreError::query("job memory events"))
        };
        let (total, rows) = tokio::try_join!(total, rows)?;
        Ok((rows, total.n))
    }
}
