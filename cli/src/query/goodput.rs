//! `rankscope goodput --job J [--flops-per-step F]`: where the job's wall
//! time went, and its MFU (`GET /api/v1/jobs/{job}/goodput`).

use serde_json::Value;

use super::columns::{col, Column, Kind};
use super::http::{HttpClient, HttpError};
use super::percent_encode;

/// Table and CSV columns (one row per part).
pub const PARTS: &[Column] = &[
    col("part", "part", Kind::Plain),
    col("ns", "ms", Kind::NsAsMs),
    col("pct", "%", Kind::Pct),
];

/// The whole answer.
pub async fn fetch(
    client: &HttpClient,
    collector: &str,
    job: &str,
    flops_per_step: Option<f64>,
) -> Result<Value, HttpError> {
    let mut url = format!(
        "{}/api/v1/jobs/{}/goodput",
        collector.trim_end_matches('/'),
        percent_encode(job)
    );
    if let Some(f) = flops_per_step {
        url.push_str(&format!("?flops_per_step={f}"));
    }
    client.get_json(&url).await
}

/// The summary line printed above the table.
pub fn summary(v: &Value) -> String {
    let wall_s = v["wall_ns"].as_f64().unwrap_or(0.0) / 1e9;
    let mfu = match v["mfu_pct"].as_f64() {
        Some(m) => format!(
            "MFU {m:.1}% ({} x {}, {} TFLOP/s peak each)",
            v["devices"],
            v["gpu_name"].as_str().unwrap_or("?"),
            v["peak_tflops"]
        ),
        None => format!("no MFU: {}", v["mfu_note"].as_str().unwrap_or("")),
    };
    format!(
        "job {}: {:.3} s wall over {} steps; {mfu}",
        v["job"].as_str().unwrap_or(""),
        wall_s,
        v["steps"]
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_summary_names_mfu_or_why_not() {
        let v = json!({"job": "j", "wall_ns": 2_000_000_000u64, "steps": 10, "mfu_pct": 41.25,
                       "devices": 8, "gpu_name": "NVIDIA H100", "peak_tflops": 989.0});
        assert_eq!(
            summary(&v),
            "job j: 2.000 s wall over 10 steps; MFU 41.2% (8 x NVIDIA H100, 989.0 TFLOP/s peak each)"
        );
        let v = json!({"job": "j", "wall_ns": 0, "steps": 0, "mfu_pct": null, "mfu_note": "give flops_per_step"});
        assert!(summary(&v).ends_with("no MFU: give flops_per_step"));
    }
}
