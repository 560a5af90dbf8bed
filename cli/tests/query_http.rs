//! The query commands' HTTP client against a real axum server on
//! 127.0.0.1:0: decoding, URL encoding, and error responses.

use axum::extract::{Path, Query};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use rankscope_cli::query::http::{HttpClient, HttpError};
use rankscope_cli::query::{self, format, OutputFormat, StepsQuery};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::time::Duration;

async fn jobs() -> Json<Value> {
    Json(json!({"jobs": [
        {"job": "sim-1", "run_id": "", "world_size": 8, "ranks_seen": 8, "nodes": 1,
         "first_seen_ns": 1, "last_seen_ns": 2, "last_step": 49},
        {"job": "new", "run_id": "r", "world_size": 2, "ranks_seen": 1, "nodes": 1,
         "first_seen_ns": 3, "last_seen_ns": 4, "last_step": null}
    ]}))
}

/// Echoes the decoded job and query into the node field so the test sees
/// exactly what the server received.
async fn steps(
    Path(job): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> impl IntoResponse {
    match job.as_str() {
        "missing" => (
            StatusCode::NOT_FOUND,
            Json(json!({"error": "job \"missing\" not found"})),
        )
            .into_response(),
        "broken" => (StatusCode::INTERNAL_SERVER_ERROR, "database exploded\n").into_response(),
        "garbage" => (StatusCode::OK, "not json").into_response(),
        "slow" => {
            tokio::time::sleep(Duration::from_secs(30)).await;
            StatusCode::OK.into_response()
        }
        _ => {
            let mut keys: Vec<String> = q.iter().map(|(k, v)| format!("{k}={v}")).collect();
            keys.sort();
            Json(json!({"job": job, "steps": [
                {"step": 0, "rank": 0, "node": keys.join("&"), "start_ns": 10, "end_ns": 30, "step_time_ns": 20},
                {"step": 0, "rank": 1, "node": "n", "start_ns": 10, "end_ns": 40, "step_time_ns": 30}
            ]}))
            .into_response()
        }
    }
}

async fn serve() -> String {
    let app = Router::new()
        .route("/api/v1/jobs", get(jobs))
        .route("/api/v1/jobs/{job}/steps", get(steps));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

fn client() -> HttpClient {
    HttpClient::new(Duration::from_secs(5))
}

#[tokio::test]
async fn jobs_are_decoded_including_null_last_step() {
    let base = serve().await;
    let jobs = query::fetch_jobs(&client(), &base).await.unwrap();
    assert_eq!(jobs.len(), 2);
    assert_eq!(
        (jobs[0].job.as_str(), jobs[0].last_step),
        ("sim-1", Some(49))
    );
    assert_eq!((jobs[1].run_id.as_str(), jobs[1].last_step), ("r", None));
    let csv = format::render_jobs(&jobs, OutputFormat::Csv);
    assert!(csv.ends_with("new,r,2,1,1,3,4,,\n"), "{csv}");
}

#[tokio::test]
async fn steps_request_encodes_the_job_and_passes_the_options() {
    let base = serve().await;
    let q = StepsQuery {
        last: Some(5),
        from_step: Some(2),
        to_step: None,
    };
    let resp = query::fetch_steps(&client(), &base, "my job/1", &q)
        .await
        .unwrap();
    assert_eq!(resp.job, "my job/1");
    assert_eq!(resp.steps[0].node, "from_step=2&last=5");
    assert_eq!(resp.steps[1].step_time_ns, 30);
    let table = format::render_steps(&resp.steps, OutputFormat::Table);
    assert!(table.contains("r1"), "{table}");
}

#[tokio::test]
async fn a_404_carries_the_api_error_message_and_the_url() {
    let base = serve().await;
    let err = query::fetch_steps(&client(), &base, "missing", &StepsQuery::default())
        .await
        .unwrap_err();
    match &err {
        HttpError::Status {
            status,
            message,
            url,
        } => {
            assert_eq!(*status, 404);
            assert_eq!(message, "job \"missing\" not found");
            assert_eq!(url, &format!("{base}/api/v1/jobs/missing/steps"));
        }
        other => panic!("{other:?}"),
    }
    let text = err.to_string();
    assert!(text.contains("HTTP 404") && text.contains(&base), "{text}");
}

#[tokio::test]
async fn a_plain_text_error_body_is_quoted() {
    let base = serve().await;
    let err = query::fetch_steps(&client(), &base, "broken", &StepsQuery::default())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, HttpError::Status { status: 500, message, .. } if message == "database exploded"),
        "{err:?}"
    );
}

#[tokio::test]
async fn an_unknown_route_falls_back_to_the_reason_phrase() {
    let base = serve().await;
    let err = client()
        .get_json::<Value>(&format!("{base}/nope"))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, HttpError::Status { status: 404, message, .. } if message == "Not Found"),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_non_json_success_is_a_decode_error() {
    let base = serve().await;
    let err = query::fetch_steps(&client(), &base, "garbage", &StepsQuery::default())
        .await
        .unwrap_err();
    assert!(matches!(err, HttpError::Decode { .. }), "{err:?}");
    assert!(err.to_string().contains("garbage/steps"), "{err}");
}

#[tokio::test]
async fn a_slow_server_times_out() {
    let base = serve().await;
    let c = HttpClient::new(Duration::from_millis(200));
    let err = query::fetch_steps(&c, &base, "slow", &StepsQuery::default())
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            HttpError::Timeout {
                timeout_ms: 200,
                ..
            }
        ),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_closed_port_names_the_url() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let err = query::fetch_jobs(&client(), &base).await.unwrap_err();
    assert!(matches!(err, HttpError::Request { .. }), "{err:?}");
    let text = err.to_string();
    assert!(text.contains(&format!("{base}/api/v1/jobs")), "{text}");
    assert!(text.to_lowercase().contains("refused"), "{text}");
}

#[tokio::test]
async fn a_malformed_url_is_refused() {
    let err = query::fetch_jobs(&client(), "not a url").await.unwrap_err();
    assert!(matches!(err, HttpError::InvalidUrl { .. }), "{err:?}");
    assert!(err.to_string().contains("not a url"), "{err}");
}
