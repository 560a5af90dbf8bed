//! The single-job profiler views of issue 29 over a job's stored kernels:
//! the TensorBoard plugin's kernel view (`kernels?by=kernel`),
//! TorchInductor's per-category breakdown (`kernels?by=category`) and the
//! per-name launch figures added to HTA's kernel table. The overview and
//! advice routes (`api::overview`) load their ranks here too.
//!
//! In: a job, optionally a rank. Definitions in
//! `rankscope_analysis::{tb_plugin, inductor}`. Every stored activity is
//! taken (the plugin and Inductor have no HTA loading rules). A rank's span
//! is the plugin's "all steps" span the importer recorded
//! ([`crate::store::plugin::PluginSpan`]); a rank without one (live jobs)
//! takes its stored steps (first step start to last step end), and a rank
//! with neither the span of its GPU activities (`span_from` says which).

use std::collections::HashMap;

use axum::Json;
use rankscope_analysis::inductor::{category_breakdown, kernel_family};
use rankscope_analysis::tb_plugin::{self, KernelViewRow, PluginKernel};
use rankscope_analysis::GpuEventKind;
use serde_json::{json, Value};

use super::{ApiError, ApiState};
use crate::store::gpu_ops::RankOps;
use crate::store::sql::ReadTask;

/// One rank's activities, launch figures and span.
pub(super) struct PluginRank {
    pub ops: RankOps,
    /// Per activity (same order as `ops.ops`): its launch figures.
    pub figures: Vec<crate::store::plugin::LaunchFigures>,
    /// `(start, end, steps)`, absolute ns.
    pub span: (u64, u64, u64),
    /// `profiler_steps` (the importer's label), `steps` or `gpu_activities`.
    pub span_from: &'static str,
}

impl PluginRank {
    pub fn rank(&self) -> u32 {
        self.ops.rank
    }

    /// The kernels (not memcpy / memset) as the plugin takes them.
    pub fn kernels(&self) -> Vec<PluginKernel<'_>> {
        self.ops
            .ops
            .iter()
            .zip(&self.figures)
            .filter(|(o, _)| o.kind == GpuEventKind::Kernel)
            .map(|(o, f)| PluginKernel {
                name: &o.name,
                start_ns: o.start_ns,
                end_ns: o.end_ns,
                blocks_per_sm: f.blocks_per_sm,
                occupancy_pct: f.occupancy_pct,
            })
            .collect()
    }
}

/// The job's ranks with GPU activities (narrowed to `rank`; errors as the
/// HTA views), with their figures and spans (module doc).
pub(super) async fn plugin_ranks(
    st: &ApiState,
    job: &str,
    rank: Option<u32>,
) -> Result<Vec<PluginRank>, ApiError> {
    // The launch figures (as many rows as the activities) decode on a task
    // of their own beside the activities.
    let figures = {
        let (store, job) = (st.store.clone(), job.to_owned());
        ReadTask::spawn(async move { store.kernel_figures(&job).await })
    };
    let ranks = super::gpu::load_ranks(st, job, rank, true).await?;
    let mut figures = figures.joined().await?;
    let spans = st.store.plugin_spans(job).await?;
    let mut step_spans: HashMap<u32, (u64, u64, u64)> = HashMap::new();
    if ranks.iter().any(|r| !spans.contains_key(&r.rank)) {
        for w in st.store.step_windows(job, 0, u64::MAX).await? {
            let end = w.step_start_ns.saturating_add(w.step_time_ns);
            let e = step_spans
                .entry(w.rank)
                .or_insert((w.step_start_ns, end, 0));
            e.0 = e.0.min(w.step_start_ns);
            e.1 = e.1.max(end);
            e.2 += 1;
        }
    }
    Ok(ranks
        .into_iter()
        .map(|ops| {
            let f = ops
                .ops
                .iter()
                .map(|o| {
                    figures
                        .get((ops.rank, o.start_ns, o.correlation))
                        .copied()
                        .unwrap_or_default()
                })
                .collect();
            let (span, span_from) = if let Some(s) = spans.get(&ops.rank) {
                ((s.start_ns, s.end_ns, s.steps), "profiler_steps")
            } else if let Some(s) = step_spans.get(&ops.rank) {
                (*s, "steps")
            } else {
                let lo = ops.ops.iter().map(|o| o.start_ns).min().unwrap_or(0);
                let hi = ops.ops.iter().map(|o| o.end_ns).max().unwrap_or(0);
                ((lo, hi, 1), "gpu_activities")
            };
            PluginRank {
                ops,
                figures: f,
                span,
                span_from,
            }
        })
        .collect())
}

/// The plugin's kernel view per (rank, kernel name), for HTA's table.
pub(super) async fn name_figures(
    st: &ApiState,
    job: &str,
    rank: Option<u32>,
) -> Result<HashMap<(u32, String), KernelViewRow>, ApiError> {
    let mut out = HashMap::new();
    for r in plugin_ranks(st, job, rank).await? {
        for row in tb_plugin::kernel_view(&r.kernels()) {
            out.insert((r.rank(), row.name.clone()), row);
        }
    }
    Ok(out)
}

/// `GET /api/v1/jobs/{job}/kernels?by=kernel[&rank=R]`: the plugin's
/// "group by Kernel" table per rank, with Inductor's category.
pub(super) async fn kernel_view(
    st: &ApiState,
    job: &str,
    rank: Option<u32>,
) -> Result<Json<Value>, ApiError> {
    let mut rows = Vec::new();
    for r in plugin_ranks(st, job, rank).await? {
        for k in tb_plugin::kernel_view(&r.kernels()) {
            rows.push(json!({
                "rank": r.rank(),
                "name": k.name,
                "category": rankscope_analysis::inductor::inductor_category(&k.name),
                "family": kernel_family(&k.name),
                "tensor_cores_used": k.tensor_cores_used,
                "calls": k.calls,
                "sum_ns": k.total_ns,
                "mean_ns": k.mean_ns,
                "max_ns": k.max_ns,
                "min_ns": k.min_ns,
                "mean_blocks_per_sm": k.mean_blocks_per_sm,
                "mean_est_achieved_occupancy_pct": k.mean_est_achieved_occupancy_pct,
            }));
        }
    }
    Ok(Json(json!({ "job": job, "by": "kernel", "kernels": rows })))
}

/// `GET /api/v1/jobs/{job}/kernels?by=category[&rank=R]`: Inductor's
/// per-category GPU time per rank over the rank's span (its wall time),
/// every GPU activity counted (memcpy / memset fall in `unknown`, as in
/// Inductor); then one job-wide row per category (`rank` null: sums over
/// the ranks, shares over the summed spans). `busy` holds the GPU-busy
/// percent per rank and job-wide.
pub(super) async fn by_category(
    st: &ApiState,
    job: &str,
    rank: Option<u32>,
) -> Result<Json<Value>, ApiError> {
    let ranks = plugin_ranks(st, job, rank).await?;
    let mut rows = Vec::new();
    let mut busy = Vec::new();
    let mut all: Vec<(&str, u64)> = Vec::new();
    let mut wall_total = 0u64;
    for r in &ranks {
        let ks: Vec<(&str, u64)> = r
            .ops
            .ops
            .iter()
            .map(|o| (&*o.name, o.end_ns.saturating_sub(o.start_ns)))
            .collect();
        let wall = r.span.1.saturating_sub(r.span.0);
        wall_total += wall;
        let (cats, pct) = category_breakdown(ks.iter().copied(), wall);
        for c in cats {
            rows.push(category_row(Some(r.rank()), &c));
        }
        busy.push(json!({
            "rank": r.rank(),
            "busy_pct": pct,
            "wall_ns": wall,
            "span_from": r.span_from,
        }));
        all.extend(ks);
    }
    if ranks.len() > 1 {
        let (cats, pct) = category_breakdown(all, wall_total);
        rows.extend(cats.iter().map(|c| category_row(None, c)));
        busy.push(json!({ "rank": null, "busy_pct": pct, "wall_ns": wall_total }));
    }
    Ok(Json(json!({
        "job": job,
        "by": "category",
        "kernels": rows,
        "busy": busy,
    })))
}

fn category_row(rank: Option<u32>, c: &rankscope_analysis::inductor::CategoryRow) -> Value {
    json!({
        "rank": rank,
        "category": c.category,
        "calls": c.calls,
        "sum_ns": c.sum_ns,
        "pct_of_wall": c.pct_of_wall,
        "pct_of_gpu_time": c.pct_of_gpu_time,
    })
}
