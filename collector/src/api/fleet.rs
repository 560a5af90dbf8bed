//! `GET /api/v1/fleet[?since=7d][&by=node|gpu|link][&min_jobs=N]`: which
//! nodes, GPUs or links keep slowing jobs down, over every job in the window
//! ([`crate::fleet`]).
//!
//! Answer: `{"as_of_ns", "since_ns", "by", "min_jobs", "base_rate", "rows":
//! [FleetRow]}`, rows ranked worst first by `score`, `low_exposure` rows
//! last; each row's `hardware` carries its GPUs' Xid / ECC / PCIe replay
//! counts ([`crate::fleet::counters`]). `as_of_ns`: when the answer was
//! computed; answers are kept for at
//! most one `repeat_offender` tick ([`crate::fleet::cache`]), and `since_ns`
//! is counted back from `as_of_ns`. 400 for a malformed or future `since`,
//! an unknown `by`, `min_jobs` = 0.

use axum::extract::{Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use rankscope_analysis::fleet::FleetPolicy;
use serde::Deserialize;

use super::{ApiError, ApiState};
use crate::fleet::cache::{Key, Window};
use crate::fleet::{parse_since, By};

/// Query parameters of the fleet route.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FleetQuery {
    since: Option<String>,
    by: Option<String>,
    min_jobs: Option<u64>,
}

/// The checked parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FleetArgs {
    pub since_ns: u64,
    /// The window as the request gave it (relative or absolute).
    pub window: Window,
    pub by: By,
    pub min_jobs: u64,
}

impl FleetQuery {
    /// Checks the parameters against `now_ns` (default window 7 days, by
    /// node, 3 jobs).
    pub fn check(&self, now_ns: u64) -> Result<FleetArgs, ApiError> {
        let bad = |m: String| ApiError(StatusCode::BAD_REQUEST, m);
        let since = self.since.as_deref().unwrap_or("7d");
        let since_ns = parse_since(since, now_ns).map_err(bad)?;
        // parse_since takes 19 or more digits as an absolute time.
        let window = if since.trim().len() >= 19 {
            Window::Since(since_ns)
        } else {
            Window::Last(now_ns - since_ns)
        };
        let by = self.by.as_deref().unwrap_or("node").parse().map_err(bad)?;
        let min_jobs = self.min_jobs.unwrap_or(FleetPolicy::default().min_jobs);
        if min_jobs == 0 {
            return Err(bad("min_jobs must be >= 1".into()));
        }
        Ok(FleetArgs {
            since_ns,
            window,
            by,
            min_jobs,
        })
    }
}

pub(super) async fn fleet(
    State(st): State<ApiState>,
    Query(q): Query<FleetQuery>,
) -> Result<Response, ApiError> {
    let now = crate::service::now_ns();
    let args = q.check(now)?;
    let key = Key {
        window: args.window,
        by: args.by,
        min_jobs: args.min_jobs,
    };
    let body = st.fleet.answer(&st.store, key, now).await?;
    Ok(([(header::CONTENT_TYPE, "application/json")], body).into_response())
}
