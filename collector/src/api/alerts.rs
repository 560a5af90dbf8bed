//! `GET /api/v1/alerts?job=&active=`: alerts with their latest state.
//!
//! Fields: `job`, `rule`, `rank` (null for job-wide alerts), `node`,
//! `severity`, `state` (`firing` / `resolved`), `started_at_ns`,
//! `resolved_at_ns` (null while firing), `summary`, `evidence` (object).

use axum::extract::{Query, State};
use axum::Json;
use serde::{Deserialize, Serialize};

use super::{ApiError, ApiState};

/// Query of the alerts route.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlertsQuery {
    job: Option<String>,
    #[serde(default)]
    active: bool,
}

/// One alert.
#[derive(Debug, Serialize)]
pub struct AlertOut {
    job: String,
    rule: String,
    rank: Option<i64>,
    node: String,
    severity: String,
    state: String,
    started_at_ns: u64,
    resolved_at_ns: Option<u64>,
    summary: String,
    evidence: serde_json::Value,
}

pub(super) async fn alerts(
    State(st): State<ApiState>,
    Query(q): Query<AlertsQuery>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let rows = st.store.alerts(q.job.as_deref(), q.active).await?;
    let out: Vec<AlertOut> = rows
        .into_iter()
        .map(|r| AlertOut {
            evidence: serde_json::from_str(&r.evidence).unwrap_or(serde_json::Value::Null),
            job: r.job_id,
            rule: r.rule,
            rank: (r.rank >= 0).then_some(r.rank),
            node: r.node,
            severity: r.severity,
            state: r.state,
            started_at_ns: r.started_at_ns,
            resolved_at_ns: (r.resolved_at_ns > 0).then_some(r.resolved_at_ns),
            summary: r.summary,
        })
        .collect();
    Ok(Json(serde_json::json!({ "alerts": out })))
}
