//! The agent-facing gRPC service `rankscope.v1.CollectorIngest`.
//!
//! In: `AgentBatch` requests. Out: an `IngestAck` once every row of the batch
//! is stored in ClickHouse, or a status the agent acts on:
//! * `INVALID_ARGUMENT`: the batch is malformed (message names field and
//!   value) or ClickHouse rejected its rows as malformed: never retried;
//! * `UNAVAILABLE`: ClickHouse is unreachable or erroring, the writer queue is
//!   full, or the same batch is being written: the agent retries it;
//! * `RESOURCE_EXHAUSTED`: the message is over `max_message_bytes` (see
//!   [`crate::limits`]).
//!
//! Thin by design: validate and convert, check for duplicates, hand the rows
//! to the writer task and await its acknowledgement.

use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use rankscope_proto::v1 as proto;
use tonic::{Request, Response, Status};

use crate::convert;
use crate::dedupe::{Dedupe, Verdict};
use crate::metrics::Metrics;
use crate::store::{BatchKey, Store, WriteError, WriterHandle};
use crate::stream::StreamHandle;

/// Most batches remembered as possibly stored in part (each costs a lookup
/// in ClickHouse when it comes again); beyond it, a failed flush's retry
/// relies on the writer's in-memory record of the tables that answered.
const MAX_UNCOMMITTED: usize = 65_536;

/// Implementation of `CollectorIngest`.
#[derive(Clone)]
pub struct IngestService {
    store: Store,
    writer: WriterHandle,
    stream: StreamHandle,
    dedupe: Arc<Mutex<Dedupe>>,
    metrics: Arc<Metrics>,
    traces: Option<crate::traces::TraceHub>,
    /// Batches that may be stored in part: read at start-up (a killed
    /// collector's, see `store::writer`) or left by a failed flush. When one
    /// comes again, only the tables that lack its rows are written.
    uncommitted: Arc<Mutex<std::collections::HashSet<BatchKey>>>,
    /// The jobs this collector holds (`crate::ownership`); `None`: every
    /// job is live here without a rebuild (tests of the service alone).
    ownership: Option<Arc<crate::ownership::Ownership>>,
}

impl IngestService {
    /// A service writing through `writer`.
    pub fn new(
        store: Store,
        writer: WriterHandle,
        stream: StreamHandle,
        dedupe: Arc<Mutex<Dedupe>>,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self {
            store,
            writer,
            stream,
            dedupe,
            metrics,
            traces: None,
            uncommitted: Arc::default(),
            ownership: None,
        }
    }

    /// Takes each batch's jobs over before writing it (see `ownership`).
    pub fn with_ownership(mut self, o: Arc<crate::ownership::Ownership>) -> Self {
        self.ownership = Some(o);
        self
    }

    /// The batches that may be stored in part (shared with `ownership`,
    /// which adds a killed owner's when it takes its jobs).
    pub fn uncommitted(&self) -> Arc<Mutex<std::collections::HashSet<BatchKey>>> {
        Arc::clone(&self.uncommitted)
    }

    /// The batches found uncommitted at start-up.
    pub fn with_uncommitted(mut self, keys: Vec<BatchKey>) -> Self {
        self.uncommitted = Arc::new(Mutex::new(keys.into_iter().collect()));
        self
    }

    /// Leaves out of `rows` the tables that already hold an uncommitted
    /// batch's rows; `Ok(false)` when the batch is not uncommitted.
    async fn complete_uncommitted(
        &self,
        key: &BatchKey,
        rows: &mut crate::store::RowSet,
    ) -> Result<bool, Status> {
        let suspect = self.uncommitted.lock().is_ok_and(|u| u.contains(key));
        if !suspect {
            return Ok(false);
        }
        let held =
            self.store.tables_holding(key, rows).await.map_err(|e| {
                Status::unavailable(format!("cannot check an uncommitted batch: {e}"))
            })?;
        if !held.is_empty() {
            tracing::info!(agent = %key.0, session = key.1, seq = key.2, tables = ?held.iter().map(|t| t.name()).collect::<Vec<_>>(), "completing a batch stored in part (collector killed or flush failed)");
        }
        for t in held {
            rows.clear_table(t);
        }
        Ok(true)
    }

    /// Reports stored batches that finish a trace import to `hub`.
    pub fn with_traces(mut self, hub: crate::traces::TraceHub) -> Self {
        self.traces = Some(hub);
        self
    }

    /// Writes a batch marked in flight, hands it to analytics as soon as the
    /// writer holds it (analytics do not wait for the flush; a retry of a
    /// batch whose flush failed is dropped there as a duplicate), and
    /// acknowledges it to duplicate detection once stored.
    async fn store_new(
        &self,
        mut batch: proto::AgentBatch,
        mut rows: crate::store::RowSet,
        received: std::time::Instant,
    ) -> Result<Response<proto::IngestAck>, Status> {
        use std::sync::atomic::Ordering::Relaxed;
        let key = (batch.agent_id.clone(), batch.agent_session, batch.seq);
        let completing = match self.complete_uncommitted(&key, &mut rows).await {
            Ok(c) => c,
            Err(status) => {
                self.finish(&batch, false);
                self.metrics.batches_retry.fetch_add(1, Relaxed);
                return Err(status);
            }
        };
        let n = rows.len() as u64;
        let result = match self.writer.enqueue(rows) {
            Ok(queued) => {
                self.stream.submit(
                    &batch.agent_id,
                    batch.agent_session,
                    batch.seq,
                    self.next_expected(&batch),
                    Some(convert::stream_input(&batch)),
                );
                shed_payload(&mut batch);
                queued.stored().await
            }
            Err(e) => Err(e),
        };
        if let Ok(mut u) = self.uncommitted.lock() {
            match &result {
                Ok(_) if completing => {
                    u.remove(&key);
                }
                // A failed flush may still have committed some of its
                // INSERTs (ClickHouse killed after a commit, before its
                // answer): the retry asks ClickHouse which tables hold the
                // batch, as for a batch a killed collector left.
                Err(WriteError::Unavailable(_)) if u.len() < MAX_UNCOMMITTED => {
                    u.insert(key);
                }
                _ => {}
            }
        }
        self.finish(
            &batch,
            !matches!(
                result,
                Err(WriteError::Unavailable(_) | WriteError::Overloaded)
            ),
        );
        match result {
            Ok(_) => {
                if let Some(hub) = &self.traces {
                    hub.stored(&batch);
                }
                self.metrics.batches_stored.fetch_add(1, Relaxed);
                self.metrics.batch_latency.observe(received.elapsed());
                self.metrics.events_stored.fetch_add(n, Relaxed);
                Ok(Response::new(proto::IngestAck {
                    seq: batch.seq,
                    rows: n,
                    duplicate: false,
                }))
            }
            Err(e @ (WriteError::Unavailable(_) | WriteError::Overloaded)) => {
                self.metrics.batches_retry.fetch_add(1, Relaxed);
                Err(Status::unavailable(e.to_string()))
            }
            Err(e) => {
                // Analytics had the batch when the writer took it.
                self.metrics.reject("clickhouse_rejected");
                tracing::warn!(agent = %batch.agent_id, seq = batch.seq, error = %e, "ClickHouse rejected a batch; dropping it");
                Err(Status::invalid_argument(e.to_string()))
            }
        }
    }

    /// Seeds duplicate detection for a session this collector has not seen
    /// (its stored seqs are in ClickHouse after a restart or a re-import).
    async fn ensure_session(&self, b: &proto::AgentBatch) -> Result<(), Status> {
        let known = self
            .dedupe
            .lock()
            .map_err(|_| Status::internal("duplicate tracker poisoned"))?
            .knows(&b.agent_id, b.agent_session);
        if known {
            return Ok(());
        }
        let stored = self
            .store
            .acked_batches(&b.agent_id, b.agent_session)
            .await
            .map_err(|e| Status::unavailable(format!("cannot read stored batches: {e}")))?;
        if let Ok(mut d) = self.dedupe.lock() {
            if !d.knows(&b.agent_id, b.agent_session) {
                d.seed(&b.agent_id, b.agent_session, &stored);
            }
        }
        Ok(())
    }

    /// A batch another collector may have stored (the agent says so:
    /// `rankscope_proto::resend`). What this collector knows of the session
    /// may predate that collector's writes (it held the job before, and
    /// gets it back), so ClickHouse is asked: the session's stored seqs join
    /// duplicate detection (a stored batch is then a duplicate), and a batch
    /// with an intent but no `ingest_batches` row is completed like one a
    /// killed collector left (only the tables lacking its rows are written).
    async fn check_elsewhere(&self, b: &proto::AgentBatch) -> Result<(), Status> {
        let unavailable = |e: crate::store::StoreError| {
            Status::unavailable(format!(
                "cannot check whether another collector stored the batch: {e}"
            ))
        };
        let stored = self
            .store
            .acked_batches(&b.agent_id, b.agent_session)
            .await
            .map_err(unavailable)?;
        let partial = !stored.contains(&b.seq)
            && self
                .store
                .batch_has_intent(&b.agent_id, b.agent_session, b.seq)
                .await
                .map_err(unavailable)?;
        if let Ok(mut d) = self.dedupe.lock() {
            d.seed(&b.agent_id, b.agent_session, &stored);
        }
        if partial {
            if let Ok(mut u) = self.uncommitted.lock() {
                u.insert((b.agent_id.clone(), b.agent_session, b.seq));
            }
        }
        Ok(())
    }

    fn verdict(&self, b: &proto::AgentBatch) -> Result<Verdict, Status> {
        let mut d = self
            .dedupe
            .lock()
            .map_err(|_| Status::internal("duplicate tracker poisoned"))?;
        Ok(d.begin(&b.agent_id, b.agent_session, b.seq))
    }

    /// The first seq of `b`'s session not stored yet (where analytics
    /// start a session they have not seen).
    fn next_expected(&self, b: &proto::AgentBatch) -> u64 {
        self.dedupe
            .lock()
            .map_or(b.seq, |d| d.next_expected(&b.agent_id, b.agent_session))
    }

    fn finish(&self, b: &proto::AgentBatch, done: bool) {
        if let Ok(mut d) = self.dedupe.lock() {
            d.finish(&b.agent_id, b.agent_session, b.seq, done);
        }
    }
}

/// Frees a batch's events, names and samples once the writer holds its
/// rows and analytics their input: what the rest of [`IngestService::store_new`]
/// reads (ids, the ranks' identities and trace marks) stays. The decoded
/// events are the larger half of a batch in memory (a `proto::Event` is
/// the size of its largest kind), and the agent keeps up to
/// `max_in_flight_batches` batches waiting for their acknowledgement, each
/// held here for a writer window and its commit: shedding them roughly
/// halved the collector's peak RSS at full ingest (bench/RESULTS.md).
fn shed_payload(batch: &mut proto::AgentBatch) {
    for r in &mut batch.ranks {
        r.events = Vec::new();
        r.names = Vec::new();
    }
    batch.gpu_samples = Vec::new();
    batch.host_samples = Vec::new();
}

/// Nanoseconds since the Unix epoch.
pub fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

#[tonic::async_trait]
impl proto::collector_ingest_server::CollectorIngest for IngestService {
    async fn ingest(
        &self,
        request: Request<proto::AgentBatch>,
    ) -> Result<Response<proto::IngestAck>, Status> {
        use std::sync::atomic::Ordering::Relaxed;
        let received = std::time::Instant::now();
        let elsewhere = request
            .metadata()
            .contains_key(rankscope_proto::resend::TRIED_ELSEWHERE);
        let batch = request.into_inner();
        self.metrics.batches_received.fetch_add(1, Relaxed);
        let rows = convert::convert(&batch, now_ns()).map_err(|e| {
            self.metrics.reject(e.reason());
            self.stream.submit(
                &batch.agent_id,
                batch.agent_session,
                batch.seq,
                self.next_expected(&batch),
                None,
            );
            tracing::debug!(agent = %batch.agent_id, seq = batch.seq, error = %e, "batch rejected");
            Status::invalid_argument(e.to_string())
        })?;
        if let Some(o) = &self.ownership {
            let mut jobs: Vec<&str> = Vec::new();
            for g in &batch.ranks {
                if let Some(j) = g.identity.as_ref().map(|i| i.job_id.as_str()) {
                    if !jobs.contains(&j) {
                        jobs.push(j);
                    }
                }
            }
            if let Err(status) = o
                .ensure(&jobs, (&batch.agent_id, batch.agent_session))
                .await
            {
                self.metrics.batches_retry.fetch_add(1, Relaxed);
                return Err(status);
            }
        }
        if let Err(status) = self.ensure_session(&batch).await {
            self.metrics.batches_retry.fetch_add(1, Relaxed);
            return Err(status);
        }
        if elsewhere {
            if let Err(status) = self.check_elsewhere(&batch).await {
                self.metrics.batches_retry.fetch_add(1, Relaxed);
                return Err(status);
            }
        }
        match self.verdict(&batch)? {
            Verdict::Duplicate => {
                self.metrics.batches_duplicate.fetch_add(1, Relaxed);
                return Ok(Response::new(proto::IngestAck {
                    seq: batch.seq,
                    rows: 0,
                    duplicate: true,
                }));
            }
            Verdict::InFlight => {
                self.metrics.batches_retry.fetch_add(1, Relaxed);
                return Err(Status::unavailable(format!(
                    "batch seq {} of agent {:?} is being written; retry later",
                    batch.seq, batch.agent_id
                )));
            }
            Verdict::New => {}
        }
        // Once a batch is marked in flight its write runs to the end in its
        // own task: a caller that goes away (an agent killed mid-request)
        // cancels this future, and a cancelled write would leave the batch
        // in flight for good, refusing every retry of it.
        let this = self.clone();
        tokio::spawn(async move { this.store_new(batch, rows, received).await })
            .await
            .map_err(|e| Status::internal(format!("storing the batch failed: {e}")))?
    }
}
