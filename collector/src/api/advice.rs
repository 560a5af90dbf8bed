//! `GET /api/v1/jobs/{job}/advice` (issue 29): recommendations, each rule
//! evaluated per rank and job-wide; every item names its rule, the ranks,
//! the figure and a short text.
//!
//! In: the overview of every rank (`api::overview`), the job's straggler
//! verdicts (`api::analytics::stragglers`). Out: `advice` (items, in rule
//! order, job-wide first) and `not_evaluated` (rules whose data the job
//! lacks, with the reason).
//!
//! The TensorBoard plugin's rules (`torch_tb_profiler` 0.4.3
//! `RunProfileData.analyze`, ../shared/SEED-VIEWS.md §1.5): `dataloader`
//! (DataLoader > 5 % of the step), `communication` (> 10 %),
//! `low_gpu_utilization` (< 50 %), `tensor_cores_unused` (the plugin: time
//! of kernels launched by Tensor Core eligible operators while no kernel uses
//! Tensor Cores, on compute capability >= 7; without operator attribution
//! rankscope takes GEMM / convolution kernels by name as that time),
//! `memory_near_capacity` (peak > 90 % of the device, [`own`]). rankscope's
//! own: `straggler` (an active verdict and its what-if gain), `input_stall`
//! (a rank whose DataLoader time is over twice the median rank's and over
//! 5 % of its step), `launch_bound` (a rank with GPU utilization under 50 %
//! whose kernels are mostly shorter than their launch calls),
//! `memory_imbalance` and `exposed_communication` ([`own`]).

use axum::extract::{Path, Query, State};
use axum::Json;
use serde_json::{json, Value};

use super::overview::{overviews, RankOverview, RankQuery};
use super::{ApiError, ApiState};

mod own;

/// The plugin's thresholds.
const DATALOADER_SHARE: f64 = 5.0;
const COMMUNICATION_SHARE: f64 = 10.0;
const LOW_UTIL_PCT: f64 = 50.0;
/// The memory rule's name (evaluated once the job has memory data).
pub const MEMORY_RULE: &str = "memory_near_capacity";

fn share(part: f64, whole: f64) -> Option<f64> {
    (whole > 0.0).then(|| 100.0 * part / whole)
}

fn item(rule: &str, ranks: Vec<u32>, figure: f64, unit: &str, text: String) -> Value {
    json!({ "rule": rule, "ranks": ranks, "figure": figure, "unit": unit, "text": text })
}

/// One threshold rule over every rank and over the job's averages.
fn threshold_rule(
    out: &mut Vec<Value>,
    rows: &[RankOverview],
    rule: &str,
    value: impl Fn(&RankOverview) -> Option<f64>,
    fires: impl Fn(f64) -> bool,
    text: impl Fn(f64) -> String,
) {
    let vals: Vec<(u32, f64)> = rows
        .iter()
        .filter_map(|o| Some((o.rank, value(o)?)))
        .collect();
    if vals.is_empty() {
        return;
    }
    let mean = vals.iter().map(|v| v.1).sum::<f64>() / vals.len() as f64;
    let firing: Vec<u32> = vals.iter().filter(|v| fires(v.1)).map(|v| v.0).collect();
    if vals.len() > 1 && fires(mean) {
        out.push(item(
            rule,
            firing.clone(),
            mean,
            "pct",
            format!("job-wide: {}", text(mean)),
        ));
    }
    for (rank, v) in vals.iter().filter(|v| fires(v.1)) {
        out.push(item(
            rule,
            vec![*rank],
            *v,
            "pct",
            format!("rank {rank}: {}", text(*v)),
        ));
    }
}

pub(super) async fn advice(
    State(st): State<ApiState>,
    Path(job): Path<String>,
    Query(q): Query<RankQuery>,
) -> Result<Json<Value>, ApiError> {
    let rows = overviews(&st, &job, q.rank, q.exact.unwrap_or(false)).await?;
    let mut out = Vec::new();
    let loader = |o: &RankOverview| share(o.roles_us[5], o.step_us);
    threshold_rule(
        &mut out,
        &rows,
        "dataloader",
        loader,
        |p| p > DATALOADER_SHARE,
        |p| {
            format!("{p:.1}% of the step time is in DataLoader; set num_workers on the DataLoader to load in several processes")
        },
    );
    threshold_rule(
        &mut out,
        &rows,
        "communication",
        |o| share(o.roles_us[3], o.step_us),
        |p| p > COMMUNICATION_SHARE,
        |p| {
            format!("{p:.1}% of the step time is in communication not hidden by compute; try gradient compression, gradient accumulation or a larger batch")
        },
    );
    threshold_rule(
        &mut out,
        &rows,
        "low_gpu_utilization",
        |o| o.summary.gpu_util_pct,
        |p| p < LOW_UTIL_PCT,
        |p| format!("GPU utilization {p:.1}%; try a larger batch size"),
    );

    // Tensor Cores: GEMM / convolution kernel time while no kernel uses them.
    let mut launch_bound = Vec::new();
    for o in rows.iter() {
        let k = &o.kernels;
        if o.summary.tensor_core_pct == Some(0.0) && k.gemm_conv_ns > 0 && k.total_ns > 0 {
            let p = 100.0 * k.gemm_conv_ns as f64 / k.total_ns as f64;
            out.push(item("tensor_cores_unused", vec![o.rank], p, "pct", format!(
                "rank {}: {p:.0}% of kernel time is GEMM / convolution kernels and none uses Tensor Cores; enable automatic mixed precision (FP16 / BF16)", o.rank)));
        }
        let util = o.summary.gpu_util_pct.unwrap_or(100.0);
        if k.launched >= 100 && util < LOW_UTIL_PCT && 2 * k.short > k.launched {
            let p = 100.0 * k.short as f64 / k.launched as f64;
            launch_bound.push(item("launch_bound", vec![o.rank], p, "pct", format!(
                "rank {}: {p:.0}% of its kernels run shorter than their launch calls at {util:.1}% GPU utilization: the CPU cannot keep the GPU busy; fuse kernels (torch.compile) or use CUDA graphs", o.rank)));
        }
    }

    // Input stalls: DataLoader time far above the median rank's.
    let loads: Vec<(u32, f64)> = rows.iter().map(|o| (o.rank, o.roles_us[5])).collect();
    if loads.len() > 1 {
        let mut v: Vec<f64> = loads.iter().map(|l| l.1).collect();
        v.sort_by(f64::total_cmp);
        let median = v[v.len() / 2];
        for (o, (rank, us)) in rows.iter().zip(&loads) {
            let p = share(*us, o.step_us).unwrap_or(0.0);
            if *us > 2.0 * median && p > DATALOADER_SHARE {
                out.push(item("input_stall", vec![*rank], p, "pct", format!(
                    "rank {rank} waits {us:.0} us per step for input, over twice the median rank ({median:.0} us)")));
            }
        }
    }
    out.extend(launch_bound);

    let verdicts = super::analytics::stragglers(State(st.clone()), Path(job.clone())).await?;
    for v in verdicts.0["stragglers"].as_array().into_iter().flatten() {
        if v["active"] != true {
            continue;
        }
        let rank = v["rank"].as_u64().unwrap_or(0) as u32;
        let gain = v["expected_gain_pct"].as_f64();
        out.push(item("straggler", vec![rank], gain.unwrap_or(0.0), "pct_gain", format!(
            "rank {rank} is a straggler (steps {}..{}, slowdown {:.2}x, cause {}); the job would be {} faster without it",
            v["first_step"], v["last_step"], v["slowdown"].as_f64().unwrap_or(0.0),
            v["cause"].as_str().unwrap_or("unknown"),
            gain.map_or("an unknown share".into(), |g| format!("{g:.1}%")))));
    }
    let (memory, not_evaluated) = own::memory_items(&st, &job, q.rank).await?;
    out.extend(memory);
    out.extend(own::exposed_items(&st, &job, q.rank).await?);
    Ok(Json(json!({
        "job": job,
        "advice": out,
        "not_evaluated": not_evaluated,
    })))
}
