//! The writer: the one task that owns buffered rows, batches them per table and
//! acknowledges each [`RowSet`] only after ClickHouse accepted all of its rows.
//!
//! In: [`RowSet`]s through [`WriterHandle::write`] over a bounded queue. Out: one INSERT
//! per table per *window*, then an acknowledgement (`Ok` or a [`WriteError`]) to every
//! row set of that window.
//!
//! Windows: row sets taken from the queue join the open window. It closes
//! `flush_interval_ms` after its first row (`relaxed_flush_interval_ms` while it holds
//! only row sets written with `write_relaxed`), when it holds `batch_max_rows` rows (all
//! tables), or at shutdown (after draining the queue). A closed window commits in its
//! own task while the next one fills: first an `ingest_intents` row per agent batch,
//! then the event tables and `ranks` concurrently, `ingest_batches` only after all of
//! them succeeded, so a stored batch row implies its event rows are stored, and an
//! intent without it marks a batch a killed collector may have stored in part (no event
//! row is sent before the intent is stored). One window commits at a time: a window
//! whose time is up while the previous one commits keeps taking rows, so under load
//! windows grow to the commit time (fewer, larger INSERTs: ClickHouse makes a part per
//! INSERT and merges them later); a full window stops taking rows until it can close.
//! `ranks` rows come with every agent batch; a window keeps one only when it adds
//! something ([`RanksSeen`]: a new or changed identity, or a refresh of `seen_ns` every
//! [`RANKS_REFRESH_NS`]), so `ranks` does not make a part in every window.
//! Memory: at most two windows of rows (`batch_max_rows` each) plus the queue.
//!
//! Backpressure policy: the queue holds `queue_capacity` row sets and `queue_max_rows`
//! rows; when either is full, `write` answers [`WriteError::Overloaded`] at once and
//! never blocks (the agent keeps the batch and retries). The queue is drained while a window commits; it fills when a full
//! window waits for the previous commit, i.e. when ClickHouse stores slower than rows
//! come.
//!
//! Failure: if any INSERT of a window fails, every row set of the window gets the
//! error: [`WriteError::Unavailable`] when retrying may help, [`WriteError::Rejected`]
//! when ClickHouse refused the data as malformed (see `fault`). Every INSERT of a window
//! runs to its end (none is cancelled half-way); the tables that took their rows are
//! remembered per agent batch (`Partial`), and when the agent sends the batch again
//! those tables are left out, so a partial window never leaves a row stored twice. That
//! memory is bounded and dies with the process; after a kill -9 the intents take its
//! place: the ingest service asks ClickHouse which tables hold an uncommitted batch
//! and leaves those out (ClickHouse 18.16 has no insert deduplication for
//! non-replicated tables).

use std::future::Future;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use clickhouse::{Row, RowOwned, RowWrite};
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::fault::{classify, Fault};
use super::grouped::{Fields, Grouped, RowIdent};
use super::rows::{BatchRow, RankRow};
use super::{RowSet, Store, Table};

/// Batching of the writer (`[writer]` in the collector config).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WriterConfig {
    /// Close a window when it holds this many rows (all tables); at most
    /// 1,000,000 (ClickHouse commits a larger INSERT in several parts, and
    /// a failure between them could not be retried without duplicates).
    pub batch_max_rows: usize,
    /// Close a window this long after its first row (later while the
    /// previous window still commits: it keeps taking rows meanwhile).
    /// Default 200 ms: acknowledgements wait about this long plus the
    /// commit; at low load that is ~5 INSERTs per table per second.
    pub flush_interval_ms: u64,
    /// Row sets waiting for the writer; more are refused with `Overloaded`.
    pub queue_capacity: usize,
    /// Rows (all tables) waiting for the writer; a row set that would go
    /// over is refused with `Overloaded` (one larger than this passes alone
    /// into an empty queue). Bounds the queue's memory however large the
    /// row sets, while many small ones (thousands of node agents) fit.
    pub queue_max_rows: usize,
    /// Limit on sending one INSERT and on waiting for ClickHouse's answer.
    pub insert_timeout_ms: u64,
    /// Flush interval of the second writer, which stores live analytics
    /// results (breakdowns, verdicts, hang suspects, alerts): they are few
    /// rows, and a verdict is queryable this long after it was raised
    /// instead of after the ingest writer's next flush. Default 10 ms: a
    /// window that closes while the previous one commits keeps filling, so
    /// under load the results' INSERTs are one commit apart, not 10 ms.
    pub results_flush_interval_ms: u64,
    /// Flush interval of row sets written with [`WriterHandle::write_relaxed`]
    /// (0: `flush_interval_ms`). Not a config key: the results writer
    /// takes the ingest writer's `flush_interval_ms` ([`Self::for_results`]).
    #[serde(skip)]
    pub relaxed_flush_interval_ms: u64,
}

impl Default for WriterConfig {
    fn default() -> Self {
        WriterConfig {
            batch_max_rows: MAX_WINDOW_ROWS,
            flush_interval_ms: 200,
            queue_capacity: 4_096,
            queue_max_rows: 1_000_000,
            insert_timeout_ms: 30_000,
            results_flush_interval_ms: 10,
            relaxed_flush_interval_ms: 0,
        }
    }
}

impl WriterConfig {
    /// The configuration of the results writer: this one with its flush
    /// interval, and the ingest writer's for relaxed row sets.
    pub fn for_results(&self) -> WriterConfig {
        WriterConfig {
            flush_interval_ms: self.results_flush_interval_ms,
            relaxed_flush_interval_ms: self.flush_interval_ms,
            ..self.clone()
        }
    }

    /// How long a window may wait for more rows after taking a row set.
    fn interval(&self, relaxed: bool) -> Duration {
        let ms = if relaxed {
            self.relaxed_flush_interval_ms.max(self.flush_interval_ms)
        } else {
            self.flush_interval_ms
        };
        Duration::from_millis(ms)
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
    /// Windows that stored all their rows.
    pub flushes: AtomicU64,
    /// Row sets refused because the queue was full.
    pub overloaded: AtomicU64,
    /// Row sets answered `Unavailable` after a failed window.
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
    /// May wait the relaxed flush interval.
    relaxed: bool,
    /// The queue's row budget taken by `rows`, given back when the writer
    /// takes them.
    _permit: tokio::sync::OwnedSemaphorePermit,
}

/// Sends row sets to the writer task. Cheap to clone.
#[derive(Debug, Clone)]
pub struct WriterHandle {
    tx: mpsc::Sender<Request>,
    /// Permits: rows the queue may still take (`queue_max_rows`).
    room: Arc<tokio::sync::Semaphore>,
    queue_max_rows: usize,
    metrics: Arc<WriterMetrics>,
}

impl WriterHandle {
    /// Queues `rows` (never waits for queue space) and resolves once they are stored
    /// or failed; see the module docs for the policy.
    pub async fn write(&self, rows: RowSet) -> Result<WriteOutcome, WriteError> {
        self.enqueue(rows)?.stored().await
    }

    /// Like [`Self::write`], for rows nobody waits for: they may wait for the
    /// relaxed flush interval (`WriterConfig::relaxed_flush_interval_ms`)
    /// unless a row set written with [`Self::write`] closes the window first.
    /// Fewer, larger INSERTs (each is a ClickHouse part) for rows that come
    /// continuously, e.g. the breakdowns of a job's steps while more follow.
    pub async fn write_relaxed(&self, rows: RowSet) -> Result<WriteOutcome, WriteError> {
        self.enqueue_relaxed(rows)?.stored().await
    }

    /// [`Self::enqueue`] for [`Self::write_relaxed`].
    pub fn enqueue_relaxed(&self, rows: RowSet) -> Result<Queued, WriteError> {
        self.enqueue_with(rows, true)
    }

    /// Queues `rows` without waiting: `Ok` once the writer holds them (they
    /// will be in its next flush), with the acknowledgement to await.
    pub fn enqueue(&self, rows: RowSet) -> Result<Queued, WriteError> {
        self.enqueue_with(rows, false)
    }

    fn enqueue_with(&self, rows: RowSet, relaxed: bool) -> Result<Queued, WriteError> {
        let want = rows.total_rows().clamp(1, self.queue_max_rows);
        let permit = u32::try_from(want)
            .ok()
            .and_then(|n| Arc::clone(&self.room).try_acquire_many_owned(n).ok());
        let Some(permit) = permit else {
            self.metrics.overloaded.fetch_add(1, Relaxed);
            return Err(WriteError::Overloaded);
        };
        let (ack, done) = oneshot::channel();
        match self.tx.try_send(Request {
            rows,
            ack,
            relaxed,
            _permit: permit,
        }) {
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
    let queue_max_rows = cfg.queue_max_rows.clamp(
        1,
        tokio::sync::Semaphore::MAX_PERMITS.min(u32::MAX as usize),
    );
    let room = Arc::new(tokio::sync::Semaphore::new(queue_max_rows));
    let writer = Writer {
        store,
        cfg,
        metrics: Arc::clone(&metrics),
        rx,
        window: Window::default(),
        partial: Partial::default(),
        ranks_seen: RanksSeen::default(),
    };
    let task = tokio::spawn(writer.run(shutdown));
    (
        WriterHandle {
            tx,
            room,
            queue_max_rows,
            metrics,
        },
        task,
    )
}

/// Most rows one INSERT may carry so that ClickHouse commits it as one part
/// (its `max_insert_block_size` is 1,048,576): the writer's `batch_max_rows`
/// is capped here.
pub const MAX_WINDOW_ROWS: usize = 1_000_000;

struct Writer {
    store: Store,
    cfg: WriterConfig,
    metrics: Arc<WriterMetrics>,
    rx: mpsc::Receiver<Request>,
    /// The window taking rows.
    window: Window,
    /// Tables that already hold the rows of agent batches whose window failed.
    partial: Partial,
    /// Rank identities already stored (or in a window on its way).
    ranks_seen: RanksSeen,
}

/// A failed window: the first error, and the tables whose INSERT succeeded.
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
    fn keys(batches: &[BatchRow]) -> impl Iterator<Item = (String, u64, u64)> + '_ {
        batches
            .iter()
            .map(|b| (b.agent_id.clone(), b.agent_session, b.batch_seq))
    }

    fn record(&mut self, batches: &[BatchRow], tables: u32) {
        if tables == 0 {
            return;
        }
        for k in Self::keys(batches) {
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

    fn forget(&mut self, batches: &[BatchRow]) {
        if self.written.is_empty() {
            return;
        }
        for k in Self::keys(batches) {
            self.written.remove(&k);
        }
    }

    /// Leaves out the rows of tables that already hold this batch.
    fn strip(&self, set: &mut RowSet) {
        if self.written.is_empty() {
            return;
        }
        let mask =
            Self::keys(&set.batches).fold(0, |m, k| m | self.written.get(&k).copied().unwrap_or(0));
        for t in Table::ALL {
            if mask & table_bit(t) != 0 {
                set.clear_table(t);
            }
        }
    }
}

/// How often a rank whose identity did not change gets a new `ranks` row
/// (its `seen_ns`, the job list's "last seen"): every agent batch carries its
/// ranks' identities, and one row per window would add a part to every
/// window of the ingest writer.
pub const RANKS_REFRESH_NS: u64 = 5_000_000_000;

/// Rank identities remembered by [`RanksSeen`]; past it the memory is
/// cleared (the next row of each rank is written again).
const RANKS_SEEN_MAX: usize = 100_000;

/// Which `ranks` rows are worth writing: a rank's first row, a row whose
/// identity (world size, local rank, node, pid, labels) changed, and one
/// per [`RANKS_REFRESH_NS`] of `seen_ns` otherwise. A row counts as written
/// once its window takes it; if that window fails, its ranks are forgotten,
/// so the agent's retry of the batch writes them.
#[derive(Default)]
struct RanksSeen {
    /// (job, run, rank) -> (identity fingerprint, `seen_ns` of the row written).
    written: std::collections::HashMap<(String, String, u32), (u64, u64)>,
}

impl RanksSeen {
    fn key(r: &RankRow) -> (String, String, u32) {
        (r.job_id.clone(), r.run_id.clone(), r.rank)
    }

    fn fingerprint(r: &RankRow) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (r.world_size, r.local_rank, &r.node, r.pid).hash(&mut h);
        (&r.label_keys, &r.label_values).hash(&mut h);
        h.finish()
    }

    /// Drops the rows of `ranks` that add nothing; remembers the others.
    fn filter(&mut self, ranks: &mut Vec<RankRow>) {
        ranks.retain(|r| {
            let print = Self::fingerprint(r);
            let key = Self::key(r);
            match self.written.get(&key) {
                Some(&(p, seen))
                    if p == print && r.seen_ns < seen.saturating_add(RANKS_REFRESH_NS) =>
                {
                    false
                }
                _ => {
                    if self.written.len() >= RANKS_SEEN_MAX && !self.written.contains_key(&key) {
                        self.written.clear();
                    }
                    self.written.insert(key, (print, r.seen_ns));
                    true
                }
            }
        });
    }

    /// A window with these rows failed: their ranks are written again.
    fn forget(&mut self, ranks: &[(String, String, u32)]) {
        for k in ranks {
            self.written.remove(k);
        }
    }
}

/// The row sets of one window, as they came: the commit writes each
/// table's rows from all of them in order (merging them into one vector per
/// table would move every row once more, plus the vectors' growth copies).
#[derive(Default)]
struct Window {
    sets: Vec<RowSet>,
    /// Acks of the row sets with their event row counts.
    pending: Vec<(usize, Ack)>,
    /// Rows (all tables) taken.
    rows: usize,
    /// When the window closes at the latest; `None` while it is empty.
    deadline: Option<Instant>,
}

impl Window {
    fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }
}

/// A committed (or failed) window, back from its commit task.
struct Committed {
    /// The agent batches' own rows (for [`Partial`]).
    batches: Vec<BatchRow>,
    /// The ranks whose rows a failed window held (for [`RanksSeen`]).
    ranks: Vec<(String, String, u32)>,
    pending: Vec<(usize, Ack)>,
    rows: usize,
    result: Result<(), FlushError>,
    /// How long the commit took (debug log).
    took: Duration,
}

impl Writer {
    async fn run(mut self, shutdown: impl Future<Output = ()>) {
        tokio::pin!(shutdown);
        let mut closing: Option<JoinHandle<Committed>> = None;
        loop {
            let full = self.window_full();
            let due = full || self.window.deadline.is_some_and(|d| d <= Instant::now());
            if closing.is_none() && !self.window.is_empty() && due {
                closing = Some(self.close());
                continue;
            }
            let deadline = if closing.is_none() {
                self.window.deadline
            } else {
                None
            };
            tokio::select! {
                biased;
                () = &mut shutdown => break,
                done = async { closing.as_mut().expect("guarded").await }, if closing.is_some() => {
                    closing = None;
                    self.finish(done);
                }
                request = self.rx.recv(), if !full => match request {
                    Some(request) => self.accept(request),
                    None => break,
                },
                () = sleep_until(deadline), if deadline.is_some() => {}
            }
        }
        // Store everything already accepted into the queue, then stop.
        self.rx.close();
        if let Some(h) = closing.take() {
            self.finish(h.await);
        }
        while let Ok(request) = self.rx.try_recv() {
            self.accept(request);
            if self.window_full() {
                let h = self.close();
                self.finish(h.await);
            }
        }
        if !self.window.is_empty() {
            let h = self.close();
            self.finish(h.await);
        }
        tracing::info!("writer stopped");
    }

    /// The window holds `batch_max_rows` (at most [`MAX_WINDOW_ROWS`]).
    fn window_full(&self) -> bool {
        self.window.rows >= self.cfg.batch_max_rows.clamp(1, MAX_WINDOW_ROWS)
    }

    /// Adds a row set to the window.
    fn accept(&mut self, request: Request) {
        let Request {
            rows: mut set,
            ack,
            relaxed,
            ..
        } = request;
        let events = set.len();
        self.partial.strip(&mut set);
        self.ranks_seen.filter(&mut set.ranks);
        // The earliest deadline of the sets taken: a set that may not wait
        // pulls in a relaxed window's; none pushes a deadline out.
        let deadline = Instant::now() + self.cfg.interval(relaxed);
        self.window.deadline = Some(self.window.deadline.map_or(deadline, |d| d.min(deadline)));
        self.window.rows += set.total_rows();
        self.window.sets.push(set);
        self.window.pending.push((events, ack));
    }

    /// Starts committing the window; the next one starts empty.
    fn close(&mut self) -> JoinHandle<Committed> {
        let window = std::mem::take(&mut self.window);
        let store = self.store.clone();
        let metrics = Arc::clone(&self.metrics);
        let timeout = Duration::from_millis(self.cfg.insert_timeout_ms);
        tokio::spawn(commit(store, metrics, timeout, window))
    }

    /// Records a closed window's outcome and answers its row sets.
    fn finish(&mut self, done: Result<Committed, tokio::task::JoinError>) {
        // A panicked commit task dropped the acks: its row sets get
        // "shutting down" (Unavailable) and are retried.
        let Ok(done) = done else {
            tracing::error!("a window's commit task failed");
            return;
        };
        let Committed {
            batches,
            ranks,
            pending,
            rows,
            result,
            took,
        } = done;
        match result {
            Ok(()) => {
                self.partial.forget(&batches);
                self.metrics.flushes.fetch_add(1, Relaxed);
                tracing::debug!(
                    rows,
                    row_sets = pending.len(),
                    commit_ms = took.as_millis() as u64,
                    "window committed"
                );
                for (rows, ack) in pending {
                    let _ = ack.send(Ok(WriteOutcome { rows }));
                }
            }
            Err(FlushError {
                table,
                error,
                written,
            }) => {
                self.partial.record(&batches, written);
                self.ranks_seen.forget(&ranks);
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
}

/// Commits a window: the intents, then every table's INSERT ended
/// concurrently (each runs to its end even when another fails: a cancelled
/// INSERT may still commit on the server), then `ingest_batches` once all
/// of them succeeded. On failure the tables that did take their rows are
/// returned with the error, so the retry of the same agent batches can leave
/// them out (see [`Partial`]).
async fn commit(
    store: Store,
    metrics: Arc<WriterMetrics>,
    timeout: Duration,
    window: Window,
) -> Committed {
    let Window {
        sets,
        pending,
        rows,
        ..
    } = window;
    let started = Instant::now();
    let result = commit_tables(&store, &metrics, timeout, &sets).await;
    // Only a failed window's ranks are needed (to be forgotten).
    let ranks = if result.is_ok() {
        Vec::new()
    } else {
        sets.iter()
            .flat_map(|s| s.ranks.iter().map(RanksSeen::key))
            .collect()
    };
    let batches = sets.into_iter().flat_map(|s| s.batches).collect();
    Committed {
        batches,
        ranks,
        pending,
        rows,
        result,
        took: started.elapsed(),
    }
}

async fn commit_tables(
    store: &Store,
    metrics: &WriterMetrics,
    timeout: Duration,
    sets: &[RowSet],
) -> Result<(), FlushError> {
    fn batches(r: &RowSet) -> &Vec<BatchRow> {
        &r.batches
    }
    let w = |table| write_table(store, metrics, timeout, table, sets, batches);
    // The intent first: a batch with an intent and no `ingest_batches` row
    // was cut short here (migration 0009, `Store::uncommitted`). No event
    // row is sent before it is stored.
    w(Table::IngestIntents)
        .await
        .map_err(|(table, error)| FlushError {
            table,
            error,
            written: 0,
        })?;
    let results = tokio::join!(
        write_table(store, metrics, timeout, Table::Steps, sets, |r| &r.steps),
        write_grouped(store, metrics, timeout, Table::Spans, sets, |r| &r.spans),
        write_table(store, metrics, timeout, Table::Collectives, sets, |r| &r
            .collectives),
        write_grouped(store, metrics, timeout, Table::Kernels, sets, |r| &r
            .kernels),
        write_grouped(store, metrics, timeout, Table::KernelLaunches, sets, |r| &r
            .launches),
        write_table(store, metrics, timeout, Table::KernelConfigs, sets, |r| &r
            .kernel_configs),
        write_table(store, metrics, timeout, Table::Ranks, sets, |r| &r.ranks),
        write_table(store, metrics, timeout, Table::StepBreakdown, sets, |r| &r
            .breakdowns),
        write_table(
            store,
            metrics,
            timeout,
            Table::StragglerVerdicts,
            sets,
            |r| &r.verdicts
        ),
        write_table(store, metrics, timeout, Table::StragglerGains, sets, |r| &r
            .gains),
        write_table(store, metrics, timeout, Table::HangSuspects, sets, |r| &r
            .hangs),
        write_table(store, metrics, timeout, Table::Alerts, sets, |r| &r.alerts),
        write_table(store, metrics, timeout, Table::TraceRanks, sets, |r| &r
            .traces),
        write_table(store, metrics, timeout, Table::TraceOps, sets, |r| &r
            .trace_ops),
        write_table(store, metrics, timeout, Table::OperatorStats, sets, |r| &r
            .operator_stats),
        write_table(store, metrics, timeout, Table::MemoryStats, sets, |r| &r
            .memory_stats),
        write_table(store, metrics, timeout, Table::OperatorShapes, sets, |r| &r
            .operator_shapes),
        write_table(store, metrics, timeout, Table::GpuSamples, sets, |r| {
            &r.telemetry.gpu_samples
        }),
        write_table(store, metrics, timeout, Table::HostSamples, sets, |r| {
            &r.telemetry.host_samples
        }),
        write_table(store, metrics, timeout, Table::RankGpuSamples, sets, |r| {
            &r.telemetry.rank_gpu
        }),
        write_table(
            store,
            metrics,
            timeout,
            Table::RankProcessSamples,
            sets,
            |r| { &r.telemetry.rank_process }
        ),
        write_table(
            store,
            metrics,
            timeout,
            Table::StragglerEvidence,
            sets,
            |r| { &r.telemetry.evidence }
        ),
        write_table(store, metrics, timeout, Table::GpuErrorSamples, sets, |r| {
            &r.telemetry.gpu_errors
        }),
    );
    let (
        r0,
        r1,
        r2,
        r3,
        r4,
        r5,
        r6,
        r7,
        r8,
        r9,
        r10,
        r11,
        r12,
        r13,
        r14,
        r15,
        r16,
        r17,
        r18,
        r19,
        r20,
        r21,
        r22,
    ) = results;
    let mut written = 0u32;
    let mut first_error = None;
    for r in [
        r0, r1, r2, r3, r4, r5, r6, r7, r8, r9, r10, r11, r12, r13, r14, r15, r16, r17, r18, r19,
        r20, r21, r22,
    ] {
        match r {
            Ok(table) => written |= table_bit(table),
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
    w(Table::IngestBatches)
        .await
        .map_err(|(table, error)| FlushError {
            table,
            error,
            written,
        })
        .map(drop)
}

/// One INSERT of `table`'s rows (`select`ed from every row set, in order),
/// none when there are no rows; counted. `Ok` names the table.
async fn write_table<
    T: RowOwned + RowWrite + for<'r> RowWrite<Value<'r> = T> + serde::Serialize,
>(
    store: &Store,
    metrics: &WriterMetrics,
    timeout: Duration,
    table: Table,
    sets: &[RowSet],
    select: impl Fn(&RowSet) -> &Vec<T>,
) -> Result<Table, (Table, clickhouse::error::Error)> {
    let n: usize = sets.iter().map(|s| select(s).len()).sum();
    if n == 0 {
        return Ok(table);
    }
    let rows: Vec<&T> = sets.iter().flat_map(|s| select(s).iter()).collect();
    counted(metrics, table, n, insert(store, table, &rows, timeout)).await
}

/// [`write_table`] of rows held in column form ([`Grouped`]).
async fn write_grouped<F>(
    store: &Store,
    metrics: &WriterMetrics,
    timeout: Duration,
    table: Table,
    sets: &[RowSet],
    select: impl Fn(&RowSet) -> &Grouped<F>,
) -> Result<Table, (Table, clickhouse::error::Error)>
where
    F: Fields + Sync,
    F::Row: RowOwned + RowWrite + for<'r> RowWrite<Value<'r> = F::Row> + Serialize,
{
    let n: usize = sets.iter().map(|s| select(s).len()).sum();
    if n == 0 {
        return Ok(table);
    }
    let parts: Vec<&Grouped<F>> = sets.iter().map(select).collect();
    let insert = insert_grouped(store, table, &parts, timeout);
    counted(metrics, table, n, insert).await
}

/// Runs `insert` of `n` rows into `table`, counted. `Ok` names the table.
async fn counted(
    metrics: &WriterMetrics,
    table: Table,
    n: usize,
    insert: impl Future<Output = Result<(), clickhouse::error::Error>>,
) -> Result<Table, (Table, clickhouse::error::Error)> {
    let counters = metrics.table(table);
    let started = std::time::Instant::now();
    match insert.await {
        Ok(()) => {
            metrics.insert_latency.observe(started.elapsed());
            let n = n as u64;
            counters.rows.fetch_add(n, Relaxed);
            counters.inserts.fetch_add(1, Relaxed);
            metrics.rows_written.fetch_add(n, Relaxed);
            metrics.inserts.fetch_add(1, Relaxed);
            Ok(table)
        }
        Err(error) => {
            counters.failures.fetch_add(1, Relaxed);
            metrics.insert_failures.fetch_add(1, Relaxed);
            Err((table, error))
        }
    }
}

/// Rows per Native block of an INSERT (the server squashes blocks into
/// parts of up to `min_insert_block_size_rows`, 1,048,576 by default).
const NATIVE_BLOCK_ROWS: usize = 65_536;

/// One INSERT of `rows` into `table`: Native blocks when the table has a
/// [`native::Layout`](super::native::Layout), else RowBinary.
async fn insert<T>(
    store: &Store,
    table: Table,
    rows: &[&T],
    timeout: Duration,
) -> Result<(), clickhouse::error::Error>
where
    T: RowOwned + RowWrite + for<'x> RowWrite<Value<'x> = T> + serde::Serialize,
{
    let layout = store
        .native_layout(table.name(), T::COLUMN_NAMES, timeout)
        .await?;
    if let Some(layout) = layout {
        let mut insert = store.native_insert(table.name(), timeout);
        for part in rows.chunks(NATIVE_BLOCK_ROWS) {
            let mut block = Vec::new();
            layout.encode(part.iter().copied(), &mut block)?;
            insert.send(block).await?;
        }
        return insert.end().await;
    }
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

/// One INSERT of the rows of `parts` into `table`: Native blocks written
/// from the columns ([`native::Layout::encode_columns`]), or RowBinary of
/// the rows built again when the table has no Native layout.
async fn insert_grouped<F>(
    store: &Store,
    table: Table,
    parts: &[&Grouped<F>],
    timeout: Duration,
) -> Result<(), clickhouse::error::Error>
where
    F: Fields,
    F::Row: RowOwned + RowWrite + for<'r> RowWrite<Value<'r> = F::Row> + Serialize,
{
    let Some(layout) = store
        .native_layout(table.name(), F::Row::COLUMN_NAMES, timeout)
        .await?
    else {
        let rows: Vec<F::Row> = parts.iter().flat_map(|k| k.rows()).collect();
        let rows: Vec<&F::Row> = rows.iter().collect();
        return insert(store, table, &rows, timeout).await;
    };
    let mut insert = store.native_insert(table.name(), timeout);
    for pieces in blocks(parts, NATIVE_BLOCK_ROWS) {
        let mut block = Vec::new();
        layout.encode_columns(&pieces, &mut block)?;
        insert.send(block).await?;
    }
    insert.end().await
}

/// `parts`' rows cut into blocks of at most `max` rows, each block the row
/// ranges of the parts it takes; the parts' rank groups ordered by job, rank
/// and first time (a window's batches come in the order they were
/// converted, not sent), as the tables' `ORDER BY (job_id, rank, <time>)`.
/// Each group's rows are in time order ([`Grouped::sort_group`]) and a
/// rank's batches do not overlap in time,
/// so the INSERT is then usually sorted already and ClickHouse skips
/// sorting and permuting it (`MergeTreeDataWriterBlocksAlreadySorted`):
/// 281,600 kernels rows cost the server 100-110 ms of CPU instead of 140-190
/// ms on 18.16 (measured side by side, HTTP, Native).
fn blocks<'a, F: Fields>(
    parts: &[&'a Grouped<F>],
    max: usize,
) -> Vec<Vec<(&'a Grouped<F>, Range<usize>)>> {
    let mut runs: Vec<(&RowIdent, u64, &Grouped<F>, Range<usize>)> = parts
        .iter()
        .flat_map(|&k| {
            k.groups()
                .map(move |(id, rows, first)| (id, first, k, rows))
        })
        .collect();
    runs.sort_by_key(|(id, first, _, _)| (&*id.job_id, id.rank, *first));
    let mut out = vec![Vec::new()];
    let mut room = max.max(1);
    for (_, _, part, rows) in runs {
        let mut at = rows.start;
        while at < rows.end {
            if room == 0 {
                out.push(Vec::new());
                room = max.max(1);
            }
            let take = room.min(rows.end - at);
            out.last_mut().expect("a block").push((part, at..at + take));
            at += take;
            room -= take;
        }
    }
    out.retain(|b| !b.is_empty());
    out
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rank(rank: u32, pid: u32, seen_ns: u64) -> RankRow {
        RankRow {
            job_id: "j".into(),
            run_id: "r".into(),
            rank,
            world_size: 2,
            local_rank: rank,
            node: "n".into(),
            pid,
            label_keys: vec!["k".into()],
            label_values: vec!["v".into()],
            seen_ns,
        }
    }

    fn kept(seen: &mut RanksSeen, rows: Vec<RankRow>) -> Vec<(u32, u64)> {
        let mut rows = rows;
        seen.filter(&mut rows);
        rows.iter().map(|r| (r.rank, r.seen_ns)).collect()
    }

    #[test]
    fn ranks_rows_are_kept_when_new_changed_stale_or_forgotten() {
        let mut seen = RanksSeen::default();
        let t = 1_000;
        // Both ranks are new; the repeat of rank 0 in the same set is not.
        assert_eq!(
            kept(
                &mut seen,
                vec![rank(0, 5, t), rank(1, 6, t), rank(0, 5, t + 1)]
            ),
            vec![(0, t), (1, t)]
        );
        // Unchanged and fresh: left out; a changed label: kept.
        let mut relabelled = rank(1, 6, t + 2);
        relabelled.label_values = vec!["w".into()];
        assert_eq!(
            kept(&mut seen, vec![rank(0, 5, t + 2), relabelled]),
            vec![(1, t + 2)]
        );
        // Stale: kept once, measured from the last row written.
        let stale = t + RANKS_REFRESH_NS;
        assert_eq!(
            kept(&mut seen, vec![rank(0, 5, stale), rank(0, 5, stale + 1)]),
            vec![(0, stale)]
        );
        // The window holding rank 0's row failed: its retry is written.
        seen.forget(&[("j".into(), "r".into(), 0)]);
        assert_eq!(
            kept(&mut seen, vec![rank(0, 5, stale + 2)]),
            vec![(0, stale + 2)]
        );
    }
}

#[cfg(test)]
mod block_tests {
    use super::*;
    use crate::store::{KernelFields, KernelRow, KernelRows};

    /// A batch's kernels: rank groups of two jobs, in an order other than
    /// the table's, each rank's rows in time order (batch `seq` later).
    fn batch(seq: u64, n: u64) -> KernelRows {
        let mut rows = Vec::new();
        for (job, rank) in [("b", 2), ("a", 1), ("b", 0), ("a", 0)] {
            for i in 0..n {
                rows.push(KernelRow {
                    job_id: job.into(),
                    run_id: "r".into(),
                    rank,
                    node: "n".into(),
                    kind: 1,
                    name: "k".into(),
                    stream: 0,
                    device: 0,
                    start_ns: seq * 1_000 + i,
                    end_ns: seq * 1_000 + i + 1,
                    correlation: i,
                    bytes: 0,
                    agent_id: "a".into(),
                    agent_session: 1,
                    batch_seq: seq,
                });
            }
        }
        rows.into()
    }

    #[test]
    fn blocks_take_every_row_once_in_table_order_and_none_is_over_the_limit() {
        // Converted out of order: a window holds batches as converted.
        let parts = [batch(3, 7), batch(1, 5), batch(2, 0), batch(4, 1)];
        let refs: Vec<&KernelRows> = parts.iter().collect();
        let total: usize = parts.iter().map(KernelRows::len).sum();
        let key = |r: &KernelRow| (r.job_id.to_string(), r.rank, r.start_ns);
        let mut want: Vec<_> = parts
            .iter()
            .flat_map(|k| k.rows())
            .map(|r| key(&r))
            .collect();
        want.sort();
        for max in [1, 3, 4, 16, 1_000] {
            let blocks = blocks(&refs, max);
            let mut seen = Vec::new();
            for b in &blocks {
                let n: usize = b.iter().map(|(_, r)| r.len()).sum();
                assert!(n > 0 && n <= max, "a block of {n} rows, limit {max}");
                for (k, r) in b {
                    assert!(!r.is_empty());
                    seen.extend(r.clone().map(|i| key(&k.row(i))));
                }
            }
            assert_eq!(seen, want, "limit {max}: every row once, in table order");
            assert_eq!(
                blocks.len(),
                total.div_ceil(max),
                "limit {max}: blocks are filled"
            );
        }
        assert!(blocks::<KernelFields>(&[], 10).is_empty());
    }
}
