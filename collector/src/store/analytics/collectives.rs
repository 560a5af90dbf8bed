//! The collective statistics read: job-wide, or of one rank matched against
//! every rank.
//!
//! In: a job id (and a rank). Out: `rankscope_analysis::CollectiveStats`,
//! the same to the bit as `collective_stats` over every stored row.
//!
//! ClickHouse aggregates each call `(process_group, seq)` first. A call is
//! uniform when its ranks agree on op, dtype, bytes and group size (one
//! entry) and no rank reported it twice (`calls == ranks`); only the rows
//! of the other calls travel (`job_collectives_mixed.sql`).
//! - Job-wide, `job_collective_groups.sql` also computes each statistics
//!   group's nearest-rank p50 / p99 where the durations are, so a few rows
//!   travel instead of every rank's duration
//!   (`rankscope_analysis::job_collective_stats_of_groups`). A percentile
//!   over a group that holds a mixed call needs that call's deduplicated
//!   rows, so a process group with a mixed call (send / recv pairs, a rank
//!   reported twice) is read call by call as well: each call's durations
//!   (`job_collective_calls.sql`) plus the mixed rows
//!   (`rankscope_analysis::job_collective_stats`). Statistics groups never
//!   span process groups, so the two parts are whole groups.
//! - Per rank, `job_collective_call_sums.sql` (each call's minimum and sum
//!   of durations: the transfer time) plus the rank's own rows
//!   (`rank_collectives.sql`): the rank's percentiles are over its own
//!   durations (`rankscope_analysis::rank_collective_stats`).

use std::collections::{BTreeSet, HashMap, HashSet};

use clickhouse::Row;
use rankscope_analysis::{
    job_collective_stats, job_collective_stats_of_groups, rank_collective_stats, CallSummary,
    CollOp, CollectiveObs, CollectiveStats, GroupSummary, UniformMatch,
};
use serde::Deserialize;

use super::super::sql::{query_file, QueryFile};
use super::super::{Store, StoreError};
use super::CollectiveReadRow;

const JOB_COLLECTIVE_GROUPS_SQL: QueryFile = query_file!("job_collective_groups");
const JOB_COLLECTIVE_CALL_SUMS_SQL: QueryFile = query_file!("job_collective_call_sums");
const JOB_COLLECTIVE_CALLS_SQL: QueryFile = query_file!("job_collective_calls");
const JOB_COLLECTIVES_MIXED_SQL: QueryFile = query_file!("job_collectives_mixed");
const RANK_COLLECTIVES_SQL: QueryFile = query_file!("rank_collectives");

/// One row of `job_collective_groups.sql`: one statistics group, its calls
/// as parallel arrays.
#[derive(Debug, Row, Deserialize)]
struct CollectiveGroupRow {
    process_group: String,
    op_name: String,
    dtype_name: String,
    seqs: Vec<u64>,
    call_bytes: Vec<u64>,
    group_sizes: Vec<u32>,
    call_rows: Vec<u64>,
    call_ranks: Vec<u64>,
    call_min_ns: Vec<u64>,
    call_sum_ns: Vec<u64>,
    /// `[p50, p99]` of `bitNot(duration)` (see the query).
    inverted_p50_p99: Vec<u64>,
}

impl CollectiveGroupRow {
    /// Whether the arrays have one entry per call and both percentiles.
    fn well_formed(&self) -> bool {
        let n = self.seqs.len();
        [
            self.call_bytes.len(),
            self.group_sizes.len(),
            self.call_rows.len(),
            self.call_ranks.len(),
            self.call_min_ns.len(),
            self.call_sum_ns.len(),
        ]
        .iter()
        .all(|&l| l == n)
            && self.inverted_p50_p99.len() == 2
    }

    /// `(process_group, seq, calls, ranks)` of each call.
    fn calls(&self) -> impl Iterator<Item = (&str, u64, u64, u64)> + '_ {
        (0..self.seqs.len()).map(|i| {
            (
                self.process_group.as_str(),
                self.seqs[i],
                self.call_rows[i],
                self.call_ranks[i],
            )
        })
    }

    /// The group summarized; `None` for an op this build does not know (its
    /// calls are left out, as `CollectiveReadRow::into_obs` leaves rows out).
    fn summary(&self) -> Option<GroupSummary<'_>> {
        let op = self.op_name.parse::<CollOp>().ok()?;
        let calls = (0..self.seqs.len())
            .map(|i| CallSummary {
                process_group: &self.process_group,
                seq: self.seqs[i],
                op,
                dtype: &self.dtype_name,
                bytes: self.call_bytes[i],
                group_size: self.group_sizes[i],
                calls: self.call_rows[i],
                min_duration_ns: self.call_min_ns[i],
                total_duration_ns: self.call_sum_ns[i],
            })
            .collect();
        Some(GroupSummary {
            calls,
            p50_duration_ns: !self.inverted_p50_p99[0],
            p99_duration_ns: !self.inverted_p50_p99[1],
        })
    }
}

/// One row of `job_collective_call_sums.sql`.
#[derive(Debug, Row, Deserialize)]
struct CollectiveCallSumRow {
    process_group: String,
    seq: u64,
    op_name: String,
    dtype_name: String,
    bytes: u64,
    group_size: u32,
    calls: u64,
    ranks: u64,
    min_ns: u64,
    sum_ns: u64,
}

/// One row of `job_collective_calls.sql`.
#[derive(Debug, Row, Deserialize)]
struct CollectiveCallRow {
    process_group: String,
    seq: u64,
    op_name: String,
    dtype_name: String,
    bytes: u64,
    group_size: u32,
    calls: u64,
    ranks: u64,
    durations_ns: Vec<u64>,
}

/// The `(process_group, seq)` of the calls that are not uniform, from each
/// aggregated entry's `(process_group, seq, calls, ranks)`: a call is
/// uniform when it has one entry (its ranks agree on op, dtype, bytes and
/// group size) and no rank reported it twice.
fn mixed_calls<'a>(
    entries: impl Iterator<Item = (&'a str, u64, u64, u64)>,
) -> HashSet<(&'a str, u64)> {
    let mut entries_of: HashMap<(&str, u64), (u32, bool)> = HashMap::new();
    for (pg, seq, calls, ranks) in entries {
        let e = entries_of.entry((pg, seq)).or_default();
        e.0 += 1;
        e.1 |= calls != ranks;
    }
    entries_of
        .into_iter()
        .filter(|(_, (n, repeated))| *n != 1 || *repeated)
        .map(|(k, _)| k)
        .collect()
}

impl Store {
    /// Collective statistics of the job (of one rank when `rank` is given),
    /// with wait / transfer from matching across all ranks (module doc).
    pub async fn collective_stats(
        &self,
        job: &str,
        rank: Option<u32>,
    ) -> Result<Vec<CollectiveStats>, StoreError> {
        match rank {
            Some(rank) => self.rank_collective_stats(job, rank).await,
            None => self.job_collective_stats(job).await,
        }
    }

    async fn job_collective_stats(&self, job: &str) -> Result<Vec<CollectiveStats>, StoreError> {
        let groups: Vec<CollectiveGroupRow> = self
            .read(JOB_COLLECTIVE_GROUPS_SQL)
            .bind(job)
            .fetch_all()
            .await
            .map_err(StoreError::query("job collective groups"))?;
        // Process groups read call by call: those with a mixed call (every
        // one, should an answer come malformed).
        let by_call: BTreeSet<&str> = if groups.iter().all(CollectiveGroupRow::well_formed) {
            mixed_calls(groups.iter().flat_map(CollectiveGroupRow::calls))
                .into_iter()
                .map(|(pg, _)| pg)
                .collect()
        } else {
            groups.iter().map(|g| g.process_group.as_str()).collect()
        };
        let summaries: Vec<GroupSummary<'_>> = groups
            .iter()
            .filter(|g| !by_call.contains(g.process_group.as_str()))
            .filter_map(CollectiveGroupRow::summary)
            .collect();
        let mut out = job_collective_stats_of_groups(&summaries);
        if !by_call.is_empty() {
            let pgs: Vec<&str> = by_call.into_iter().collect();
            out.extend(self.job_collective_stats_by_call(job, &pgs).await?);
            // Groups never span process groups: both parts are whole groups.
            out.sort_by(|a, b| a.sort_key().cmp(&b.sort_key()));
        }
        Ok(out)
    }

    /// Job-wide statistics of the process groups `pgs` from each call's
    /// durations plus the rows of the mixed calls.
    async fn job_collective_stats_by_call(
        &self,
        job: &str,
        pgs: &[&str],
    ) -> Result<Vec<CollectiveStats>, StoreError> {
        let calls: Vec<CollectiveCallRow> = self
            .read(JOB_COLLECTIVE_CALLS_SQL)
            .bind(job)
            .bind(pgs)
            .fetch_all()
            .await
            .map_err(StoreError::query("job collective calls"))?;
        let mixed = mixed_calls(
            calls
                .iter()
                .map(|c| (c.process_group.as_str(), c.seq, c.calls, c.ranks)),
        );
        // An op this build does not know is left out, as
        // `CollectiveReadRow::into_obs` leaves its rows out.
        let uniform: Vec<UniformMatch<'_>> = calls
            .iter()
            .filter(|c| !mixed.contains(&(c.process_group.as_str(), c.seq)))
            .filter_map(|c| {
                Some(UniformMatch {
                    process_group: &c.process_group,
                    seq: c.seq,
                    op: c.op_name.parse::<CollOp>().ok()?,
                    dtype: &c.dtype_name,
                    bytes: c.bytes,
                    group_size: c.group_size,
                    durations_ns: &c.durations_ns,
                })
            })
            .collect();
        let rest = self.mixed_rows(job, &mixed).await?;
        Ok(job_collective_stats(&uniform, &rest))
    }

    async fn rank_collective_stats(
        &self,
        job: &str,
        rank: u32,
    ) -> Result<Vec<CollectiveStats>, StoreError> {
        let own = async {
            self.read(RANK_COLLECTIVES_SQL)
                .bind(job)
                .bind(rank)
                .fetch_all::<CollectiveReadRow>()
                .await
                .map_err(StoreError::query("rank collectives"))
        };
        let calls = async {
            self.read(JOB_COLLECTIVE_CALL_SUMS_SQL)
                .bind(job)
                .fetch_all::<CollectiveCallSumRow>()
                .await
                .map_err(StoreError::query("job collective call sums"))
        };
        let (own, calls) = tokio::join!(own, calls);
        let (own, calls) = (own?, calls?);
        let mixed = mixed_calls(
            calls
                .iter()
                .map(|c| (c.process_group.as_str(), c.seq, c.calls, c.ranks)),
        );
        let rest = self.mixed_rows(job, &mixed).await?;
        // The rank's duration in each uniform call (one row each: uniform).
        let mine: HashMap<(&str, u64), u64> = own
            .iter()
            .map(|r| {
                let d = r.end_ns.saturating_sub(r.start_ns);
                ((r.process_group.as_str(), r.seq), d)
            })
            .collect();
        let joined: Vec<(CallSummary<'_>, u64)> = calls
            .iter()
            .filter(|c| !mixed.contains(&(c.process_group.as_str(), c.seq)))
            .filter_map(|c| {
                let d = *mine.get(&(c.process_group.as_str(), c.seq))?;
                let summary = CallSummary {
                    process_group: &c.process_group,
                    seq: c.seq,
                    op: c.op_name.parse::<CollOp>().ok()?,
                    dtype: &c.dtype_name,
                    bytes: c.bytes,
                    group_size: c.group_size,
                    calls: c.calls,
                    min_duration_ns: c.min_ns,
                    total_duration_ns: c.sum_ns,
                };
                Some((summary, d))
            })
            .collect();
        Ok(rank_collective_stats(rank, &joined, &rest))
    }

    /// The observations of the `mixed` calls (none read when there are none).
    async fn mixed_rows(
        &self,
        job: &str,
        mixed: &HashSet<(&str, u64)>,
    ) -> Result<Vec<CollectiveObs>, StoreError> {
        if mixed.is_empty() {
            return Ok(Vec::new());
        }
        let rows: Vec<CollectiveReadRow> = self
            .read(JOB_COLLECTIVES_MIXED_SQL)
            .bind(job)
            .bind(job)
            .fetch_all()
            .await
            .map_err(StoreError::query("job collectives, mixed calls"))?;
        // Only the calls found mixed above: one that became mixed since
        // (rows stored in between) was already counted as uniform.
        Ok(rows
            .into_iter()
            .filter(|r| mixed.contains(&(r.process_group.as_str(), r.seq)))
            .filter_map(CollectiveReadRow::into_obs)
            .collect())
    }
}
