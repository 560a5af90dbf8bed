//! The uplink: one task that delivers batches to their job's collector.
//!
//! In: [`Pending`] batches (each holds one job) from the backlog channel;
//! the collector set and each job's owner ([`crate::route`]). Out:
//! `CollectorIngest.Ingest` calls to the owner; counters of sent, retried,
//! acknowledged and rejected batches; failing collectors evicted.
//!
//! Policy:
//! * up to `max_in_flight_batches` calls at once, started in arrival order
//!   (each job's batches in `seq` order); a batch leaves the backlog channel
//!   only when there is room in this window, so while a collector is slow
//!   or down batches wait in the backlog;
//! * each batch goes to its job's owner; a job whose batches are in flight
//!   to another live collector (its owner changed) waits until they settle;
//!   no live collector at all: the batch waits;
//! * OK (also `duplicate = true`) => delivered;
//! * transient failure ([`classify`]) => the batch is kept, unchanged (same
//!   session and `seq`), and that collector turns *degraded*: nothing new is
//!   started to it; once its running calls have finished, only its oldest
//!   unacknowledged batch is retried, after a jittered exponential
//!   [`Backoff`] delay that grows with each failed probe. Its first answer
//!   ends the degraded state and its batches are resent in order;
//! * a collector that has not answered (transport errors, timeouts; or
//!   that refuses the job, ABORTED) for `collector_failover_after_ms` is
//!   evicted (a collector answering UNAVAILABLE is busy, not gone): its
//!   running calls are aborted and its jobs go to the next collector of
//!   their rendezvous order, which stores each batch once: the new owner's
//!   duplicate detection starts a session it has not seen from what
//!   ClickHouse holds (`ingest_batches`), so a batch the dead owner stored
//!   but never acknowledged is acknowledged as a duplicate;
//! * a batch sent to a collector after another one had it (failover, or
//!   failback to a returning owner) says so (`resend::TRIED_ELSEWHERE`,
//!   see `tried`): the collector then checks ClickHouse for it even when
//!   it knows the session (what it knows predates the other's writes);
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
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::sync::watch;
use tokio::task::{Id, JoinSet};
use tokio::time::Instant;
use tonic::transport::Channel;
use tonic::{Code, Status};

use crate::backoff::Backoff;
use crate::batch::Pending;
use crate::metrics::{DropReason, Metrics};
use crate::route::Routes;

mod lanes;
mod tried;
use lanes::Lane;

use rankscope_proto::codec::StampedBatch;

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
    /// The collector (`ip:port`) of the call running now.
    target: Option<String>,
    call: Option<tokio::task::AbortHandle>,
    /// The current call is a degraded collector's probe.
    probe: bool,
    /// The collectors it was sent to.
    tried: tried::Tried,
}

/// The target of every call in dump mode (no collector).
const DUMP: &str = "dump";

/// Uplink state; see the module docs.
pub(crate) struct Uplink {
    /// The collector set and each job's owner.
    routes: Routes,
    routes_changed: watch::Receiver<u64>,
    /// A collector failing this long loses its jobs to the next of their order.
    failover_after: Duration,
    metrics: Arc<Metrics>,
    backoff: Backoff,
    rng: SmallRng,
    max_in_flight: usize,
    /// Unsettled batches by arrival order (each job's in its `seq` order).
    window: BTreeMap<u64, Slot>,
    next_order: u64,
    calls: JoinSet<(u64, Result<proto::IngestAck, Status>)>,
    call_order: HashMap<Id, u64>,
    lanes: HashMap<String, Lane>,
    /// `authorization` metadata sent with every call, when configured.
    auth: Option<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>,
    /// With TLS: the configuration [`crate::probe_tls`] diagnoses an outage
    /// with (gRPC reports a refused certificate as "connection closed").
    tls_probe: Option<Arc<crate::config::Config>>,
    /// The disk spool: a settled batch's file is removed.
    spool: Option<Arc<crate::spool::Spool>>,
    /// The dump sink (`dump_dir`): each call writes the batch there instead
    /// of sending it; the write is the acknowledgement (see `crate::dump`).
    dump: Option<Arc<crate::spool::Spool>>,
}

impl Uplink {
    pub(crate) fn new(
        routes: Routes,
        routes_changed: watch::Receiver<u64>,
        metrics: Arc<Metrics>,
        backoff: Backoff,
        rng: SmallRng,
        max_in_flight: usize,
    ) -> Self {
        Self {
            routes,
            routes_changed,
            failover_after: Duration::from_secs(15),
            metrics,
            backoff,
            rng,
            max_in_flight: max_in_flight.max(1),
            window: BTreeMap::new(),
            next_order: 0,
            calls: JoinSet::new(),
            call_order: HashMap::new(),
            lanes: HashMap::new(),
            auth: None,
            tls_probe: None,
            spool: None,
            dump: None,
        }
    }

    /// A collector failing for `after` is evicted: its jobs fail over.
    pub(crate) fn with_failover_after(mut self, after: Duration) -> Self {
        self.failover_after = after;
        self
    }

    /// Writes every batch to `dump` instead of calling a collector.
    pub(crate) fn with_dump(mut self, dump: Option<Arc<crate::spool::Spool>>) -> Self {
        self.dump = dump;
        self
    }

    /// Diagnoses each outage's first failure with a TLS probe (`None`: no TLS).
    pub(crate) fn with_tls_probe(mut self, config: Option<crate::config::Config>) -> Self {
        self.tls_probe = config.map(Arc::new);
        self
    }

    /// Removes each settled batch from `spool`.
    pub(crate) fn with_spool(mut self, spool: Option<Arc<crate::spool::Spool>>) -> Self {
        self.spool = spool;
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
        let mut routes_open = true;
        loop {
            self.start_calls();
            if !input_open && self.window.is_empty() {
                break;
            }
            let room = self.window.len() < self.max_in_flight;
            let wake = self.next_wake();
            tokio::select! {
                Some(done) = self.calls.join_next_with_id(), if !self.calls.is_empty() => {
                    match done {
                        Ok((id, (order, result))) => {
                            self.call_order.remove(&id);
                            self.settle(order, result);
                        }
                        Err(e) => {
                            // A call task panicked or was aborted (its
                            // collector was evicted): retry it.
                            if let Some(order) = self.call_order.remove(&e.id()) {
                                self.settle(order, Err(Status::cancelled(e.to_string())));
                            }
                        }
                    }
                }
                _ = tokio::time::sleep_until(wake.unwrap_or_else(Instant::now)), if wake.is_some() => {
                    self.probe_due();
                }
                r = self.routes_changed.changed(), if routes_open => match r {
                    Ok(()) => self.routes_changed_now(),
                    Err(_) => routes_open = false,
                },
                pending = input.recv(), if input_open && room => match pending {
                    Some(p) => {
                        self.next_order += 1;
                        self.window.insert(self.next_order, Slot { pending: p, attempts: 0, target: None, call: None, probe: false, tried: tried::Tried::default() });
                    }
                    None => input_open = false,
                },
            }
        }
        tracing::debug!("uplink stopped");
    }

    /// The owner of `job` now and its client (`None`: no live collector).
    fn owner(&self, job: &str) -> Option<(String, Option<Channel>)> {
        if self.dump.is_some() {
            return Some((DUMP.to_owned(), None));
        }
        let t = crate::route::lock(&self.routes);
        t.owner(job)
            .map(|(k, x)| (k.to_owned(), Some(x.channel.clone())))
    }

    /// Starts every idle batch whose owner is healthy, in order; a job
    /// whose batches are still in flight to another (live) collector waits
    /// for them, so a voluntary move never overlaps two owners. A degraded
    /// owner gets a probe once no call to it runs.
    fn start_calls(&mut self) {
        let now = Instant::now();
        self.evict_failed(now);
        let mut busy: HashMap<Arc<str>, String> = HashMap::new();
        for s in self.window.values() {
            if let Some(t) = &s.target {
                busy.insert(Arc::clone(&s.pending.job), t.clone());
            }
        }
        let idle: Vec<u64> = self
            .window
            .iter()
            .filter(|(_, s)| s.target.is_none())
            .map(|(o, _)| *o)
            .collect();
        let mut owners: HashMap<Arc<str>, Option<(String, Option<Channel>)>> = HashMap::new();
        for order in idle {
            let job = Arc::clone(&self.window[&order].pending.job);
            let owner = owners
                .entry(Arc::clone(&job))
                .or_insert_with(|| self.owner(&job))
                .clone();
            let Some((key, channel)) = owner else {
                continue; // no live collector: the batch waits
            };
            if busy.get(&job).is_some_and(|t| *t != key) {
                continue;
            }
            let lane = self.lanes.entry(key.clone()).or_default();
            if lane.failures == 0 {
                busy.insert(job, key.clone());
                self.call(order, key, channel, false);
            } else if lane.in_flight == 0 && lane.retry_at.is_none() {
                let delay = self.backoff.delay(lane.failures - 1, &mut self.rng);
                tracing::debug!(collector = %key, delay_ms = delay.as_millis() as u64, failures = lane.failures, "collector unavailable, retrying later");
                lane.retry_at = Some(now + delay);
            }
        }
    }

    fn call(&mut self, order: u64, key: String, channel: Option<Channel>, probe: bool) {
        let Some(slot) = self.window.get_mut(&order) else {
            return;
        };
        if slot.attempts == 0 {
            Metrics::inc(&self.metrics.batches_sent);
        } else {
            Metrics::inc(&self.metrics.batches_retried);
        }
        slot.attempts += 1;
        slot.probe = probe;
        let elsewhere = slot.tried.record(&key);
        let (session, seq) = (slot.pending.session, slot.pending.seq);
        // Encoded once, when it was cut; each call stamps its send time.
        let body = StampedBatch {
            body: slot.pending.body.clone(),
            sent_at_ns: now_ns(),
        };
        if self.dump.is_none() && !slot.pending.job.is_empty() {
            crate::route::lock(&self.routes).routed(&slot.pending.job, &key);
        }
        let handle = match (&self.dump, channel) {
            (Some(dump), _) => {
                let dump = Arc::clone(dump);
                self.calls.spawn(async move {
                    (
                        order,
                        crate::dump::write(dump, session, seq, body.body).await,
                    )
                })
            }
            (None, Some(channel)) => {
                let mut request = tonic::Request::new(body);
                if let Some(auth) = &self.auth {
                    request.metadata_mut().insert("authorization", auth.clone());
                }
                if elsewhere {
                    Metrics::inc(&self.metrics.batches_tried_elsewhere);
                    request.metadata_mut().insert(
                        rankscope_proto::resend::TRIED_ELSEWHERE,
                        tonic::metadata::MetadataValue::from_static("1"),
                    );
                }
                self.calls
                    .spawn(async move { (order, ingest(channel, request).await) })
            }
            (None, None) => return,
        };
        slot.target = Some(key.clone());
        slot.call = Some(handle.clone());
        self.lanes.entry(key).or_default().in_flight += 1;
        self.call_order.insert(handle.id(), order);
    }

    fn settle(&mut self, order: u64, result: Result<proto::IngestAck, Status>) {
        let Some(slot) = self.window.get_mut(&order) else {
            return;
        };
        let key = slot.target.take().unwrap_or_default();
        slot.call = None;
        if let Some(l) = self.lanes.get_mut(&key) {
            l.in_flight = l.in_flight.saturating_sub(1);
        }
        let outcome = match &result {
            Ok(_) => None,
            Err(status) => Some(classify(status)),
        };
        match (result, outcome) {
            (Ok(ack), _) => {
                let Some(slot) = self.window.remove(&order) else {
                    return;
                };
                if let Some(spool) = &self.spool {
                    spool.remove(slot.pending.session, slot.pending.seq);
                }
                let (events, samples) = (slot.pending.events, slot.pending.samples);
                Metrics::inc(&self.metrics.batches_acked);
                if ack.duplicate {
                    Metrics::inc(&self.metrics.batches_duplicate);
                }
                Metrics::add(&self.metrics.delivered_events, events);
                Metrics::add(&self.metrics.delivered_samples, samples);
                tracing::trace!(seq = slot.pending.seq, events, duplicate = ack.duplicate, collector = %key, "batch delivered");
                self.recovered(&key);
            }
            (Err(status), Some(Outcome::Drop)) => {
                let Some(slot) = self.window.remove(&order) else {
                    return;
                };
                if let Some(spool) = &self.spool {
                    spool.remove(slot.pending.session, slot.pending.seq);
                }
                let (events, samples) = (slot.pending.events, slot.pending.samples);
                Metrics::inc(&self.metrics.batches_rejected);
                self.metrics
                    .dropped(DropReason::RejectedByCollector, events);
                self.metrics
                    .samples_dropped(DropReason::RejectedByCollector, samples);
                let (error, _) = crate::channel::describe(&status);
                tracing::warn!(seq = slot.pending.seq, events, code = ?status.code(), %error, collector = %key, "collector rejected batch, dropped");
                self.recovered(&key);
            }
            (Err(status), _) => {
                let was_probe = std::mem::take(&mut slot.probe);
                let (attempts, seq) = (slot.attempts, slot.pending.seq);
                let Some(lane) = self.lanes.get_mut(&key) else {
                    return;
                };
                if lane.evicted {
                    // Aborted by the eviction: the batch goes to the new owner.
                    return;
                }
                let (error, tls) = crate::channel::describe(&status);
                if tls {
                    Metrics::inc(&self.metrics.collector_tls_failures);
                }
                // A busy collector (its writer queue full, ClickHouse away)
                // is alive: its jobs stay; only one that does not answer,
                // or refuses the job (ABORTED), fails over.
                if answered(&status) {
                    lane.down_since = None;
                } else if lane.down_since.is_none() {
                    lane.down_since = Some(Instant::now());
                    if self.dump.is_none() {
                        crate::route::lock(&self.routes).set_failing(&key, true);
                    }
                }
                if lane.failures == 0 {
                    // Once per outage: why the collector cannot be reached.
                    tracing::warn!(seq, collector = %key, code = ?status.code(), %error, tls, "collector unreachable; holding batches and retrying");
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
                if lane.failures == 0 || was_probe {
                    lane.failures = lane.failures.saturating_add(1);
                }
                tracing::debug!(seq, attempts, collector = %key, code = ?status.code(), %error, "batch not delivered, will retry");
            }
        }
    }
}

/// Whether the collector itself sent this failure (a status without a
/// transport error under it): it is alive, only busy or without
/// ClickHouse, so its jobs do not fail over. ABORTED (it refuses the job:
/// another schema version holds it) and client-side timeouts do not count.
pub(crate) fn answered(status: &Status) -> bool {
    std::error::Error::source(status).is_none()
        && matches!(status.code(), Code::Unavailable | Code::Internal)
}

/// `CollectorIngest.Ingest` with a pre-encoded `AgentBatch`.
pub(crate) use rankscope_proto::codec::ingest_stamped as ingest;

pub(crate) fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_collector_that_does_not_answer_loses_its_jobs() {
        assert!(answered(&Status::unavailable("writer queue full")));
        assert!(!answered(&Status::aborted(
            "another schema version holds the job"
        )));
        assert!(!answered(&Status::cancelled("Timeout expired")));
        let mut refused = Status::unavailable("tcp connect error");
        refused.set_source(Arc::new(std::io::Error::other("Connection refused")));
        assert!(!answered(&refused), "a transport error is no answer");
    }

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
