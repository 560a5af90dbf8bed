//! `GET /api/v1/jobs/{job}/goodput[?flops_per_step=F]`: where the job's wall
//! time went (`rankscope_analysis::goodput`) and, with the model's FLOPs per
//! step and a known GPU model, its MFU.
//!
//! Answer: `{"job", "wall_ns", "steps", "parts": [{"part", "ns", "pct"}],
//! "gpu_name", "peak_tflops", "devices", "flops_per_step", "mfu_pct",
//! "mfu_note"}`. 400 for a bad `flops_per_step`, 404 for an unknown job.

use std::collections::BTreeMap;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};

use super::{ApiError, ApiState};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct GoodputQuery {
    flops_per_step: Option<f64>,
}

#[derive(Debug, Serialize)]
pub(super) struct Part {
    part: &'static str,
    ns: f64,
    pct: f64,
}

#[derive(Debug, Serialize)]
pub(super) struct GoodputOut {
    job: String,
    wall_ns: u64,
    steps: u64,
    parts: Vec<Part>,
    gpu_name: Option<String>,
    peak_tflops: Option<f64>,
    devices: u32,
    flops_per_step: Option<f64>,
    mfu_pct: Option<f64>,
    /// Why there is no MFU, when there is none.
    mfu_note: Option<String>,
}

pub(super) async fn goodput(
    State(st): State<ApiState>,
    Path(job): Path<String>,
    Query(q): Query<GoodputQuery>,
) -> Result<Json<GoodputOut>, ApiError> {
    if let Some(f) = q.flops_per_step {
        if !f.is_finite() || f <= 0.0 {
            return Err(ApiError(
                StatusCode::BAD_REQUEST,
                format!("flops_per_step must be a positive number, got {f}"),
            ));
        }
    }
    let steps = st.store.goodput_steps(&job).await?;
    st.require_job(&job, steps.is_empty()).await?;
    let facts = st.store.goodput_job(&job).await?;
    // Time lost to stragglers, per step: each verdict's what-if gain (and
    // the part of it outside the stragglers' phases: cause `other`).
    let mut wait: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
    let verdicts: Vec<(u32, u64, u64, rankscope_analysis::StragglerCause)> = st
        .store
        .stragglers(&job)
        .await?
        .into_iter()
        .map(|v| {
            let cause = super::analytics::cause_of(&v.cause);
            (v.rank, v.first_step, v.last_step, cause)
        })
        .collect();
    let spans: Vec<(u32, u64, u64)> = verdicts.iter().map(|v| (v.0, v.1, v.2)).collect();
    let what_if = super::analytics::VerdictGains::load(&st, &job, &spans).await?;
    for &(rank, first, last, cause) in &verdicts {
        for (step, (gain, _)) in what_if.per_step(rank, first, last, cause) {
            let w = wait.entry(step).or_default();
            w.0 += gain;
            if cause == rankscope_analysis::StragglerCause::Other {
                w.1 += gain;
            }
        }
    }
    let input: Vec<rankscope_analysis::StepTime> = steps
        .iter()
        .map(|s| rankscope_analysis::StepTime {
            step_time_ns: s.step_time_ns,
            compute_ns: s.compute_ns,
            input_ns: s.input_ns,
            exposed_comm_ns: s.exposed_comm_ns,
            straggler_wait_ns: wait.get(&s.step).map_or(0, |w| w.0) as f64,
            straggler_other_ns: wait.get(&s.step).map_or(0, |w| w.1) as f64,
        })
        .collect();
    let wall = facts.last_ns.saturating_sub(facts.first_ns);
    let g = rankscope_analysis::goodput(&input, wall, facts.longest_hang_ns);
    let parts = g
        .parts()
        .into_iter()
        .map(|(part, ns)| Part {
            part,
            ns,
            pct: if wall > 0 {
                100.0 * ns / wall as f64
            } else {
                0.0
            },
        })
        .collect();
    let gpu_name = st.store.job_gpu_name(&job).await?;
    let peak = gpu_name.as_deref().and_then(rankscope_analysis::peak_flops);
    let devices = facts.world_size.max(1);
    let (mfu_pct, mfu_note) = match (q.flops_per_step, peak) {
        (None, _) => (
            None,
            Some("give flops_per_step (the model's FLOPs per step, all ranks)".to_owned()),
        ),
        (Some(_), None) => (
            None,
            Some(match &gpu_name {
                Some(n) => format!("no peak FLOP/s known for GPU {n:?}"),
                None => {
                    "the job's GPU model is unknown (no NVML samples, no imported trace)".to_owned()
                }
            }),
        ),
        // flops_per_step: the whole job's step (all ranks), e.g. 6 x parameters x tokens
        // per global batch for a dense transformer.
        (Some(f), Some((peak, _))) => (g.mfu_pct(f, devices, peak), None),
    };
    Ok(Json(GoodputOut {
        job,
        wall_ns: wall,
        steps: g.steps,
        parts,
        gpu_name,
        peak_tflops: peak.map(|p| p.0 / 1e12),
        devices,
        flops_per_step: q.flops_per_step,
        mfu_pct,
        mfu_note,
    }))
}
