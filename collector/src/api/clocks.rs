//! `GET /api/v1/jobs/{job}/clocks`: each node's clock offset against the
//! reference node (the node of the job's lowest rank), estimated from the
//! ends of the job's blocking collectives at query time
//! (`Store::clock_estimate`, `rankscope_analysis::clocks`).
//!
//! Answer: `{"job", "reference_node", "instances", "inconsistent",
//! "uncertainty", "nodes": [{"node", "offset_us", "uncertainty_us",
//! "method", "bound_lo_us", "bound_hi_us", "median_us", "median_se_us",
//! "samples", "rejected"}]}`, nodes by name. `offset_us` is the node's clock
//! minus the reference clock (subtract it from the node's times), `null`
//! for a node that shares no collective with the reference node. `method`
//! `bounds`: the offset is the centre of the causal bounds `[bound_lo_us,
//! bound_hi_us]` (the offsets for which no member left a collective before
//! the last one arrived, agreed by the most instances) and
//! `uncertainty_us` their half-width; `median` (no instance bounds it): the
//! median end residual `median_us`, `uncertainty_us` its one-sigma standard
//! error `median_se_us` (`sqrt(pi/2) * 1.4826 * MAD / sqrt(samples)`).
//! `samples` / `rejected`: instances kept / rejected by the MAD rule
//! (`rankscope_analysis::clocks`). `inconsistent` counts the instances whose
//! latest start is after their earliest end once corrected. 404 for an
//! unknown job; a job without blocking collectives answers an empty `nodes`.

use axum::extract::{Path, State};
use axum::Json;
use rankscope_analysis::clocks::ClockEstimate;
use serde::Serialize;

use super::{ApiError, ApiState};

/// How `uncertainty_us` is defined (carried in the answer).
pub const UNCERTAINTY: &str = "method bounds: half-width of the causal bounds (no member leaves a collective before the last one arrived), over the instances kept after rejecting end residuals beyond 3 * 1.4826 * MAD from their median; method median: one-sigma standard error of the median end residual, sqrt(pi/2) * 1.4826 * MAD / sqrt(samples)";

#[derive(Debug, Serialize)]
pub(super) struct NodeOut {
    node: String,
    offset_us: Option<f64>,
    uncertainty_us: f64,
    method: &'static str,
    bound_lo_us: Option<f64>,
    bound_hi_us: Option<f64>,
    median_us: f64,
    median_se_us: f64,
    samples: u64,
    rejected: u64,
}

#[derive(Debug, Serialize)]
pub(super) struct ClocksOut {
    job: String,
    reference_node: String,
    instances: u64,
    inconsistent: u64,
    uncertainty: &'static str,
    nodes: Vec<NodeOut>,
}

/// The answer for `job` from its estimate.
fn answer(job: String, e: ClockEstimate) -> ClocksOut {
    ClocksOut {
        job,
        reference_node: e.reference_node,
        instances: e.instances,
        inconsistent: e.inconsistent,
        uncertainty: UNCERTAINTY,
        nodes: e
            .nodes
            .into_iter()
            .map(|n| NodeOut {
                node: n.node,
                offset_us: n.offset_ns.map(|o| o as f64 / 1000.0),
                uncertainty_us: n.uncertainty_ns.round() / 1000.0,
                method: if n.from_bounds { "bounds" } else { "median" },
                bound_lo_us: n.bounds_ns.map(|b| b.0 as f64 / 1000.0),
                bound_hi_us: n.bounds_ns.map(|b| b.1 as f64 / 1000.0),
                median_us: n.median_ns as f64 / 1000.0,
                median_se_us: n.median_se_ns.round() / 1000.0,
                samples: n.samples,
                rejected: n.rejected,
            })
            .collect(),
    }
}

pub(super) async fn clocks(
    State(st): State<ApiState>,
    Path(job): Path<String>,
) -> Result<Json<ClocksOut>, ApiError> {
    let e = st.store.clock_estimate(&job).await?;
    st.require_job(&job, e.nodes.is_empty()).await?;
    Ok(Json(answer(job, e)))
}
