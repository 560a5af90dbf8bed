//! The Grafana dashboards of `deploy/grafana` against the real thing: every
//! ClickHouse panel's SQL (and variable query) runs, with Grafana's macros
//! substituted, against the test's ClickHouse holding a simulated job with
//! a straggler, and returns exactly the columns the panel declares; every
//! Prometheus query names only metrics the running collector and agent
//! export.

use crate::common;

use std::collections::BTreeSet;

use common::*;
use rankscope_cli::simulate::Straggler;
use serde_json::Value;

fn dashboards() -> Vec<(String, Value)> {
    let dir = rankscope_testkit::workspace_root().join("deploy/grafana/dashboards");
    let mut out: Vec<(String, Value)> = std::fs::read_dir(&dir)
        .expect("deploy/grafana/dashboards")
        .map(|e| {
            let p = e.unwrap().path();
            let v = serde_json::from_slice(&std::fs::read(&p).unwrap())
                .unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (p.file_name().unwrap().to_string_lossy().into_owned(), v)
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// Grafana's ClickHouse macros and the `job` variable, substituted.
fn substitute(sql: &str, job: &str) -> String {
    let mut s = sql.replace("${job}", job).replace("$job", job);
    while let Some(i) = s.find("$__timeFilter(") {
        let open = i + "$__timeFilter(".len();
        let mut depth = 1;
        let mut end = open;
        for (k, c) in s[open..].char_indices() {
            match c {
                '(' => depth += 1,
                ')' => depth -= 1,
                _ => {}
            }
            if depth == 0 {
                end = open + k;
                break;
            }
        }
        let col = s[open..end].to_owned();
        s.replace_range(
            i..=end,
            &format!("({col} >= toDateTime(0) AND {col} <= toDateTime(4102444800))"),
        );
    }
    s
}

/// (where, query, declared columns) of every ClickHouse query of `d`.
fn clickhouse_queries(d: &Value) -> Vec<(String, String, Vec<String>)> {
    let cols = |v: &Value| -> Vec<String> {
        v["rankscope_columns"]
            .as_array()
            .map(|a| a.iter().map(|c| c.as_str().unwrap().to_owned()).collect())
            .unwrap_or_default()
    };
    let mut out = Vec::new();
    for v in d["templating"]["list"].as_array().into_iter().flatten() {
        if v["datasource"]["type"] == "grafana-clickhouse-datasource" {
            out.push((
                format!("variable {}", v["name"]),
                v["query"].as_str().unwrap().to_owned(),
                cols(v),
            ));
        }
    }
    for p in d["panels"].as_array().into_iter().flatten() {
        for t in p["targets"].as_array().into_iter().flatten() {
            if t["datasource"]["type"] == "grafana-clickhouse-datasource" {
                out.push((
                    format!("panel {:?}", p["title"]),
                    t["rawSql"].as_str().unwrap().to_owned(),
                    cols(t),
                ));
            }
        }
    }
    out
}

fn prometheus_exprs(d: &Value) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for v in d["templating"]["list"].as_array().into_iter().flatten() {
        if v["datasource"]["type"] == "prometheus" {
            out.push(v["query"].as_str().unwrap().to_owned());
        }
    }
    for p in d["panels"].as_array().into_iter().flatten() {
        for t in p["targets"].as_array().into_iter().flatten() {
            if let Some(e) = t["expr"].as_str() {
                out.push(e.to_owned());
            }
        }
    }
    out
}

/// Metric names in a Prometheus exposition.
fn exported(text: &str) -> BTreeSet<String> {
    let mut names: BTreeSet<String> = text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(str::to_owned)
        .collect();
    // Families declared without a series yet (e.g. no rejection so far).
    names.extend(
        text.lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .filter_map(|l| l.split(' ').next())
            .map(str::to_owned),
    );
    names
}

async fn scrape(url: &str) -> String {
    let client = rankscope_cli::query::http::HttpClient::new(std::time::Duration::from_secs(10));
    let (status, body) = client.get(url).await.expect("scrape");
    assert!(status.is_success(), "{url}: {status}");
    String::from_utf8_lossy(&body).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_dashboard_query_runs_and_names_what_exists() {
    let stack = Stack::start().await;
    let job = "grafana-job";
    let mut sim = sim_config(job, 8, 20);
    sim.stragglers = vec![Straggler {
        rank: 5,
        factor: 1.4,
    }];
    rankscope_cli::simulate::run(&sim, &stack.agent_url())
        .await
        .expect("simulate");
    stack
        .api_poll(
            &format!("/api/v1/jobs/{job}/stragglers"),
            "stragglers",
            |r| !r.is_empty(),
        )
        .await;
    // Verdicts and breakdowns are separate INSERTs of the results writer,
    // and analytics run before the raw events' flush commits: wait for the
    // breakdowns and the raw events the panels read too.
    stack
        .api_poll(
            &format!("/api/v1/jobs/{job}/breakdown?last=20"),
            "breakdown",
            |r| r.len() == 8 * 20,
        )
        .await;
    stack.all_stored(&sim).await;
    // The route above answers from the collector's memory; the panels
    // read the stored verdicts.
    eventually(60, "the verdict stored", || {
        stack.rows_now("straggler_verdicts", job) > 0
    })
    .await;
    let ds = dashboards();
    assert!(
        ds.len() >= 2,
        "{:?}",
        ds.iter().map(|d| &d.0).collect::<Vec<_>>()
    );
    let mut ran = 0;
    let mut empty = Vec::new();
    for (file, d) in &ds {
        for (place, sql, cols) in clickhouse_queries(d) {
            assert!(
                !cols.is_empty(),
                "{file} {place}: declare rankscope_columns"
            );
            let q = format!("{} FORMAT JSON", substitute(&sql, job));
            let out = stack
                .clickhouse
                .query_in(&stack.database, &q)
                .unwrap_or_else(|e| panic!("{file} {place}: {e}\n{q}"));
            let v: Value =
                serde_json::from_str(&out).unwrap_or_else(|e| panic!("{file} {place}: {e}: {out}"));
            let got: Vec<String> = v["meta"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| m["name"].as_str().unwrap().to_owned())
                .collect();
            assert_eq!(got, cols, "{file} {place}: columns");
            if v["rows"].as_u64() == Some(0) {
                empty.push(format!("{file} {place}"));
            }
            ran += 1;
        }
    }
    assert!(ran >= 8, "{ran} ClickHouse queries");
    // A simulated job has no GPU telemetry; every other panel shows data.
    assert!(
        empty.iter().all(|p| p.contains("GPU")),
        "panels without rows: {empty:?}"
    );
    // Prometheus: every metric a query names is exported by a binary.
    let mut names = exported(&scrape(&format!("http://{}/metrics", stack.http_addr())).await);
    let agent = stack
        .agent
        .as_ref()
        .unwrap()
        .metrics_addr
        .expect("agent metrics");
    names.extend(exported(&scrape(&format!("http://{agent}/metrics")).await));
    let mut checked = 0;
    for (file, d) in &ds {
        for e in prometheus_exprs(d) {
            let mut rest = e.as_str();
            while let Some(i) = rest.find("rankscope_") {
                let tail = &rest[i..];
                let n = tail
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(tail.len());
                let metric = &tail[..n];
                assert!(
                    names.contains(metric),
                    "{file}: {metric} (in {e}) is not exported"
                );
                checked += 1;
                rest = &tail[n..];
            }
        }
    }
    assert!(checked >= 9, "{checked} metric names checked");
    stack.stop().await;
}
