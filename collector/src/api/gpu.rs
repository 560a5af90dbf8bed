//! GPU-activity routes under `/api/v1/jobs/{job}/` (issue 17): `kernel-types`,
//! `kernels`, `idle`, `queue`, `memcpy`. Computed at query time from the
//! stored kernels and their launch calls with `rankscope_analysis` (HTA 0.5.0
//! definitions documented there: `kernels`, `idle`, `memcpy`).
//!
//! The activities are read as HTA 0.5.0 loads a trace
//! ([`rankscope_analysis::hta_load`]: the ProfilerStep window, whole
//! microseconds rounded inward; `kernel-types` and `kernels` also count a
//! host event that carries a `stream` argument, as HTA does:
//! [`RankOps::hta_gpu_ops`]), so the numbers equal HTA's on the same
//! trace; `?exact=true` takes every recorded GPU activity at its recorded
//! nanosecond times instead, and no host event.
//!
//! Each answers `{"job": J, "<route>": [rows]}`; rows are per rank
//! (ascending), `?rank=R` keeps one rank. An unknown job is 404, an unknown
//! rank 404 naming the ranks that have GPU activities, bad options 400. A job
//! without the events a view needs (no memcpy, no launch calls) gives no
//! rows, not an error.

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::Json;
use rankscope_analysis::kernels::{DEFAULT_DURATION_RATIO, DEFAULT_NUM_KERNELS};
use rankscope_analysis::{
    idle::DEFAULT_CONSECUTIVE_KERNEL_DELAY_NS, idle_breakdown, kernel_table, kernel_type_times,
    memcpy_summary, queue_length,
};
use serde::Deserialize;
use serde_json::{json, Value};

use super::{ApiError, ApiState};
use crate::store::gpu_ops::RankOps;

/// Options of the GPU routes (each route uses the ones it needs).
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct GpuQuery {
    rank: Option<u32>,
    /// Every recorded GPU activity at its recorded times, not HTA's
    /// loading rules (see the module doc).
    exact: Option<bool>,
    /// `kernels`: at most this many names per type (HTA `num_kernels`).
    top: Option<usize>,
    /// `kernels`: the share of a type's time kept by name (HTA `duration_ratio`).
    ratio: Option<f64>,
    /// `idle`: HTA `consecutive_kernel_delay`, microseconds.
    kernel_delay_us: Option<u64>,
    /// `launches`: HTA `runtime_cutoff`, microseconds (default 50).
    runtime_cutoff_us: Option<u64>,
    /// `launches`: HTA `launch_delay_cutoff`, microseconds (default 100).
    launch_delay_cutoff_us: Option<u64>,
    /// `kernels`: `hta` (default: HTA's kernel breakdown), `kernel` (the
    /// TensorBoard plugin's kernel view) or `category` (TorchInductor's
    /// per-category breakdown); see `api::views`.
    pub(super) by: Option<String>,
}

impl GpuQuery {
    /// `kernels`: `top` and `ratio`, checked.
    pub(super) fn kernels_args(&self) -> Result<(usize, f64), ApiError> {
        let top = self.top.unwrap_or(DEFAULT_NUM_KERNELS);
        let ratio = self.ratio.unwrap_or(DEFAULT_DURATION_RATIO);
        if top == 0 {
            return Err(bad("top must be >= 1"));
        }
        if !(ratio > 0.0 && ratio <= 1.0) {
            return Err(bad(format!("ratio must be in (0, 1], got {ratio}")));
        }
        Ok((top, ratio))
    }

    /// `idle`: the consecutive-kernel delay, ns.
    pub(super) fn idle_delay_ns(&self) -> Result<u64, ApiError> {
        Ok(match self.kernel_delay_us {
            Some(us) => us
                .checked_mul(1000)
                .ok_or_else(|| bad("kernel_delay_us is too large"))?,
            None => DEFAULT_CONSECUTIVE_KERNEL_DELAY_NS,
        })
    }

    /// `launches`: the runtime and launch-delay cutoffs, ns.
    pub(super) fn launches_cutoffs_ns(&self) -> Result<(u64, u64), ApiError> {
        let runtime = self.runtime_cutoff_us.unwrap_or(50);
        let delay = self.launch_delay_cutoff_us.unwrap_or(100);
        if runtime == 0 || delay == 0 {
            return Err(bad(
                "runtime_cutoff_us and launch_delay_cutoff_us must be >= 1",
            ));
        }
        // Found while wiring the fuzzer: `runtime * 1000` overflowed (a wrong cutoff
        // in release builds, a panic in debug ones).
        match (runtime.checked_mul(1000), delay.checked_mul(1000)) {
            (Some(r), Some(d)) => Ok((r, d)),
            _ => Err(bad(
                "runtime_cutoff_us and launch_delay_cutoff_us are too large",
            )),
        }
    }
}

fn bad(msg: impl Into<String>) -> ApiError {
    ApiError(StatusCode::BAD_REQUEST, msg.into())
}

/// The job's ranks with GPU activities, narrowed to `q.rank`, loaded as
/// HTA does unless `q.exact`.
async fn load(st: &ApiState, job: &str, q: &GpuQuery) -> Result<Vec<RankOps>, ApiError> {
    load_ranks(st, job, q.rank, q.exact.unwrap_or(false)).await
}

/// [`load`] with its options spelled out (the issue-29 views take every
/// activity: `exact`).
pub(super) async fn load_ranks(
    st: &ApiState,
    job: &str,
    rank: Option<u32>,
    exact: bool,
) -> Result<Vec<RankOps>, ApiError> {
    let all: Vec<RankOps> = if exact {
        let ops = st.store.gpu_ops(job).await?;
        ops.into_iter().map(RankOps::exact).collect()
    } else {
        // Independent reads: side by side.
        let (ops, windows) = tokio::join!(st.store.gpu_ops(job), st.store.hta_windows(job));
        let windows = windows?;
        ops?.into_iter()
            .map(|r| {
                let w = windows.get(&r.rank).copied().unwrap_or_default();
                r.hta_loaded(w)
            })
            .collect()
    };
    if all.is_empty() {
        st.require_job(job, true).await?;
    }
    let Some(r) = rank else { return Ok(all) };
    if all.iter().any(|o| o.rank == r) {
        return Ok(all.into_iter().filter(|o| o.rank == r).collect());
    }
    let have: Vec<String> = all.iter().map(|o| o.rank.to_string()).collect();
    Err(ApiError(
        StatusCode::NOT_FOUND,
        if have.is_empty() {
            format!("rank {r} of job {job:?} has no GPU activities (the job has none)")
        } else {
            format!(
                "rank {r} of job {job:?} has no GPU activities; ranks with some: {}",
                have.join(", ")
            )
        },
    ))
}

fn opt(v: Option<f64>) -> Value {
    v.map_or(Value::Null, |x| json!(x))
}

pub(super) async fn kernel_types(
    State(st): State<ApiState>,
    Path(job): Path<String>,
    Query(q): Query<GpuQuery>,
) -> Result<Json<Value>, ApiError> {
    let ranks = load(&st, &job, &q).await?;
    let mut rows = Vec::new();
    for r in &ranks {
        let times = kernel_type_times(&r.hta_gpu_ops());
        let total: u64 = times.iter().map(|t| t.1).sum();
        for (kernel_type, sum_ns) in times {
            rows.push(json!({
                "rank": r.rank,
                "kernel_type": kernel_type,
                "sum_ns": sum_ns,
                "pct": 100.0 * sum_ns as f64 / total as f64,
            }));
        }
    }
    Ok(Json(json!({ "job": job, "kernel-types": rows })))
}

pub(super) async fn kernels(
    State(st): State<ApiState>,
    Path(job): Path<String>,
    Query(q): Query<GpuQuery>,
) -> Result<Json<Value>, ApiError> {
    let (top, ratio) = q.kernels_args()?;
    match q.by.as_deref() {
        None | Some("hta") => {}
        Some("kernel") => return super::views::kernel_view(&st, &job, q.rank).await,
        Some("category") => return super::views::by_category(&st, &job, q.rank).await,
        Some(other) => {
            return Err(bad(format!(
                "by must be hta, kernel or category, got {other:?}"
            )))
        }
    }
    let ranks = load(&st, &job, &q).await?;
    let figures = super::views::name_figures(&st, &job, q.rank).await?;
    let mut rows = Vec::new();
    for r in &ranks {
        for k in kernel_table(&r.hta_gpu_ops(), ratio, top) {
            let f = figures.get(&(r.rank, k.name.clone()));
            rows.push(json!({
                "rank": r.rank,
                "kernel_type": k.kernel_type,
                "name": k.name,
                "calls": k.calls,
                "sum_ns": k.sum_ns,
                "max_ns": k.max_ns,
                "min_ns": k.min_ns,
                "mean_ns": k.mean_ns,
                "stddev_ns": k.stddev_ns,
                // HTA 0.5.0's own figures (over per-name sums in a folded type).
                "hta_max_ns": k.hta.max_ns,
                "hta_min_ns": k.hta.min_ns,
                "hta_mean_ns": k.hta.mean_ns,
                "hta_stddev_ns": k.hta.stddev_ns,
                // Issue 29 (`api::views`): Inductor's category, the plugin's
                // launch figures and Tensor Cores (absent for `others`).
                "category": (k.name != "others")
                    .then(|| rankscope_analysis::inductor::inductor_category(&k.name)),
                "mean_blocks_per_sm": f.map(|f| f.mean_blocks_per_sm),
                "mean_est_achieved_occupancy_pct": f.map(|f| f.mean_est_achieved_occupancy_pct),
                "tensor_cores_used": (k.name != "others")
                    .then(|| rankscope_analysis::tb_plugin::uses_tensor_cores(&k.name)),
            }));
        }
    }
    Ok(Json(json!({ "job": job, "kernels": rows })))
}

/// Adds pandas-`describe()` columns (`count`, `mean<suffix>`, `std<suffix>`,
/// `min`, `p25`, `p50`, `p75`, `max`, each with the suffix) to `row`.
fn add_describe(row: &mut Value, d: &rankscope_analysis::describe::Describe, suffix: &str) {
    let Some(m) = row.as_object_mut() else { return };
    m.insert("count".into(), d.count.into());
    for (name, v) in [
        ("mean", d.mean),
        ("std", d.std),
        ("min", d.min),
        ("p25", d.p25),
        ("p50", d.p50),
        ("p75", d.p75),
        ("max", d.max),
    ] {
        m.insert(format!("{name}{suffix}"), opt(v));
    }
}

pub(super) async fn idle(
    State(st): State<ApiState>,
    Path(job): Path<String>,
    Query(q): Query<GpuQuery>,
) -> Result<Json<Value>, ApiError> {
    let delay_ns = q.idle_delay_ns()?;
    let ranks = load(&st, &job, &q).await?;
    let mut rows = Vec::new();
    for r in &ranks {
        for i in idle_breakdown(&r.gpu_ops(), delay_ns) {
            rows.push(json!({
                "rank": r.rank,
                "stream": i.stream,
                "category": i.category.as_str(),
                "idle_ns": i.idle_ns,
                "ratio": opt(i.ratio),
            }));
            if let Some(row) = rows.last_mut() {
                add_describe(row, &i.gaps, "_ns");
            }
        }
    }
    Ok(Json(json!({ "job": job, "idle": rows })))
}

pub(super) async fn queue(
    State(st): State<ApiState>,
    Path(job): Path<String>,
    Query(q): Query<GpuQuery>,
) -> Result<Json<Value>, ApiError> {
    let ranks = load(&st, &job, &q).await?;
    let mut rows = Vec::new();
    for r in &ranks {
        for s in queue_length(&r.gpu_ops()) {
            let mut row = json!({ "rank": r.rank, "stream": s.stream });
            add_describe(&mut row, &s.queue, "");
            rows.push(row);
        }
    }
    Ok(Json(json!({ "job": job, "queue": rows })))
}

pub(super) async fn memcpy(
    State(st): State<ApiState>,
    Path(job): Path<String>,
    Query(q): Query<GpuQuery>,
) -> Result<Json<Value>, ApiError> {
    let ranks = load(&st, &job, &q).await?;
    let mut rows = Vec::new();
    for r in &ranks {
        let ops = r.ops.iter().map(|o| {
            (
                &*o.name,
                o.kind,
                // An activity HTA's rounding shortened below zero
                // counts no time.
                o.end_ns.saturating_sub(o.start_ns),
                o.bytes,
            )
        });
        for m in memcpy_summary(ops) {
            rows.push(json!({
                "rank": r.rank,
                "kind": m.kind,
                "calls": m.calls,
                "bytes": m.bytes,
                "sum_ns": m.sum_ns,
                "gbps": opt(m.gbps),
            }));
        }
    }
    Ok(Json(json!({ "job": job, "memcpy": rows })))
}

/// `GET /api/v1/jobs/{job}/launches[?rank=&runtime_cutoff_us=&launch_delay_cutoff_us=]`:
/// HTA's kernel launch statistics per rank (`rankscope_analysis::launch_stats`):
/// only activities whose launch call is one of [`rankscope_analysis::HTA_LAUNCH_APIS`]
/// count; a rank without recorded launch calls (live ranks without a trace)
/// has 0 launches.
pub(super) async fn launches(
    State(st): State<ApiState>,
    Path(job): Path<String>,
    Query(q): Query<GpuQuery>,
) -> Result<Json<Value>, ApiError> {
    let (runtime_ns, delay_ns) = q.launches_cutoffs_ns()?;
    let ranks = load(&st, &job, &q).await?;
    let mut rows = Vec::new();
    for r in &ranks {
        let obs: Vec<rankscope_analysis::LaunchObs<'_>> = r
            .ops
            .iter()
            .filter_map(|o| {
                let (call, api) = o.launch.as_ref()?;
                rankscope_analysis::HTA_LAUNCH_APIS
                    .contains(&api.as_ref())
                    .then(|| {
                        rankscope_analysis::LaunchObs::new(
                            &o.name,
                            (call.start_ns, call.end_ns),
                            (o.start_ns, o.end_ns),
                        )
                    })
            })
            .collect();
        let s = rankscope_analysis::launch_stats(&obs, runtime_ns, delay_ns);
        rows.push(json!({
            "rank": r.rank,
            "launches": s.launches,
            "short_kernels": s.short_kernels,
            "runtime_outliers": s.runtime_outliers,
            "launch_delay_outliers": s.launch_delay_outliers,
            "mean_cpu_ns": s.mean_cpu_ns,
            "mean_launch_delay_ns": s.mean_delay_ns,
            "max_cpu_ns": s.max_cpu.as_ref().map(|m| m.1),
            "max_cpu_kernel": s.max_cpu.map(|m| m.0),
            "max_launch_delay_ns": s.max_delay.as_ref().map(|m| m.1),
            "max_launch_delay_kernel": s.max_delay.map(|m| m.0),
        }));
    }
    Ok(Json(json!({
        "job": job,
        "runtime_cutoff_us": runtime_ns / 1000,
        "launch_delay_cutoff_us": delay_ns / 1000,
        "launches": rows,
    })))
}
