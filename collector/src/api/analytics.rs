//! Analytics routes under `/api/v1/jobs/{job}/`: `breakdown`, `ranks`,
//! `collectives`, `stragglers`, `hangs` (`ranks` in `analytics/ranks.rs`).
//!
//! Field names are the user-facing contract (issue 3); every duration is
//! `*_ns`, every percentage `*_pct`. Definitions (HTA 0.5.0, PyTorch Profiler,
//! nccl-tests) are documented where computed, in `rankscope_analysis`.

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};

use super::{ApiError, ApiState};

mod ranks;
mod versions;
use crate::store::analytics::StepBreakdownRow;
use crate::store::telemetry::{EvidenceReadRow, StepGpu};
pub(super) use ranks::{ranks, RanksQuery};

/// 100 * part / whole, `None` when whole is 0.
fn pct(part: u64, whole: u64) -> Option<f64> {
    (whole > 0).then(|| 100.0 * part as f64 / whole as f64)
}

/// Query of the breakdown route.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BreakdownQuery {
    step: Option<u64>,
    last: Option<u64>,
}

/// One (step, rank) breakdown.
#[derive(Debug, Serialize)]
pub struct BreakdownOut {
    job: String,
    #[serde(flatten)]
    row: StepBreakdownRow,
    /// HTA comm/comp overlap: 100 * overlap / comm.
    overlap_pct: Option<f64>,
    idle_pct: Option<f64>,
    compute_pct: Option<f64>,
    non_compute_pct: Option<f64>,
    /// GPU telemetry of the rank's GPUs during the step (`gpu_util_pct`,
    /// `sm_active_pct`, `sm_clock_mhz`, `power_w`, `temp_c`,
    /// `throttle_reasons`, `gpu_samples`); null without samples.
    #[serde(flatten)]
    gpu: StepGpu,
}

pub(super) async fn breakdown(
    State(st): State<ApiState>,
    Path(job): Path<String>,
    Query(q): Query<BreakdownQuery>,
) -> Result<Json<serde_json::Value>, ApiError> {
    if q.step.is_some() && q.last.is_some() {
        return Err(ApiError(
            StatusCode::BAD_REQUEST,
            "give either step or last, not both".into(),
        ));
    }
    if q.last == Some(0) {
        return Err(ApiError(
            StatusCode::BAD_REQUEST,
            "last must be >= 1".into(),
        ));
    }
    let rows = st
        .store
        .step_breakdowns(&job, q.step, q.step, q.last)
        .await?;
    st.require_job(&job, rows.is_empty()).await?;
    let steps = rows.iter().map(|r| r.step);
    let gpu = match (steps.clone().min(), steps.max()) {
        (Some(from), Some(to)) => st.store.step_gpu(&job, from, to).await?,
        _ => Default::default(),
    };
    let out: Vec<BreakdownOut> = rows
        .into_iter()
        .map(|row| BreakdownOut {
            gpu: gpu.get(&(row.step, row.rank)).cloned().unwrap_or_default(),
            overlap_pct: pct(row.overlap_ns, row.comm_ns),
            idle_pct: pct(row.idle_ns, row.gpu_span_ns),
            compute_pct: pct(row.compute_ns, row.gpu_span_ns),
            non_compute_pct: pct(row.non_compute_ns, row.gpu_span_ns),
            job: job.clone(),
            row,
        })
        .collect();
    Ok(Json(serde_json::json!({ "job": job, "breakdown": out })))
}

/// `GET /api/v1/jobs/{job}/progress`: how far the job's analytics are —
/// finalized (step, rank) breakdowns and the highest finalized step
/// (`rankscope import` waits until they cover what it sent).
pub(super) async fn progress(
    State(st): State<ApiState>,
    Path(job): Path<String>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let (n, last) = st.store.analytics_progress(&job).await?;
    st.require_job(&job, n == 0).await?;
    Ok(Json(serde_json::json!({
        "job": job,
        "rank_steps_final": n,
        "last_step_final": last,
    })))
}

/// Query of the collectives route.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CollectivesQuery {
    rank: Option<u32>,
}

/// One row of collective statistics.
#[derive(Debug, Serialize)]
pub struct CollectiveOut {
    process_group: String,
    op: String,
    dtype: String,
    size_bucket: String,
    size_lower_bytes: u64,
    size_upper_bytes: u64,
    /// `null` for job-wide rows.
    rank: Option<u32>,
    calls: u64,
    collectives: u64,
    total_bytes: u64,
    avg_bytes: u64,
    total_duration_ns: u64,
    mean_duration_ns: u64,
    p50_duration_ns: u64,
    p99_duration_ns: u64,
    algbw_gbps: Option<f64>,
    busbw_gbps: Option<f64>,
    wait_ns: u64,
    transfer_ns: u64,
}

pub(super) async fn collectives(
    State(st): State<ApiState>,
    Path(job): Path<String>,
    Query(q): Query<CollectivesQuery>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let stats = st.store.collective_stats(&job, q.rank).await?;
    st.require_job(&job, stats.is_empty()).await?;
    let out: Vec<CollectiveOut> = stats
        .into_iter()
        .filter(|s| q.rank.is_none() || s.rank == q.rank)
        .map(|s| CollectiveOut {
            process_group: s.process_group,
            op: s.op.as_str().to_owned(),
            dtype: s.dtype,
            size_bucket: s.size_bucket.label(),
            size_lower_bytes: s.size_bucket.lower_bytes,
            size_upper_bytes: s.size_bucket.upper_bytes,
            rank: s.rank,
            calls: s.calls,
            collectives: s.collectives,
            total_bytes: s.total_bytes,
            avg_bytes: s.avg_bytes,
            total_duration_ns: s.total_duration_ns,
            mean_duration_ns: s.mean_duration_ns,
            p50_duration_ns: s.p50_duration_ns,
            p99_duration_ns: s.p99_duration_ns,
            algbw_gbps: s.algbw_gbps,
            busbw_gbps: s.busbw_gbps,
            wait_ns: s.wait_ns_total,
            transfer_ns: s.transfer_ns_total,
        })
        .collect();
    Ok(Json(serde_json::json!({ "job": job, "collectives": out })))
}

/// One straggler verdict.
#[derive(Debug, Serialize)]
pub struct StragglerOut {
    rank: u32,
    node: String,
    first_step: u64,
    last_step: u64,
    steps_flagged: u64,
    slowdown: f64,
    score: f64,
    /// `compute`, `input`, `communication` or `other` (time outside the
    /// rank's phases; `rankscope_analysis::StragglerCause`).
    cause: String,
    active: bool,
    updated_ns: u64,
    /// The job's step time reduction (%) if this rank ran like its peers,
    /// over the verdict's steps (`rankscope_analysis::expected_gain_pct`);
    /// null without breakdown rows for them.
    expected_gain_pct: Option<f64>,
    /// The automatic Kineto trace requested when the verdict appeared
    /// (`[traces.auto]`); null without.
    trace_id: Option<String>,
    /// For an `other` verdict whose rank was traced: the host operators of
    /// most self time inside its gap (the stretch the evidence names) per
    /// step of the trace, largest first (`traces::gap_ops`; held in memory
    /// since the collector started, the evidence text keeps them); null
    /// without.
    gap_operators: Option<Vec<crate::traces::gap_ops::GapOperator>>,
    /// Hardware evidence of a compute straggler, or for cause `other` the
    /// amount and where in the step it sits (`evidence` text only); null
    /// fields without.
    #[serde(flatten)]
    evidence: EvidenceOut,
}

/// The GPU evidence of a verdict (see `stream::evidence`).
#[derive(Debug, Default, Serialize)]
pub struct EvidenceOut {
    /// e.g. "GPU 5 (GPU-..) on node-a: SM clock 1200 MHz vs 1980 MHz median
    /// of 7 peer GPUs (-39.4%); throttle reasons: hw_thermal_slowdown; ...".
    evidence: Option<String>,
    evidence_gpus: Option<Vec<u32>>,
    sm_clock_mhz: Option<f64>,
    peer_sm_clock_mhz: Option<f64>,
    throttle_reasons: Option<Vec<String>>,
    temp_c: Option<f64>,
    peer_temp_c: Option<f64>,
    power_w: Option<f64>,
    peer_power_w: Option<f64>,
}

impl From<EvidenceReadRow> for EvidenceOut {
    fn from(e: EvidenceReadRow) -> Self {
        Self {
            evidence: Some(e.evidence),
            evidence_gpus: Some(e.gpu_indexes),
            sm_clock_mhz: e.sm_clock_mhz,
            peer_sm_clock_mhz: e.peer_sm_clock_mhz,
            throttle_reasons: Some(e.throttle_reasons),
            temp_c: e.temp_c,
            peer_temp_c: e.peer_temp_c,
            power_w: e.power_w,
            peer_power_w: e.peer_power_w,
        }
    }
}

pub(super) async fn stragglers(
    State(st): State<ApiState>,
    Path(job): Path<String>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let (versions, evidence) = versions::straggler_versions(&st, &job).await?;
    let mut evidence: std::collections::HashMap<(u32, u64), EvidenceReadRow> = evidence
        .into_iter()
        .map(|e| ((e.rank, e.first_step), e))
        .collect();
    // The other gains (versions stored before migration 0017, or raised
    // while some of their steps were not in memory) from the stored
    // breakdowns (no read when none).
    let spans: Vec<(u32, u64, u64)> = versions
        .iter()
        .filter(|v| v.gain.is_none())
        .map(|v| (v.row.rank, v.row.first_step, v.row.last_step))
        .collect();
    let what_if = VerdictGains::load(&st, &job, &spans).await?;
    let out: Vec<StragglerOut> = versions
        .into_iter()
        .map(
            |crate::stream::live::Version { row: v, gain }| StragglerOut {
                expected_gain_pct: gain.unwrap_or_else(|| {
                    what_if.pct(v.rank, v.first_step, v.last_step, cause_of(&v.cause))
                }),
                evidence: evidence
                    .remove(&(v.rank, v.first_step))
                    .map(EvidenceOut::from)
                    .unwrap_or_default(),
                rank: v.rank,
                node: v.node,
                first_step: v.first_step,
                last_step: v.last_step,
                steps_flagged: v.steps_flagged,
                slowdown: v.slowdown,
                score: v.score,
                cause: v.cause,
                active: v.active != 0,
                updated_ns: v.updated_ns,
                trace_id: st.traces.auto_trace_of(&job, v.rank, v.first_seen_ns),
                gap_operators: st
                    .traces
                    .gap
                    .fill_of(&job, v.rank, v.first_step)
                    .map(|f| f.operators),
            },
        )
        .collect();
    Ok(Json(serde_json::json!({ "job": job, "stragglers": out })))
}

/// What the what-if gains of a job's verdicts need, read with two queries
/// for all of them: the per-step peers of every step any verdict covers and
/// the verdict ranks' own rows (a 16,384-rank job's hundreds of verdicts
/// once read every rank's rows per verdict: over a minute per request).
pub(super) struct VerdictGains {
    peers: std::collections::BTreeMap<u64, rankscope_analysis::StepPeers>,
    /// The verdict ranks' rows, by rank.
    own: std::collections::HashMap<u32, Vec<rankscope_analysis::RankStepWait>>,
}

impl VerdictGains {
    /// For verdicts given as (rank, first step, last step).
    pub(super) async fn load(
        st: &ApiState,
        job: &str,
        verdicts: &[(u32, u64, u64)],
    ) -> Result<Self, ApiError> {
        let (Some(first), Some(last)) = (
            verdicts.iter().map(|v| v.1).min(),
            verdicts.iter().map(|v| v.2).max(),
        ) else {
            return Ok(Self {
                peers: Default::default(),
                own: Default::default(),
            });
        };
        let mut ranks: Vec<u32> = verdicts.iter().map(|v| v.0).collect();
        ranks.sort_unstable();
        ranks.dedup();
        // Both reads depend only on the verdicts' spans: concurrent.
        let (peers, waits) = tokio::join!(
            st.store.step_peers(job, first, last),
            st.store.step_waits_of(job, first, last, &ranks)
        );
        let peers = peers?.into_iter().map(|p| (p.step, p.into())).collect();
        let mut own: std::collections::HashMap<u32, Vec<_>> = Default::default();
        for r in waits? {
            own.entry(r.rank)
                .or_default()
                .push(rankscope_analysis::RankStepWait {
                    step: r.step,
                    rank: r.rank,
                    step_time_ns: r.step_time_ns,
                    work_ns: r.work_ns,
                    wait_ns: r.wait_ns,
                });
        }
        Ok(Self { peers, own })
    }

    fn own(
        &self,
        rank: u32,
        first: u64,
        last: u64,
    ) -> impl Iterator<Item = &rankscope_analysis::RankStepWait> {
        self.own
            .get(&rank)
            .into_iter()
            .flatten()
            .filter(move |r| (first..=last).contains(&r.step))
    }

    /// `expected_gain_pct` of the verdict (rank, first..=last, cause).
    pub(super) fn pct(
        &self,
        rank: u32,
        first: u64,
        last: u64,
        cause: rankscope_analysis::StragglerCause,
    ) -> Option<f64> {
        rankscope_analysis::expected_gain_pct_for(
            &self.peers,
            self.own(rank, first, last),
            rank,
            cause,
        )
    }

    /// Per step of the verdict: (what the rank cost the step, median step time).
    pub(super) fn per_step(
        &self,
        rank: u32,
        first: u64,
        last: u64,
        cause: rankscope_analysis::StragglerCause,
    ) -> std::collections::BTreeMap<u64, (u64, u64)> {
        rankscope_analysis::gain_per_step_for(&self.peers, self.own(rank, first, last), rank, cause)
    }
}

/// The cause a stored verdict names (`compute` for a name this build does
/// not know: the work-bounded gain).
pub(super) fn cause_of(name: &str) -> rankscope_analysis::StragglerCause {
    rankscope_analysis::StragglerCause::parse(name)
        .unwrap_or(rankscope_analysis::StragglerCause::Compute)
}

pub(super) async fn hangs(
    State(st): State<ApiState>,
    Path(job): Path<String>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let rows = st.store.hangs(&job).await?;
    st.require_job(&job, rows.is_empty()).await?;
    Ok(Json(serde_json::json!({ "job": job, "hangs": rows })))
}
