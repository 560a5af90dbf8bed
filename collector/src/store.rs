//! The ClickHouse store: connection, schema migrations, the batching writer and the
//! read queries of the collector.
//!
//! In: [`StoreConfig`] (URL, database, credentials, compression); [`RowSet`]s from
//! `convert` through the [`WriterHandle`]. Out: rows in ClickHouse tables
//! (`collector/schema/*.sql`), acknowledgements once ClickHouse accepted them, and typed
//! query results (`collector/queries/*.sql`).
//!
//! Invariants:
//! - SQL lives in files: DDL in numbered append-only migrations, reads in `queries/`.
//!   Values reach SQL only through client-side `?` binding; identifiers (database, table
//!   names) come from validated config or from [`Table`], never from requests.
//! - INSERTs are Native blocks ([`native`]: columns named and typed as `system.columns`
//!   describes them) where every column type has a Native encoding, else RowBinary; reads
//!   go through [`Store::read`] ([`sql`]): plain RowBinary on ClickHouse 18.16, which
//!   cannot report result types, `RowBinaryWithNamesAndTypes` checked against the Rust
//!   row on 22.x and later (a type difference is an error naming the query file). The
//!   row structs in [`rows`] must match the columns exactly; tests round-trip every table.
//! - All tables are partitioned by the UTC day of their event time; retention drops
//!   whole partitions.
//! - With a cluster ([`Store::with_cluster`]) the same table names are `Distributed`
//!   tables over sharded `*_local` replicated tables ([`cluster`]); reads and INSERTs do
//!   not change, DDL and retention do.

pub mod analytics;
pub mod by_kernel;
pub mod clocks;
pub mod cluster;
pub mod diff;
mod fault;
pub mod fleet;
pub mod fleet_counters;
mod frame;
pub mod gains;
pub mod goodput;
pub mod gpu_ops;
pub mod grouped;
mod migrate;
pub mod native;
pub mod overview_kept;
pub mod owners;
pub mod per_step;
pub mod plugin;
mod read;
mod recover;
mod retention;
pub mod rows;
pub mod sql;
pub mod telemetry;
pub mod timeline;
pub mod traces;
pub mod views;
mod writer;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use serde::{Deserialize, Serialize};

pub use grouped::{
    Fields, Grouped, KernelFields, KernelRows, LaunchFields, LaunchRows, RowIdent, SpanFields,
    SpanRows,
};
pub use migrate::{split_statements, Migration, MIGRATIONS};
pub use read::{JobRow, StepTimeRow};
pub use recover::{
    BatchKey, RecoverBreakdown, RecoverCollective, RecoverJob, RecoverKernel, RecoverMarker,
    RecoverRank, RecoverSpan, RecoverVerdict,
};
pub use rows::{
    AlertRow, BatchRow, BreakdownRow, CollectiveRow, GainRow, HangRow, KernelConfigRow, KernelRow,
    LaunchRow, MemoryStatRow, OperatorShapeRow, OperatorStatRow, RankRow, RowSet, SpanRow, StepRow,
    Text, TraceOpRow, TraceRankRow, VerdictRow,
};
pub use writer::{
    spawn_writer, spawn_writer_counting, Queued, TableCounters, WriteError, WriteOutcome,
    WriterConfig, WriterHandle, WriterMetrics, MAX_WINDOW_ROWS, RANKS_REFRESH_NS,
};

/// How INSERT bodies are compressed on the wire.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    /// Plain RowBinary.
    None,
    /// ClickHouse's LZ4 block compression (the default; ~3x less traffic for our rows).
    #[default]
    Lz4,
}

/// Connection settings of the ClickHouse store (`[clickhouse]` in the collector config).
/// `Debug` redacts the password.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StoreConfig {
    /// HTTP interface of ClickHouse, e.g. `http://127.0.0.1:8123`.
    pub url: String,
    /// Database of the rankscope tables; created at start-up if missing.
    /// Letters, digits and `_` only.
    pub database: String,
    /// ClickHouse user.
    pub user: String,
    /// Password of `user`; empty for none.
    pub password: String,
    /// Compression of INSERT bodies: `lz4` or `none`.
    pub compression: Compression,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            url: "http://127.0.0.1:8123".into(),
            database: "rankscope".into(),
            user: "default".into(),
            password: String::new(),
            compression: Compression::Lz4,
        }
    }
}

impl std::fmt::Debug for StoreConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let password = if self.password.is_empty() {
            ""
        } else {
            "<redacted>"
        };
        f.debug_struct("StoreConfig")
            .field("url", &self.url)
            .field("database", &self.database)
            .field("user", &self.user)
            .field("password", &password)
            .field("compression", &self.compression)
            .finish()
    }
}

/// Errors of the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("invalid ClickHouse config: {0}")]
    Config(String),
    #[error("ClickHouse {what} failed: {source}")]
    Query {
        what: &'static str,
        #[source]
        source: clickhouse::error::Error,
    },
    #[error("schema migration {version} ({name}) statement {index} failed: {source}")]
    Migration {
        version: u32,
        name: String,
        index: usize,
        #[source]
        source: clickhouse::error::Error,
    },
    #[error(
        "schema migration {version} ({name}) changed after it was applied: schema_migrations \
         records checksum {recorded}, this collector has {current}; migrations are append-only"
    )]
    ChecksumMismatch {
        version: u32,
        name: String,
        recorded: String,
        current: String,
    },
    #[error(
        "schema migration {version} ({name}) statement {index} cannot run on ClickHouse \
         cluster {cluster}: {reason}"
    )]
    ClusterRewrite {
        version: u32,
        name: String,
        index: usize,
        cluster: String,
        reason: String,
    },
    /// Rows a read depends on changed between its queries (asking again
    /// succeeds).
    #[error("{0}")]
    ChangedWhileRead(String),
}

impl StoreError {
    /// `map_err` helper: wraps a client error with what was being done.
    pub(crate) fn query(what: &'static str) -> impl FnOnce(clickhouse::error::Error) -> StoreError {
        move |source| StoreError::Query { what, source }
    }

    /// Whether a read's result types differ from what its Rust row expects (the text
    /// names the query file, the column and both types): a bug, not an outage.
    pub fn is_type_mismatch(&self) -> bool {
        matches!(
            self,
            StoreError::Query {
                source: clickhouse::error::Error::SchemaMismatch(_),
                ..
            }
        )
    }

    /// Whether retrying later may succeed (ClickHouse down, overloaded, timing out).
    pub fn is_transient(&self) -> bool {
        match self {
            StoreError::Query { source, .. } | StoreError::Migration { source, .. } => {
                fault::classify(source) == fault::Fault::Transient
            }
            StoreError::ChangedWhileRead(_) => true,
            _ => false,
        }
    }
}

/// A table written by the collector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Table {
    Steps,
    Spans,
    Collectives,
    Kernels,
    Ranks,
    IngestBatches,
    GpuSamples,
    HostSamples,
    StepBreakdown,
    StragglerVerdicts,
    HangSuspects,
    Alerts,
    RankGpuSamples,
    RankProcessSamples,
    StragglerEvidence,
    KernelLaunches,
    TraceRanks,
    TraceOps,
    IngestIntents,
    KernelConfigs,
    OperatorStats,
    MemoryStats,
    OperatorShapes,
    GpuErrorSamples,
    StragglerGains,
}

impl Table {
    /// Every table (the writer stores `ingest_batches` after the event tables).
    pub const ALL: [Table; 25] = [
        Table::Steps,
        Table::Spans,
        Table::Collectives,
        Table::Kernels,
        Table::Ranks,
        Table::IngestBatches,
        Table::GpuSamples,
        Table::HostSamples,
        Table::StepBreakdown,
        Table::StragglerVerdicts,
        Table::HangSuspects,
        Table::Alerts,
        Table::RankGpuSamples,
        Table::RankProcessSamples,
        Table::StragglerEvidence,
        Table::KernelLaunches,
        Table::TraceRanks,
        Table::TraceOps,
        Table::IngestIntents,
        Table::KernelConfigs,
        Table::OperatorStats,
        Table::MemoryStats,
        Table::OperatorShapes,
        Table::GpuErrorSamples,
        Table::StragglerGains,
    ];

    /// The table's name in ClickHouse.
    pub fn name(self) -> &'static str {
        match self {
            Table::Steps => "steps",
            Table::Spans => "spans",
            Table::Collectives => "collectives",
            Table::Kernels => "kernels",
            Table::Ranks => "ranks",
            Table::IngestBatches => "ingest_batches",
            Table::GpuSamples => "gpu_samples",
            Table::HostSamples => "host_samples",
            Table::StepBreakdown => "step_breakdown",
            Table::StragglerVerdicts => "straggler_verdicts",
            Table::HangSuspects => "hang_suspects",
            Table::Alerts => "alerts",
            Table::RankGpuSamples => "rank_gpu_samples",
            Table::RankProcessSamples => "rank_process_samples",
            Table::StragglerEvidence => "straggler_evidence",
            Table::KernelLaunches => "kernel_launches",
            Table::TraceRanks => "trace_ranks",
            Table::TraceOps => "trace_ops",
            Table::IngestIntents => "ingest_intents",
            Table::KernelConfigs => "kernel_configs",
            Table::OperatorStats => "operator_stats",
            Table::MemoryStats => "memory_stats",
            Table::OperatorShapes => "operator_shapes",
            Table::GpuErrorSamples => "gpu_error_samples",
            Table::StragglerGains => "straggler_gains",
        }
    }

    /// Whether rows of the table belong to a job (have a `job_id` column).
    pub fn has_job_id(self) -> bool {
        matches!(
            self,
            Table::Steps
                | Table::Spans
                | Table::Collectives
                | Table::Kernels
                | Table::Ranks
                | Table::StepBreakdown
                | Table::StragglerVerdicts
                | Table::HangSuspects
                | Table::Alerts
                | Table::RankGpuSamples
                | Table::RankProcessSamples
                | Table::StragglerEvidence
                | Table::StragglerGains
                | Table::KernelLaunches
                | Table::TraceRanks
                | Table::TraceOps
                | Table::KernelConfigs
                | Table::OperatorStats
                | Table::OperatorShapes
                | Table::MemoryStats
        )
    }
}

/// A handle on the ClickHouse database of rankscope. Cheap to clone.
#[derive(Clone)]
pub struct Store {
    /// Client whose current database is `database`.
    client: clickhouse::Client,
    /// `client` with the crate's type validation on, for reads on servers that
    /// report result types ([`sql`]).
    checked: clickhouse::Client,
    /// Whether reads use `checked`: set once by [`Store::detect_server`].
    typed: Arc<OnceLock<bool>>,
    /// Client without a database, for `CREATE DATABASE`.
    server: clickhouse::Client,
    database: String,
    /// `clickhouse_cluster`: DDL runs `ON CLUSTER` on sharded tables (see [`cluster`]).
    cluster: Option<String>,
    /// Native-format layouts of the tables written so far (`None`: the
    /// table stays on RowBinary), read from `system.columns` once.
    layouts: Arc<Mutex<Layouts>>,
    /// With `compression = "lz4"`: `client` without the crate's
    /// compression, sending `decompress=1`, for the Native INSERTs whose
    /// bodies the writer frames itself ([`frame`]).
    framed: Option<clickhouse::Client>,
}

/// An INSERT in the Native format ([`Store::native_insert`]).
pub(crate) struct NativeInsert {
    insert: clickhouse::insert_formatted::InsertFormatted,
    framer: Option<frame::Framer>,
}

impl NativeInsert {
    /// Sends one Native block.
    pub(crate) async fn send(&mut self, block: Vec<u8>) -> Result<(), clickhouse::error::Error> {
        let body = match &mut self.framer {
            Some(f) => f.frame(&block)?,
            None => block,
        };
        self.insert.send(body.into()).await
    }

    /// Ends the INSERT: `Ok` once ClickHouse stored every block.
    pub(crate) async fn end(self) -> Result<(), clickhouse::error::Error> {
        self.insert.end().await
    }
}

/// Per table name: its Native layout, or `None` (RowBinary).
type Layouts = HashMap<&'static str, Option<Arc<native::Layout>>>;

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("database", &self.database)
            .field("cluster", &self.cluster)
            .finish_non_exhaustive()
    }
}

impl Store {
    /// Builds the client; does not touch the network (see [`Store::ping`]).
    pub fn connect(cfg: &StoreConfig) -> Result<Store, StoreError> {
        if !cfg.url.starts_with("http://") {
            return Err(StoreError::Config(format!(
                "url {:?} must start with http:// (TLS is not built in)",
                cfg.url
            )));
        }
        validate_identifier("database", &cfg.database)?;
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_keepalive(Some(Duration::from_secs(60)));
        connector.set_connect_timeout(Some(Duration::from_secs(5)));
        let http = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
            // Below ClickHouse's keep_alive_timeout (3 s) so we never reuse a closed socket.
            .pool_idle_timeout(Duration::from_secs(2))
            .pool_timer(TokioTimer::new())
            .build(connector);
        let mut server = clickhouse::Client::with_http_client(http)
            .with_url(cfg.url.trim_end_matches('/'))
            .with_user(cfg.user.as_str())
            .with_compression(match cfg.compression {
                Compression::None => clickhouse::Compression::None,
                Compression::Lz4 => clickhouse::Compression::Lz4,
            })
            .with_validation(false);
        if !cfg.password.is_empty() {
            server = server.with_password(cfg.password.as_str());
        }
        let client = server.clone().with_database(cfg.database.as_str());
        let framed = (cfg.compression == Compression::Lz4).then(|| {
            client
                .clone()
                .with_compression(clickhouse::Compression::None)
                .with_setting("decompress", "1")
        });
        Ok(Store {
            framed,
            checked: client.clone().with_validation(true),
            typed: Arc::default(),
            client,
            server,
            database: cfg.database.clone(),
            cluster: None,
            layouts: Arc::default(),
        })
    }

    /// Cluster mode (`clickhouse_cluster`; empty: a single server). Migrations create
    /// the schema `ON CLUSTER` as sharded replicated tables under `Distributed` ones,
    /// retention drops partitions on every shard, and every query runs with
    /// `distributed_product_mode = 'global'` (an IN over two Distributed tables is refused
    /// with the default 'deny') and `insert_distributed_sync = 1` (an INSERT returns once
    /// its rows are on their shards: the collector acknowledges only stored batches).
    pub fn with_cluster(mut self, cluster: &str) -> Result<Store, StoreError> {
        if cluster.is_empty() {
            self.cluster = None;
            return Ok(self);
        }
        validate_identifier("clickhouse_cluster", cluster)?;
        let settings = |c: clickhouse::Client| {
            c.with_setting("distributed_product_mode", "global")
                .with_setting("insert_distributed_sync", "1")
        };
        self.client = settings(self.client);
        self.framed = self.framed.map(settings);
        self.checked = settings(self.checked);
        self.server = settings(self.server);
        self.cluster = Some(cluster.to_string());
        Ok(self)
    }

    /// The cluster of cluster mode, `None` for a single server.
    pub fn cluster(&self) -> Option<&str> {
        self.cluster.as_deref()
    }

    /// The client, with the rankscope database as its current database.
    pub fn client(&self) -> &clickhouse::Client {
        &self.client
    }

    /// An INSERT of Native blocks into `table` (`INSERT INTO table FORMAT
    /// Native`), each block sent with [`NativeInsert::send`]: framed and
    /// compressed by the collector with `compression = "lz4"`, as is otherwise.
    pub(crate) fn native_insert(&self, table: &str, timeout: Duration) -> NativeInsert {
        let sql = format!("INSERT INTO {table} FORMAT Native");
        let (client, framer) = match &self.framed {
            Some(c) => (c, Some(frame::Framer::default())),
            None => (&self.client, None),
        };
        NativeInsert {
            insert: client
                .insert_formatted_with(sql)
                .with_timeouts(Some(timeout), Some(timeout)),
            framer,
        }
    }

    /// How rows with fields `names` are written to `table` in the Native
    /// format, from `system.columns` (asked once per table, then cached);
    /// `None`: a column type [`native`] does not encode, or the table is
    /// missing (asked again next time): RowBinary.
    /// `timeout` bounds the lookup (a server that never answers).
    pub(crate) async fn native_layout(
        &self,
        table: &'static str,
        names: &[&str],
        timeout: Duration,
    ) -> Result<Option<Arc<native::Layout>>, clickhouse::error::Error> {
        let cached = |s: &Self| {
            s.layouts
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(table)
                .cloned()
        };
        if let Some(layout) = cached(self) {
            return Ok(layout);
        }
        #[derive(clickhouse::Row, Deserialize)]
        struct ColumnRow {
            name: String,
            ty: String,
        }
        let query = self
            .client
            .query("SELECT name, type AS ty FROM system.columns WHERE database = ? AND table = ?")
            .bind(self.database.as_str())
            .bind(table);
        let columns: Vec<ColumnRow> = tokio::time::timeout(timeout, query.fetch_all())
            .await
            .map_err(|_| clickhouse::error::Error::TimedOut)??;
        if columns.is_empty() {
            return Ok(None);
        }
        let types: HashMap<String, String> = columns.into_iter().map(|c| (c.name, c.ty)).collect();
        let layout = native::Layout::new(names, &types).map(Arc::new);
        if layout.is_none() {
            tracing::info!(
                table,
                "a column type has no Native encoding: INSERTs stay RowBinary"
            );
        }
        self.layouts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(table, layout.clone());
        Ok(layout)
    }

    fn server_client(&self) -> &clickhouse::Client {
        &self.server
    }

    /// The configured database name.
    pub fn database(&self) -> &str {
        &self.database
    }

    /// Checks that ClickHouse answers a trivial query.
    pub async fn ping(&self) -> Result<(), StoreError> {
        let one: u8 = self
            .server
            .query("SELECT toUInt8(1)")
            .fetch_one()
            .await
            .map_err(StoreError::query("ping"))?;
        debug_assert_eq!(one, 1);
        self.detect_server().await
    }

    /// Creates the database if needed and applies pending migrations; returns the
    /// versions applied now (empty when the schema was up to date).
    pub async fn migrate(&self) -> Result<Vec<u32>, StoreError> {
        self.detect_server().await?;
        migrate::migrate(self, MIGRATIONS).await
    }
}

/// Accepts `[A-Za-z_][A-Za-z0-9_]*`, the identifiers we put into SQL.
fn validate_identifier(what: &str, name: &str) -> Result<(), StoreError> {
    let mut bytes = name.bytes();
    let ok = bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(StoreError::Config(format!(
            "{what} {name:?} must start with a letter or _ and hold only letters, digits and _"
        )))
    }
}

/// Wall-clock time in ns since the Unix epoch (0 if the clock is before 1970).
pub(crate) fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_defaults_and_parsing() {
        let cfg = StoreConfig::default();
        assert_eq!(cfg.url, "http://127.0.0.1:8123");
        assert_eq!(cfg.database, "rankscope");
        assert_eq!(cfg.user, "default");
        let parsed: StoreConfig =
            toml::from_str("database = \"x\"\ncompression = \"none\"").unwrap();
        assert_eq!(parsed.database, "x");
        assert_eq!(parsed.compression, Compression::None);
        assert_eq!(parsed.url, cfg.url);
        assert!(toml::from_str::<StoreConfig>("databse = \"x\"").is_err());
        let secret = StoreConfig {
            password: "hunter2".into(),
            ..StoreConfig::default()
        };
        assert!(!format!("{secret:?}").contains("hunter2"));
    }

    #[test]
    fn connect_validates_config() {
        let bad_db = StoreConfig {
            database: "a; DROP".into(),
            ..Default::default()
        };
        assert!(matches!(
            Store::connect(&bad_db),
            Err(StoreError::Config(_))
        ));
        let bad_url = StoreConfig {
            url: "https://ch:8443".into(),
            ..Default::default()
        };
        assert!(matches!(
            Store::connect(&bad_url),
            Err(StoreError::Config(_))
        ));
        let good = StoreConfig {
            database: "_rank_scope1".into(),
            ..Default::default()
        };
        assert_eq!(Store::connect(&good).unwrap().database(), "_rank_scope1");
        assert!(validate_identifier("d", "").is_err());
        assert!(validate_identifier("d", "1abc").is_err());
    }

    #[test]
    fn table_names_are_unique_and_batches_come_after_events() {
        let names: std::collections::HashSet<_> = Table::ALL.iter().map(|t| t.name()).collect();
        assert_eq!(names.len(), Table::ALL.len());
        let pos = |t| Table::ALL.iter().position(|x| *x == t).unwrap();
        for t in [
            Table::Steps,
            Table::Spans,
            Table::Collectives,
            Table::Kernels,
            Table::Ranks,
        ] {
            assert!(pos(t) < pos(Table::IngestBatches));
        }
    }
}
