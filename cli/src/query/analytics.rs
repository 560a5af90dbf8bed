//! Analytics commands: `breakdown`, `ranks`, `collectives`, `stragglers`.
//!
//! In: the collector URL, a job and options. Out: the rows of
//! `GET /api/v1/jobs/{job}/{breakdown|ranks|collectives|stragglers}` and the
//! columns each command shows in a table (JSON passes every API field).

use serde_json::Value;

use super::columns::{col, Column, Kind};
use super::http::{HttpClient, HttpError};
use super::percent_encode;

/// Which analytics view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View {
    Breakdown,
    Ranks,
    Collectives,
    Stragglers,
}

impl View {
    /// Path segment and the response's array field.
    pub fn name(self) -> &'static str {
        match self {
            View::Breakdown => "breakdown",
            View::Ranks => "ranks",
            View::Collectives => "collectives",
            View::Stragglers => "stragglers",
        }
    }

    /// Table columns.
    pub fn columns(self) -> &'static [Column] {
        match self {
            View::Breakdown => BREAKDOWN,
            View::Ranks => RANKS,
            View::Collectives => COLLECTIVES,
            View::Stragglers => STRAGGLERS,
        }
    }
}

const BREAKDOWN: &[Column] = &[
    col("step", "step", Kind::Plain),
    col("rank", "rank", Kind::Plain),
    col("node", "node", Kind::Plain),
    col("step_time_ns", "step_ms", Kind::NsAsMs),
    col("gpu_span_ns", "span_ms", Kind::NsAsMs),
    col("idle_ns", "idle_ms", Kind::NsAsMs),
    col("compute_ns", "compute_ms", Kind::NsAsMs),
    col("comm_ns", "comm_ms", Kind::NsAsMs),
    col("memory_ns", "memory_ms", Kind::NsAsMs),
    col("overlap_ns", "overlap_ms", Kind::NsAsMs),
    col("exposed_comm_ns", "exposed_comm_ms", Kind::NsAsMs),
    col("overlap_pct", "overlap_%", Kind::Pct),
    col("comm_wait_ns", "wait_ms", Kind::NsAsMs),
];

const RANKS: &[Column] = &[
    col("rank", "rank", Kind::Plain),
    col("node", "node", Kind::Plain),
    col("gpu_span_ns", "span_ms", Kind::NsAsMs),
    col("idle_ns", "idle_ms", Kind::NsAsMs),
    col("compute_ns", "compute_ms", Kind::NsAsMs),
    col("non_compute_ns", "non_compute_ms", Kind::NsAsMs),
    col("comm_ns", "comm_ms", Kind::NsAsMs),
    col("memory_ns", "memory_ms", Kind::NsAsMs),
    col("idle_pct", "idle_%", Kind::Pct),
    col("compute_pct", "compute_%", Kind::Pct),
    col("non_compute_pct", "non_compute_%", Kind::Pct),
    col("overlap_pct", "overlap_%", Kind::Pct),
];

const COLLECTIVES: &[Column] = &[
    col("process_group", "pg", Kind::Plain),
    col("op", "op", Kind::Plain),
    col("dtype", "dtype", Kind::Plain),
    col("size_bucket", "size", Kind::Plain),
    col("rank", "rank", Kind::Plain),
    col("calls", "calls", Kind::Plain),
    col("avg_bytes", "avg_bytes", Kind::Bytes),
    col("mean_duration_ns", "mean_ms", Kind::NsAsMs),
    col("p50_duration_ns", "p50_ms", Kind::NsAsMs),
    col("p99_duration_ns", "p99_ms", Kind::NsAsMs),
    col("algbw_gbps", "algbw_GB/s", Kind::Float2),
    col("busbw_gbps", "busbw_GB/s", Kind::Float2),
    col("wait_ns", "wait_ms", Kind::NsAsMs),
    col("transfer_ns", "transfer_ms", Kind::NsAsMs),
];

const STRAGGLERS: &[Column] = &[
    col("rank", "rank", Kind::Plain),
    col("node", "node", Kind::Plain),
    col("first_step", "first_step", Kind::Plain),
    col("last_step", "last_step", Kind::Plain),
    col("steps_flagged", "steps_flagged", Kind::Plain),
    col("slowdown", "slowdown", Kind::Float3),
    col("score", "score", Kind::Float2),
    col("cause", "cause", Kind::Plain),
    col("active", "active", Kind::Plain),
    col("expected_gain_pct", "gain_%", Kind::Pct),
    col("trace_id", "trace", Kind::Plain),
    col("evidence", "evidence", Kind::Plain),
];

/// Table columns of `rankscope alerts`.
pub const ALERTS: &[Column] = &[
    col("job", "job", Kind::Plain),
    col("rule", "rule", Kind::Plain),
    col("rank", "rank", Kind::Plain),
    col("node", "node", Kind::Plain),
    col("severity", "severity", Kind::Plain),
    col("state", "state", Kind::Plain),
    col("started_at_ns", "started_at_ns", Kind::Plain),
    col("resolved_at_ns", "resolved_at_ns", Kind::Plain),
    col("summary", "summary", Kind::Plain),
];

/// URL of `GET /api/v1/alerts`.
pub fn alerts_url(collector: &str, job: Option<&str>, active: bool) -> String {
    let mut url = format!("{}/api/v1/alerts", collector.trim_end_matches('/'));
    let mut sep = '?';
    if let Some(j) = job {
        url.push_str(&format!("{sep}job={}", percent_encode(j)));
        sep = '&';
    }
    if active {
        url.push_str(&format!("{sep}active=true"));
    }
    url
}

/// Fetches alerts (`evidence` stays an object for JSON output; tables show
/// the summary).
pub async fn fetch_alerts(
    client: &HttpClient,
    collector: &str,
    job: Option<&str>,
    active: bool,
) -> Result<Vec<Value>, HttpError> {
    let body: Value = client.get_json(&alerts_url(collector, job, active)).await?;
    Ok(match body.get("alerts") {
        Some(Value::Array(rows)) => rows.clone(),
        _ => Vec::new(),
    })
}

/// URL of `view` for `job` with `params` (absent ones left out).
pub fn view_url(collector: &str, job: &str, view: View, params: &[(&str, Option<u64>)]) -> String {
    let mut url = format!(
        "{}/api/v1/jobs/{}/{}",
        collector.trim_end_matches('/'),
        percent_encode(job),
        view.name()
    );
    let mut sep = '?';
    for (key, value) in params {
        if let Some(v) = value {
            url.push(sep);
            url.push_str(&format!("{key}={v}"));
            sep = '&';
        }
    }
    url
}

/// Fetches the rows of `ranks` (`exact`: `?exact=true`, the stored
/// activities as they are rather than as HTA loads them).
pub async fn fetch_ranks(
    client: &HttpClient,
    collector: &str,
    job: &str,
    exact: bool,
) -> Result<Vec<Value>, HttpError> {
    let mut url = view_url(collector, job, View::Ranks, &[]);
    if exact {
        url.push_str("?exact=true");
    }
    let body: Value = client.get_json(&url).await?;
    Ok(match body.get(View::Ranks.name()) {
        Some(Value::Array(rows)) => rows.clone(),
        _ => Vec::new(),
    })
}

/// Fetches the rows of `view`.
pub async fn fetch_view(
    client: &HttpClient,
    collector: &str,
    job: &str,
    view: View,
    params: &[(&str, Option<u64>)],
) -> Result<Vec<Value>, HttpError> {
    let body: Value = client
        .get_json(&view_url(collector, job, view, params))
        .await?;
    Ok(match body.get(view.name()) {
        Some(Value::Array(rows)) => rows.clone(),
        _ => Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alert_urls() {
        assert_eq!(
            alerts_url("http://c/", None, false),
            "http://c/api/v1/alerts"
        );
        assert_eq!(
            alerts_url("http://c", Some("a/b"), true),
            "http://c/api/v1/alerts?job=a%2Fb&active=true"
        );
    }

    #[test]
    fn urls() {
        assert_eq!(
            view_url(
                "http://c/",
                "a b",
                View::Breakdown,
                &[("step", None), ("last", Some(3))]
            ),
            "http://c/api/v1/jobs/a%20b/breakdown?last=3"
        );
        assert_eq!(
            view_url("http://c", "j", View::Collectives, &[("rank", Some(2))]),
            "http://c/api/v1/jobs/j/collectives?rank=2"
        );
        assert_eq!(
            view_url("http://c", "j", View::Stragglers, &[]),
            "http://c/api/v1/jobs/j/stragglers"
        );
    }
}
