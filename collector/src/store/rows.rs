//! Row types of the ClickHouse tables, as written by the writer and read back by queries.
//!
//! In: rows filled by `convert` (proto -> rows). Out: RowBinary-serialised INSERT data.
//! Invariants: field order and types match the columns of `collector/schema/*.sql`
//! exactly (the client runs with validation off, so a mismatch is caught only by the
//! round-trip tests in `collector/tests/store.rs`). Enum8 columns are `i8` holding the
//! proto enum number. Every event row carries its ingest identity (`agent_id`,
//! `agent_session`, `batch_seq`) so duplicates of a retried batch can be found.

use clickhouse::Row;
use serde::{Deserialize, Serialize};

/// A string column value shared by many rows (a batch's job, node and agent
/// ids, an interned event name): cloning it for a row is a reference-count
/// increment, not an allocation and a copy. Serialised as a plain string.
pub type Text = std::sync::Arc<str>;

/// `steps`: one step begin (`kind` 1) or end (`kind` 2) marker of one rank.
#[derive(Debug, Clone, PartialEq, Eq, Row, Serialize, Deserialize)]
pub struct StepRow {
    pub job_id: Text,
    pub run_id: Text,
    pub rank: u32,
    pub step: u64,
    /// 1 = begin, 2 = end.
    pub kind: i8,
    pub ts_ns: u64,
    pub node: Text,
    pub local_rank: u32,
    pub pid: u32,
    pub agent_id: Text,
    pub agent_session: u64,
    pub batch_seq: u64,
}

/// `spans`: a compute/communication/... span of one rank (`category` = proto SpanCategory).
#[derive(Debug, Clone, PartialEq, Eq, Row, Serialize, Deserialize)]
pub struct SpanRow {
    pub job_id: Text,
    pub run_id: Text,
    pub rank: u32,
    pub node: Text,
    pub category: i8,
    pub name: Text,
    pub start_ns: u64,
    pub end_ns: u64,
    pub stream: u32,
    pub device: i32,
    pub agent_id: Text,
    pub agent_session: u64,
    pub batch_seq: u64,
}

/// `collectives`: one NCCL collective as seen by one rank (`op` = proto CollectiveOp,
/// `dtype` = proto DataType, 0 = unspecified).
#[derive(Debug, Clone, PartialEq, Eq, Row, Serialize, Deserialize)]
pub struct CollectiveRow {
    pub job_id: Text,
    pub run_id: Text,
    pub rank: u32,
    pub node: Text,
    pub op: i8,
    pub process_group: Text,
    pub group_ranks: Vec<u32>,
    pub group_size: u32,
    pub dtype: i8,
    pub count: u64,
    pub bytes: u64,
    pub seq: u64,
    pub peer: u32,
    pub stream: u32,
    pub device: i32,
    pub start_ns: u64,
    pub end_ns: u64,
    pub agent_id: Text,
    pub agent_session: u64,
    pub batch_seq: u64,
}

/// `kernels`: a GPU kernel, memcpy or memset (`kind` = proto KernelKind).
#[derive(Debug, Clone, PartialEq, Eq, Row, Serialize, Deserialize)]
pub struct KernelRow {
    pub job_id: Text,
    pub run_id: Text,
    pub rank: u32,
    pub node: Text,
    pub kind: i8,
    pub name: Text,
    pub stream: u32,
    pub device: i32,
    pub start_ns: u64,
    pub end_ns: u64,
    pub correlation: u64,
    pub bytes: u64,
    pub agent_id: Text,
    pub agent_session: u64,
    pub batch_seq: u64,
}

/// `kernel_launches`: the host-side launch call of a `kernels` row (same job, rank,
/// correlation and `kernel_start_ns` = its `start_ns`), when known.
#[derive(Debug, Clone, PartialEq, Eq, Row, Serialize, Deserialize)]
pub struct LaunchRow {
    pub job_id: Text,
    pub run_id: Text,
    pub rank: u32,
    pub node: Text,
    pub correlation: u64,
    pub stream: u32,
    pub kernel_start_ns: u64,
    pub api: Text,
    pub start_ns: u64,
    pub end_ns: u64,
    pub agent_id: Text,
    pub agent_session: u64,
    pub batch_seq: u64,
}

/// `kernel_configs`: the launch configuration of a `kernels` row (same job,
/// rank, correlation and `kernel_start_ns` = its `start_ns`), when the trace
/// recorded one (`rankscope.v1.KernelConfig`; -1 = a figure not recorded).
#[derive(Debug, Clone, PartialEq, Row, Serialize, Deserialize)]
pub struct KernelConfigRow {
    pub job_id: Text,
    pub run_id: Text,
    pub rank: u32,
    pub node: Text,
    pub correlation: u64,
    pub kernel_start_ns: u64,
    pub blocks_per_sm: f64,
    pub est_achieved_occupancy_pct: f64,
    pub grid: Vec<u32>,
    pub block: Vec<u32>,
    pub registers_per_thread: u32,
    pub shared_memory_bytes: u32,
    pub agent_id: Text,
    pub agent_session: u64,
    pub batch_seq: u64,
}

/// `operator_stats`: one operator's figures of a traced rank
/// (`rankscope.v1.OperatorStat`).
#[derive(Debug, Clone, PartialEq, Eq, Row, Serialize, Deserialize)]
pub struct OperatorStatRow {
    pub job_id: Text,
    pub run_id: Text,
    pub rank: u32,
    pub node: Text,
    pub name: Text,
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
    pub ts_ns: u64,
    pub agent_id: Text,
    pub agent_session: u64,
    pub batch_seq: u64,
}

/// `operator_shapes`: one (operator, input shape)'s figures of a traced
/// rank (`rankscope.v1.OperatorStat` with `by_shape`; migration 0013).
#[derive(Debug, Clone, PartialEq, Eq, Row, Serialize, Deserialize)]
pub struct OperatorShapeRow {
    pub job_id: Text,
    pub run_id: Text,
    pub rank: u32,
    pub node: Text,
    pub name: Text,
    pub input_shape: String,
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
    pub ts_ns: u64,
    pub agent_id: Text,
    pub agent_session: u64,
    pub batch_seq: u64,
}

/// `memory_stats`: a memory-table row, a peak or a curve point of a rank
/// (`kind` `op` / `peak` / `sample`; see `schema/0011_memory_stats.sql`).
#[derive(Debug, Clone, PartialEq, Eq, Row, Serialize, Deserialize, Default)]
pub struct MemoryStatRow {
    pub job_id: Text,
    pub run_id: Text,
    pub rank: u32,
    pub node: Text,
    pub kind: Text,
    pub device: i32,
    pub name: Text,
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
    pub agent_id: Text,
    pub agent_session: u64,
    pub batch_seq: u64,
}

/// `ranks`: the identity of a rank, refreshed (`seen_ns`) with every batch carrying it.
#[derive(Debug, Clone, PartialEq, Eq, Row, Serialize, Deserialize)]
pub struct RankRow {
    pub job_id: String,
    pub run_id: String,
    pub rank: u32,
    pub world_size: u32,
    pub local_rank: u32,
    pub node: String,
    pub pid: u32,
    pub label_keys: Vec<String>,
    pub label_values: Vec<String>,
    pub seen_ns: u64,
}

/// `ingest_batches`: one row per stored agent batch, written after its event rows.
#[derive(Debug, Clone, PartialEq, Eq, Row, Serialize, Deserialize)]
pub struct BatchRow {
    pub agent_id: String,
    pub agent_session: u64,
    pub batch_seq: u64,
    pub node: String,
    pub received_ns: u64,
    /// Event rows of the batch.
    pub rows: u64,
}

/// `step_breakdown`: per (job, step, rank) GPU time breakdown (see `stream::job`).
#[derive(Debug, Clone, PartialEq, Row, Serialize, Deserialize)]
pub struct BreakdownRow {
    pub job_id: String,
    pub run_id: String,
    pub step: u64,
    pub rank: u32,
    pub node: String,
    pub step_start_ns: u64,
    pub step_time_ns: u64,
    pub gpu_span_ns: u64,
    pub gpu_busy_ns: u64,
    pub idle_ns: u64,
    pub compute_ns: u64,
    pub comm_ns: u64,
    pub memory_ns: u64,
    pub overlap_ns: u64,
    pub exposed_comm_ns: u64,
    pub non_compute_ns: u64,
    pub dataloader_ns: u64,
    pub comm_wait_ns: u64,
    pub comm_transfer_ns: u64,
    pub gpu_events: u64,
    pub computed_ns: u64,
}

/// `straggler_verdicts`: one version of a straggler verdict.
#[derive(Debug, Clone, PartialEq, Row, Serialize, Deserialize)]
pub struct VerdictRow {
    pub job_id: String,
    pub rank: u32,
    pub node: String,
    pub first_step: u64,
    pub last_step: u64,
    pub steps_flagged: u64,
    pub slowdown: f64,
    pub score: f64,
    pub cause: String,
    pub active: u8,
    pub first_seen_ns: u64,
    pub updated_ns: u64,
}

/// `straggler_gains` (migration 0017): the what-if gain of one verdict
/// version, computed by the stream over every step of the verdict
/// (`rankscope_analysis::expected_gain_pct`); keyed like [`VerdictRow`].
#[derive(Debug, Clone, PartialEq, Row, Serialize, Deserialize)]
pub struct GainRow {
    pub job_id: String,
    pub rank: u32,
    pub first_step: u64,
    pub last_step: u64,
    pub expected_gain_pct: Option<f64>,
    pub first_seen_ns: u64,
    pub updated_ns: u64,
}

/// `hang_suspects`: a rank that stopped ending steps (`last_step` -1: none ended).
#[derive(Debug, Clone, PartialEq, Eq, Row, Serialize, Deserialize)]
pub struct HangRow {
    pub job_id: String,
    pub rank: u32,
    pub node: String,
    pub last_step: i64,
    pub job_step: u64,
    pub silent_ns: u64,
    pub detected_ns: u64,
}

/// `alerts`: one alert transition (`state` 1 = firing, 2 = resolved; `rank` -1 = the job).
#[derive(Debug, Clone, PartialEq, Eq, Row, Serialize, Deserialize)]
pub struct AlertRow {
    pub job_id: String,
    pub rule: String,
    pub rank: i64,
    pub node: String,
    pub severity: String,
    pub state: i8,
    pub started_at_ns: u64,
    pub resolved_at_ns: u64,
    pub transition_ns: u64,
    pub summary: String,
    pub evidence: String,
}

/// `trace_ranks`: one state change of one (trace, rank) (collector/src/traces.rs).
#[derive(Debug, Clone, PartialEq, Eq, Row, Serialize, Deserialize)]
pub struct TraceRankRow {
    pub job_id: String,
    pub trace_id: String,
    pub rank: u32,
    pub node: String,
    pub state: String,
    pub reason: String,
    pub origin: String,
    pub requested_at_ns: u64,
    pub updated_at_ns: u64,
    pub duration_ms: u64,
    pub iterations: u64,
    pub first_step: i64,
    pub steps: u64,
    pub events: u64,
    pub pid: i32,
    /// The rank the trace is about; -1 = none.
    pub subject: i64,
}

/// `trace_ops`: one operator's calls and self time in one step of a traced rank.
#[derive(Debug, Clone, PartialEq, Eq, Row, Serialize, Deserialize)]
pub struct TraceOpRow {
    pub job_id: String,
    pub trace_id: String,
    pub rank: u32,
    pub step: i64,
    pub category: String,
    pub name: String,
    pub calls: u64,
    pub self_ns: u64,
    pub stored_ns: u64,
}

/// The rows of one agent batch (or several), written and acknowledged together.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RowSet {
    pub steps: Vec<StepRow>,
    /// In column form (see [`super::grouped`]), as `kernels` and `launches`.
    pub spans: super::grouped::SpanRows,
    pub collectives: Vec<CollectiveRow>,
    pub kernels: super::grouped::KernelRows,
    /// Launch calls of some `kernels` rows (not counted as event rows).
    pub launches: super::grouped::LaunchRows,
    /// Launch configurations of some `kernels` rows (not counted as event rows).
    pub kernel_configs: Vec<KernelConfigRow>,
    pub ranks: Vec<RankRow>,
    pub batches: Vec<BatchRow>,
    /// Analytics results (written by the stream task, not by ingest).
    pub breakdowns: Vec<BreakdownRow>,
    pub verdicts: Vec<VerdictRow>,
    /// The stored gains of some `verdicts` (migration 0017).
    pub gains: Vec<GainRow>,
    pub hangs: Vec<HangRow>,
    /// Alert transitions (written by the alert task).
    pub alerts: Vec<AlertRow>,
    /// Trace state changes (written by the trace hub).
    pub traces: Vec<TraceRankRow>,
    /// Operator summaries of imported traces (written by the trace hub).
    pub trace_ops: Vec<TraceOpRow>,
    /// Agent telemetry (see [`TelemetryRows`]).
    pub telemetry: TelemetryRows,
    /// Operator and memory views of traced ranks (not counted as event rows).
    pub operator_stats: Vec<OperatorStatRow>,
    pub memory_stats: Vec<MemoryStatRow>,
    pub operator_shapes: Vec<OperatorShapeRow>,
}

/// A table, its time column and the first and last time of some rows.
pub type BatchTimeRange = (super::Table, &'static str, Option<(u64, u64)>);

/// The first and last time of `rows`, `None` when there are none.
fn time_range<T>(rows: &[T], ts: impl Fn(&T) -> u64) -> Option<(u64, u64)> {
    rows.iter().map(ts).fold(None, |r, t| match r {
        None => Some((t, t)),
        Some((a, b)) => Some((a.min(t), b.max(t))),
    })
}

impl RowSet {
    /// Per table with an agent batch's rows (`batch_seq` column): the table,
    /// its time column and the time range of the rows here.
    pub fn batch_time_ranges(&self) -> [BatchTimeRange; 14] {
        use super::Table as T;
        let t = &self.telemetry;
        [
            (T::Steps, "ts_ns", time_range(&self.steps, |r| r.ts_ns)),
            (T::Spans, "start_ns", self.spans.order_range()),
            (
                T::Collectives,
                "start_ns",
                time_range(&self.collectives, |r| r.start_ns),
            ),
            (T::Kernels, "start_ns", self.kernels.order_range()),
            (
                T::KernelLaunches,
                "kernel_start_ns",
                self.launches.order_range(),
            ),
            (
                T::KernelConfigs,
                "kernel_start_ns",
                time_range(&self.kernel_configs, |r| r.kernel_start_ns),
            ),
            (
                T::GpuSamples,
                "ts_ns",
                time_range(&t.gpu_samples, |r| r.ts_ns),
            ),
            (
                T::HostSamples,
                "ts_ns",
                time_range(&t.host_samples, |r| r.ts_ns),
            ),
            (
                T::RankGpuSamples,
                "ts_ns",
                time_range(&t.rank_gpu, |r| r.ts_ns),
            ),
            (
                T::RankProcessSamples,
                "ts_ns",
                time_range(&t.rank_process, |r| r.ts_ns),
            ),
            (
                T::GpuErrorSamples,
                "ts_ns",
                time_range(&t.gpu_errors, |r| r.ts_ns),
            ),
            (
                T::OperatorStats,
                "ts_ns",
                time_range(&self.operator_stats, |r| r.ts_ns),
            ),
            (
                T::MemoryStats,
                "ts_ns",
                time_range(&self.memory_stats, |r| r.ts_ns),
            ),
            (
                T::OperatorShapes,
                "ts_ns",
                time_range(&self.operator_shapes, |r| r.ts_ns),
            ),
        ]
    }

    /// Drops the rows of `table` (not `ingest_batches`: a batch's own row is
    /// always written last).
    pub fn clear_table(&mut self, table: super::Table) {
        use super::Table as T;
        match table {
            T::Steps => self.steps.clear(),
            T::Spans => self.spans.clear(),
            T::Collectives => self.collectives.clear(),
            T::Kernels => self.kernels.clear(),
            T::KernelLaunches => self.launches.clear(),
            T::KernelConfigs => self.kernel_configs.clear(),
            T::Ranks => self.ranks.clear(),
            T::StepBreakdown => self.breakdowns.clear(),
            T::StragglerVerdicts => self.verdicts.clear(),
            T::StragglerGains => self.gains.clear(),
            T::HangSuspects => self.hangs.clear(),
            T::Alerts => self.alerts.clear(),
            T::TraceRanks => self.traces.clear(),
            T::TraceOps => self.trace_ops.clear(),
            T::GpuSamples => self.telemetry.gpu_samples.clear(),
            T::HostSamples => self.telemetry.host_samples.clear(),
            T::RankGpuSamples => self.telemetry.rank_gpu.clear(),
            T::RankProcessSamples => self.telemetry.rank_process.clear(),
            T::GpuErrorSamples => self.telemetry.gpu_errors.clear(),
            T::StragglerEvidence => self.telemetry.evidence.clear(),
            T::OperatorStats => self.operator_stats.clear(),
            T::MemoryStats => self.memory_stats.clear(),
            T::OperatorShapes => self.operator_shapes.clear(),
            T::IngestBatches | T::IngestIntents => {}
        }
    }

    /// Event rows: steps + spans + collectives + kernels (not ranks or batches).
    pub fn len(&self) -> usize {
        self.steps.len() + self.spans.len() + self.collectives.len() + self.kernels.len()
    }

    /// No rows of any table, including ranks and batches.
    pub fn is_empty(&self) -> bool {
        self.total_rows() == 0
    }

    /// Rows of every table, the unit of the writer's `batch_max_rows`.
    pub fn total_rows(&self) -> usize {
        self.len()
            + self.launches.len()
            + self.kernel_configs.len()
            + self.ranks.len()
            + self.batches.len()
            + self.breakdowns.len()
            + self.verdicts.len()
            + self.gains.len()
            + self.hangs.len()
            + self.alerts.len()
            + self.traces.len()
            + self.trace_ops.len()
            + self.telemetry.len()
            + self.operator_stats.len()
            + self.memory_stats.len()
            + self.operator_shapes.len()
    }
}

pub use super::telemetry::rows::{
    EvidenceRow, GpuErrorRow, GpuSampleRow, HostSampleRow, RankGpuRow, RankProcessRow,
    TelemetryRows,
};
