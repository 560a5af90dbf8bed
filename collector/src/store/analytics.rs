//! Reads of the analytics results and of the raw events the query-time
//! analytics need.
//!
//! In: a job id (and ranges). Out: rows ready for the API. The per-rank
//! temporal breakdown is computed here from raw rows and the collective
//! statistics from per-call aggregates (plus the rows of mixed calls), both
//! with `rankscope_analysis` (HTA / nccl-tests definitions, see that crate);
//! step breakdowns and verdicts were computed live and are only read. SQL in
//! `collector/queries/`, arguments bound with `?`.

use clickhouse::Row;
use rankscope_analysis::{
    breakdown, classify_kernel, Breakdown, CollOp, CollectiveObs, GpuEvent, GpuEventKind,
    KernelClass,
};
use serde::{Deserialize, Serialize};

use super::sql::{query_file, QueryFile};
use super::{Store, StoreError};

mod collectives;

const BREAKDOWN_SQL: QueryFile = query_file!("breakdown");
const RANK_GPU_EVENTS_SQL: QueryFile = query_file!("rank_gpu_events");
const RANK_KERNEL_NAMES_SQL: QueryFile = query_file!("rank_kernel_names");
const STRAGGLERS_SQL: QueryFile = query_file!("stragglers");
const STEP_PEERS_SQL: QueryFile = query_file!("step_peers");
const STEP_WAITS_OF_SQL: QueryFile = query_file!("step_waits_of");
const HANGS_SQL: QueryFile = query_file!("hangs");

/// One row of `step_peers.sql`.
#[derive(Debug, Clone, Row, Deserialize)]
pub struct StepPeersRow {
    pub step: u64,
    pub ranks: u64,
    pub median_step_ns: u64,
    pub min_wait_rank: u32,
    pub min_wait_ns: u64,
    pub second_min_wait_ns: u64,
    pub max_work_rank: u32,
    pub max_work_ns: u64,
    pub second_max_work_ns: u64,
}

impl From<StepPeersRow> for rankscope_analysis::StepPeers {
    fn from(r: StepPeersRow) -> Self {
        Self {
            step: r.step,
            ranks: r.ranks,
            median_step_ns: r.median_step_ns,
            min_wait: (r.min_wait_rank, r.min_wait_ns),
            second_min_wait_ns: r.second_min_wait_ns,
            max_work: (r.max_work_rank, r.max_work_ns),
            second_max_work_ns: r.second_max_work_ns,
        }
    }
}

/// One row of `step_waits_of.sql`.
#[derive(Debug, Clone, Row, Deserialize)]
pub struct StepWaitRow {
    pub step: u64,
    pub rank: u32,
    pub step_time_ns: u64,
    pub work_ns: u64,
    pub wait_ns: u64,
}

/// One stored per-(step, rank) breakdown row.
#[derive(Debug, Clone, PartialEq, Eq, Row, Serialize, Deserialize)]
pub struct StepBreakdownRow {
    pub step: u64,
    pub rank: u32,
    pub node: String,
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
}

#[derive(Debug, Row, Deserialize)]
struct GpuEventRow {
    rank: u32,
    node: String,
    kind: i8,
    /// [`class_code`] of the name.
    class: u8,
    start_ns: u64,
    end_ns: u64,
}

/// Wire codes of [`KernelClass`] in `rank_gpu_events.sql` (0: computation,
/// the default for a name the caller did not list).
fn class_code(c: KernelClass) -> u8 {
    match c {
        KernelClass::Computation => 0,
        KernelClass::Communication => 1,
        KernelClass::Memory => 2,
        KernelClass::Other => 3,
    }
}

fn class_of_code(code: u8) -> KernelClass {
    match code {
        1 => KernelClass::Communication,
        2 => KernelClass::Memory,
        3 => KernelClass::Other,
        _ => KernelClass::Computation,
    }
}

/// One stored collective (column order of `job_collectives_mixed.sql`,
/// `rank_collectives.sql` and `job_collectives_window.sql`).
#[derive(Debug, Row, Deserialize)]
pub(super) struct CollectiveReadRow {
    rank: u32,
    process_group: String,
    seq: u64,
    op: String,
    dtype: String,
    group_size: u32,
    bytes: u64,
    start_ns: u64,
    end_ns: u64,
}

impl CollectiveReadRow {
    /// The analytics' observation; `None` for an op it does not know.
    pub(super) fn into_obs(self) -> Option<CollectiveObs> {
        Some(CollectiveObs {
            rank: self.rank,
            process_group: self.process_group,
            seq: self.seq,
            op: self.op.parse::<CollOp>().ok()?,
            dtype: self.dtype,
            group_size: self.group_size,
            bytes: self.bytes,
            start_ns: self.start_ns,
            end_ns: self.end_ns,
        })
    }
}

/// A straggler verdict, latest version.
#[derive(Debug, Clone, PartialEq, Row, Serialize, Deserialize)]
pub struct StragglerRow {
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

/// A suspected hang.
#[derive(Debug, Clone, PartialEq, Eq, Row, Serialize, Deserialize)]
pub struct HangSuspectRow {
    pub rank: u32,
    pub node: String,
    /// -1 when the rank never ended a step.
    pub last_step: i64,
    pub job_step: u64,
    pub silent_ns: u64,
    pub detected_ns: u64,
}

const BREAKDOWN_PROGRESS_SQL: QueryFile = query_file!("breakdown_progress");

#[derive(Debug, Row, Deserialize)]
struct ProgressRow {
    n: u64,
    step: u64,
}

/// Temporal breakdown of one rank over all its GPU events in the job.
#[derive(Debug, Clone, PartialEq)]
pub struct RankSummary {
    pub rank: u32,
    pub node: String,
    pub breakdown: Breakdown,
}

impl Store {
    /// Finalized (step, rank) breakdowns of `job` and its highest finalized
    /// step (`None` when none is).
    pub async fn analytics_progress(&self, job: &str) -> Result<(u64, Option<u64>), StoreError> {
        let r: ProgressRow = self
            .read(BREAKDOWN_PROGRESS_SQL)
            .bind(job)
            .fetch_one()
            .await
            .map_err(StoreError::query("analytics progress"))?;
        Ok((r.n, (r.n > 0).then_some(r.step)))
    }

    /// Breakdown rows of steps `from..=to`, or of the last `last` steps.
    pub async fn step_breakdowns(
        &self,
        job: &str,
        from_step: Option<u64>,
        to_step: Option<u64>,
        last: Option<u64>,
    ) -> Result<Vec<StepBreakdownRow>, StoreError> {
        let (mut from, mut to) = (from_step.unwrap_or(0), to_step.unwrap_or(u64::MAX));
        if let Some(k) = last {
            let Some(max) = self.last_breakdown_step(job).await? else {
                return Ok(Vec::new());
            };
            to = to.min(max);
            from = from.max(max.saturating_sub(k.saturating_sub(1)));
        }
        self.read(BREAKDOWN_SQL)
            .bind(job)
            .bind(from)
            .bind(to)
            .fetch_all()
            .await
            .map_err(StoreError::query("breakdown"))
    }

    /// Per-rank temporal breakdown over every GPU event of the job,
    /// including events outside any step (as HTA's temporal breakdown).
    ///
    /// A kernel's class (HTA's, from its name) is decided once per distinct
    /// name here and mapped by ClickHouse, so rows carry a code, not a name.
    pub async fn rank_summaries(&self, job: &str) -> Result<Vec<RankSummary>, StoreError> {
        let names: Vec<String> = self
            .read(RANK_KERNEL_NAMES_SQL)
            .bind(job)
            .fetch_all()
            .await
            .map_err(StoreError::query("kernel names"))?;
        if names.is_empty() {
            return Ok(Vec::new());
        }
        // Only the names of the other classes travel (computation is the
        // default): few (NCCL, memory kernels), so the query stays small
        // however many compute kernels a job has. "" -> 0 keeps the arrays
        // non-empty and changes nothing.
        let (mut names, mut codes): (Vec<String>, Vec<u8>) = names
            .into_iter()
            .map(|n| {
                let code = class_code(classify_kernel(&n, GpuEventKind::Kernel));
                (n, code)
            })
            .filter(|(_, code)| *code != 0)
            .unzip();
        names.push(String::new());
        codes.push(0);
        let mut cursor = self
            .read(RANK_GPU_EVENTS_SQL)
            .bind(&names)
            .bind(&codes)
            .bind(job)
            .fetch::<GpuEventRow>()
            .map_err(StoreError::query("rank GPU events"))?;
        let mut out = Vec::new();
        let mut current: Option<(u32, String, Vec<GpuEvent>)> = None;
        while let Some(row) = cursor
            .next()
            .await
            .map_err(StoreError::query("rank GPU events"))?
        {
            if current.as_ref().is_none_or(|c| c.0 != row.rank) {
                if let Some((rank, node, events)) = current.take() {
                    out.push(summary(rank, node, &events));
                }
                current = Some((row.rank, row.node.clone(), Vec::new()));
            }
            // Memcpy / memset are memory whatever their name (`classify_kernel`).
            let class = match row.kind {
                2 | 3 => KernelClass::Memory,
                _ => class_of_code(row.class),
            };
            if let Some(c) = current.as_mut() {
                c.2.push(GpuEvent {
                    start_ns: row.start_ns,
                    end_ns: row.end_ns,
                    class,
                });
            }
        }
        if let Some((rank, node, events)) = current.take() {
            out.push(summary(rank, node, &events));
        }
        Ok(out)
    }

    /// Latest version of every straggler verdict of the job.
    /// Per step of `first..=last`: what the what-if gain needs of all ranks.
    pub async fn step_peers(
        &self,
        job: &str,
        first: u64,
        last: u64,
    ) -> Result<Vec<StepPeersRow>, StoreError> {
        self.read(STEP_PEERS_SQL)
            .bind(job)
            .bind(first)
            .bind(last)
            .fetch_all()
            .await
            .map_err(StoreError::query("step peers"))
    }

    /// Step time, work and wait of `ranks` in steps `first..=last`.
    pub async fn step_waits_of(
        &self,
        job: &str,
        first: u64,
        last: u64,
        ranks: &[u32],
    ) -> Result<Vec<StepWaitRow>, StoreError> {
        self.read(STEP_WAITS_OF_SQL)
            .bind(job)
            .bind(first)
            .bind(last)
            .bind(ranks)
            .fetch_all()
            .await
            .map_err(StoreError::query("step waits"))
    }

    pub async fn stragglers(&self, job: &str) -> Result<Vec<StragglerRow>, StoreError> {
        self.read(STRAGGLERS_SQL)
            .bind(job)
            .fetch_all()
            .await
            .map_err(StoreError::query("stragglers"))
    }

    /// Suspected hangs of the job.
    pub async fn hangs(&self, job: &str) -> Result<Vec<HangSuspectRow>, StoreError> {
        self.read(HANGS_SQL)
            .bind(job)
            .fetch_all()
            .await
            .map_err(StoreError::query("hangs"))
    }
}

fn summary(rank: u32, node: String, events: &[GpuEvent]) -> RankSummary {
    RankSummary {
        rank,
        node,
        breakdown: breakdown(events),
    }
}

const ALERTS_SQL: QueryFile = query_file!("alerts");

/// An alert with its latest transition.
#[derive(Debug, Clone, PartialEq, Eq, Row, Serialize, Deserialize)]
pub struct AlertReadRow {
    pub job_id: String,
    pub rule: String,
    pub rank: i64,
    pub node: String,
    pub severity: String,
    pub state: String,
    pub started_at_ns: u64,
    pub resolved_at_ns: u64,
    pub summary: String,
    /// JSON text.
    pub evidence: String,
}

impl Store {
    /// Alerts of `job` (all jobs when `None`), newest first; only firing
    /// ones when `active`.
    pub async fn alerts(
        &self,
        job: Option<&str>,
        active: bool,
    ) -> Result<Vec<AlertReadRow>, StoreError> {
        let job = job.unwrap_or("");
        self.read(ALERTS_SQL)
            .bind(job)
            .bind(job)
            .bind(u8::from(active))
            .fetch_all()
            .await
            .map_err(StoreError::query("alerts"))
    }
}
