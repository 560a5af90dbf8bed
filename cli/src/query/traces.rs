//! `rankscope trace` (request a Kineto trace of a job's ranks through their
//! agents) and `rankscope traces` (what became of each rank's trace).
//!
//! In: the collector URL, the job, ranks, `--duration-ms` or
//! `--iterations`. Out: `POST /api/v1/jobs/{job}/traces`, then (with
//! `--wait`) `GET .../traces?trace_id=` until every rank is `imported` or
//! `failed`; rows rendered like every other view (fields `trace_id, rank,
//! node, state, reason, requested_at_ns, iterations, ..., archive_url`).

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::columns::{col, Column, Kind};
use super::http::{HttpClient, HttpError};
use super::percent_encode;

/// Table and CSV columns of both commands.
pub const TRACES: &[Column] = &[
    col("trace_id", "trace_id", Kind::Plain),
    col("rank", "rank", Kind::Plain),
    col("node", "node", Kind::Plain),
    col("state", "state", Kind::Plain),
    col("reason", "reason", Kind::Plain),
    col("requested_at_ns", "requested_at_ns", Kind::Plain),
    col("iterations", "iterations", Kind::Plain),
    col("duration_ms", "duration_ms", Kind::Plain),
    col("first_step", "first_step", Kind::Plain),
    col("steps", "steps", Kind::Plain),
    col("events", "events", Kind::Plain),
    col("origin", "origin", Kind::Plain),
    // Where the agent archived the rank's trace (`rankscope import <url>`).
    col("archive_url", "archive_url", Kind::Plain),
];

/// Table and CSV columns of `rankscope trace-diff`.
pub const DIFF: &[Column] = &[
    col("level", "level", Kind::Plain),
    col("category", "category", Kind::Plain),
    col("name", "name", Kind::Name),
    col("subject_ns_per_iter", "subject_ms/it", Kind::NsAsMs),
    col("peers_ns_per_iter", "peers_ms/it", Kind::NsAsMs),
    col("diff_ns_per_iter", "diff_ms/it", Kind::NsAsMs),
    col("subject_calls_per_iter", "subject_calls/it", Kind::Float2),
    col("peers_calls_per_iter", "peers_calls/it", Kind::Float2),
    col("only_on", "only_on", Kind::Plain),
];

/// `GET .../traces/{trace}/diff[?rank=]`: the whole answer.
pub async fn diff(
    client: &HttpClient,
    collector: &str,
    job: &str,
    trace_id: &str,
    rank: Option<u32>,
) -> Result<Value, HttpError> {
    let mut url = format!(
        "{}/{}/diff",
        traces_url(collector, job),
        percent_encode(trace_id)
    );
    if let Some(r) = rank {
        url.push_str(&format!("?rank={r}"));
    }
    client.get_json(&url).await
}

/// How much to trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceSpan {
    DurationMs(u64),
    Iterations(u64),
}

fn traces_url(collector: &str, job: &str) -> String {
    format!(
        "{}/api/v1/jobs/{}/traces",
        collector.trim_end_matches('/'),
        percent_encode(job)
    )
}

/// Requests a trace; returns the trace id and its ranks.
pub async fn request(
    client: &HttpClient,
    collector: &str,
    job: &str,
    ranks: &[u32],
    span: TraceSpan,
) -> Result<(String, Vec<Value>), HttpError> {
    let mut body = json!({ "ranks": ranks });
    match span {
        TraceSpan::DurationMs(ms) => body["duration_ms"] = json!(ms),
        TraceSpan::Iterations(n) => body["iterations"] = json!(n),
    }
    let answer: Value = client.post_json(&traces_url(collector, job), &body).await?;
    let id = answer["trace_id"].as_str().unwrap_or_default().to_owned();
    Ok((id, rows(&answer["ranks"])))
}

/// Every (trace, rank) of `job`, or of one trace.
pub async fn fetch(
    client: &HttpClient,
    collector: &str,
    job: &str,
    trace_id: Option<&str>,
) -> Result<Vec<Value>, HttpError> {
    let mut url = traces_url(collector, job);
    if let Some(t) = trace_id {
        url.push_str(&format!("?trace_id={}", percent_encode(t)));
    }
    let body: Value = client.get_json(&url).await?;
    Ok(rows(&body["traces"]))
}

fn rows(v: &Value) -> Vec<Value> {
    v.as_array().cloned().unwrap_or_default()
}

/// Whether every rank reached `imported` or `failed`.
pub fn all_finished(rows: &[Value]) -> bool {
    !rows.is_empty()
        && rows
            .iter()
            .all(|r| matches!(r["state"].as_str(), Some("imported" | "failed")))
}

/// Polls the trace every `every` until all ranks finished or `wait` passed;
/// returns the last rows and whether they all finished.
pub async fn wait(
    client: &HttpClient,
    collector: &str,
    job: &str,
    trace_id: &str,
    wait: Duration,
    every: Duration,
) -> Result<(Vec<Value>, bool), HttpError> {
    let deadline = Instant::now() + wait;
    loop {
        let rows = fetch(client, collector, job, Some(trace_id)).await?;
        if all_finished(&rows) {
            return Ok((rows, true));
        }
        if Instant::now() >= deadline {
            return Ok((rows, false));
        }
        tokio::time::sleep(every.min(deadline.saturating_duration_since(Instant::now()))).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finished_means_every_rank_imported_or_failed() {
        let r = |s: &str| json!({"state": s});
        assert!(all_finished(&[r("imported"), r("failed")]));
        assert!(!all_finished(&[r("imported"), r("captured")]));
        assert!(!all_finished(&[]));
    }

    #[test]
    fn url_encodes_the_job() {
        assert_eq!(
            traces_url("http://c/", "a b"),
            "http://c/api/v1/jobs/a%20b/traces"
        );
    }
}
