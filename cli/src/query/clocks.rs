//! `rankscope clocks --job J`: each node's clock offset against the job's
//! reference node, estimated from the ends of its blocking collectives
//! (`GET /api/v1/jobs/{job}/clocks`).

use serde_json::Value;

use super::columns::{col, Column, Kind};
use super::http::{HttpClient, HttpError};
use super::percent_encode;

/// Table and CSV columns (one row per node).
pub const NODES: &[Column] = &[
    col("node", "node", Kind::Plain),
    col("offset_us", "offset_us", Kind::Float3),
    col("uncertainty_us", "uncertainty_us", Kind::Float3),
    col("method", "method", Kind::Plain),
    col("bound_lo_us", "bound_lo_us", Kind::Float3),
    col("bound_hi_us", "bound_hi_us", Kind::Float3),
    col("samples", "samples", Kind::Plain),
    col("rejected", "rejected", Kind::Plain),
];

/// The whole answer.
pub async fn fetch(client: &HttpClient, collector: &str, job: &str) -> Result<Value, HttpError> {
    let url = format!(
        "{}/api/v1/jobs/{}/clocks",
        collector.trim_end_matches('/'),
        percent_encode(job)
    );
    client.get_json(&url).await
}

/// The summary line printed above the table.
pub fn summary(v: &Value) -> String {
    format!(
        "job {}: reference node {} (the node of the lowest rank); {} collectives compared, {} inconsistent after correction",
        v["job"].as_str().unwrap_or(""),
        v["reference_node"].as_str().unwrap_or("-"),
        v["instances"],
        v["inconsistent"]
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::query::columns::render;
    use crate::query::OutputFormat;
    use serde_json::json;

    #[test]
    fn the_table_lists_nodes_with_offsets_and_names_the_reference() {
        let v = json!({"job": "j", "reference_node": "n0", "instances": 40, "inconsistent": 0,
            "nodes": [
                {"node": "n0", "offset_us": 0.0, "uncertainty_us": 0.0, "samples": 40, "rejected": 0},
                {"node": "n1", "offset_us": 3001.25, "uncertainty_us": 4.5, "samples": 38, "rejected": 2}]});
        assert_eq!(
            summary(&v),
            "job j: reference node n0 (the node of the lowest rank); 40 collectives compared, 0 inconsistent after correction"
        );
        let rows = v["nodes"].as_array().unwrap().clone();
        let table = render(&rows, NODES, OutputFormat::Table);
        assert!(
            table.contains("3001.250") && table.contains("n1"),
            "{table}"
        );
        let csv = render(&rows, NODES, OutputFormat::Csv);
        assert_eq!(
            csv.lines().next(),
            Some("node,offset_us,uncertainty_us,method,bound_lo_us,bound_hi_us,samples,rejected")
        );
    }
}
