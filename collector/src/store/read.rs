//! Read queries of the store: job list (with warnings, `split`), per-rank step times,
//! stored batches, counts.
//!
//! In: query arguments from the API and start-up. Out: typed rows.
//! Invariants: SQL comes from `collector/queries/*.sql`; arguments are bound with `?`
//! (client-side escaping), table names only from [`Table`]. Results are ordered
//! deterministically.

use std::collections::BTreeMap;

use clickhouse::sql::Identifier;
use clickhouse::Row;
use serde::{Deserialize, Serialize};

use super::sql::{query_file, QueryFile};
use super::{Store, StoreError, Table};

pub mod split;

const JOBS_RANKS_SQL: QueryFile = query_file!("jobs_ranks");
const JOBS_STEPS_SQL: QueryFile = query_file!("jobs_steps");
const JOB_EXISTS_SQL: QueryFile = query_file!("job_exists");
const STEP_TIMES_SQL: QueryFile = query_file!("step_times");
const LAST_STEPS_SQL: QueryFile = query_file!("last_steps");
const ACKED_BATCHES_SQL: QueryFile = query_file!("acked_batches");
const BATCH_INTENT_SQL: QueryFile = query_file!("batch_intent");
const COUNT_ROWS_SQL: QueryFile = query_file!("count_rows");
const COUNT_ALL_ROWS_SQL: QueryFile = query_file!("count_all_rows");

/// One job (and run) as listed by `GET /api/v1/jobs`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobRow {
    pub job: String,
    pub run_id: String,
    /// Largest world size any rank reported.
    pub world_size: u32,
    /// Distinct ranks seen.
    pub ranks_seen: u32,
    /// Distinct nodes seen.
    pub nodes: u32,
    /// Earliest of first batch arrival and first step marker.
    pub first_seen_ns: u64,
    /// Latest of last batch arrival and last step marker.
    pub last_seen_ns: u64,
    /// Highest step with an end marker.
    pub last_step: Option<u64>,
    /// What looks wrong with the job, for people (e.g. its world split
    /// across job ids: [`split::warn_split_worlds`]).
    #[serde(default)]
    pub warnings: Vec<String>,
}

/// The wall time of one step on one rank.
#[derive(Debug, Clone, PartialEq, Eq, Row, Serialize, Deserialize)]
pub struct StepTimeRow {
    pub step: u64,
    pub rank: u32,
    pub node: String,
    /// Earliest begin marker.
    pub start_ns: u64,
    /// Latest end marker.
    pub end_ns: u64,
    pub step_time_ns: u64,
}

#[derive(Debug, Row, Deserialize)]
struct JobRanksRow {
    job_id: String,
    run_id: String,
    world_size: u32,
    ranks_seen: u32,
    nodes: u32,
    first_seen_ns: u64,
    last_seen_ns: u64,
}

#[derive(Debug, Row, Deserialize)]
struct JobStepsRow {
    job_id: String,
    run_id: String,
    first_ns: u64,
    last_ns: u64,
    ends: u64,
    last_step: u64,
}

#[derive(Debug, Row, Deserialize)]
struct LastStepsRow {
    steps: u64,
    first_step: u64,
}

#[derive(Debug, Row, Deserialize)]
struct AckedRow {
    batch_seq: u64,
}

impl Store {
    /// Every job and run with rank identities or step markers, most recently seen first.
    pub async fn jobs(&self) -> Result<Vec<JobRow>, StoreError> {
        let ranks: Vec<JobRanksRow> = self
            .read(JOBS_RANKS_SQL)
            .fetch_all()
            .await
            .map_err(StoreError::query("list jobs"))?;
        let steps: Vec<JobStepsRow> = self
            .read(JOBS_STEPS_SQL)
            .fetch_all()
            .await
            .map_err(StoreError::query("list jobs"))?;
        let mut jobs: BTreeMap<(String, String), JobRow> = BTreeMap::new();
        for r in ranks {
            jobs.insert(
                (r.job_id.clone(), r.run_id.clone()),
                JobRow {
                    job: r.job_id,
                    run_id: r.run_id,
                    world_size: r.world_size,
                    ranks_seen: r.ranks_seen,
                    nodes: r.nodes,
                    first_seen_ns: r.first_seen_ns,
                    last_seen_ns: r.last_seen_ns,
                    last_step: None,
                    warnings: Vec::new(),
                },
            );
        }
        for s in steps {
            let job = jobs
                .entry((s.job_id.clone(), s.run_id.clone()))
                .or_insert_with(|| JobRow {
                    job: s.job_id,
                    run_id: s.run_id,
                    world_size: 0,
                    ranks_seen: 0,
                    nodes: 0,
                    first_seen_ns: s.first_ns,
                    last_seen_ns: s.last_ns,
                    last_step: None,
                    warnings: Vec::new(),
                });
            job.first_seen_ns = job.first_seen_ns.min(s.first_ns);
            job.last_seen_ns = job.last_seen_ns.max(s.last_ns);
            job.last_step = (s.ends > 0).then_some(s.last_step);
        }
        let mut jobs: Vec<JobRow> = jobs.into_values().collect();
        split::warn_split_worlds(&mut jobs);
        jobs.sort_by(|a, b| {
            b.last_seen_ns
                .cmp(&a.last_seen_ns)
                .then_with(|| (&a.job, &a.run_id).cmp(&(&b.job, &b.run_id)))
        });
        Ok(jobs)
    }

    /// Whether anything of `job` is stored.
    pub async fn job_exists(&self, job: &str) -> Result<bool, StoreError> {
        let found: u64 = self
            .read(JOB_EXISTS_SQL)
            .bind(job)
            .bind(job)
            .fetch_one()
            .await
            .map_err(StoreError::query("look up job"))?;
        Ok(found > 0)
    }

    /// Step wall time per (step, rank) of `job` for steps in `from_step..=to_step`
    /// having both markers, ordered by step then rank. `last = Some(K)` keeps the last
    /// K complete steps of that range.
    pub async fn step_times(
        &self,
        job: &str,
        from_step: Option<u64>,
        to_step: Option<u64>,
        last: Option<u64>,
    ) -> Result<Vec<StepTimeRow>, StoreError> {
        let mut from = from_step.unwrap_or(0);
        let to = to_step.unwrap_or(u64::MAX);
        if from > to {
            return Ok(Vec::new());
        }
        if let Some(k) = last {
            if k == 0 {
                return Ok(Vec::new());
            }
            let window: LastStepsRow = self
                .read(LAST_STEPS_SQL)
                .bind(job)
                .bind(from)
                .bind(to)
                .bind(k)
                .fetch_one()
                .await
                .map_err(StoreError::query("find last steps"))?;
            if window.steps == 0 {
                return Ok(Vec::new());
            }
            from = from.max(window.first_step);
        }
        self.read(STEP_TIMES_SQL)
            .bind(job)
            .bind(from)
            .bind(to)
            .fetch_all()
            .await
            .map_err(StoreError::query("read step times"))
    }

    /// The stored batch sequence numbers of one agent session, sorted: seeds
    /// duplicate detection the first time the collector sees the session.
    pub async fn acked_batches(
        &self,
        agent_id: &str,
        agent_session: u64,
    ) -> Result<Vec<u64>, StoreError> {
        let rows: Vec<AckedRow> = self
            .read(ACKED_BATCHES_SQL)
            .bind(agent_id)
            .bind(agent_session)
            .fetch_all()
            .await
            .map_err(StoreError::query("read stored batches"))?;
        Ok(rows.into_iter().map(|r| r.batch_seq).collect())
    }

    /// Whether a collector began storing batch `seq` of an agent session
    /// (it has an `ingest_intents` row).
    pub async fn batch_has_intent(
        &self,
        agent_id: &str,
        agent_session: u64,
        seq: u64,
    ) -> Result<bool, StoreError> {
        let n: u64 = self
            .read(BATCH_INTENT_SQL)
            .bind(agent_id)
            .bind(agent_session)
            .bind(seq)
            .fetch_one()
            .await
            .map_err(StoreError::query("read a batch's intent"))?;
        Ok(n > 0)
    }

    /// Rows of `job` in `table` (for tests and diagnostics). Tables without a job
    /// (`ingest_batches`, samples) count all their rows; `job` is then ignored.
    pub async fn count_rows(&self, table: Table, job: &str) -> Result<u64, StoreError> {
        let query = if table.has_job_id() {
            self.read(COUNT_ROWS_SQL)
                .bind(Identifier(table.name()))
                .bind(job)
        } else {
            self.read(COUNT_ALL_ROWS_SQL).bind(Identifier(table.name()))
        };
        query
            .fetch_one()
            .await
            .map_err(StoreError::query("count rows"))
    }
}
