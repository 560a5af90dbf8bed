//! Reads of a collector restart: what live analytics held in memory for the
//! running jobs, rebuilt from the stored rows (`stream::recover`).
//!
//! In: a time horizon (jobs with a step marker since then are "running") and
//! per job its last finalized step. Out: typed rows — rank identities, the
//! finalized breakdowns of a replay window, and the raw step markers, GPU
//! events, spans and collectives after the last finalized step. Invariants:
//! SQL from `collector/queries/recover_*.sql`; raw reads are capped by a row
//! limit (the caller passes limit + 1 to tell a job over the limit).

use clickhouse::Row;
use serde::Deserialize;

use super::sql::{query_file, QueryFile};
use super::{Store, StoreError};

const JOBS_SQL: QueryFile = query_file!("recover_jobs");
const RANKS_SQL: QueryFile = query_file!("recover_ranks");
const MARKERS_SQL: QueryFile = query_file!("recover_markers");
const KERNELS_SQL: QueryFile = query_file!("recover_kernels");
const SPANS_SQL: QueryFile = query_file!("recover_spans");
const COLLECTIVES_SQL: QueryFile = query_file!("recover_collectives");
const BREAKDOWNS_SQL: QueryFile = query_file!("recover_breakdowns");
const VERDICTS_SQL: QueryFile = query_file!("recover_verdicts");
const MAX_STEP_SQL: QueryFile = query_file!("breakdown_max_step");
const UNCOMMITTED_SQL: QueryFile = query_file!("uncommitted_batches");
const BATCH_ROWS_IN_SQL: &str = include_str!("../../queries/batch_rows_in.sql");

/// An agent batch: (agent id, session, seq).
pub type BatchKey = (String, u64, u64);

#[derive(Debug, Row, Deserialize)]
struct KeyRow {
    agent_id: String,
    agent_session: u64,
    batch_seq: u64,
}

/// A job with a step marker since the horizon.
#[derive(Debug, Clone, Row, Deserialize)]
pub struct RecoverJob {
    pub job_id: String,
    pub last_step: u64,
}

/// A rank of a running job.
#[derive(Debug, Clone, Row, Deserialize)]
pub struct RecoverRank {
    pub rank: u32,
    pub node: String,
    pub run_id: String,
    pub world_size: u32,
    /// Last step the rank ended at or before the last finalized step
    /// (meaningful when `ends` > 0).
    pub last_end: u64,
    pub ends: u64,
}

/// A step marker after the last finalized step.
#[derive(Debug, Clone, Row, Deserialize)]
pub struct RecoverMarker {
    pub rank: u32,
    pub step: u64,
    pub is_end: u8,
    pub ts_ns: u64,
    pub node: String,
    pub run_id: String,
    pub agent_id: String,
    pub agent_session: u64,
    pub batch_seq: u64,
}

/// A kernel, memcpy or memset.
#[derive(Debug, Clone, Row, Deserialize)]
pub struct RecoverKernel {
    pub rank: u32,
    pub memcpy: u8,
    pub memset: u8,
    pub name: String,
    pub start_ns: u64,
    pub end_ns: u64,
    pub agent_id: String,
    pub agent_session: u64,
    pub batch_seq: u64,
}

/// A dataloader or compute span.
#[derive(Debug, Clone, Row, Deserialize)]
pub struct RecoverSpan {
    pub rank: u32,
    pub dataloader: u8,
    pub device: i32,
    pub start_ns: u64,
    pub end_ns: u64,
    pub agent_id: String,
    pub agent_session: u64,
    pub batch_seq: u64,
}

/// A collective.
#[derive(Debug, Clone, Row, Deserialize)]
pub struct RecoverCollective {
    pub rank: u32,
    pub op: String,
    pub process_group: String,
    pub seq: u64,
    pub dtype: String,
    pub group_size: u32,
    pub bytes: u64,
    pub start_ns: u64,
    pub end_ns: u64,
    pub agent_id: String,
    pub agent_session: u64,
    pub batch_seq: u64,
}

/// A finalized (step, rank): the straggler tracker's input.
#[derive(Debug, Clone, Row, Deserialize)]
pub struct RecoverBreakdown {
    pub step: u64,
    pub rank: u32,
    pub node: String,
    pub step_start_ns: u64,
    pub step_time_ns: u64,
    pub compute_ns: u64,
    pub comm_ns: u64,
    pub dataloader_ns: u64,
    pub comm_wait_ns: u64,
}

/// When an active verdict was first seen.
#[derive(Debug, Clone, Row, Deserialize)]
pub struct RecoverVerdict {
    pub rank: u32,
    pub first_step: u64,
    pub first_seen_ns: u64,
}

#[derive(Debug, Row, Deserialize)]
struct MaxStep {
    step: u64,
    n: u64,
}

impl Store {
    /// Batches a killed collector may have stored in part: an intent since
    /// `since_ns` and no `ingest_batches` row.
    pub async fn uncommitted_batches(&self, since_ns: u64) -> Result<Vec<BatchKey>, StoreError> {
        let rows: Vec<KeyRow> = self
            .read(UNCOMMITTED_SQL)
            .bind(since_ns)
            .bind(since_ns)
            .fetch_all()
            .await
            .map_err(StoreError::query("recover: uncommitted batches"))?;
        Ok(rows
            .into_iter()
            .map(|r| (r.agent_id, r.agent_session, r.batch_seq))
            .collect())
    }

    /// The tables that already hold rows of the uncommitted batch `key`,
    /// among those `set` (the batch converted again) has rows for.
    pub async fn tables_holding(
        &self,
        key: &BatchKey,
        set: &super::RowSet,
    ) -> Result<Vec<super::Table>, StoreError> {
        let mut held = Vec::new();
        for (table, ts, range) in set.batch_time_ranges() {
            let Some((first, last)) = range else { continue };
            let sql = BATCH_ROWS_IN_SQL
                .replace("{table}", table.name())
                .replace("{ts}", ts);
            let n: u64 = self
                .read_sql("batch_rows_in.sql", &sql)
                .bind(&key.0)
                .bind(key.1)
                .bind(key.2)
                .bind(first)
                .bind(last)
                .fetch_one()
                .await
                .map_err(StoreError::query("look up an uncommitted batch"))?;
            if n > 0 {
                held.push(table);
            }
        }
        Ok(held)
    }

    /// Jobs with a step marker at or after `since_ns`.
    pub async fn recover_jobs(&self, since_ns: u64) -> Result<Vec<RecoverJob>, StoreError> {
        self.read(JOBS_SQL)
            .bind(since_ns)
            .fetch_all()
            .await
            .map_err(StoreError::query("recover: running jobs"))
    }

    /// The highest finalized step of `job`, `None` when none is.
    pub async fn last_finalized_step(&self, job: &str) -> Result<Option<u64>, StoreError> {
        let m: MaxStep = self
            .read(MAX_STEP_SQL)
            .bind(job)
            .fetch_one()
            .await
            .map_err(StoreError::query("recover: last finalized step"))?;
        Ok((m.n > 0).then_some(m.step))
    }

    /// The ranks of `job`; `last_end` counts ends at or before `finalized`.
    pub async fn recover_ranks(
        &self,
        job: &str,
        finalized: u64,
    ) -> Result<Vec<RecoverRank>, StoreError> {
        self.read(RANKS_SQL)
            .bind(job)
            .bind(job)
            .bind(finalized)
            .fetch_all()
            .await
            .map_err(StoreError::query("recover: ranks"))
    }

    /// Step markers of steps `from_step..`, at most `limit`.
    pub async fn recover_markers(
        &self,
        job: &str,
        from_step: u64,
        limit: u64,
    ) -> Result<Vec<RecoverMarker>, StoreError> {
        self.read(MARKERS_SQL)
            .bind(job)
            .bind(from_step)
            .bind(limit)
            .fetch_all()
            .await
            .map_err(StoreError::query("recover: step markers"))
    }

    /// GPU events, spans and collectives starting at or after `since_ns`,
    /// at most `limit` of each.
    pub async fn recover_events(
        &self,
        job: &str,
        since_ns: u64,
        limit: u64,
    ) -> Result<(Vec<RecoverKernel>, Vec<RecoverSpan>, Vec<RecoverCollective>), StoreError> {
        let q = |sql: QueryFile| self.read(sql).bind(job).bind(since_ns).bind(limit);
        let kernels = q(KERNELS_SQL)
            .fetch_all()
            .await
            .map_err(StoreError::query("recover: kernels"))?;
        let spans = q(SPANS_SQL)
            .fetch_all()
            .await
            .map_err(StoreError::query("recover: spans"))?;
        let collectives = q(COLLECTIVES_SQL)
            .fetch_all()
            .await
            .map_err(StoreError::query("recover: collectives"))?;
        Ok((kernels, spans, collectives))
    }

    /// Finalized breakdowns of steps `from_step..`, by step then rank.
    pub async fn recover_breakdowns(
        &self,
        job: &str,
        from_step: u64,
    ) -> Result<Vec<RecoverBreakdown>, StoreError> {
        self.read(BREAKDOWNS_SQL)
            .bind(job)
            .bind(from_step)
            .fetch_all()
            .await
            .map_err(StoreError::query("recover: breakdowns"))
    }

    /// Active straggler verdicts of `job` and when each was first seen.
    pub async fn recover_verdicts(&self, job: &str) -> Result<Vec<RecoverVerdict>, StoreError> {
        self.read(VERDICTS_SQL)
            .bind(job)
            .fetch_all()
            .await
            .map_err(StoreError::query("recover: verdicts"))
    }
}
