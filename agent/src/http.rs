//! The agent's HTTP endpoint: `GET /metrics` (Prometheus text, the counter
//! and gauge names of [`crate::metrics`] and [`crate::route`]), `GET
//! /status` (the collectors and each job's owner) and `GET /healthz`.
//!
//! In: a function rendering the current exposition. Out: HTTP responses on
//! `metrics_listen_addr` (default 127.0.0.1:7711; empty disables it). Serving
//! reads atomics only; it never touches the rank-facing path.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::routing::get;
use axum::Router;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Renders the exposition on demand.
pub type Render = Arc<dyn Fn() -> String + Send + Sync>;

/// Binds `addr` and serves until `stop` turns true; returns the bound address.
pub async fn spawn(
    addr: SocketAddr,
    render: Render,
    status: Render,
    mut stop: watch::Receiver<bool>,
) -> std::io::Result<(SocketAddr, JoinHandle<()>)> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let app = Router::new()
        .route(
            "/metrics",
            get(move || {
                let render = render.clone();
                async move { ([("content-type", "text/plain; version=0.0.4")], render()) }
            }),
        )
        .route(
            "/status",
            get(move || {
                let status = status.clone();
                async move { status() }
            }),
        )
        .route("/healthz", get(|| async { "ok\n" }));
    let task = tokio::spawn(async move {
        let shutdown = async move {
            let _ = stop.wait_for(|s| *s).await;
        };
        if let Err(e) = axum::serve(listener, app)
            .with_graceful_shutdown(shutdown)
            .await
        {
            tracing::warn!(error = %e, "metrics endpoint failed");
        }
    });
    Ok((bound, task))
}
