//! The issue-29 commands `overview`, `advice` and `annotations` over
//! `GET /api/v1/jobs/{job}/{overview,advice,annotations}` (definitions: the collector's
//! `api::overview` / `api::advice`, the PyTorch Profiler TensorBoard
//! plugin's overview and recommendations).
//!
//! In: the collector URL and [`ViewArgs`]. Out: tables (per rank, then the
//! job-wide spread or the items), JSON (the API's body) or CSV (the rows).

use serde_json::Value;

use super::columns::{col, render, Column, Kind};
use super::http::{HttpClient, HttpError};
use super::{percent_encode, OutputFormat};

/// Options of `overview` and `advice`.
#[derive(Debug, Clone, clap::Args)]
pub struct ViewArgs {
    /// Job id.
    #[arg(long)]
    pub job: String,
    /// Only this rank.
    #[arg(long)]
    pub rank: Option<u32>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = OutputFormat::Table)]
    pub format: OutputFormat,
}

const OVERVIEW: &[Column] = &[
    col("rank", "rank", Kind::Plain),
    col("steps", "steps", Kind::Plain),
    col("gpu_util_pct", "gpu_util_%", Kind::Pct),
    col("sm_efficiency_pct", "sm_eff_%", Kind::Pct),
    col("achieved_occupancy_pct", "occupancy_%", Kind::Pct),
    col("tensor_core_pct", "tensor_core_%", Kind::Pct),
    col("step_us", "step_us", Kind::Float2),
    col("kernel_us", "kernel_us", Kind::Float2),
    col("memcpy_us", "memcpy_us", Kind::Float2),
    col("memset_us", "memset_us", Kind::Float2),
    col("communication_us", "comm_us", Kind::Float2),
    col("runtime_us", "runtime_us", Kind::Float2),
    col("dataloader_us", "dataloader_us", Kind::Float2),
    col("cpu_exec_us", "cpu_exec_us", Kind::Float2),
    col("other_us", "other_us", Kind::Float2),
];

const SPREAD: &[Column] = &[
    col("figure", "figure", Kind::Plain),
    col("min", "min", Kind::Float2),
    col("median", "median", Kind::Float2),
    col("max", "max", Kind::Float2),
    col("outlier_rank", "outlier_rank", Kind::Plain),
    col("outlier_value", "outlier", Kind::Float2),
];

const ADVICE: &[Column] = &[
    col("rule", "rule", Kind::Plain),
    col("ranks", "ranks", Kind::Plain),
    col("figure", "figure", Kind::Float2),
    col("unit", "unit", Kind::Plain),
    col("text", "text", Kind::Plain),
];

const ANNOTATIONS: &[Column] = &[
    col("rank", "rank", Kind::Plain),
    col("name", "name", Kind::Name),
    col("count", "count", Kind::Plain),
    col("sum_ns", "sum_ms", Kind::NsAsMs),
    col("max_ns", "max_ms", Kind::NsAsMs),
    col("min_ns", "min_ms", Kind::NsAsMs),
    col("mean_ns", "mean_ms", Kind::NsAsMs),
    col("stddev_ns", "stddev_ms", Kind::NsAsMs),
];

/// `rankscope annotations` (HTA 0.5.0's GPU user-annotation breakdown).
pub async fn annotations(
    client: &HttpClient,
    collector: &str,
    a: &ViewArgs,
) -> Result<String, HttpError> {
    let body: Value = client.get_json(&url(collector, "annotations", a)).await?;
    if a.format == OutputFormat::Json {
        return Ok(format!("{body}\n"));
    }
    let mut out = render(&array(&body, "annotations"), ANNOTATIONS, a.format);
    if let (Some(n), OutputFormat::Table) = (body["note"].as_str(), a.format) {
        out.push_str(&format!("note: {n}\n"));
    }
    Ok(out)
}

/// `{collector}/api/v1/jobs/{job}/{route}[?rank=R]`.
pub fn url(collector: &str, route: &str, a: &ViewArgs) -> String {
    let mut u = format!(
        "{}/api/v1/jobs/{}/{route}",
        collector.trim_end_matches('/'),
        percent_encode(&a.job)
    );
    if let Some(r) = a.rank {
        u.push_str(&format!("?rank={r}"));
    }
    u
}

fn array(body: &Value, field: &str) -> Vec<Value> {
    body[field].as_array().cloned().unwrap_or_default()
}

/// `rankscope overview`.
pub async fn overview(
    client: &HttpClient,
    collector: &str,
    a: &ViewArgs,
) -> Result<String, HttpError> {
    let body: Value = client.get_json(&url(collector, "overview", a)).await?;
    if a.format == OutputFormat::Json {
        return Ok(format!("{body}\n"));
    }
    let mut out = render(&array(&body, "overview"), OVERVIEW, a.format);
    if a.format == OutputFormat::Table {
        let spread: Vec<Value> = body["job_wide"]
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(_, v)| v.is_object())
            .map(|(k, v)| {
                let mut row = v.clone();
                row["figure"] = Value::String(k.clone());
                row
            })
            .collect();
        out.push('\n');
        out.push_str(&render(&spread, SPREAD, a.format));
        for n in array(&body, "notes") {
            out.push_str(&format!("note: {}\n", n.as_str().unwrap_or_default()));
        }
    }
    Ok(out)
}

/// `rankscope advice`.
pub async fn advice(
    client: &HttpClient,
    collector: &str,
    a: &ViewArgs,
) -> Result<String, HttpError> {
    let body: Value = client.get_json(&url(collector, "advice", a)).await?;
    if a.format == OutputFormat::Json {
        return Ok(format!("{body}\n"));
    }
    let rows: Vec<Value> = array(&body, "advice")
        .into_iter()
        .map(|mut r| {
            let ranks: Vec<String> = array(&r, "ranks").iter().map(|x| x.to_string()).collect();
            r["ranks"] = Value::String(ranks.join(","));
            r
        })
        .collect();
    let mut out = render(&rows, ADVICE, a.format);
    if a.format == OutputFormat::Table {
        if rows.is_empty() {
            out.push_str("no rule fired\n");
        }
        for n in array(&body, "not_evaluated") {
            out.push_str(&format!(
                "not evaluated: {} ({})\n",
                n["rule"].as_str().unwrap_or_default(),
                n["reason"].as_str().unwrap_or_default()
            ));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_carries_the_rank() {
        let mut a = ViewArgs {
            job: "a/b".into(),
            rank: None,
            format: OutputFormat::Table,
        };
        assert_eq!(
            url("http://c/", "overview", &a),
            "http://c/api/v1/jobs/a%2Fb/overview"
        );
        a.rank = Some(3);
        assert_eq!(
            url("http://c", "advice", &a),
            "http://c/api/v1/jobs/a%2Fb/advice?rank=3"
        );
    }
}
