//! The fleet score on `/metrics` and in Grafana: the fleet dashboard's score
//! panel queries `rankscope_fleet_score`, which the `repeat_offender`
//! rounds export (`gauges::JobGauges::fleet`); its series must hold the
//! scores `GET /api/v1/fleet` gives at the rule's window and `min_jobs`, one
//! per ranked unit (at most `FLEET_SERIES_MAX` per grouping), worst first
//! under the panel's `sort_desc`.

use rankscope_collector::gauges::FLEET_SERIES_MAX;
use serde_json::Value;

use crate::common::Stack;

pub async fn scores_on_metrics_are_the_apis(
    stack: &Stack,
    window_secs: u64,
    min_jobs: u64,
    worst_gpu: &str,
) {
    let dash: Value = serde_json::from_slice(
        &std::fs::read(
            rankscope_testkit::workspace_root()
                .join("deploy/grafana/dashboards/rankscope-fleet-clickhouse.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let exprs: Vec<&str> = dash["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["targets"].as_array().unwrap())
        .filter_map(|t| t["expr"].as_str())
        .collect();
    assert_eq!(exprs, ["sort_desc(rankscope_fleet_score)"]);
    let api = |by: &str| format!("/api/v1/fleet?since={window_secs}s&by={by}&min_jobs={min_jobs}");
    let (api_gpus, api_nodes) = (
        stack.api_get(&api("gpu")).await,
        stack.api_get(&api("node")).await,
    );
    let client = rankscope_cli::query::http::HttpClient::new(std::time::Duration::from_secs(30));
    let (status, text) = client
        .get(&format!("http://{}/metrics", stack.http_addr()))
        .await
        .expect("/metrics");
    assert!(status.is_success());
    let text = String::from_utf8_lossy(&text).into_owned();
    let mut series: Vec<(String, f64)> = text
        .lines()
        .filter(|l| l.starts_with("rankscope_fleet_score{"))
        .map(|l| {
            let (labels, v) = l.rsplit_once(' ').unwrap();
            (labels.to_owned(), v.parse().unwrap())
        })
        .collect();
    for (by, body) in [("gpu", &api_gpus), ("node", &api_nodes)] {
        let ranked: Vec<&Value> = body["rows"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| !r["place"].is_null())
            .collect();
        assert!(!ranked.is_empty(), "{by}: {body:#}");
        let exported: Vec<&(String, f64)> = series
            .iter()
            .filter(|(l, _)| l.contains(&format!("by=\"{by}\"")))
            .collect();
        assert_eq!(
            exported.len(),
            ranked.len().min(FLEET_SERIES_MAX),
            "{by}: {text}"
        );
        for r in ranked.iter().take(FLEET_SERIES_MAX) {
            let mut want = format!(
                "rankscope_fleet_score{{by=\"{by}\",node=\"{}\"",
                r["node"].as_str().unwrap()
            );
            if let Some(g) = r["gpu_uuid"].as_str() {
                want.push_str(&format!(",gpu_uuid=\"{g}\""));
            }
            want.push('}');
            let got = exported
                .iter()
                .find(|(l, _)| *l == want)
                .unwrap_or_else(|| panic!("{want} not on /metrics: {text}"));
            let score = r["score"].as_f64().unwrap();
            assert!(
                (got.1 - score).abs() <= 1e-9 * score.abs().max(1.0),
                "{want}: {} vs API {score}",
                got.1
            );
        }
    }
    // sort_desc: the worst unit's series comes first.
    series.sort_by(|a, b| b.1.total_cmp(&a.1));
    assert!(
        series[0].0.contains(&format!("gpu_uuid=\"{worst_gpu}\"")),
        "{series:?}"
    );
}
