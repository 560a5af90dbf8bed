//! `POST /api/v1/jobs/{job}/traces` (request a Kineto trace of some or all
//! ranks) and `GET /api/v1/jobs/{job}/traces[?trace_id=]` (what became of
//! each rank's trace); see [`crate::traces`].
//!
//! Request body: `{"ranks": [0, 3], "iterations": 2}` or
//! `{"duration_ms": 500}`; `ranks` absent or empty = every rank;
//! `iteration_roundup` optional (default `traces.iteration_roundup`).
//! Answer: `{"trace_id": .., "ranks": [<TraceRankView>..]}` (201), or
//! `{"error": ..}` with 400 (bad body), 404 (job unknown to the store and to
//! every agent) or 503.

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};

use super::{ApiError, ApiState};
use crate::traces::{NewTrace, RequestError, TraceMode, TraceRankView};

/// Body of `POST .../traces`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct TraceBody {
    #[serde(default)]
    ranks: Vec<u32>,
    duration_ms: Option<u64>,
    iterations: Option<u64>,
    iteration_roundup: Option<u64>,
}

/// Answer of `POST .../traces`.
#[derive(Debug, Serialize)]
pub(super) struct TraceCreated {
    trace_id: String,
    ranks: Vec<TraceRankView>,
}

/// Answer of `GET .../traces`.
#[derive(Debug, Serialize)]
pub(super) struct TraceList {
    job_id: String,
    traces: Vec<TraceRankView>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ListQuery {
    trace_id: Option<String>,
}

pub(super) async fn request(
    State(st): State<ApiState>,
    Path(job): Path<String>,
    body: Result<Json<TraceBody>, axum::extract::rejection::JsonRejection>,
) -> Result<(StatusCode, Json<TraceCreated>), ApiError> {
    let Json(body) = body.map_err(|e| {
        ApiError(
            StatusCode::BAD_REQUEST,
            format!("bad trace request body: {}", e.body_text()),
        )
    })?;
    let mode = match (body.duration_ms, body.iterations) {
        (Some(ms), None) => {
            if body.iteration_roundup.is_some() {
                return Err(ApiError(
                    StatusCode::BAD_REQUEST,
                    "iteration_roundup applies to an iterations request only".into(),
                ));
            }
            TraceMode::DurationMs(ms)
        }
        (None, Some(iterations)) => TraceMode::Iterations {
            iterations,
            roundup: body
                .iteration_roundup
                .unwrap_or(st.traces.config().iteration_roundup)
                .max(1),
        },
        _ => {
            return Err(ApiError(
                StatusCode::BAD_REQUEST,
                "give exactly one of duration_ms and iterations".into(),
            ))
        }
    };
    let ranks = st
        .traces
        .request(NewTrace {
            job,
            ranks: body.ranks,
            mode,
            origin: "manual".into(),
            subject: None,
        })
        .await
        .map_err(|e| match e {
            RequestError::Invalid(m) => ApiError(StatusCode::BAD_REQUEST, m),
            RequestError::NotFound(m) => ApiError(StatusCode::NOT_FOUND, m),
            RequestError::Unavailable(m) => ApiError(StatusCode::SERVICE_UNAVAILABLE, m),
        })?;
    Ok((
        StatusCode::CREATED,
        Json(TraceCreated {
            trace_id: ranks[0].trace_id.clone(),
            ranks,
        }),
    ))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct DiffQuery {
    rank: Option<u32>,
}

/// `GET /api/v1/jobs/{job}/traces/{trace}/diff[?rank=R]`: the trace's
/// subject rank (R, else the straggler an automatic trace was made for,
/// else the rank with the most time per iteration) against its other ranks.
pub(super) async fn diff(
    State(st): State<ApiState>,
    Path((job, trace)): Path<(String, String)>,
    Query(q): Query<DiffQuery>,
) -> Result<Json<crate::traces::TraceDiff>, ApiError> {
    st.traces
        .diff(&job, &trace, q.rank)
        .await
        .map(Json)
        .map_err(|e| match e {
            RequestError::Invalid(m) => ApiError(StatusCode::BAD_REQUEST, m),
            RequestError::NotFound(m) => ApiError(StatusCode::NOT_FOUND, m),
            RequestError::Unavailable(m) => ApiError(StatusCode::SERVICE_UNAVAILABLE, m),
        })
}

pub(super) async fn list(
    State(st): State<ApiState>,
    Path(job): Path<String>,
    Query(q): Query<ListQuery>,
) -> Result<Json<TraceList>, ApiError> {
    let mut traces = st.traces.list(&job);
    if let Some(id) = &q.trace_id {
        traces.retain(|t| &t.trace_id == id);
        if traces.is_empty() {
            return Err(ApiError(
                StatusCode::NOT_FOUND,
                format!("trace {id:?} of job {job:?} not found"),
            ));
        }
    }
    if traces.is_empty() {
        st.require_job(&job, true).await?;
    }
    Ok(Json(TraceList {
        job_id: job,
        traces,
    }))
}
