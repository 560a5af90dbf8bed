//! `rankscope ops` and `rankscope memory`: the Operator and Memory views of
//! a job's traced ranks (`GET /api/v1/jobs/{job}/ops`, `/memory`; their
//! definitions are the collector's `api::views`).

use serde_json::Value;

use super::columns::{col, Column, Kind};
use super::http::{HttpClient, HttpError};
use super::percent_encode;

/// `ops --rank R`: one row per operator (and call stack) of the rank.
pub const RANK_OPS: &[Column] = &[
    col("name", "operator", Kind::Name),
    col("calls", "calls", Kind::Plain),
    col("host_self_us", "host self us", Kind::Float3),
    col("host_total_us", "host total us", Kind::Float3),
    col("device_self_us", "dev self us", Kind::Float3),
    col("device_total_us", "dev total us", Kind::Float3),
    col("tc_eligible", "tc elig", Kind::Plain),
    col("tc_self_pct", "tc self %", Kind::Pct),
    col("tc_total_pct", "tc total %", Kind::Pct),
    col("host_avg_us", "host avg us", Kind::Float3),
    col("host_min_us", "host min us", Kind::Float3),
    col("host_max_us", "host max us", Kind::Float3),
    col("host_ratio_pct", "host %", Kind::Pct),
    col("device_avg_us", "dev avg us", Kind::Float3),
    col("device_min_us", "dev min us", Kind::Float3),
    col("device_max_us", "dev max us", Kind::Float3),
    col("device_ratio_pct", "dev %", Kind::Pct),
];

/// `ops --group-by shape`: the input shape column, after the name.
pub const INPUT_SHAPE: Column = col("input_shape", "input shape", Kind::Plain);

/// `cols` with the input shape column after the name when the rows carry
/// one (`--group-by shape` of traces with `Input Dims`).
pub fn with_shape(rows: &[Value], cols: &[Column]) -> Vec<Column> {
    let mut out = cols.to_vec();
    if rows.iter().any(|r| r.get("input_shape").is_some()) {
        out.insert(1, INPUT_SHAPE);
    }
    out
}

/// `ops` without `--rank`: one row per operator across the ranks.
pub const JOB_OPS: &[Column] = &[
    col("name", "operator", Kind::Name),
    col("ranks", "ranks", Kind::Plain),
    col("calls_median", "calls med", Kind::Float2),
    col("host_self_us_median", "host self med us", Kind::Float3),
    col("host_self_us_max", "host self max us", Kind::Float3),
    col("host_self_max_rank", "max rank", Kind::Plain),
    col("host_total_us_median", "host total med us", Kind::Float3),
    col("device_self_us_median", "dev self med us", Kind::Float3),
    col("device_self_us_max", "dev self max us", Kind::Float3),
    col("device_self_max_rank", "dev max rank", Kind::Plain),
    col("device_total_us_median", "dev total med us", Kind::Float3),
];

/// `memory`: peaks per rank and device.
pub const PEAKS: &[Column] = &[
    col("rank", "rank", Kind::Plain),
    col("device", "device", Kind::Plain),
    col("peak_allocated_bytes", "peak allocated", Kind::Bytes),
    col("peak_reserved_bytes", "peak reserved", Kind::Bytes),
];

/// `memory --events`: the allocation/release events.
pub const EVENTS: &[Column] = &[
    col("rank", "rank", Kind::Plain),
    col("device", "device", Kind::Plain),
    col("ts_ns", "ts ns", Kind::Plain),
    col("bytes", "bytes", Kind::Plain),
    col("total_allocated_bytes", "total allocated", Kind::Plain),
    col("total_reserved_bytes", "total reserved", Kind::Plain),
    col("operator", "operator", Kind::Name),
];

/// `memory` of a live job: per rank its peak over the steps.
pub const LIVE_RANKS: &[Column] = &[
    col("rank", "rank", Kind::Plain),
    col("source", "source", Kind::Plain),
    col("peak_bytes", "peak", Kind::Bytes),
    col("total_bytes", "device/node memory", Kind::Bytes),
    col("headroom_pct", "headroom %", Kind::Pct),
];

/// `memory --steps` of a live job: per (step, rank) its peak.
pub const LIVE_STEPS: &[Column] = &[
    col("step", "step", Kind::Plain),
    col("rank", "rank", Kind::Plain),
    col("source", "source", Kind::Plain),
    col("peak_bytes", "peak", Kind::Plain),
];

/// The line above the live table: the max rank and the worst imbalance.
pub fn live_summary(v: &Value) -> Option<String> {
    let l = &v["live"];
    let rank = l["max_rank"].as_u64()?;
    let worst = l["imbalance"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s["imbalance"].as_f64())
        .fold(0.0f64, f64::max);
    Some(format!(
        "largest peak: rank {rank}, {:.1} MiB; worst step imbalance (max / median) {worst:.2}",
        l["max_peak_bytes"].as_f64().unwrap_or(0.0) / 1048576.0
    ))
}

/// `memory --ops`: the per-operator memory table.
pub const MEMORY_OPS: &[Column] = &[
    col("rank", "rank", Kind::Plain),
    col("device", "device", Kind::Plain),
    col("name", "operator", Kind::Name),
    col("calls", "calls", Kind::Plain),
    col("size_increase_bytes", "size increase", Kind::Plain),
    col(
        "self_size_increase_bytes",
        "self size increase",
        Kind::Plain,
    ),
    col("allocation_count", "allocs", Kind::Plain),
    col("self_allocation_count", "self allocs", Kind::Plain),
    col("allocation_size_bytes", "alloc size", Kind::Plain),
    col("self_allocation_size_bytes", "self alloc size", Kind::Plain),
];

fn url(collector: &str, job: &str, view: &str, params: &[(&str, String)]) -> String {
    let mut u = format!(
        "{}/api/v1/jobs/{}/{view}",
        collector.trim_end_matches('/'),
        percent_encode(job)
    );
    for (i, (k, v)) in params.iter().enumerate() {
        u.push(if i == 0 { '?' } else { '&' });
        u.push_str(&format!("{k}={}", percent_encode(v)));
    }
    u
}

/// The ops answer.
pub async fn ops(
    client: &HttpClient,
    collector: &str,
    job: &str,
    rank: Option<u32>,
    group_by: &str,
    top: Option<usize>,
) -> Result<Value, HttpError> {
    let mut p = vec![("group_by", group_by.to_owned())];
    if let Some(r) = rank {
        p.push(("rank", r.to_string()));
    }
    if let Some(t) = top {
        p.push(("top", t.to_string()));
    }
    client.get_json(&url(collector, job, "ops", &p)).await
}

/// The memory answer.
pub async fn memory(
    client: &HttpClient,
    collector: &str,
    job: &str,
    rank: Option<u32>,
    ops: bool,
    events: Option<(u64, u64)>,
) -> Result<Value, HttpError> {
    // The CLI prints every row: the unbounded answer (the job-wide one is
    // bounded for the UI otherwise).
    let mut p = vec![("full", "true".to_owned())];
    if let Some(r) = rank {
        p.push(("rank", r.to_string()));
    }
    if ops {
        p.push(("ops", "true".to_owned()));
    }
    if let Some((limit, offset)) = events {
        p.push(("events", "true".to_owned()));
        p.push(("limit", limit.to_string()));
        p.push(("offset", offset.to_string()));
    }
    client.get_json(&url(collector, job, "memory", &p)).await
}

/// `ops --group-by stack` rows: the operator name followed by its frames
/// (`file:line`), innermost first, for the table.
pub fn with_frames(rows: &mut [Value]) {
    for r in rows {
        let Some(frames) = r["frames"].as_array() else {
            continue;
        };
        let at: Vec<String> = frames
            .iter()
            .map(|f| format!("{}:{}", f["file"].as_str().unwrap_or(""), f["line"]))
            .collect();
        if !at.is_empty() {
            let name = r["name"].as_str().unwrap_or("").to_owned();
            r["name"] = Value::String(format!("{name} @ {}", at.join(" < ")));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn stack_rows_name_their_frames() {
        let mut rows = vec![json!({"name": "aten::mm", "frames": [
            {"file": "/w/train.py", "line": 42, "function": "step"},
            {"file": "/w/train.py", "line": 80, "function": "main"}]})];
        with_frames(&mut rows);
        assert_eq!(
            rows[0]["name"],
            "aten::mm @ /w/train.py:42 < /w/train.py:80"
        );
        assert_eq!(
            url("http://c/", "j 1", "ops", &[("rank", "3".into())]),
            "http://c/api/v1/jobs/j%201/ops?rank=3"
        );
    }
}
