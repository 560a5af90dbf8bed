//! `rankscope fleet`: which nodes, GPUs or links keep slowing jobs down,
//! across every job the collector holds.
//!
//! In: the collector URL, `--since` (e.g. `7d`), `--by node|gpu|link`,
//! `--min-jobs N`. Out: `GET /api/v1/fleet` rows, worst first: as JSON
//! (every API field: `node`, `gpu_uuid`, `jobs`, `rank_hours`, `verdicts`,
//! `cost_gpu_hours`, `score`, `low_exposure`, `hardware`, `timeline`, ...)
//! or as a table / CSV of the main columns. The collector validates the
//! parameters (a 400's message is printed as is).

use serde_json::Value;

use super::columns::{col, render as render_columns, Column, Kind};
use super::http::{HttpClient, HttpError};
use super::{percent_encode, OutputFormat};

/// Table and CSV columns.
pub const FLEET: &[Column] = &[
    col("place", "#", Kind::Plain),
    col("node", "node", Kind::Plain),
    col("gpu_uuid", "gpu_uuid", Kind::Plain),
    col("link", "link", Kind::Plain),
    col("jobs", "jobs", Kind::Plain),
    col("rank_hours", "rank_h", Kind::Float2),
    col("verdicts", "verdicts", Kind::Plain),
    col("verdict_steps", "steps", Kind::Plain),
    col("hang_suspects", "hangs", Kind::Plain),
    col("cost_gpu_hours", "cost_gpu_h", Kind::Float3),
    col("score", "score", Kind::Float2),
    col("low_exposure", "low_exposure", Kind::Plain),
    col("hardware", "hardware", Kind::Plain),
];

/// URL of `GET /api/v1/fleet`.
pub fn fleet_url(collector: &str, since: &str, by: &str, min_jobs: Option<u64>) -> String {
    let mut url = format!(
        "{}/api/v1/fleet?since={}&by={}",
        collector.trim_end_matches('/'),
        percent_encode(since),
        percent_encode(by)
    );
    if let Some(n) = min_jobs {
        url.push_str(&format!("&min_jobs={n}"));
    }
    url
}

/// Fetches the whole answer (`rows`, `base_rate`, ...).
pub async fn fetch(
    client: &HttpClient,
    collector: &str,
    since: &str,
    by: &str,
    min_jobs: Option<u64>,
) -> Result<Value, HttpError> {
    client
        .get_json(&fleet_url(collector, since, by, min_jobs))
        .await
}

/// Renders the rows: JSON as the API gives them, tables and CSV with the
/// hardware evidence as `;`-separated text and the columns of the grouping.
pub fn render(body: &Value, format: OutputFormat) -> String {
    let rows = body["rows"].as_array().cloned().unwrap_or_default();
    if format == OutputFormat::Json {
        return serde_json::to_string_pretty(&rows).unwrap_or_default() + "\n";
    }
    let by = body["by"].as_str().unwrap_or("node");
    let columns: Vec<Column> = FLEET
        .iter()
        .filter(|c| match c.field {
            "gpu_uuid" => by == "gpu",
            "link" => by == "link",
            _ => true,
        })
        .copied()
        .collect();
    let flat: Vec<Value> = rows.iter().map(flatten).collect();
    render_columns(&flat, &columns, format)
}

fn flatten(row: &Value) -> Value {
    let mut r = row.clone();
    let hw = &row["hardware"];
    let mut parts: Vec<String> = Vec::new();
    if let Some(n) = hw["clock_below_peers"].as_u64().filter(|n| *n > 0) {
        parts.push(format!("clock below peers x{n}"));
    }
    for t in hw["throttle_reasons"].as_array().into_iter().flatten() {
        parts.extend(t.as_str().map(str::to_owned));
    }
    for (key, label) in [
        ("xid_errors", "Xid"),
        ("ecc_uncorrected_errors", "ECC uncorrected"),
        ("ecc_corrected_errors", "ECC corrected"),
        ("pcie_replays", "PCIe replays"),
    ] {
        if let Some(n) = hw[key].as_u64().filter(|n| *n > 0) {
            parts.push(format!("{label} x{n}"));
        }
    }
    r["hardware"] = Value::String(parts.join(";"));
    if row["place"].is_null() {
        r["place"] = Value::String("-".into());
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_url_encodes_the_parameters() {
        assert_eq!(
            fleet_url("http://c:7701/", "7d", "gpu", Some(2)),
            "http://c:7701/api/v1/fleet?since=7d&by=gpu&min_jobs=2"
        );
    }

    #[test]
    fn tables_show_the_grouping_column_and_hardware_as_text() {
        let body = serde_json::json!({"by": "gpu", "rows": [{
            "place": 1, "node": "n1", "gpu_uuid": "GPU-x", "jobs": 12, "rank_hours": 1.5,
            "verdicts": 12, "verdict_steps": 120, "hang_suspects": 0, "cost_gpu_hours": 0.25,
            "score": 7.5, "low_exposure": false,
            "hardware": {"clock_below_peers": 2, "throttle_reasons": ["hw_slowdown"], "evidence": [],
                         "xid_errors": 1, "ecc_corrected_errors": 0, "pcie_replays": 9},
        }]});
        let t = render(&body, OutputFormat::Csv);
        assert!(t.contains("gpu_uuid") && !t.contains(",link"), "{t}");
        assert!(
            t.contains("GPU-x")
                && t.contains("clock below peers x2;hw_slowdown;Xid x1;PCIe replays x9"),
            "{t}"
        );
        let j = render(&body, OutputFormat::Json);
        assert!(j.contains("\"gpu_uuid\": \"GPU-x\""), "{j}");
    }
}
