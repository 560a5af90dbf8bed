//! `GET /api/v1/jobs/{job}/diff?rank=A&vs_rank=B[&vs_job=K][&from_step=&to_step=]`:
//! rank A of the job against rank B (of the same job, or of job K) over a
//! step range: per kernel name, with its category (HTA's kernel types,
//! `rankscope_analysis::classify_kernel`), calls and time per step on each
//! side, the largest absolute difference first; a kernel only one side ran
//! is marked (`only_on`: `a` or `b`). HTA's TraceDiff (v0.5.0,
//! `hta/analyzers/trace_diff.py`) compares two traces' operators the same
//! way, by counts and durations per name.
//!
//! Each side's kernels are those that started between the begin of its
//! first step in the range and the end of its last; per-step figures
//! divide by the steps it completed there. A communication kernel's time
//! includes waiting for the other ranks (the PyTorch Profiler's
//! "synchronizing" time, which `stragglers` and `goodput` account for);
//! both sides run the same collectives, so the part they have in common is
//! the transfer and the excess on one side is its wait
//! (`wait_ns_per_step_*`). The difference compares the time without that
//! wait (`diff_ns_per_step`), so a straggler's slow kernels come before its
//! peers' waiting. 400: no `rank`, neither `vs_rank`
//! nor `vs_job`, an empty step range; 404: unknown job, or a rank with no
//! complete step in the range.

use std::collections::BTreeMap;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};

use super::{ApiError, ApiState};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct DiffQuery {
    rank: Option<u32>,
    vs_rank: Option<u32>,
    vs_job: Option<String>,
    from_step: Option<u64>,
    to_step: Option<u64>,
}

#[derive(Debug, Serialize, PartialEq)]
pub(super) struct DiffRow {
    category: &'static str,
    name: String,
    calls_per_step_a: f64,
    ns_per_step_a: f64,
    calls_per_step_b: f64,
    ns_per_step_b: f64,
    /// The part of `ns_per_step_*` that was waiting for other ranks.
    wait_ns_per_step_a: f64,
    wait_ns_per_step_b: f64,
    /// (a - wait a) - (b - wait b), ns per step.
    diff_ns_per_step: f64,
    /// `a` or `b` when only that side ran the kernel.
    only_on: &'static str,
}

#[derive(Debug, Serialize)]
pub(super) struct DiffOut {
    job: String,
    rank: u32,
    vs_job: String,
    vs_rank: u32,
    steps_a: u64,
    steps_b: u64,
    rows: Vec<DiffRow>,
}

fn bad(m: impl Into<String>) -> ApiError {
    ApiError(StatusCode::BAD_REQUEST, m.into())
}

/// (name, kind) -> (calls, ns) per step of one side.
async fn side(
    st: &ApiState,
    job: &str,
    rank: u32,
    first: u64,
    last: u64,
) -> Result<(BTreeMap<(String, i8), (f64, f64)>, u64), ApiError> {
    let w = st.store.step_window(job, rank, first, last).await?;
    if w.steps == 0 {
        st.require_job(job, true).await?;
        return Err(ApiError(
            StatusCode::NOT_FOUND,
            format!("rank {rank} of job {job:?} has no complete step in {first}..{last}"),
        ));
    }
    let n = w.steps as f64;
    let rows = st
        .store
        .diff_kernels(job, rank, w.from_ns, w.to_ns)
        .await?
        .into_iter()
        .map(|k| ((k.name, k.kind), (k.calls as f64 / n, k.sum_ns as f64 / n)))
        .collect();
    Ok((rows, w.steps))
}

pub(super) async fn diff(
    State(st): State<ApiState>,
    Path(job): Path<String>,
    Query(q): Query<DiffQuery>,
) -> Result<Json<DiffOut>, ApiError> {
    let rank = q
        .rank
        .ok_or_else(|| bad("rank is required (the side to compare)"))?;
    if q.vs_rank.is_none() && q.vs_job.is_none() {
        return Err(bad(
            "give vs_rank, vs_job or both (what to compare rank with)",
        ));
    }
    let vs_job = q.vs_job.clone().unwrap_or_else(|| job.clone());
    let vs_rank = q.vs_rank.unwrap_or(rank);
    let (first, last) = (q.from_step.unwrap_or(0), q.to_step.unwrap_or(u64::MAX));
    if first > last {
        return Err(bad(format!(
            "empty step range: from_step {first} > to_step {last}"
        )));
    }
    let (a, steps_a) = side(&st, &job, rank, first, last).await?;
    let (b, steps_b) = side(&st, &vs_job, vs_rank, first, last).await?;
    let mut keys: Vec<&(String, i8)> = a.keys().chain(b.keys()).collect();
    keys.sort();
    keys.dedup();
    let mut rows: Vec<DiffRow> = keys
        .into_iter()
        .map(|k| {
            let (ca, na) = a.get(k).copied().unwrap_or_default();
            let (cb, nb) = b.get(k).copied().unwrap_or_default();
            let kind = match k.1 {
                2 => rankscope_analysis::GpuEventKind::Memcpy,
                3 => rankscope_analysis::GpuEventKind::Memset,
                _ => rankscope_analysis::GpuEventKind::Kernel,
            };
            let class = rankscope_analysis::classify_kernel(&k.0, kind);
            // Both sides ran it: the common part is the transfer, the
            // excess the side's wait for the others.
            let (wa, wb) = if class == rankscope_analysis::KernelClass::Communication
                && a.contains_key(k)
                && b.contains_key(k)
            {
                let common = na.min(nb);
                (na - common, nb - common)
            } else {
                (0.0, 0.0)
            };
            DiffRow {
                category: class.as_str(),
                name: k.0.clone(),
                calls_per_step_a: ca,
                ns_per_step_a: na,
                calls_per_step_b: cb,
                ns_per_step_b: nb,
                wait_ns_per_step_a: wa,
                wait_ns_per_step_b: wb,
                diff_ns_per_step: (na - wa) - (nb - wb),
                only_on: match (a.contains_key(k), b.contains_key(k)) {
                    (true, false) => "a",
                    (false, true) => "b",
                    _ => "",
                },
            }
        })
        .collect();
    rows.sort_by(|x, y| {
        y.diff_ns_per_step
            .abs()
            .total_cmp(&x.diff_ns_per_step.abs())
            .then_with(|| x.name.cmp(&y.name))
    });
    Ok(Json(DiffOut {
        job,
        rank,
        vs_job,
        vs_rank,
        steps_a,
        steps_b,
        rows,
    }))
}
