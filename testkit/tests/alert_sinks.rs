//! The Slack and Alertmanager bodies as a sink sends them: a real collector
//! posts a straggler alert to a real HTTP receiver, with the sink's
//! configured `headers`, and the receiver checks path, headers and body.

use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::*;
use rankscope_cli::simulate::{self, Straggler};
use rankscope_collector::alert::{Format, SinkConfig};
use serde_json::Value;
use tokio::sync::mpsc;

/// One POST as received: path, headers (lower-case names), JSON body.
type Post = (String, BTreeMap<String, String>, Value);

/// An HTTP receiver answering 200 to every POST and recording it.
async fn receiver() -> (std::net::SocketAddr, mpsc::UnboundedReceiver<Post>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let app = axum::Router::new().fallback(
        move |uri: axum::http::Uri, headers: axum::http::HeaderMap, body: axum::body::Bytes| {
            let tx = tx.clone();
            async move {
                let headers = headers
                    .iter()
                    .map(|(k, v)| (k.as_str().to_owned(), v.to_str().unwrap_or("").to_owned()))
                    .collect();
                let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
                let _ = tx.send((uri.path().to_owned(), headers, body));
                axum::http::StatusCode::OK
            }
        },
    );
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(l, app).await.unwrap() });
    (addr, rx)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slack_and_alertmanager_sinks_post_their_bodies_with_headers() {
    let (addr, mut rx) = receiver().await;
    let headers = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    };
    let stack = Stack::start_with(|c| {
        c.alerts.webhook_url = String::new();
        c.alerts.generator_url = "https://rankscope.example/jobs".into();
        c.alerts.sinks = vec![
            SinkConfig {
                url: format!("http://{addr}/services/T0/B0/xyz"),
                format: Format::Slack,
                headers: headers(&[("X-Slack-Test", "slack-1")]),
                ..Default::default()
            },
            SinkConfig {
                url: format!("http://{addr}/api/v2/alerts"),
                format: Format::Alertmanager,
                headers: headers(&[
                    ("Authorization", "Bearer am-token"),
                    ("X-Scope-OrgID", "team-a"),
                ]),
                ..Default::default()
            },
        ];
    })
    .await;
    let mut sim = sim_config("sink-fmt", 8, 8);
    sim.layers = 1;
    sim.stragglers = vec![Straggler {
        rank: 6,
        factor: 1.5,
    }];
    simulate::run(&sim, &stack.agent_url())
        .await
        .expect("simulate");

    let (mut slack, mut am) = (None, None);
    while slack.is_none() || am.is_none() {
        let post = tokio::time::timeout(Duration::from_secs(60), rx.recv())
            .await
            .unwrap_or_else(|_| panic!("no post; slack {slack:?} alertmanager {am:?}"))
            .expect("receiver running");
        match post.0.as_str() {
            "/services/T0/B0/xyz" => slack = Some(post),
            "/api/v2/alerts" => am = Some(post),
            other => panic!("POST to an unconfigured path {other}"),
        }
    }

    let (_, h, body) = slack.unwrap();
    assert_eq!(h["content-type"], "application/json");
    assert_eq!(h["x-slack-test"], "slack-1");
    assert!(!h.contains_key("authorization"), "headers are per sink");
    let text = body["text"].as_str().expect("Slack text");
    assert!(
        text.starts_with(":warning: [FIRING] sink-fmt / straggler: "),
        "{text}"
    );
    assert!(text.contains("rank 6"), "{text}");
    assert_eq!(body.as_object().unwrap().len(), 1, "only text: {body}");

    let (_, h, body) = am.unwrap();
    assert_eq!(h["content-type"], "application/json");
    assert_eq!(h["authorization"], "Bearer am-token");
    assert_eq!(h["x-scope-orgid"], "team-a");
    let alerts = body.as_array().expect("Alertmanager body is an array");
    assert_eq!(alerts.len(), 1);
    let a = &alerts[0];
    assert_eq!(a["labels"]["alertname"], "RankscopeStraggler");
    assert_eq!(a["labels"]["job"], "sink-fmt");
    assert_eq!(a["labels"]["rank"], "6");
    assert_eq!(a["labels"]["node"], "sim-node-0");
    assert_eq!(a["labels"]["source"], "rankscope");
    assert_eq!(a["generatorURL"], "https://rankscope.example/jobs");
    assert!(a.get("endsAt").is_none(), "firing: no endsAt");
    let starts = a["startsAt"].as_str().expect("startsAt");
    assert!(
        starts.len() == 24 && starts.ends_with('Z') && starts.as_bytes()[10] == b'T',
        "{starts}"
    );
    let evidence: Value = serde_json::from_str(
        a["annotations"]["evidence"]
            .as_str()
            .expect("evidence annotation"),
    )
    .expect("evidence is JSON");
    assert_eq!(evidence["cause"], "compute");
    assert!(a["annotations"]["summary"]
        .as_str()
        .is_some_and(|s| s.contains("rank 6")));

    let sinks = stack.collector.as_ref().unwrap().alerts().sinks();
    use std::sync::atomic::Ordering::Relaxed;
    eventually(30, "both sinks counted their post", || {
        sinks.iter().all(|s| s.metrics.sent.load(Relaxed) >= 1)
    })
    .await;
    stack.stop().await;
}
