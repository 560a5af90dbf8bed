//! GPU-activity commands (issue 17): `kernel-types`, `kernels`, `idle`,
//! `queue`, `memcpy` over `GET /api/v1/jobs/{job}/{view}` (HTA 0.5.0
//! definitions, see `rankscope_analysis::{kernels, idle, memcpy}`).
//!
//! In: the collector URL and [`GpuArgs`]. Out: the API's rows rendered as a
//! table, JSON or CSV through [`super::columns`].

use serde_json::Value;

use super::columns::{col, render, Column, Kind};
use super::http::{HttpClient, HttpError};
use super::{percent_encode, OutputFormat};

/// Which GPU view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GpuView {
    KernelTypes,
    Kernels,
    Idle,
    Queue,
    Memcpy,
    Launches,
}

/// Options of the GPU commands.
#[derive(Debug, Clone, clap::Args)]
pub struct GpuArgs {
    /// Job id.
    #[arg(long)]
    pub job: String,
    /// Only this rank.
    #[arg(long)]
    pub rank: Option<u32>,
    /// `kernels`: at most N names per kernel type (HTA num_kernels).
    #[arg(long, value_name = "N")]
    pub top: Option<u64>,
    /// `kernels`: keep the names making up this share of a type's time
    /// (HTA duration_ratio, 0 < F <= 1).
    #[arg(long, value_name = "F")]
    pub ratio: Option<f64>,
    /// `idle`: gaps below this are kernel_wait (HTA consecutive_kernel_delay).
    #[arg(long, value_name = "US")]
    pub kernel_delay_us: Option<u64>,
    /// `launches`: HTA runtime_cutoff, us (default 50).
    #[arg(long, value_name = "US")]
    pub runtime_cutoff_us: Option<u64>,
    /// `launches`: HTA launch_delay_cutoff, us (default 100).
    #[arg(long, value_name = "US")]
    pub launch_delay_cutoff_us: Option<u64>,
    /// Every recorded GPU activity at its recorded nanosecond times, not
    /// HTA 0.5.0's loading rules (the default: with two or more
    /// ProfilerSteps only work launched by the last step's end, times
    /// rounded inward to whole microseconds).
    #[arg(long)]
    pub exact: bool,
    /// `kernels`: `hta` (HTA's kernel breakdown, the default), `kernel` (the
    /// PyTorch Profiler TensorBoard plugin's kernel view: blocks per SM,
    /// occupancy, Tensor Cores, Inductor category) or `category`
    /// (TorchInductor's GPU time per kernel category and the GPU-busy percent).
    #[arg(long, value_parser = ["hta", "kernel", "category"])]
    pub by: Option<String>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = OutputFormat::Table)]
    pub format: OutputFormat,
}

impl GpuView {
    /// Path segment and the response's array field.
    pub fn name(self) -> &'static str {
        match self {
            GpuView::KernelTypes => "kernel-types",
            GpuView::Kernels => "kernels",
            GpuView::Idle => "idle",
            GpuView::Queue => "queue",
            GpuView::Memcpy => "memcpy",
            GpuView::Launches => "launches",
        }
    }

    /// Table columns.
    pub fn columns(self) -> &'static [Column] {
        match self {
            GpuView::KernelTypes => KERNEL_TYPES,
            GpuView::Kernels => KERNELS,
            GpuView::Idle => IDLE,
            GpuView::Queue => QUEUE,
            GpuView::Memcpy => MEMCPY,
            GpuView::Launches => LAUNCHES,
        }
    }
}

const KERNEL_TYPES: &[Column] = &[
    col("rank", "rank", Kind::Plain),
    col("kernel_type", "kernel_type", Kind::Plain),
    col("sum_ns", "sum_ms", Kind::NsAsMs),
    col("pct", "%", Kind::Pct),
];

const KERNELS: &[Column] = &[
    col("rank", "rank", Kind::Plain),
    col("kernel_type", "kernel_type", Kind::Plain),
    col("category", "category", Kind::Plain),
    col("name", "name", Kind::Name),
    col("calls", "calls", Kind::Plain),
    col("sum_ns", "sum_ms", Kind::NsAsMs),
    col("max_ns", "max_ms", Kind::NsAsMs),
    col("min_ns", "min_ms", Kind::NsAsMs),
    col("mean_ns", "mean_ms", Kind::NsAsMs),
    col("stddev_ns", "stddev_ms", Kind::NsAsMs),
];

/// `kernels --by kernel`: the TensorBoard plugin's kernel view.
const KERNEL_VIEW: &[Column] = &[
    col("rank", "rank", Kind::Plain),
    col("category", "category", Kind::Plain),
    col("name", "name", Kind::Name),
    col("tensor_cores_used", "tc", Kind::Plain),
    col("calls", "calls", Kind::Plain),
    col("sum_ns", "sum_ms", Kind::NsAsMs),
    col("mean_ns", "mean_ms", Kind::NsAsMs),
    col("max_ns", "max_ms", Kind::NsAsMs),
    col("min_ns", "min_ms", Kind::NsAsMs),
    col("mean_blocks_per_sm", "blocks/SM", Kind::Float2),
    col("mean_est_achieved_occupancy_pct", "occupancy_%", Kind::Pct),
];

/// `kernels --by category`: TorchInductor's categories.
const CATEGORIES: &[Column] = &[
    col("rank", "rank", Kind::Plain),
    col("category", "category", Kind::Plain),
    col("calls", "calls", Kind::Plain),
    col("sum_ns", "sum_ms", Kind::NsAsMs),
    col("pct_of_wall", "%_of_span", Kind::Pct),
    col("pct_of_gpu_time", "%_of_gpu_time", Kind::Pct),
];

const IDLE: &[Column] = &[
    col("rank", "rank", Kind::Plain),
    col("stream", "stream", Kind::Plain),
    col("category", "category", Kind::Plain),
    col("idle_ns", "idle_ms", Kind::NsAsMs),
    col("ratio", "ratio", Kind::Float3),
    col("count", "count", Kind::Plain),
    col("mean_ns", "mean_ms", Kind::NsAsMs),
    col("std_ns", "std_ms", Kind::NsAsMs),
    col("min_ns", "min_ms", Kind::NsAsMs),
    col("p25_ns", "p25_ms", Kind::NsAsMs),
    col("p50_ns", "p50_ms", Kind::NsAsMs),
    col("p75_ns", "p75_ms", Kind::NsAsMs),
    col("max_ns", "max_ms", Kind::NsAsMs),
];

const QUEUE: &[Column] = &[
    col("rank", "rank", Kind::Plain),
    col("stream", "stream", Kind::Plain),
    col("count", "count", Kind::Plain),
    col("mean", "mean", Kind::Float2),
    col("std", "std", Kind::Float2),
    col("min", "min", Kind::Float2),
    col("p25", "p25", Kind::Float2),
    col("p50", "p50", Kind::Float2),
    col("p75", "p75", Kind::Float2),
    col("max", "max", Kind::Float2),
];

const MEMCPY: &[Column] = &[
    col("rank", "rank", Kind::Plain),
    col("kind", "kind", Kind::Plain),
    col("calls", "calls", Kind::Plain),
    col("bytes", "bytes", Kind::Bytes),
    col("sum_ns", "sum_ms", Kind::NsAsMs),
    col("gbps", "GB/s", Kind::Float2),
];

/// URL of `view` with the options it takes (absent ones left out).
const LAUNCHES: &[Column] = &[
    col("rank", "rank", Kind::Plain),
    col("launches", "launches", Kind::Plain),
    col("short_kernels", "short_kernels", Kind::Plain),
    col("runtime_outliers", "runtime_outliers", Kind::Plain),
    col("launch_delay_outliers", "delay_outliers", Kind::Plain),
    col("mean_cpu_ns", "mean_cpu_ms", Kind::NsAsMs),
    col("mean_launch_delay_ns", "mean_delay_ms", Kind::NsAsMs),
    col("max_cpu_ns", "max_cpu_ms", Kind::NsAsMs),
    col("max_cpu_kernel", "max_cpu_kernel", Kind::Name),
    col("max_launch_delay_ns", "max_delay_ms", Kind::NsAsMs),
    col("max_launch_delay_kernel", "max_delay_kernel", Kind::Name),
];

pub fn gpu_url(collector: &str, view: GpuView, a: &GpuArgs) -> String {
    let mut url = format!(
        "{}/api/v1/jobs/{}/{}",
        collector.trim_end_matches('/'),
        percent_encode(&a.job),
        view.name()
    );
    let mut params: Vec<(&str, String)> = Vec::new();
    if let Some(r) = a.rank {
        params.push(("rank", r.to_string()));
    }
    if a.exact {
        params.push(("exact", "true".into()));
    }
    if view == GpuView::Kernels {
        if let Some(t) = a.top {
            params.push(("top", t.to_string()));
        }
        if let Some(r) = a.ratio {
            params.push(("ratio", r.to_string()));
        }
        if let Some(b) = &a.by {
            params.push(("by", b.clone()));
        }
    }
    if view == GpuView::Idle {
        if let Some(d) = a.kernel_delay_us {
            params.push(("kernel_delay_us", d.to_string()));
        }
    }
    if view == GpuView::Launches {
        if let Some(r) = a.runtime_cutoff_us {
            params.push(("runtime_cutoff_us", r.to_string()));
        }
        if let Some(d) = a.launch_delay_cutoff_us {
            params.push(("launch_delay_cutoff_us", d.to_string()));
        }
    }
    for (i, (k, v)) in params.iter().enumerate() {
        url.push(if i == 0 { '?' } else { '&' });
        url.push_str(&format!("{k}={v}"));
    }
    url
}

/// Fetches the rows of `view` and renders them.
pub async fn show(
    client: &HttpClient,
    collector: &str,
    view: GpuView,
    a: &GpuArgs,
) -> Result<String, HttpError> {
    let body: Value = client.get_json(&gpu_url(collector, view, a)).await?;
    let rows = match body.get(view.name()) {
        Some(Value::Array(rows)) => rows.clone(),
        _ => Vec::new(),
    };
    let columns = match (view, a.by.as_deref()) {
        (GpuView::Kernels, Some("kernel")) => KERNEL_VIEW,
        (GpuView::Kernels, Some("category")) => {
            let mut out = render(&rows, CATEGORIES, a.format);
            if a.format == OutputFormat::Table {
                for b in body["busy"].as_array().into_iter().flatten() {
                    let who = b["rank"]
                        .as_u64()
                        .map_or("job".into(), |r| format!("rank {r}"));
                    let pct = b["busy_pct"]
                        .as_f64()
                        .map_or("-".into(), |p| format!("{p:.2}%"));
                    out.push_str(&format!("{who}: GPU busy {pct} of the profiled span\n"));
                }
            }
            return Ok(out);
        }
        _ => view.columns(),
    };
    Ok(render(&rows, columns, a.format))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_carry_only_the_options_a_view_takes() {
        let a = GpuArgs {
            job: "a/b".into(),
            rank: Some(3),
            top: Some(5),
            ratio: Some(0.9),
            kernel_delay_us: Some(10),
            runtime_cutoff_us: Some(20),
            launch_delay_cutoff_us: None,
            exact: false,
            by: Some("category".into()),
            format: OutputFormat::Table,
        };
        assert_eq!(
            gpu_url("http://c/", GpuView::Kernels, &a),
            "http://c/api/v1/jobs/a%2Fb/kernels?rank=3&top=5&ratio=0.9&by=category"
        );
        assert_eq!(
            gpu_url("http://c", GpuView::Idle, &a),
            "http://c/api/v1/jobs/a%2Fb/idle?rank=3&kernel_delay_us=10"
        );
        assert_eq!(
            gpu_url("http://c", GpuView::Launches, &a),
            "http://c/api/v1/jobs/a%2Fb/launches?rank=3&runtime_cutoff_us=20"
        );
        let b = GpuArgs { rank: None, ..a };
        assert_eq!(
            gpu_url("http://c", GpuView::KernelTypes, &b),
            "http://c/api/v1/jobs/a%2Fb/kernel-types"
        );
        let c = GpuArgs { exact: true, ..b };
        assert_eq!(
            gpu_url("http://c", GpuView::Memcpy, &c),
            "http://c/api/v1/jobs/a%2Fb/memcpy?exact=true"
        );
    }
}
