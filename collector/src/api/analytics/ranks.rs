//! `GET /api/v1/jobs/{job}/ranks[?exact=true]`: each rank's temporal
//! breakdown and compute/communication overlap over all its GPU work.
//!
//! In: the job's stored GPU activities. Out: one [`RankOut`] per rank. By
//! default HTA 0.5.0's figures (`rankscope_analysis::hta_temporal`) over the
//! activities as HTA loads the trace (`api::gpu::load_ranks`); `exact`: the
//! union reading of every stored GPU activity (`Store::rank_summaries`).

use axum::extract::{Path, Query, State};
use axum::Json;
use rankscope_analysis::Breakdown;
use serde::{Deserialize, Serialize};

use super::super::{ApiError, ApiState};

/// One rank's temporal breakdown over the whole job.
#[derive(Debug, Serialize)]
pub struct RankOut {
    rank: u32,
    node: String,
    gpu_span_ns: u64,
    gpu_busy_ns: u64,
    idle_ns: u64,
    compute_ns: u64,
    non_compute_ns: u64,
    comm_ns: u64,
    memory_ns: u64,
    overlap_ns: u64,
    overlap_pct: Option<f64>,
    idle_pct: Option<f64>,
    compute_pct: Option<f64>,
    non_compute_pct: Option<f64>,
}

impl RankOut {
    fn new(rank: u32, node: String, b: &Breakdown) -> Self {
        Self {
            rank,
            node,
            gpu_span_ns: b.gpu_span_ns,
            gpu_busy_ns: b.gpu_busy_ns,
            idle_ns: b.idle_ns,
            compute_ns: b.compute_ns,
            non_compute_ns: b.non_compute_ns,
            comm_ns: b.comm_ns,
            memory_ns: b.memory_ns,
            overlap_ns: b.overlap_ns,
            overlap_pct: b.overlap_pct,
            idle_pct: b.idle_pct,
            compute_pct: b.compute_pct,
            non_compute_pct: b.non_compute_pct,
        }
    }
}

/// Query of the ranks route.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct RanksQuery {
    /// Every stored GPU activity at its stored times (the union reading,
    /// `rankscope_analysis::breakdown`), not HTA's loading rules.
    exact: Option<bool>,
}

/// `GET /api/v1/jobs/{job}/ranks[?exact=true]`: each rank's temporal
/// breakdown and overlap over all its GPU work. By default as HTA 0.5.0
/// computes them (`get_temporal_breakdown`, `get_comm_comp_overlap`:
/// `rankscope_analysis::hta_temporal`) over the activities as HTA loads the
/// trace (`api::gpu::load_ranks`: the ProfilerStep window, whole
/// microseconds, host events with a `stream`); `exact`: every stored GPU
/// activity at its stored times.
pub(in crate::api) async fn ranks(
    State(st): State<ApiState>,
    Path(job): Path<String>,
    Query(q): Query<RanksQuery>,
) -> Result<Json<serde_json::Value>, ApiError> {
    // The summaries and HTA's loading of the activities are independent
    // reads: side by side.
    let hta_ranks = async {
        if q.exact.unwrap_or(false) {
            Ok(Vec::new())
        } else {
            super::super::gpu::load_ranks(&st, &job, None, false).await
        }
    };
    let (rows, hta_ranks) = tokio::join!(st.store.rank_summaries(&job), hta_ranks);
    let rows = rows?;
    st.require_job(&job, rows.is_empty()).await?;
    let hta: std::collections::HashMap<u32, Breakdown> = hta_ranks?
        .iter()
        .map(|r| {
            (
                r.rank,
                rankscope_analysis::hta_temporal::hta_breakdown(&r.hta_gpu_ops()),
            )
        })
        .collect();
    let exact = q.exact.unwrap_or(false);
    let out: Vec<RankOut> = rows
        .into_iter()
        .map(|r| {
            let b = if exact {
                r.breakdown
            } else {
                // A rank HTA's window leaves without work has none.
                hta.get(&r.rank).copied().unwrap_or_default()
            };
            RankOut::new(r.rank, r.node, &b)
        })
        .collect();
    Ok(Json(serde_json::json!({ "job": job, "ranks": out })))
}
