//! `GET /api/v1/jobs/{job}/memory?events=true[&rank=R][&limit=N][&offset=K]`:
//! the `[memory]` events of a job's traces one by one (allocations with
//! bytes > 0, releases <= 0), with the totals Kineto wrote after each and
//! the operator each is attributed to (the TensorBoard plugin 0.4.3's rule,
//! `rankscope_analysis::optree::memory::record_operators`: Σ bytes of one
//! operator's events = its `self_size_increase_bytes`), in (rank, device,
//! time) order, a page of `limit` (1..=[`MAX_LIMIT`], default
//! [`DEFAULT_LIMIT`]) from `offset`; `events_total` counts them all.

use axum::http::StatusCode;
use serde::Serialize;

use super::super::{ApiError, ApiState};

/// Most events in one answer.
pub const MAX_LIMIT: u64 = 100_000;
/// Events in one answer unless `limit` says otherwise.
pub const DEFAULT_LIMIT: u64 = 1_000;

/// One event as the API answers it.
#[derive(Debug, Serialize)]
pub(in crate::api) struct EventRow {
    rank: u32,
    device: String,
    ts_ns: u64,
    bytes: i64,
    total_allocated_bytes: i64,
    total_reserved_bytes: i64,
    operator: String,
}

/// A page of `job`'s events and their total count; 400 for a `limit`
/// outside 1..=[`MAX_LIMIT`].
pub(in crate::api) async fn events(
    st: &ApiState,
    job: &str,
    rank: Option<u32>,
    limit: Option<u64>,
    offset: Option<u64>,
) -> Result<(Vec<EventRow>, u64), ApiError> {
    let limit = limit.unwrap_or(DEFAULT_LIMIT);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(ApiError(
            StatusCode::BAD_REQUEST,
            format!("limit must be 1..={MAX_LIMIT}, got {limit}"),
        ));
    }
    let (rows, total) = st
        .store
        .job_memory_events(job, rank, offset.unwrap_or(0), limit)
        .await?;
    let rows = rows
        .into_iter()
        .map(|e| EventRow {
            rank: e.rank,
            device: super::memory::device_name(e.device),
            ts_ns: e.ts_ns,
            bytes: e.bytes,
            total_allocated_bytes: e.allocated_bytes,
            total_reserved_bytes: e.reserved_bytes,
            operator: e.name,
        })
        .collect();
    Ok((rows, total))
}
