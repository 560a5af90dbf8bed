//! Bearer-token authentication: agents and API clients without the
//! collector's token are rejected (and counted), with it they work.

use crate::common;

use common::*;
use rankscope_cli::query::http::HttpClient;
use rankscope_cli::simulate;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingest_and_api_require_the_token() {
    let mut stack = Stack::start_without_agent_with(|c| c.auth_token = "s3cret".into()).await;

    // An agent without the token: every batch is refused, dropped, counted.
    stack
        .start_agent(&format!("http://{}", stack.grpc_addr()))
        .await;
    let mut sim = sim_config("auth-no", 2, 2);
    sim.layers = 1;
    simulate::run(&sim, &stack.agent_url())
        .await
        .expect("simulate");
    let agent = stack.agent.as_ref().unwrap();
    eventually(30, "the collector refused the agent", || {
        agent.metrics().batches_rejected > 0
    })
    .await;
    let refused = stack.collector.as_ref().unwrap().metrics().rejected();
    assert!(
        refused.get("unauthenticated").copied().unwrap_or(0) > 0,
        "{refused:?}"
    );
    stack.stop_agent().await;
    assert_eq!(stack.counts("auth-no").await.total(), 0);

    // With the token: delivered.
    let mut cfg = agent_config(&format!("http://{}", stack.grpc_addr()), stack.dir.path());
    cfg.collector_token = "s3cret".into();
    stack.agent = Some(rankscope_agent::start(cfg).await.expect("agent"));
    let mut sim = sim_config("auth-yes", 2, 2);
    sim.layers = 1;
    let plan = simulate::plan(&sim);
    simulate::run(&sim, &stack.agent_url())
        .await
        .expect("simulate");
    let report = stack.stop_agent().await;
    assert_eq!(report.undelivered_events, 0);
    assert_eq!(
        stack.counts("auth-yes").await.total(),
        plan.event_counts().total()
    );

    // The API: 401 without or with a wrong token, 200 with it; probes open.
    let base = format!("http://{}", stack.http_addr());
    let get = |token: &str, path: &str| {
        let client = HttpClient::new(Duration::from_secs(10)).with_token(token);
        let url = format!("{base}{path}");
        async move { client.get(&url).await.expect("GET").0.as_u16() }
    };
    assert_eq!(get("", "/api/v1/jobs").await, 401);
    assert_eq!(get("wrong", "/api/v1/jobs").await, 401);
    assert_eq!(get("s3cret", "/api/v1/jobs").await, 200);
    assert_eq!(get("", "/healthz").await, 200);
    assert_eq!(get("", "/metrics").await, 200);
    stack.stop().await;
}

/// The agents' control stream (Kineto trace requests) takes the same token:
/// without it the stream is refused and counted, with it it opens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_control_stream_requires_the_token() {
    use rankscope_proto::v1 as proto;
    let stack = Stack::start_without_agent_with(|c| c.auth_token = "s3cret".into()).await;
    let open = |token: Option<&'static str>| {
        let url = format!("http://{}", stack.grpc_addr());
        async move {
            let mut client = proto::collector_control_client::CollectorControlClient::connect(url)
                .await
                .expect("connect");
            let hello = proto::AgentReport {
                hello: Some(proto::AgentHello {
                    agent_id: "a".into(),
                    node: "n".into(),
                    agent_session: 1,
                    kineto_listening: false,
                }),
                ..Default::default()
            };
            let mut req = tonic::Request::new(tokio_stream::iter(vec![hello]));
            if let Some(t) = token {
                req.metadata_mut()
                    .insert("authorization", format!("Bearer {t}").parse().unwrap());
            }
            client.control(req).await.map(|_| ())
        }
    };
    let err = open(None).await.expect_err("no token");
    assert_eq!(err.code(), tonic::Code::Unauthenticated, "{err:?}");
    let err = open(Some("wrong")).await.expect_err("wrong token");
    assert_eq!(err.code(), tonic::Code::Unauthenticated, "{err:?}");
    open(Some("s3cret"))
        .await
        .expect("the right token opens the stream");
    let refused = stack.collector.as_ref().unwrap().metrics().rejected();
    assert_eq!(
        refused.get("unauthenticated").copied(),
        Some(2),
        "{refused:?}"
    );
    stack.stop().await;
}
