//! `GET /api/v1/fleet[?since=7d][&by=node|gpu|link][&min_jobs=N]`: which
//! nodes, GPUs or links keep slowing jobs down, over every job in the window
//! ([`crate::fleet`]).
//!
//! Answer: `{"since_ns", "by", "min_jobs", "base_rate", "rows": [FleetRow]}`,
//! rows ranked worst first by `score`, `low_exposure` rows last; each row's
//! `hardware` carries its GPUs' Xid / ECC / PCIe replay counts
//! ([`crate::fleet::counters`]). 400 for a
//! malformed or future `since`, an unknown `by`, `min_jobs` = 0.

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::Json;
use rankscope_analysis::fleet::FleetPolicy;
use serde::{Deserialize, Serialize};

use super::{ApiError, ApiState};
use crate::fleet::{assemble, parse_since, By, FleetRow};

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
    pub by: By,
    pub min_jobs: u64,
}

impl FleetQuery {
    /// Checks the parameters against `now_ns` (default window 7 days, by
    /// node, 3 jobs).
    pub fn check(&self, now_ns: u64) -> Result<FleetArgs, ApiError> {
        let bad = |m: String| ApiError(StatusCode::BAD_REQUEST, m);
        let since_ns = parse_since(self.since.as_deref().unwrap_or("7d"), now_ns).map_err(bad)?;
        let by = self.by.as_deref().unwrap_or("node").parse().map_err(bad)?;
        let min_jobs = self.min_jobs.unwrap_or(FleetPolicy::default().min_jobs);
        if min_jobs == 0 {
            return Err(bad("min_jobs must be >= 1".into()));
        }
        Ok(FleetArgs {
            since_ns,
            by,
            min_jobs,
        })
    }
}

#[derive(Debug, Serialize)]
pub(super) struct FleetOut {
    since_ns: u64,
    by: By,
    min_jobs: u64,
    /// Flagged placements per placement over the window's units.
    base_rate: f64,
    rows: Vec<FleetRow>,
}

pub(super) async fn fleet(
    State(st): State<ApiState>,
    Query(q): Query<FleetQuery>,
) -> Result<Json<FleetOut>, ApiError> {
    let args = q.check(crate::service::now_ns())?;
    // GPU error counts are evidence on nodes and GPUs, not on links.
    let counters = async {
        match args.by {
            By::Link => Ok(Vec::new()),
            By::Node | By::Gpu => st.store.fleet_gpu_counters(args.since_ns).await,
        }
    };
    let (facts, counters) =
        tokio::try_join!(st.store.fleet_facts_by(args.since_ns, args.by), counters)?;
    let mut rows = assemble(
        &facts,
        args.by,
        FleetPolicy {
            min_jobs: args.min_jobs,
        },
    );
    crate::fleet::counters::attach(&mut rows, &counters, args.by);
    let (n, k) = rows.iter().fold((0u64, 0u64), |(n, k), r| {
        (n + r.placements, k + r.flagged_placements)
    });
    Ok(Json(FleetOut {
        since_ns: args.since_ns,
        by: args.by,
        min_jobs: args.min_jobs,
        base_rate: if n == 0 { 0.0 } else { k as f64 / n as f64 },
        rows,
    }))
}
