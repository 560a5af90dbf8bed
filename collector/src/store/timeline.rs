//! Queries of the timeline export (`api::timeline`).

use clickhouse::Row;
use serde::Deserialize;

use super::sql::{query_file, QueryFile};
use super::{Store, StoreError};

const SPANS_SQL: QueryFile = query_file!("timeline_spans");
const COLLECTIVES_SQL: QueryFile = query_file!("timeline_collectives");

/// One span.
#[derive(Debug, Clone, PartialEq, Row, Deserialize)]
pub struct TimelineSpan {
    pub rank: u32,
    pub category: String,
    pub name: String,
    pub start_ns: u64,
    pub end_ns: u64,
    pub stream: u32,
    pub device: i32,
}

/// One collective call of one rank.
#[derive(Debug, Clone, PartialEq, Row, Deserialize)]
pub struct TimelineCollective {
    pub rank: u32,
    pub op: String,
    pub process_group: String,
    pub seq: u64,
    pub bytes: u64,
    pub stream: u32,
    pub device: i32,
    pub start_ns: u64,
    pub end_ns: u64,
}

impl Store {
    /// Spans that started in `from_ns..=to_ns`.
    pub async fn timeline_spans(
        &self,
        job: &str,
        from_ns: u64,
        to_ns: u64,
    ) -> Result<Vec<TimelineSpan>, StoreError> {
        self.read(SPANS_SQL)
            .bind(job)
            .bind(from_ns)
            .bind(to_ns)
            .fetch_all()
            .await
            .map_err(StoreError::query("timeline spans"))
    }

    /// Collectives that started in `from_ns..=to_ns`.
    pub async fn timeline_collectives(
        &self,
        job: &str,
        from_ns: u64,
        to_ns: u64,
    ) -> Result<Vec<TimelineCollective>, StoreError> {
        self.read(COLLECTIVES_SQL)
            .bind(job)
            .bind(from_ns)
            .bind(to_ns)
            .fetch_all()
            .await
            .map_err(StoreError::query("timeline collectives"))
    }
}
