//! HTTP JSON API of the collector.
//!
//! Routes: `GET /healthz`, `GET /metrics` (Prometheus text),
//! `GET /api/v1/jobs`, `GET /api/v1/jobs/{job}/steps?from_step=&to_step=&last=`,
//! and the analytics routes of [`analytics`] (`breakdown`, `ranks`,
//! `collectives`, `stragglers`, `hangs`), the step-range routes of
//! [`matrix`] (`matrix`, `collectives/steps`, for the web UI),
//! `GET /api/v1/gpus` of [`telemetry`] and `POST`/`GET
//! /api/v1/jobs/{job}/traces` of [`traces`]. `GET /` and `/ui/*` serve the web
//! UI ([`ui`]); only `/api/*` needs the bearer token.
//! In: HTTP requests. Out: JSON documents (`{"error": "..."}` with a 4xx/5xx
//! status on failure). Reads go to ClickHouse through [`Store`]; the API holds
//! no state of its own.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};

mod advice;
mod alerts;
mod analytics;
mod annotations;
mod clocks;
mod diff;
mod fleet;
mod goodput;
mod gpu;
pub mod matrix;
mod opsmem;
mod overview;
mod telemetry;
mod timeline;
mod traces;
mod ui;
mod views;

use crate::store::{JobRow, StepTimeRow, Store};

/// Shared state of the handlers.
#[derive(Clone)]
pub struct ApiState {
    /// Bearer token required on `/api/*` (empty: none).
    pub auth_token: String,
    /// Read access to ClickHouse.
    pub store: Store,
    /// Every exported counter (and the ingest and writer histograms).
    pub counters: crate::counters::Counters,
    /// Latest analytics values as gauges.
    pub gauges: Arc<crate::gauges::JobGauges>,
    /// Kineto traces on request.
    pub traces: crate::traces::TraceHub,
    /// Straggler verdicts as the live analytics raised them (not yet
    /// stored, perhaps).
    pub live: Arc<crate::stream::live::LiveVerdicts>,
    /// Fleet answers kept for one `repeat_offender` tick.
    pub fleet: crate::fleet::cache::FleetCache,
    /// Overview figures kept while a job's inputs are unchanged.
    pub overviews: Arc<overview::cache::OverviewCache>,
}

/// The API's router.
pub fn router(state: ApiState) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .route("/api/v1/jobs", get(jobs))
        .route("/api/v1/jobs/{job}/steps", get(steps))
        .route("/api/v1/jobs/{job}/breakdown", get(analytics::breakdown))
        .route("/api/v1/jobs/{job}/progress", get(analytics::progress))
        .route("/api/v1/jobs/{job}/ranks", get(analytics::ranks))
        .route(
            "/api/v1/jobs/{job}/collectives",
            get(analytics::collectives),
        )
        .route("/api/v1/jobs/{job}/stragglers", get(analytics::stragglers))
        .route("/api/v1/jobs/{job}/hangs", get(analytics::hangs))
        .route("/api/v1/jobs/{job}/kernel-types", get(gpu::kernel_types))
        .route("/api/v1/jobs/{job}/kernels", get(gpu::kernels))
        .route("/api/v1/jobs/{job}/idle", get(gpu::idle))
        .route("/api/v1/jobs/{job}/queue", get(gpu::queue))
        .route("/api/v1/jobs/{job}/memcpy", get(gpu::memcpy))
        .route("/api/v1/jobs/{job}/launches", get(gpu::launches))
        .route("/api/v1/jobs/{job}/overview", get(overview::overview))
        .route("/api/v1/jobs/{job}/advice", get(advice::advice))
        .route(
            "/api/v1/jobs/{job}/annotations",
            get(annotations::annotations),
        )
        .route(
            "/api/v1/jobs/{job}/traces",
            post(traces::request).get(traces::list),
        )
        .route("/api/v1/jobs/{job}/traces/{trace}/diff", get(traces::diff))
        .route("/api/v1/jobs/{job}/goodput", get(goodput::goodput))
        .route("/api/v1/jobs/{job}/diff", get(diff::diff))
        .route("/api/v1/jobs/{job}/timeline", get(timeline::timeline))
        .route("/api/v1/jobs/{job}/matrix", get(matrix::matrix))
        .route(
            "/api/v1/jobs/{job}/collectives/steps",
            get(matrix::collective_steps),
        )
        .route("/api/v1/alerts", get(alerts::alerts))
        .route("/api/v1/gpus", get(telemetry::gpus))
        .route("/api/v1/jobs/{job}/ops", get(opsmem::ops))
        .route("/api/v1/jobs/{job}/memory", get(opsmem::memory))
        .route("/api/v1/fleet", get(fleet::fleet))
        .route("/api/v1/jobs/{job}/clocks", get(clocks::clocks))
        .route("/", get(ui::index))
        .route("/ui/{*path}", get(ui::asset))
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            require_token,
        ))
        .with_state(state)
}

impl ApiState {
    /// 404 when a query came back empty because the job does not exist.
    async fn require_job(&self, job: &str, empty: bool) -> Result<(), ApiError> {
        if empty && !self.store.job_exists(job).await? {
            return Err(ApiError(
                StatusCode::NOT_FOUND,
                format!("job {job:?} not found"),
            ));
        }
        Ok(())
    }
}

/// Rejects `/api/*` requests without the configured bearer token (401).
async fn require_token(
    State(st): State<ApiState>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let open = !req.uri().path().starts_with("/api/");
    let header = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok());
    if open || rankscope_proto::auth::authorized(header, &st.auth_token) {
        next.run(req).await
    } else {
        tracing::debug!(path = %req.uri().path(), "API request without a valid token");
        ApiError(
            StatusCode::UNAUTHORIZED,
            "missing or wrong bearer token (RANKSCOPE_TOKEN)".into(),
        )
        .into_response()
    }
}

/// An error answered as `{"error": ".."}`.
#[derive(Debug)]
pub struct ApiError(StatusCode, String);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.0, Json(serde_json::json!({ "error": self.1 }))).into_response()
    }
}

impl From<crate::store::StoreError> for ApiError {
    fn from(e: crate::store::StoreError) -> Self {
        tracing::warn!(error = %e, "query failed");
        // A result type the reader does not expect is our bug, not an outage.
        let status = if e.is_type_mismatch() {
            StatusCode::INTERNAL_SERVER_ERROR
        } else {
            StatusCode::SERVICE_UNAVAILABLE
        };
        ApiError(status, format!("query failed: {e}"))
    }
}

async fn healthz(State(st): State<ApiState>) -> Response {
    match st.store.ping().await {
        Ok(()) => (StatusCode::OK, "ok\n").into_response(),
        Err(e) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("clickhouse: {e}\n"),
        )
            .into_response(),
    }
}

async fn metrics(State(st): State<ApiState>) -> Response {
    let mut out = String::new();
    crate::counters::render(&st.counters.families(), &mut out);
    st.counters.ingest.batch_latency.render(
        &mut out,
        "rankscope_collector_batch_latency_seconds",
        "Time from receiving an agent batch to acknowledging it after ClickHouse stored it.",
    );
    st.counters.writer.metrics().insert_latency.render(
        &mut out,
        "rankscope_collector_clickhouse_insert_latency_seconds",
        "Duration of successful ClickHouse INSERT statements.",
    );
    st.gauges.render(&mut out);
    ([("content-type", "text/plain; version=0.0.4")], out).into_response()
}

#[derive(Serialize)]
struct JobsResponse {
    jobs: Vec<JobRow>,
}

async fn jobs(State(st): State<ApiState>) -> Result<Json<JobsResponse>, ApiError> {
    Ok(Json(JobsResponse {
        jobs: st.store.jobs().await?,
    }))
}

/// Query parameters of the steps route.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StepsQuery {
    from_step: Option<u64>,
    to_step: Option<u64>,
    last: Option<u64>,
}

impl StepsQuery {
    fn check(&self) -> Result<(), ApiError> {
        if let (Some(a), Some(b)) = (self.from_step, self.to_step) {
            if a > b {
                return Err(ApiError(
                    StatusCode::BAD_REQUEST,
                    format!("from_step = {a} is after to_step = {b}"),
                ));
            }
        }
        if self.last == Some(0) {
            return Err(ApiError(
                StatusCode::BAD_REQUEST,
                "last must be >= 1".into(),
            ));
        }
        Ok(())
    }
}

/// Routes [`check_query`] knows.
pub const QUERY_ROUTES: &[&str] = &[
    "steps",
    "gpu/kernels",
    "gpu/idle",
    "gpu/launches",
    "timeline",
    "matrix",
    "alerts",
    "goodput",
    "breakdown",
    "collectives",
    "gpus",
    "diff",
    "traces/list",
    "traces/diff",
    "ops",
    "memory",
    "fleet",
    "ranks",
];

/// A route's query string as its handler takes it, without the store:
/// parsed as axum's `Query` extractor does, then (where the checks are
/// factored out of the handler) validated. `Err` is the 400 message. For
/// the fuzzer (`rankscope-fuzz`, target `query`).
pub fn check_query(route: &str, uri: &http::Uri) -> Result<(), String> {
    fn parse<T: serde::de::DeserializeOwned>(uri: &http::Uri) -> Result<T, String> {
        Query::<T>::try_from_uri(uri)
            .map(|q| q.0)
            .map_err(|e| format!("parse: {e}"))
    }
    let checked = |r: Result<(), ApiError>| r.map_err(|e| format!("invalid: {}", e.1));
    match route {
        "steps" => checked(parse::<StepsQuery>(uri)?.check()),
        "gpu/kernels" => checked(parse::<gpu::GpuQuery>(uri)?.kernels_args().map(drop)),
        "gpu/idle" => checked(parse::<gpu::GpuQuery>(uri)?.idle_delay_ns().map(drop)),
        "gpu/launches" => checked(parse::<gpu::GpuQuery>(uri)?.launches_cutoffs_ns().map(drop)),
        "timeline" => checked(parse::<timeline::TimelineQuery>(uri)?.check().map(drop)),
        "matrix" => {
            let q = parse::<matrix::RangeQuery>(uri)?;
            checked(matrix::parse_fields(q.fields.as_deref()).map(drop))
        }
        "alerts" => parse::<alerts::AlertsQuery>(uri).map(drop),
        "goodput" => parse::<goodput::GoodputQuery>(uri).map(drop),
        "breakdown" => parse::<analytics::BreakdownQuery>(uri).map(drop),
        "ranks" => parse::<analytics::RanksQuery>(uri).map(drop),
        "collectives" => parse::<analytics::CollectivesQuery>(uri).map(drop),
        "gpus" => parse::<telemetry::GpusQuery>(uri).map(drop),
        "diff" => parse::<diff::DiffQuery>(uri).map(drop),
        "traces/list" => parse::<traces::ListQuery>(uri).map(drop),
        "traces/diff" => parse::<traces::DiffQuery>(uri).map(drop),
        "ops" => checked(parse::<opsmem::OpsQuery>(uri)?.check()),
        "memory" => parse::<opsmem::MemoryQuery>(uri).map(drop),
        "fleet" => checked(
            parse::<fleet::FleetQuery>(uri)?
                .check(crate::service::now_ns())
                .map(drop),
        ),
        _ => Err(format!("unknown route {route:?}")),
    }
}

#[derive(Serialize)]
struct StepsResponse {
    job: String,
    steps: Vec<StepTimeRow>,
}

async fn steps(
    State(st): State<ApiState>,
    Path(job): Path<String>,
    Query(q): Query<StepsQuery>,
) -> Result<Json<StepsResponse>, ApiError> {
    q.check()?;
    let steps = st
        .store
        .step_times(&job, q.from_step, q.to_step, q.last)
        .await?;
    st.require_job(&job, steps.is_empty()).await?;
    Ok(Json(StepsResponse { job, steps }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::StoreError;

    #[test]
    fn a_result_type_mismatch_is_a_500_naming_the_query_and_an_outage_a_503() {
        let mismatch = StoreError::Query {
            what: "goodput job",
            source: clickhouse::error::Error::SchemaMismatch(
                "goodput_job.sql: While processing column GoodputJob.world_size defined as \
                 Nullable(UInt32): attempting to (de)serialize u32"
                    .into(),
            ),
        };
        assert!(mismatch.is_type_mismatch());
        let ApiError(status, text) = mismatch.into();
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
        assert!(text.contains("goodput_job.sql") && text.contains("Nullable(UInt32)"));
        let down = StoreError::Query {
            what: "goodput job",
            source: clickhouse::error::Error::TimedOut,
        };
        assert_eq!(ApiError::from(down).0, StatusCode::SERVICE_UNAVAILABLE);
    }
}
