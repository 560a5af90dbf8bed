//! The `job_owners` table (migration 0015): which collector holds which
//! job's live state. In: rows from `ownership`; out: the recent holders of
//! every job (`queries/job_owners.sql`).

use clickhouse::Row;
use serde::{Deserialize, Serialize};

use super::sql::{query_file, QueryFile};
use super::{Store, StoreError};

const OWNERS_SQL: QueryFile = query_file!("job_owners");

/// One collector holding one job (also the row written).
#[derive(Debug, Clone, PartialEq, Eq, Row, Serialize, Deserialize)]
pub struct OwnerRow {
    pub job_id: String,
    /// The collector's id (`[ownership] collector_id`, default its gRPC
    /// address).
    pub collector: String,
    /// Its schema version (its last migration).
    pub schema_version: u32,
    /// When it took the job.
    pub since_ns: u64,
    /// When it last said it holds the job.
    pub seen_ns: u64,
}

/// A row of `job_owners.sql`.
#[derive(Debug, Row, Deserialize)]
struct OwnerRead {
    job_id: String,
    collector: String,
    version: u32,
    since: u64,
    seen: u64,
}

impl Store {
    /// Every (job, collector) seen holding a job since `since_ns`.
    pub async fn job_owners(&self, since_ns: u64) -> Result<Vec<OwnerRow>, StoreError> {
        let rows: Vec<OwnerRead> = self
            .read(OWNERS_SQL)
            .bind(since_ns)
            .fetch_all()
            .await
            .map_err(StoreError::query("job owners"))?;
        Ok(rows
            .into_iter()
            .map(|r| OwnerRow {
                job_id: r.job_id,
                collector: r.collector,
                schema_version: r.version,
                since_ns: r.since,
                seen_ns: r.seen,
            })
            .collect())
    }

    /// Writes `rows` (a take-over, or the holder's refresh).
    pub async fn record_owners(&self, rows: &[OwnerRow]) -> Result<(), StoreError> {
        if rows.is_empty() {
            return Ok(());
        }
        let mut insert = self
            .client()
            .insert::<OwnerRow>("job_owners")
            .await
            .map_err(StoreError::query("record job owners"))?;
        for r in rows {
            insert
                .write(r)
                .await
                .map_err(StoreError::query("record job owners"))?;
        }
        insert
            .end()
            .await
            .map_err(StoreError::query("record job owners"))
    }
}
