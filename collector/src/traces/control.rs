//! The gRPC service `rankscope.v1.CollectorControl`: agents open one
//! control stream each (see control.proto) and the [`TraceHub`] talks to
//! them through it.
//!
//! In: the agent's `AgentReport`s. Out: `ControlCommand`s from a bounded
//! per-stream queue (a stream 256 commands behind loses the newest; the
//! agent gets open traces again when it reconnects). Every stream ends
//! when the collector shuts down: the gRPC server's graceful shutdown waits
//! for open streams, and an agent's control stream is never ended by the
//! agent (a connected agent once kept a stopping collector waiting forever).

use std::pin::Pin;

use futures_util::Stream;
use rankscope_proto::v1 as proto;
use tokio::sync::{mpsc, watch};
use tonic::{Request, Response, Status, Streaming};

use super::TraceHub;

/// Commands queued per control stream.
const STREAM_QUEUE: usize = 256;

/// Implementation of `CollectorControl`.
#[derive(Clone)]
pub struct ControlService {
    hub: TraceHub,
    /// True once the collector shuts down.
    stop: watch::Receiver<bool>,
}

impl ControlService {
    pub fn new(hub: TraceHub, stop: watch::Receiver<bool>) -> Self {
        Self { hub, stop }
    }
}

type CommandStream = Pin<Box<dyn Stream<Item = Result<proto::ControlCommand, Status>> + Send>>;

#[tonic::async_trait]
impl proto::collector_control_server::CollectorControl for ControlService {
    type ControlStream = CommandStream;

    async fn control(
        &self,
        request: Request<Streaming<proto::AgentReport>>,
    ) -> Result<Response<Self::ControlStream>, Status> {
        let mut inbound = request.into_inner();
        let first = inbound
            .message()
            .await?
            .ok_or_else(|| Status::invalid_argument("control stream ended before its hello"))?;
        let hello = first.hello.clone().ok_or_else(|| {
            Status::invalid_argument("the first AgentReport of a control stream must carry hello")
        })?;
        if hello.agent_id.is_empty() || hello.node.is_empty() {
            return Err(Status::invalid_argument(
                "hello.agent_id and hello.node must be non-empty",
            ));
        }
        let (tx, rx) = mpsc::channel(STREAM_QUEUE);
        let id = self.hub.connect(&hello, tx);
        let hub = self.hub.clone();
        tokio::spawn(async move {
            hub.report(id, first).await;
            loop {
                match inbound.message().await {
                    Ok(Some(report)) => hub.report(id, report).await,
                    Ok(None) => break,
                    Err(e) => {
                        tracing::debug!(agent = %hello.agent_id, error = %e, "control stream broke");
                        break;
                    }
                }
            }
            hub.disconnect(id);
            tracing::info!(agent = %hello.agent_id, "agent control stream closed");
        });
        let out = futures_util::stream::unfold(
            (rx, self.stop.clone()),
            |(mut rx, mut stop)| async move {
                let next = tokio::select! {
                    c = rx.recv() => c,
                    _ = stop.wait_for(|stop| *stop) => None,
                };
                next.map(|c| (Ok(c), (rx, stop)))
            },
        );
        Ok(Response::new(Box::pin(out)))
    }
}
