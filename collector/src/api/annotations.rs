//! `GET /api/v1/jobs/{job}/annotations[?rank=R&exact=true]` (issue 29): GPU
//! time per user annotation per rank, HTA 0.5.0's
//! `get_gpu_user_annotation_breakdown` (definitions:
//! `rankscope_analysis::annotations`).
//!
//! In: the job's `gpu_user_annotation` ranges (stored by the importer as
//! `other` spans with a device). As the HTA views, the ranges are loaded as
//! HTA loads a trace (`rankscope_analysis::hta_load`: with two or more
//! ProfilerSteps only ranges starting by the last step's end, whole
//! microseconds rounded inward) unless `exact=true`. Out: rows `rank`,
//! `name`, `count`, `sum_ns`, `max_ns`, `min_ns`, `mean_ns`, `stddev_ns`,
//! sorted by rank and name. A job without GPU annotations gives no rows and
//! a note (200); an unknown job is 404, an unknown rank 404 naming the ranks
//! that have annotations.

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::Json;
use rankscope_analysis::annotations::annotation_breakdown;
use rankscope_analysis::hta_load::{keeps, round_inward_us};
use serde::Deserialize;
use serde_json::{json, Value};

use super::{ApiError, ApiState};

/// Options of `annotations`.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct AnnotationsQuery {
    rank: Option<u32>,
    exact: Option<bool>,
}

pub(super) async fn annotations(
    State(st): State<ApiState>,
    Path(job): Path<String>,
    Query(q): Query<AnnotationsQuery>,
) -> Result<Json<Value>, ApiError> {
    let mut all = st.store.gpu_annotations(&job).await?;
    if all.is_empty() {
        st.require_job(&job, true).await?;
        return Ok(Json(json!({
            "job": job,
            "annotations": [],
            "note": "the job has no GPU-side user annotations (gpu_user_annotation ranges: \
                     record_function ranges in a trace taken with CUDA activities)",
        })));
    }
    if let Some(r) = q.rank {
        if !all.iter().any(|a| a.rank == r) {
            let mut have: Vec<u32> = all.iter().map(|a| a.rank).collect();
            have.dedup();
            let have: Vec<String> = have.iter().map(u32::to_string).collect();
            return Err(ApiError(
                StatusCode::NOT_FOUND,
                format!(
                    "rank {r} of job {job:?} has no GPU user annotations; ranks with some: {}",
                    have.join(", ")
                ),
            ));
        }
        all.retain(|a| a.rank == r);
    }
    if !q.exact.unwrap_or(false) {
        let windows = st.store.hta_windows(&job).await?;
        all.retain(|a| {
            keeps(
                windows.get(&a.rank).copied().unwrap_or_default(),
                Some(a.start_ns),
            )
        });
        for a in &mut all {
            (a.start_ns, a.end_ns) = round_inward_us(a.start_ns, a.end_ns);
        }
    }
    let mut rows = Vec::new();
    for chunk in all.chunk_by(|a, b| a.rank == b.rank) {
        let rank = chunk[0].rank;
        let durs = chunk
            .iter()
            .map(|a| (a.name.as_str(), a.end_ns as i64 - a.start_ns as i64));
        for r in annotation_breakdown(durs) {
            rows.push(json!({
                "rank": rank,
                "name": r.name,
                "count": r.count,
                "sum_ns": r.sum_ns,
                "max_ns": r.max_ns,
                "min_ns": r.min_ns,
                "mean_ns": r.mean_ns,
                "stddev_ns": r.stddev_ns,
            }));
        }
    }
    Ok(Json(json!({ "job": job, "annotations": rows })))
}
