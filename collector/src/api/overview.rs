//! `GET /api/v1/jobs/{job}/overview[?rank=R]` (issue 29): the PyTorch
//! Profiler TensorBoard plugin's overview per rank and across the job.
//!
//! In: the ranks `api::views::plugin_ranks` loads. Out: per rank the GPU
//! summary (`gpu_util_pct`, `sm_efficiency_pct`, `achieved_occupancy_pct`,
//! `tensor_core_pct`, definitions in `rankscope_analysis::tb_plugin`) and
//! the step-time breakdown by the plugin's priority roles as averages per
//! step (`step_us`, `kernel_us`, `memcpy_us`, `memset_us`,
//! `communication_us`, `runtime_us`, `dataloader_us`, `cpu_exec_us`,
//! `other_us`); then `job`: per figure the min / median / max over ranks and
//! the outlier rank (farthest from the median).
//!
//! The roles' sources: kernels (`kernel`; NCCL kernels are
//! `communication`), memcpys, memsets, the launch calls stored with the
//! activities (`runtime`: only calls that launched GPU work are stored),
//! `dataloader` spans. CPU operators are not stored, so `cpu_exec_us` is
//! null and their time is in `other_us` (a note says so).
//!
//! The per-rank figures are kept per (job, rank filter) while the job's
//! input tables are unchanged ([`cache`]), for this route and `advice`, and
//! per rank in ClickHouse ([`kept`], migration 0018) for cold requests;
//! `?exact=true` computes them from the stored rows whatever is kept. The
//! answer's `figures_from` says which (`kept` or `stored_rows`).

pub mod cache;
pub mod kept;

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::Json;
use rankscope_analysis::tb_plugin::{gpu_summary, role_times, GpuSummary};
use rankscope_analysis::{classify_kernel, GpuEventKind, KernelClass};
use serde::Deserialize;
use serde_json::{json, Value};

use super::views::{plugin_ranks, PluginRank};
use super::{ApiError, ApiState};

/// Options of `overview` and `advice`.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct RankQuery {
    pub(super) rank: Option<u32>,
    /// Compute from the stored rows, not from the kept figures ([`kept`]).
    pub(super) exact: Option<bool>,
}

/// The figures of one rank.
#[derive(Debug, Clone)]
pub struct RankOverview {
    pub rank: u32,
    pub summary: GpuSummary,
    pub steps: u64,
    pub span_from: &'static str,
    /// Averages per step, µs, in `rankscope_analysis::tb_plugin::ROLES`
    /// order, then the step time.
    pub roles_us: [f64; 8],
    pub step_us: f64,
    /// What `advice` reads of the rank's kernels.
    pub kernels: KernelCounts,
    /// Read from a kept row ([`kept`]) rather than computed from the
    /// stored rows.
    pub from_kept: bool,
}

/// A rank's kernel time and launches as `advice` weighs them.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct KernelCounts {
    /// Σ kernel durations (ns).
    pub total_ns: u64,
    /// Σ durations of the kernels named like GEMM or convolution.
    pub gemm_conv_ns: u64,
    /// Activities with a launch call.
    pub launched: u64,
    /// Of those, the ones that ran shorter than their launch call.
    pub short: u64,
}

/// What the overview asks of a kernel's name, asked once per name.
#[derive(Debug, Clone, Copy)]
struct NameFacts {
    communication: bool,
    gemm_conv: bool,
}

/// [`NameFacts`] per name, keyed by where the name is: the activities read
/// for a job share one `Arc<str>` per distinct name (`store::gpu_ops`), so
/// millions of activities ask a few dozen times.
#[derive(Default)]
pub(super) struct NameMemo(foldhash::HashMap<(usize, usize), NameFacts>);

impl NameMemo {
    fn facts(&mut self, name: &str) -> NameFacts {
        *self
            .0
            .entry((name.as_ptr() as usize, name.len()))
            .or_insert_with(|| {
                let lower = name.to_ascii_lowercase();
                NameFacts {
                    communication: classify_kernel(name, GpuEventKind::Kernel)
                        == KernelClass::Communication,
                    gemm_conv: lower.contains("gemm") || lower.contains("conv"),
                }
            })
    }
}

/// [`KernelCounts`] of one rank.
fn kernel_counts(r: &PluginRank, memo: &mut NameMemo) -> KernelCounts {
    let ks = r.kernels();
    let mut c = KernelCounts::default();
    for k in &ks {
        let d = k.end_ns.saturating_sub(k.start_ns);
        c.total_ns += d;
        if memo.facts(k.name).gemm_conv {
            c.gemm_conv_ns += d;
        }
    }
    for op in &r.ops.ops {
        if let Some((call, _)) = &op.launch {
            c.launched += 1;
            let kd = op.end_ns.saturating_sub(op.start_ns);
            c.short += u64::from(kd < call.end_ns.saturating_sub(call.start_ns));
        }
    }
    c
}

/// The overview of one rank (module doc).
pub(super) fn rank_overview(
    r: &PluginRank,
    dataloader: &[(u64, u64)],
    memo: &mut NameMemo,
) -> RankOverview {
    let (s, e, steps) = r.span;
    let summary = gpu_summary(&r.kernels(), (s, e));
    let mut roles: [Vec<(u64, u64)>; 7] = Default::default();
    for o in &r.ops.ops {
        let i = match o.kind {
            GpuEventKind::Memcpy => 1,
            GpuEventKind::Memset => 2,
            GpuEventKind::Collective => 3,
            GpuEventKind::Kernel if memo.facts(&o.name).communication => 3,
            GpuEventKind::Kernel => 0,
        };
        roles[i].push((o.start_ns, o.end_ns));
        if let Some((call, _)) = &o.launch {
            roles[4].push((call.start_ns, call.end_ns));
        }
    }
    roles[5].extend_from_slice(dataloader);
    let times = role_times(&roles, (s, e));
    let n = steps.max(1) as f64;
    let per_step = |ns: u64| ns as f64 / 1e3 / n;
    let mut roles_us = [0.0; 8];
    for (i, t) in times.iter().enumerate() {
        roles_us[i] = per_step(*t);
    }
    RankOverview {
        rank: r.rank(),
        summary,
        steps,
        span_from: r.span_from,
        roles_us,
        step_us: per_step(e.saturating_sub(s)),
        kernels: kernel_counts(r, memo),
        from_kept: false,
    }
}

/// Every rank's overview (errors as the GPU views), computed again only
/// when the job's inputs changed since the kept one ([`cache`], then
/// [`kept`]); with `exact`, computed from the stored rows (no cache).
pub(super) async fn overviews(
    st: &ApiState,
    job: &str,
    rank: Option<u32>,
    exact: bool,
) -> Result<Arc<Vec<RankOverview>>, ApiError> {
    if exact {
        return Ok(Arc::new(kept::figures(st, job, rank, true).await?));
    }
    // Read before the figures: a write during the computation changes the
    // next request's inputs.
    let inputs = st.store.view_inputs(job).await?;
    if let Some(rows) = st.overviews.get(job, rank, &inputs) {
        return Ok(rows);
    }
    let rows = Arc::new(kept::figures(st, job, rank, false).await?);
    st.overviews.put(job, rank, inputs, Arc::clone(&rows));
    Ok(rows)
}

/// Every rank's overview computed from the job's stored rows (module doc).
pub(super) async fn from_stored_rows(
    st: &ApiState,
    job: &str,
    rank: Option<u32>,
) -> Result<Vec<RankOverview>, ApiError> {
    let ranks = plugin_ranks(st, job, rank).await?;
    let loaders: HashMap<u32, Vec<(u64, u64)>> = st.store.dataloader_spans(job).await?;
    let mut memo = NameMemo::default();
    Ok(ranks
        .iter()
        .map(|r| {
            let loader = loaders.get(&r.rank()).map_or(&[][..], Vec::as_slice);
            rank_overview(r, loader, &mut memo)
        })
        .collect())
}

/// Min / median / max of `(rank, value)` and the rank farthest from the
/// median (ties: the lowest rank); null without values.
pub(super) fn spread(vals: &[(u32, f64)]) -> Value {
    if vals.is_empty() {
        return Value::Null;
    }
    let mut v: Vec<f64> = vals.iter().map(|x| x.1).collect();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let median = if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    };
    let outlier = vals
        .iter()
        .max_by(|a, b| {
            (a.1 - median)
                .abs()
                .total_cmp(&(b.1 - median).abs())
                .then(b.0.cmp(&a.0))
        })
        .filter(|_| n > 1);
    json!({
        "min": v[0],
        "median": median,
        "max": v[n - 1],
        "outlier_rank": outlier.map(|o| o.0),
        "outlier_value": outlier.map(|o| o.1),
    })
}

pub(super) fn overview_row(o: &RankOverview) -> Value {
    let s = &o.summary;
    let mut row = json!({
        "rank": o.rank,
        "steps": o.steps,
        "span_from": o.span_from,
        "gpu_util_pct": s.gpu_util_pct,
        "sm_efficiency_pct": s.sm_efficiency_pct,
        "achieved_occupancy_pct": s.achieved_occupancy_pct,
        "tensor_core_pct": s.tensor_core_pct,
        "step_us": o.step_us,
    });
    if let Some(m) = row.as_object_mut() {
        for (i, role) in rankscope_analysis::tb_plugin::ROLES.iter().enumerate() {
            let v = if *role == "cpu_exec" {
                Value::Null
            } else {
                json!(o.roles_us[i])
            };
            m.insert(format!("{role}_us"), v);
        }
    }
    row
}

/// The job-wide spread of each figure of `rows`.
pub(super) fn job_spread(rows: &[RankOverview]) -> Value {
    let pick = |f: &dyn Fn(&RankOverview) -> Option<f64>| -> Value {
        let v: Vec<(u32, f64)> = rows.iter().filter_map(|o| Some((o.rank, f(o)?))).collect();
        spread(&v)
    };
    let mut out = json!({
        "gpu_util_pct": pick(&|o| o.summary.gpu_util_pct),
        "sm_efficiency_pct": pick(&|o| o.summary.sm_efficiency_pct),
        "achieved_occupancy_pct": pick(&|o| o.summary.achieved_occupancy_pct),
        "tensor_core_pct": pick(&|o| o.summary.tensor_core_pct),
        "step_us": pick(&|o| Some(o.step_us)),
    });
    if let Some(m) = out.as_object_mut() {
        for (i, role) in rankscope_analysis::tb_plugin::ROLES.iter().enumerate() {
            if *role != "cpu_exec" {
                m.insert(format!("{role}_us"), pick(&|o| Some(o.roles_us[i])));
            }
        }
    }
    out
}

pub(super) async fn overview(
    State(st): State<ApiState>,
    Path(job): Path<String>,
    Query(q): Query<RankQuery>,
) -> Result<Json<Value>, ApiError> {
    let rows = overviews(&st, &job, q.rank, q.exact.unwrap_or(false)).await?;
    let ranks: Vec<Value> = rows.iter().map(overview_row).collect();
    let from_kept = rows.iter().all(|o| o.from_kept);
    Ok(Json(json!({
        "job": job,
        "overview": ranks,
        "job_wide": job_spread(&rows),
        "figures_from": if from_kept { kept::FROM_KEPT } else { kept::FROM_ROWS },
        "notes": [
            "cpu_exec_us is null: CPU operators are not stored; their time is in other_us",
            "runtime_us counts only the launch calls of stored GPU activities",
        ],
    })))
}
