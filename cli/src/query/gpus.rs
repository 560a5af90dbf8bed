//! `rankscope gpus`: the latest sample of every GPU the agents sampled.
//!
//! In: the collector URL and optional `--node` / `--job`. Out: the rows of
//! `GET /api/v1/gpus?node=&job=` rendered as JSON (every API field, arrays
//! as arrays), or as a table / CSV where `throttle_reasons` and `ranks`
//! become `;`-separated text (`JOB:RANK` per rank). Missing metrics (the GPU
//! cannot report them) print as `-` in tables and empty in CSV.

use serde_json::Value;

use super::columns::{col, render as render_columns, Column, Kind};
use super::http::{HttpClient, HttpError};
use super::{percent_encode, OutputFormat};

/// Table and CSV columns.
pub const GPUS: &[Column] = &[
    col("node", "node", Kind::Plain),
    col("gpu_index", "gpu", Kind::Plain),
    col("name", "name", Kind::Plain),
    col("state", "state", Kind::Plain),
    col("gpu_util_pct", "util_%", Kind::Pct),
    col("mem_util_pct", "mem_util_%", Kind::Pct),
    col("sm_active_pct", "sm_active_%", Kind::Pct),
    col("sm_occupancy_pct", "sm_occ_%", Kind::Pct),
    col("mem_used_bytes", "mem_used", Kind::Bytes),
    col("mem_total_bytes", "mem_total", Kind::Bytes),
    col("power_w", "power_W", Kind::Float2),
    col("temp_c", "temp_C", Kind::Float2),
    col("sm_clock_mhz", "sm_MHz", Kind::Plain),
    col("throttle_reasons", "throttle", Kind::Plain),
    col("ranks", "ranks", Kind::Plain),
];

/// URL of `GET /api/v1/gpus` (absent filters left out).
pub fn gpus_url(collector: &str, node: Option<&str>, job: Option<&str>) -> String {
    let mut url = format!("{}/api/v1/gpus", collector.trim_end_matches('/'));
    let mut sep = '?';
    for (key, value) in [("node", node), ("job", job)] {
        if let Some(v) = value {
            url.push(sep);
            url.push_str(&format!("{key}={}", percent_encode(v)));
            sep = '&';
        }
    }
    url
}

/// Fetches the latest sample of every GPU.
pub async fn fetch_gpus(
    client: &HttpClient,
    collector: &str,
    node: Option<&str>,
    job: Option<&str>,
) -> Result<Vec<Value>, HttpError> {
    let body: Value = client.get_json(&gpus_url(collector, node, job)).await?;
    Ok(match body.get("gpus") {
        Some(Value::Array(rows)) => rows.clone(),
        _ => Vec::new(),
    })
}

/// Renders GPU rows in `format`.
pub fn render(rows: &[Value], format: OutputFormat) -> String {
    if format == OutputFormat::Json {
        return render_columns(rows, GPUS, format);
    }
    let flat: Vec<Value> = rows.iter().map(flatten).collect();
    render_columns(&flat, GPUS, format)
}

/// `throttle_reasons` and `ranks` as `;`-separated text (null stays null).
fn flatten(row: &Value) -> Value {
    let mut r = row.clone();
    if let Some(Value::Array(reasons)) = row.get("throttle_reasons") {
        let text: Vec<&str> = reasons.iter().filter_map(Value::as_str).collect();
        r["throttle_reasons"] = Value::String(text.join(";"));
    }
    if let Some(Value::Array(ranks)) = row.get("ranks") {
        let text: Vec<String> = ranks
            .iter()
            .map(|x| format!("{}:{}", x["job"].as_str().unwrap_or(""), x["rank"]))
            .collect();
        r["ranks"] = Value::String(text.join(";"));
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rows() -> Vec<Value> {
        vec![
            json!({"node": "n1", "gpu_index": 0, "name": "H100", "state": "ok",
                   "gpu_util_pct": 87.0, "mem_util_pct": 41.0, "sm_active_pct": null,
                   "sm_occupancy_pct": null, "mem_used_bytes": 1073741824u64,
                   "mem_total_bytes": 85899345920u64, "power_w": 312.5, "temp_c": 71.0,
                   "sm_clock_mhz": 1410, "throttle_reasons": ["sw_power_cap", "hw_slowdown"],
                   "ranks": [{"job": "j", "rank": 0}, {"job": "j", "rank": 1}]}),
            json!({"node": "n1", "gpu_index": 1, "name": "H100", "state": "lost",
                   "throttle_reasons": null, "ranks": []}),
        ]
    }

    #[test]
    fn url_encodes_and_skips_absent_filters() {
        assert_eq!(gpus_url("http://c/", None, None), "http://c/api/v1/gpus");
        assert_eq!(
            gpus_url("http://c", Some("n 1"), Some("j/2")),
            "http://c/api/v1/gpus?node=n%201&job=j%2F2"
        );
        assert_eq!(
            gpus_url("http://c", None, Some("j")),
            "http://c/api/v1/gpus?job=j"
        );
    }

    #[test]
    fn table_and_csv_flatten_arrays_and_show_missing() {
        let t = render(&rows(), OutputFormat::Table);
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[0].starts_with("node  gpu  name  state"), "{t}");
        assert!(lines[1].contains("sw_power_cap;hw_slowdown"), "{t}");
        assert!(lines[1].contains("j:0;j:1"), "{t}");
        assert!(lines[1].contains("1.0 GiB"), "{t}");
        assert!(lines[2].contains("lost"), "{t}");
        let c = render(&rows(), OutputFormat::Csv);
        let csv: Vec<&str> = c.lines().collect();
        assert_eq!(
            csv[0],
            "node,gpu_index,name,state,gpu_util_pct,mem_util_pct,sm_active_pct,sm_occupancy_pct,\
             mem_used_bytes,mem_total_bytes,power_w,temp_c,sm_clock_mhz,throttle_reasons,ranks"
        );
        assert_eq!(
            csv[1],
            "n1,0,H100,ok,87.0,41.0,,,1073741824,85899345920,312.5,71.0,1410,sw_power_cap;hw_slowdown,j:0;j:1"
        );
        assert_eq!(csv[2], "n1,1,H100,lost,,,,,,,,,,,");
    }

    #[test]
    fn json_keeps_the_api_rows() {
        let j = render(&rows(), OutputFormat::Json);
        let back: Vec<Value> = serde_json::from_str(&j).unwrap();
        assert_eq!(back, rows());
    }
}
