//! The writer: the one task that owns buffered rows, batches them per table and
//! acknowledges each [`RowSet`] only after ClickHouse accepted all of its rows.
//!
//! In: [`RowSet`]s through [`WriterHandle::write`] over a bounded queue. Out: one INSERT
//! per table per flush, then an acknowledgement (`Ok` or a [`WriteError`]) to every
//! row set of that flush.
//!
//! Backpressure policy: the queue holds `queue_capacity` row sets; when full, `write`
//! answers [`WriteError::Overloaded`] at once and never blocks (the agent keeps the batch
//! and retries). While a flush runs the queue is not drained, so a slow ClickHouse fills
//! it and pushes back.
//!
//! Flush policy: when buffered rows reach `batch_max_rows`, or `flush_interval_ms` after
//! the first row entered an empty buffer (no free-running tick), or at shutdown (after
//! draining the queue). First an `ingest_intents` row per agent batch, then the event
//! tables and `ranks` concurrently, `ingest_batches` only after all of them succeeded, so
//! a stored batch row implies its event rows are stored, and an intent without it marks
//! a batch a killed collector may have stored in part.
//!
//! Failure: if any INSERT of a flush fails, every row set of the flush gets the error:
//! [`WriteError::Unavailable`] when retrying may help, [`WriteError::Rejected`] when
//! ClickHouse refused the data as malformed (see `fault`). Every INSERT of a flush runs
//! to its end (none is cancelled half-way); the tables that took their rows are
//! remembered per agent batch (`Partial`), and when the agent sends the batch again
//! those tables are left out, so a partial flush never leaves a row stored twice. That
//! memory is bounded and dies with the process; after a kill -9 the intents take its
//! place: the ingest service asks ClickHouse which tables hold an uncommitted batch
//! and leaves those out (ClickHouse 18.16 has no insert deduplication for
//! non-replicated tables).

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use clickhouse::{RowOwned, RowWrite};
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::fault::{classify, Fault};
use super::{RowSet, Store, Table};

/// Batching of the writer (`[writer]` in the collector config).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WriterConfig {
    /// Flush when this many rows (all tables) are buffered.
    pub batch_max_rows: usize,
    /// Flush at the latest this long after the first row entered an empty buffer.
    /// Default 200 ms: acknowledgements, and live analytics (which see a batch
    /// once it is stored), wait at most this long; at ~15 ms per INSERT this is
    /// ~5 INSERTs per table per second at low load.
    pub flush_interval_ms: u64,
    /// Row sets waiting for the writer; more are refused with `Overloaded`.
    pub queue_capacity: usize,
    /// Limit on sending one INSERT and on waiting for ClickHouse's answer.
    pub insert_timeout_ms: u64,
    /// Flush interval of the second writer, which stores live analytics
    /// results (breakdowns, verdicts, hang suspects, alerts): they are few
    /// rows, and a verdict is queryable this long after it was raised
    /// instead of after the ingest writer's next flush.
    pub results_flush_interval_ms: u64,
}

impl Default for WriterConfig {
    fn default() -> Self {
        WriterConfig {
            batch_max_rows: 100_000,
            flush_interval_ms: 200,
            queue_capacity: 256,
            insert_timeout_ms: 30_000,
            results_flush_interval_ms: 50,
        }
    }
}

impl WriterConfig {
    /// The configuration of the results writer: this one with its flush
    /// interval.
    pub fn for_results(&self) -> WriterConfig {
        WriterConfig {
            flush_interval_ms: self.results_flush_interval_ms,
            ..self.clone()
        }
    }
}

/// A successful write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteOutcome {
    /// Event rows of the row set now stored (as [`RowSet::len`]).
    pub rows: usize,
}

/// Why a row set was not stored.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WriteError {
    /// The writer queue is full; nothing was buffered. Retry later.
    #[error("the ClickHouse writer is overloaded; retry later")]
    Overloaded,
    /// ClickHouse is down, slow or temporarily refusing, or the writer is shutting down.
    /// Retry later.
    #[error("ClickHouse unavailable: {0}")]
    Unavailable(String),
    /// ClickHouse rejected the rows as malformed; retrying the same rows cannot succeed.
    #[error("ClickHouse rejected the rows: {0}")]
    Rejected(String),
}

/// Counters of one table.
#[derive(Debug, Default)]
pub struct TableCounters {
    /// Rows ClickHouse accepted.
    pub rows: AtomicU64,
    /// INSERT statements ClickHouse accepted.
    pub inserts: AtomicU64,
    /// INSERT statements that failed.
    pub failures: AtomicU64,
}

/// Counters of the writer. Totals are sums over tables.
#[derive(Debug, Default)]
pub struct WriterMetrics {
    /// Rows ClickHouse accepted (all tables).
    pub rows_written: AtomicU64,
    /// INSERT statements ClickHouse accepted.
    pub inserts: AtomicU64,
    /// INSERT statements that failed.
    pub insert_failures: AtomicU64,
    /// Flushes that stored all their rows.
    pub flushes: AtomicU64,
    /// Row sets refused because the queue was full.
    pub overloaded: AtomicU64,
    /// Row sets answered `Unavailable` after a failed flush.
    pub unavailable: AtomicU64,
    /// Row sets answered `Rejected`.
    pub rejected: AtomicU64,
    /// Duration of successful INSERT statements.
    pub insert_latency: crate::metrics::Histogram,
    tables: [TableCounters; Table::ALL.len()],
}

impl WriterMetrics {
    /// Counters of one table.
    pub fn table(&self, table: Table) -> &TableCounters {
        let index = Table::ALL.iter().position(|t| *t == table).unwrap_or(0);
        &self.tables[index]
    }
}

type Ack = oneshot::Sender<Result<WriteOutcome, WriteError>>;

struct Request {
    rows: RowSet,
    ack: Ack,
}

/// Sends row sets to the writer task. Cheap to clone.
#[derive(Debug, Clone)]
pub struct WriterHandle {
    tx: mpsc::Sender<Request>,
    metrics: Arc<WriterMetrics>,
}

impl WriterHandle {
    /// Queues `rows` (never waits for queue space) and resolves once they are stored
    /// or failed; see the module docs for the policy.
    pub async fn write(&self, rows: RowSet) -> Result<WriteOutcome, WriteError> {
        self.enqueue(rows)?.stored().await
    }

    /// Queues `rows` without waiting: `Ok` once the writer holds them (they
    /// will be in its next flush), with the acknowledgement to await.
    pub fn enqueue(&self, rows: RowSet) -> Result<Queued, WriteError> {
        let (ack, done) = oneshot::channel();
        match self.tx.try_send(Request { rows, ack }) {
            Ok(()) => Ok(Queued(done)),
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.metrics.overloaded.fetch_add(1, Relaxed);
                Err(WriteError::Overloaded)
            }
            Err(mpsc::error::TrySendError::Closed(_)) => Err(shutting_down()),
        }
    }

    /// Row sets waiting in the queue (not yet taken by the writer).
    pub fn queue_len(&self) -> usize {
        self.tx.max_capacity() - self.tx.capacity()
    }

    /// The writer's counters.
    pub fn metrics(&self) -> &WriterMetrics {
        &self.metrics
    }

    /// The writer's counters, shared.
    pub fn metrics_arc(&self) -> Arc<WriterMetrics> {
        Arc::clone(&self.metrics)
    }
}

/// Rows the writer holds: [`Queued::stored`] resolves when they are stored or failed.
#[derive(Debug)]
pub struct Queued(oneshot::Receiver<Result<WriteOutcome, WriteError>>);

impl Queued {
    /// The writer's answer for the rows.
    pub async fn stored(self) -> Result<WriteOutcome, WriteError> {
        self.0.await.unwrap_or_else(|_| Err(shutting_down()))
    }
}

fn shutting_down() -> WriteError {
    WriteError::Unavailable("the collector's writer is shutting down".into())
}

/// Spawns the writer task. It runs until `shutdown` resolves (or every handle is
/// dropped), then stores what it holds and exits.
pub fn spawn_writer(
    store: Store,
    cfg: WriterConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> (WriterHandle, JoinHandle<()>) {
    spawn_writer_counting(store, cfg, Arc::default(), shutdown)
}

/// [`spawn_writer`] counting into `metrics` (shared by the ingest and the
/// results writer: `/metrics` shows their sum).
pub fn spawn_writer_counting(
    store: Store,
    cfg: WriterConfig,
    metrics: Arc<WriterMetrics>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> (WriterHandle, JoinHandle<()>) {
    let (tx, rx) = mpsc::channel(cfg.queue_capacity.max(1));
    let writer = Writer {
        store,
        cfg,
        metrics: Arc::clone(&metrics),
        rx,
        buffer: Vec::new(),
        buffered_rows: 0,
        pending: Vec::new(),
        deadline: None,
        partial: Partial::default(),
    };
    let task = tokio::spawn(writer.run(shutdown));
    (WriterHandle { tx, metrics }, task)
}

struct Writer {
    store: Store,
    cfg: WriterConfig,
    metrics: Arc<WriterMetrics>,
    rx: mpsc::Receiver<Request>,
    /// Every pending row set as it came: a flush writes each table's rows
    /// from all of them in order (merging them into one vector per table
    /// would move every row once more, plus the vectors' growth copies).
    buffer: Vec<RowSet>,
    /// Rows (all tables) in `buffer`.
    buffered_rows: usize,
    /// Acks of the buffered row sets with their event row counts.
    pending: Vec<(usize, Ack)>,
    /// When the buffer must be flushed; `None` while it is empty.
    deadline: Option<Instant>,
    /// Tables that already hold the rows of agent batches whose flush failed.
    partial: Partial,
}

/// A failed flush: the first error, and the tables whose INSERT succeeded.
struct FlushError {
    table: Table,
    error: clickhouse::error::Error,
    written: u32,
}

fn table_bit(t: Table) -> u32 {
    1 << Table::ALL.iter().position(|x| *x == t).unwrap_or(31)
}

/// Most agent batches remembered as partially stored.
const PARTIAL_MAX: usize = 65_536;

/// Agent batches whose flush failed after some of their tables were
/// written: which tables hold their rows. When the agent sends such a
/// batch again (same agent, session, seq) those tables are left out, so a
/// partial flush never makes rows visible twice. Bounded (oldest forgotten
/// first); lost with the process, so the window left is a collector killed
/// between a partial flush and the retry (README "Delivery").
#[derive(Default)]
struct Partial {
    written: std::collections::HashMap<(String, u64, u64), u32>,
    order: std::collections::VecDeque<(String, u64, u64)>,
}

impl Partial {
    fn keys(set: &RowSet) -> impl Iterator<Item = (String, u64, u64)> + '_ {
        set.batches
            .iter()
            .map(|b| (b.agent_id.clone(), b.agent_session, b.batch_seq))
    }

    fn record(&mut self, set: &RowSet, tables: u32) {
        if tables == 0 {
            return;
        }
        for k in Self::keys(set) {
            let e = self.written.entry(k.clone()).or_insert_with(|| {
                self.order.push_back(k);
                0
            });
            *e |= tables;
        }
        while self.order.len() > PARTIAL_MAX {
            if let Some(old) = self.order.pop_front() {
                self.written.remove(&old);
            }
        }
    }

    fn forget(&mut self, set: &RowSet) {
        if self.written.is_empty() {
            return;
        }
        for k in Self::keys(set) {
            self.written.remove(&k);
        }
    }

    /// Leaves out the rows of tables that already hold this batch.
    fn strip(&self, set: &mut RowSet) {
        if self.written.is_empty() {
            return;
        }
        let mask = Self::keys(set).fold(0, |m, k| m | self.written.get(&k).copied().unwrap_or(0));
        for t in Table::ALL {
            if mask & table_bit(t) != 0 {
                set.clear_table(t);
            }
        }
    }
}

impl Writer {
    async fn run(mut self, shutdown: impl Future<Output = ()>) {
        tokio::pin!(shutdown);
        loop {
            let deadline = self.deadline;
            tokio::select! {
                biased;
                () = &mut shutdown => break,
                request = self.rx.recv() => match request {
                    Some(request) => self.accept(request).await,
                    None => break,
                },
                () = sleep_until(deadline), if deadline.is_some() => self.flush().await,
            }
        }
        // Store everything already accepted into the queue, then stop.
        self.rx.close();
        while let Ok(request) = self.rx.try_recv() {
            self.buffer_request(request);
        }
        self.flush().await;
        tracing::info!("writer stopped");
    }

    async fn accept(&mut self, request: Request) {
        self.buffer_request(request);
        if self.buffered_rows >= self.cfg.batch_max_rows {
            self.flush().await;
        }
    }

    fn buffer_request(&mut self, request: Request) {
        if self.pending.is_empty() {
            self.deadline =
                Some(Instant::now() + Duration::from_millis(self.cfg.flush_interval_ms));
        }
        let rows = request.rows.len();
        let mut request = request;
        self.partial.strip(&mut request.rows);
        self.buffered_rows += request.rows.total_rows();
        self.buffer.push(request.rows);
        self.pending.push((rows, request.ack));
    }

    /// Writes the buffer, table by table, and answers every pending row set.
    async fn flush(&mut self) {
        self.deadline = None;
        if self.pending.is_empty() {
            return;
        }
        let sets = std::mem::take(&mut self.buffer);
        let total_rows = std::mem::take(&mut self.buffered_rows);
        let pending = std::mem::take(&mut self.pending);
        let result = self.write_all(&sets).await;
        match result {
            Ok(()) => {
                for s in &sets {
                    self.partial.forget(s);
                }
                self.metrics.flushes.fetch_add(1, Relaxed);
                tracing::debug!(rows = total_rows, row_sets = pending.len(), "flushed");
                for (rows, ack) in pending {
                    let _ = ack.send(Ok(WriteOutcome { rows }));
                }
            }
            Err(FlushError {
                table,
                error,
                written,
            }) => {
                for s in &sets {
                    self.partial.record(s, written);
                }
                let answer = match classify(&error) {
                    Fault::Transient => {
                        self.metrics
                            .unavailable
                            .fetch_add(pending.len() as u64, Relaxed);
                        tracing::warn!(table = table.name(), row_sets = pending.len(), error = %error, "INSERT failed; row sets not acknowledged");
                        WriteError::Unavailable(format!("INSERT into {}: {error}", table.name()))
                    }
                    Fault::Permanent => {
                        self.metrics
                            .rejected
                            .fetch_add(pending.len() as u64, Relaxed);
                        tracing::warn!(table = table.name(), row_sets = pending.len(), error = %error, "ClickHouse rejected rows");
                        WriteError::Rejected(format!("INSERT into {}: {error}", table.name()))
                    }
                };
                for (_, ack) in pending {
                    let _ = ack.send(Err(answer.clone()));
                }
            }
        }
    }

    /// Event tables concurrently (one INSERT each costs ~15 ms of server latency), then
    /// `ingest_batches` once all of them succeeded.
    ///
    /// Every event-table INSERT runs to its end even when another fails (a
    /// cancelled INSERT may still commit on the server): on failure the
    /// tables that did take their rows are returned with the error, so the
    /// retry of the same agent batches can leave them out (see [`Partial`]).
    async fn write_all(&self, sets: &[RowSet]) -> Result<(), FlushError> {
        // The intent first: a batch with an intent and no `ingest_batches`
        // row was cut short here (migration 0009, `Store::uncommitted`).
        self.write_table(Table::IngestIntents, sets, |r| &r.batches)
            .await
            .map_err(|(table, error)| FlushError {
                table,
                error,
                written: 0,
            })?;
        let results = tokio::join!(
            self.write_table(Table::Steps, sets, |r| &r.steps),
            self.write_table(Table::Spans, sets, |r| &r.spans),
            self.write_table(Table::Collectives, sets, |r| &r.collectives),
            self.write_table(Table::Kernels, sets, |r| &r.kernels),
            self.write_table(Table::KernelLaunches, sets, |r| &r.launches),
            self.write_table(Table::Ranks, sets, |r| &r.ranks),
            self.write_table(Table::StepBreakdown, sets, |r| &r.breakdowns),
            self.write_table(Table::StragglerVerdicts, sets, |r| &r.verdicts),
            self.write_table(Table::HangSuspects, sets, |r| &r.hangs),
            self.write_table(Table::Alerts, sets, |r| &r.alerts),
            self.write_table(Table::TraceRanks, sets, |r| &r.traces),
            self.write_table(Table::TraceOps, sets, |r| &r.trace_ops),
            self.write_table(Table::GpuSamples, sets, |r| &r.telemetry.gpu_samples),
            self.write_table(Table::HostSamples, sets, |r| &r.telemetry.host_samples),
            self.write_table(Table::RankGpuSamples, sets, |r| &r.telemetry.rank_gpu),
            self.write_table(Table::RankProcessSamples, sets, |r| {
                &r.telemetry.rank_process
            }),
            self.write_table(Table::StragglerEvidence, sets, |r| &r.telemetry.evidence),
        );
        let (r0, r1, r2, r3, r4, r5, r6, r7, r8, r9, r10, r11, r12, r13, r14, r15, r16) = results;
        let all = [
            (Table::Steps, r0),
            (Table::Spans, r1),
            (Table::Collectives, r2),
            (Table::Kernels, r3),
            (Table::KernelLaunches, r4),
            (Table::Ranks, r5),
            (Table::StepBreakdown, r6),
            (Table::StragglerVerdicts, r7),
            (Table::HangSuspects, r8),
            (Table::Alerts, r9),
            (Table::TraceRanks, r10),
            (Table::TraceOps, r11),
            (Table::GpuSamples, r12),
            (Table::HostSamples, r13),
            (Table::RankGpuSamples, r14),
            (Table::RankProcessSamples, r15),
            (Table::StragglerEvidence, r16),
        ];
        let mut written = 0u32;
        let mut first_error = None;
        for (table, r) in all {
            match r {
                Ok(()) => written |= table_bit(table),
                Err(e) if first_error.is_none() => first_error = Some(e),
                Err(_) => {}
            }
        }
        if let Some((table, error)) = first_error {
            return Err(FlushError {
                table,
                error,
                written,
            });
        }
        self.write_table(Table::IngestBatches, sets, |r| &r.batches)
            .await
            .map_err(|(table, error)| FlushError {
                table,
                error,
                written,
            })
    }

    /// One INSERT of `table`'s rows (`select`ed from every row set, in order).
    async fn write_table<T: RowOwned + RowWrite>(
        &self,
        table: Table,
        sets: &[RowSet],
        select: impl Fn(&RowSet) -> &Vec<T>,
    ) -> Result<(), (Table, clickhouse::error::Error)> {
        let n: usize = sets.iter().map(|s| select(s).len()).sum();
        if n == 0 {
            return Ok(());
        }
        let counters = self.metrics.table(table);
        let started = std::time::Instant::now();
        let rows = sets.iter().flat_map(|s| select(s).iter());
        match insert(
            &self.store,
            table,
            rows,
            Duration::from_millis(self.cfg.insert_timeout_ms),
        )
        .await
        {
            Ok(()) => {
                self.metrics.insert_latency.observe(started.elapsed());
                let n = n as u64;
                counters.rows.fetch_add(n, Relaxed);
                counters.inserts.fetch_add(1, Relaxed);
                self.metrics.rows_written.fetch_add(n, Relaxed);
                self.metrics.inserts.fetch_add(1, Relaxed);
                Ok(())
            }
            Err(error) => {
                counters.failures.fetch_add(1, Relaxed);
                self.metrics.insert_failures.fetch_add(1, Relaxed);
                Err((table, error))
            }
        }
    }
}

/// One INSERT of `rows` into `table`.
async fn insert<'r, T: RowOwned + RowWrite + 'r>(
    store: &Store,
    table: Table,
    rows: impl Iterator<Item = &'r T>,
    timeout: Duration,
) -> Result<(), clickhouse::error::Error> {
    let mut insert = store
        .client()
        .insert::<T>(table.name())
        .await?
        .with_timeouts(Some(timeout), Some(timeout));
    for row in rows {
        insert.write(row).await?;
    }
    insert.end().await
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}
