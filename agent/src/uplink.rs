//! The uplink: one task that delivers batches to the collector.
//!
//! In: [`Pending`] batches from the backlog channel. Out: `CollectorIngest.Ingest`
//! calls; counters of sent, retried, acknowledged and rejected batches.
//!
//! Policy:
//! * up to `max_in_flight_batches` calls at once, started in `seq` order; a
//!   batch leaves the backlog channel only when there is room in this window,
//!   so while the collector is slow or down batches wait in the backlog;
//! * OK (also `duplicate = true`) => delivered;
//! * transient failure ([`classify`]) => the batch is kept, unchanged (same
//!   `seq`), and the uplink turns *degraded*: nothing new is started; once the
//!   calls already running have finished, only the oldest unacknowledged batch
//!   is retried, after a jittered exponential [`Backoff`] delay that grows with
//!   each failed probe. The first answer from the collector ends the degraded
//!   state and the window is resent in `seq` order. So after an outage the
//!   backlog is delivered in order (strictly so with one batch in flight);
//! * permanent failure => logged, counted as
//!   `dropped_events{reason="rejected_by_collector"}`, never retried.
//!
//! The task ends when the backlog channel is closed and every batch in the
//! window is settled; at shutdown it is aborted after the flush timeout.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::SystemTime;

use rand::rngs::SmallRng;
use rankscope_proto::v1 as proto;
use tokio::sync::mpsc;
use tokio::sync::watch;
use tokio::task::{Id, JoinSet};
use tokio::time::Instant;
use tonic::transport::Channel;
use tonic::{Code, Status};

use crate::backoff::Backoff;
use crate::batch::Pending;
use crate::metrics::{DropReason, Metrics};

use rankscope_proto::codec::{StampedBatch, StampedCodec};

/// What to do after a failed call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Keep the batch and try again later.
    Retry,
    /// Drop the batch: sending it again cannot succeed.
    Drop,
}

/// Classifies a failed `Ingest` call. Only codes that mean "not now" are
/// retried; transport errors surface as UNAVAILABLE (connect) or CANCELLED
/// (request timeout) and are retried too.
pub(crate) fn classify(status: &Status) -> Outcome {
    match status.code() {
        Code::Unavailable
        | Code::DeadlineExceeded
        | Code::Unknown
        | Code::Internal
        | Code::Aborted
        | Code::Cancelled => Outcome::Retry,
        // InvalidArgument, FailedPrecondition, ResourceExhausted (too large),
        // Unauthenticated, PermissionDenied, OutOfRange, Unimplemented, ...
        _ => Outcome::Drop,
    }
}

#[derive(Debug)]
struct Slot {
    /// The encoded batch (every call sends these bytes), its counts and
    /// its share of the backlog's byte budget.
    pending: Pending,
    /// Calls made for this batch so far.
    attempts: u32,
    in_flight: bool,
    /// The current call is the degraded-mode probe.
    probe: bool,
}

/// Uplink state; see the module docs.
pub(crate) struct Uplink {
    /// The newest client (replaced when TLS certificates are reloaded).
    client: watch::Receiver<Channel>,
    metrics: Arc<Metrics>,
    backoff: Backoff,
    rng: SmallRng,
    max_in_flight: usize,
    window: BTreeMap<u64, Slot>,
    calls: JoinSet<(u64, Result<proto::IngestAck, Status>)>,
    call_seq: HashMap<Id, u64>,
    /// Failed probes since the collector last answered (0 = healthy).
    failures: u32,
    retry_at: Option<Instant>,
    /// `authorization` metadata sent with every call, when configured.
    auth: Option<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>,
    /// With TLS: the configuration [`crate::probe_tls`] diagnoses an outage
    /// with (gRPC reports a refused certificate as "connection closed").
    tls_probe: Option<Arc<crate::config::Config>>,
    /// The disk spool: a settled batch's file is removed.
    spool: Option<Arc<crate::spool::Spool>>,
    /// This run's `agent_session` (names the spool files).
    session: u64,
    /// The dump sink (`dump_dir`): each call writes the batch there instead
    /// of sending it; the write is the acknowledgement (see `crate::dump`).
    dump: Option<Arc<crate::spool::Spool>>,
}

impl Uplink {
    pub(crate) fn new(
        client: watch::Receiver<Channel>,
        metrics: Arc<Metrics>,
        backoff: Backoff,
        rng: SmallRng,
        max_in_flight: usize,
    ) -> Self {
        Self {
            client,
            metrics,
            backoff,
            rng,
            max_in_flight: max_in_flight.max(1),
            window: BTreeMap::new(),
            calls: JoinSet::new(),
            call_seq: HashMap::new(),
            failures: 0,
            retry_at: None,
            auth: None,
            tls_probe: None,
            spool: None,
            session: 0,
            dump: None,
        }
    }

    /// Writes every batch to `dump` (named with `session`) instead of
    /// calling the collector.
    pub(crate) fn with_dump(
        mut self,
        dump: Option<Arc<crate::spool::Spool>>,
        session: u64,
    ) -> Self {
        self.dump = dump;
        self.session = session;
        self
    }

    /// Diagnoses each outage's first failure with a TLS probe (`None`: no TLS).
    pub(crate) fn with_tls_probe(mut self, config: Option<crate::config::Config>) -> Self {
        self.tls_probe = config.map(Arc::new);
        self
    }

    /// Removes each settled batch of `session` from `spool`.
    pub(crate) fn with_spool(
        mut self,
        spool: Option<Arc<crate::spool::Spool>>,
        session: u64,
    ) -> Self {
        self.spool = spool;
        self.session = session;
        self
    }

    /// Sends `authorization: Bearer <token>` with every call (empty: none).
    pub(crate) fn with_token(mut self, token: &str) -> Result<Self, ()> {
        if !token.is_empty() {
            let v = rankscope_proto::auth::bearer(token)
                .parse()
                .map_err(|_| ())?;
            self.auth = Some(v);
        }
        Ok(self)
    }

    /// Delivers batches until `input` is closed and the window is empty.
    pub(crate) async fn run(mut self, mut input: mpsc::Receiver<Pending>) {
        let mut input_open = true;
        loop {
            self.start_calls();
            if !input_open && self.window.is_empty() {
                break;
            }
            let room = self.window.len() < self.max_in_flight;
            let retry_at = self.retry_at;
            tokio::select! {
                Some(done) = self.calls.join_next_with_id(), if !self.calls.is_empty() => {
                    match done {
                        Ok((id, (seq, result))) => {
                            self.call_seq.remove(&id);
                            self.settle(seq, result);
                        }
                        Err(e) => {
                            // A call task panicked or was cancelled: retry it.
                            if let Some(seq) = self.call_seq.remove(&e.id()) {
                                self.settle(seq, Err(Status::internal(e.to_string())));
                            }
                        }
                    }
                }
                _ = tokio::time::sleep_until(retry_at.unwrap_or_else(Instant::now)),
                    if retry_at.is_some() => {
                    self.retry_at = None;
                    self.probe();
                }
                pending = input.recv(), if input_open && room => match pending {
                    Some(p) => {
                        let seq = p.seq;
                        self.window.insert(seq, Slot { pending: p, attempts: 0, in_flight: false, probe: false });
                    }
                    None => input_open = false,
                },
            }
        }
        tracing::debug!("uplink stopped");
    }

    /// Healthy: starts every idle batch of the window, in seq order.
    /// Degraded: once no call is running, schedules the next probe.
    fn start_calls(&mut self) {
        if self.failures == 0 {
            let idle: Vec<u64> = self
                .window
                .iter()
                .filter(|(_, s)| !s.in_flight)
                .map(|(seq, _)| *seq)
                .collect();
            for seq in idle {
                self.call(seq, false);
            }
        } else if self.calls.is_empty() && self.retry_at.is_none() {
            let delay = self.backoff.delay(self.failures - 1, &mut self.rng);
            tracing::debug!(
                delay_ms = delay.as_millis() as u64,
                failures = self.failures,
                "collector unavailable, retrying later"
            );
            self.retry_at = Some(Instant::now() + delay);
        }
    }

    /// Degraded: retries the oldest unacknowledged batch.
    fn probe(&mut self) {
        if let Some(seq) = self.window.keys().next().copied() {
            self.call(seq, true);
        }
    }

    fn call(&mut self, seq: u64, probe: bool) {
        let Some(slot) = self.window.get_mut(&seq) else {
            return;
        };
        if slot.attempts == 0 {
            Metrics::inc(&self.metrics.batches_sent);
        } else {
            Metrics::inc(&self.metrics.batches_retried);
        }
        slot.attempts += 1;
        slot.in_flight = true;
        slot.probe = probe;
        // Encoded once, when it was cut; each call stamps its send time.
        let body = StampedBatch {
            body: slot.pending.body.clone(),
            sent_at_ns: now_ns(),
        };
        let handle = if let Some(dump) = &self.dump {
            let (dump, session) = (Arc::clone(dump), self.session);
            self.calls.spawn(async move {
                (seq, crate::dump::write(dump, session, seq, body.body).await)
            })
        } else {
            let channel = self.client.borrow().clone();
            let mut request = tonic::Request::new(body);
            if let Some(auth) = &self.auth {
                request.metadata_mut().insert("authorization", auth.clone());
            }
            self.calls
                .spawn(async move { (seq, ingest(channel, request).await) })
        };
        self.call_seq.insert(handle.id(), seq);
    }

    fn settle(&mut self, seq: u64, result: Result<proto::IngestAck, Status>) {
        let Some(slot) = self.window.get_mut(&seq) else {
            return;
        };
        slot.in_flight = false;
        let outcome = match &result {
            Ok(_) => None,
            Err(status) => Some(classify(status)),
        };
        match (result, outcome) {
            (Ok(ack), _) => {
                if let Some(spool) = &self.spool {
                    spool.remove(self.session, seq);
                }
                let slot = self.window.remove(&seq);
                let (events, samples) =
                    slot.map_or((0, 0), |s| (s.pending.events, s.pending.samples));
                Metrics::inc(&self.metrics.batches_acked);
                if ack.duplicate {
                    Metrics::inc(&self.metrics.batches_duplicate);
                }
                Metrics::add(&self.metrics.delivered_events, events);
                Metrics::add(&self.metrics.delivered_samples, samples);
                tracing::trace!(seq, events, duplicate = ack.duplicate, "batch delivered");
                self.recovered();
            }
            (Err(status), Some(Outcome::Drop)) => {
                if let Some(spool) = &self.spool {
                    spool.remove(self.session, seq);
                }
                let slot = self.window.remove(&seq);
                let (events, samples) =
                    slot.map_or((0, 0), |s| (s.pending.events, s.pending.samples));
                Metrics::inc(&self.metrics.batches_rejected);
                self.metrics
                    .dropped(DropReason::RejectedByCollector, events);
                self.metrics
                    .samples_dropped(DropReason::RejectedByCollector, samples);
                let (error, _) = crate::channel::describe(&status);
                tracing::warn!(seq, events, code = ?status.code(), %error, "collector rejected batch, dropped");
                self.recovered();
            }
            (Err(status), _) => {
                let was_probe = std::mem::take(&mut slot.probe);
                let attempts = slot.attempts;
                let (error, tls) = crate::channel::describe(&status);
                if tls {
                    Metrics::inc(&self.metrics.collector_tls_failures);
                }
                if self.failures == 0 {
                    // Once per outage: why the collector cannot be reached.
                    tracing::warn!(seq, code = ?status.code(), %error, tls, "collector unreachable; holding batches and retrying");
                    if let (Some(cfg), false) = (&self.tls_probe, tls) {
                        let (cfg, metrics) = (Arc::clone(cfg), Arc::clone(&self.metrics));
                        // Off the uplink's path: the probe takes up to a few seconds.
                        tokio::spawn(async move {
                            if let Err(crate::channel::ProbeError::Tls(error)) =
                                crate::probe_tls(&cfg).await
                            {
                                Metrics::inc(&metrics.collector_tls_failures);
                                tracing::warn!(%error, "TLS to the collector fails");
                            }
                        });
                    }
                }
                if self.failures == 0 || was_probe {
                    self.failures = self.failures.saturating_add(1);
                }
                tracing::debug!(seq, attempts, code = ?status.code(), %error, "batch not delivered, will retry");
            }
        }
    }

    /// The collector answered: leave the degraded state.
    fn recovered(&mut self) {
        if self.failures > 0 {
            tracing::info!(failures = self.failures, "collector reachable again");
        }
        self.failures = 0;
        self.retry_at = None;
    }
}

/// `CollectorIngest.Ingest` with a pre-encoded `AgentBatch` (what the
/// generated client does, minus encoding).
pub(crate) async fn ingest(
    channel: Channel,
    request: tonic::Request<StampedBatch>,
) -> Result<proto::IngestAck, Status> {
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready()
        .await
        .map_err(|e| Status::unknown(format!("Service was not ready: {e}")))?;
    let path = tonic::codegen::http::uri::PathAndQuery::from_static(INGEST_PATH);
    grpc.unary(request, path, StampedCodec::<proto::IngestAck>::default())
        .await
        .map(tonic::Response::into_inner)
}

/// The gRPC path of `CollectorIngest.Ingest` (proto/rankscope/v1/ingest.proto).
const INGEST_PATH: &str = "/rankscope.v1.CollectorIngest/Ingest";

pub(crate) fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transient_codes_are_retried_and_the_rest_dropped() {
        for code in [
            Code::Unavailable,
            Code::DeadlineExceeded,
            Code::Unknown,
            Code::Internal,
            Code::Aborted,
            Code::Cancelled,
        ] {
            assert_eq!(classify(&Status::new(code, "")), Outcome::Retry, "{code:?}");
        }
        for code in [
            Code::InvalidArgument,
            Code::FailedPrecondition,
            Code::ResourceExhausted,
            Code::Unauthenticated,
            Code::PermissionDenied,
            Code::OutOfRange,
            Code::Unimplemented,
        ] {
            assert_eq!(classify(&Status::new(code, "")), Outcome::Drop, "{code:?}");
        }
    }
}
