//! The direct bulk-load baseline: the rows an end-to-end run stored, loaded
//! again into the same ClickHouse server with `clickhouse-client`.
//!
//! In: the database an e2e run wrote, the server (HTTP for DDL, native TCP
//! for `clickhouse-client`). Out: a [`BulkRun`]: rows, wall time and the
//! server's CPU seconds for loading them.
//!
//! Method: each event table (`steps`, `spans`, `collectives`, `kernels`) is
//! exported with `SELECT * ... FORMAT Native` into a file; a fresh database
//! gets tables of the same schema (`CREATE TABLE .. AS ..`); then one
//! `clickhouse-client` per table runs `INSERT ... FORMAT Native` from its
//! file, all four at once (as the collector's writer inserts the event tables
//! concurrently). Wall time runs from spawning the clients to the last exit.
//! Row counts are checked afterwards. Besides the load itself, the CPU until
//! the merges it triggered settled ([`settle`]) is recorded, as the
//! end-to-end run records its own (the headline ratio compares the
//! end-to-end window, its merges so far included, with the load alone).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rankscope_testkit::ClickHouse;

use crate::{sys, BenchError};

/// The event tables: one row per event.
pub const EVENT_TABLES: [&str; 4] = ["steps", "spans", "collectives", "kernels"];

/// One bulk load.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct BulkRun {
    pub rows: u64,
    /// Native-format bytes loaded.
    pub bytes: u64,
    pub elapsed_s: f64,
    pub rows_per_s: f64,
    /// ClickHouse server CPU seconds during the load (NaN if unknown).
    pub clickhouse_cpu_s: f64,
    /// The same until the merges of the loaded parts settled ([`settle`]).
    #[serde(default)]
    pub clickhouse_cpu_settled_s: f64,
}

/// The longest wait for merges to settle.
pub const SETTLE_CAP: Duration = Duration::from_secs(120);

/// How long no merge of a database may run for its merges to count as
/// settled.
pub const SETTLE_QUIET: Duration = Duration::from_secs(2);

/// Waits until no merge of `db` has run for [`SETTLE_QUIET`] (polled every
/// 100 ms in `system.merges`), at most `cap`; false when `cap` passed first.
pub fn settle(ch: &ClickHouse, db: &str, cap: Duration) -> Result<bool, BenchError> {
    settle_where(ch, &format!("database = '{db}'"), cap)
}

/// [`settle`] for every database of the server: before a measurement that
/// background merges would disturb (the agent's idle cost).
pub fn settle_all(ch: &ClickHouse, cap: Duration) -> Result<bool, BenchError> {
    settle_where(ch, "1", cap)
}

fn settle_where(ch: &ClickHouse, filter: &str, cap: Duration) -> Result<bool, BenchError> {
    let started = Instant::now();
    let mut quiet_since = Instant::now();
    loop {
        let running: u64 = ch
            .query(&format!("SELECT count() FROM system.merges WHERE {filter}"))?
            .trim()
            .parse()
            .map_err(|e| BenchError::parse("system.merges count", e))?;
        if running > 0 {
            quiet_since = Instant::now();
        } else if quiet_since.elapsed() >= SETTLE_QUIET {
            return Ok(true);
        }
        if started.elapsed() >= cap {
            return Ok(false);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn client(ch: &ClickHouse) -> Command {
    let mut cmd = Command::new("clickhouse-client");
    cmd.args(["--host", "127.0.0.1", "--port"])
        .arg(ch.tcp_port.to_string());
    cmd
}

/// Whether `clickhouse-client` can be run.
pub fn client_available() -> bool {
    Command::new("clickhouse-client")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Row count of `db.table`.
pub fn count(ch: &ClickHouse, db: &str, table: &str) -> Result<u64, BenchError> {
    let text = ch.query(&format!("SELECT count() FROM {db}.{table}"))?;
    text.trim()
        .parse()
        .map_err(|e| BenchError::parse(format!("count of {db}.{table}"), e))
}

/// Exports the event tables of `src_db` and loads them into `dst_db`
/// (created here, left for the caller to drop).
pub fn load_same_rows(
    ch: &ClickHouse,
    src_db: &str,
    dst_db: &str,
    dir: &Path,
) -> Result<BulkRun, BenchError> {
    let mut files = Vec::new();
    for table in EVENT_TABLES {
        let path = dir.join(format!("{src_db}.{table}.native"));
        let out = std::fs::File::create(&path)
            .map_err(BenchError::io(format!("create {}", path.display())))?;
        let status = client(ch)
            .arg("--query")
            .arg(format!("SELECT * FROM {src_db}.{table} FORMAT Native"))
            .stdout(out)
            .status()
            .map_err(BenchError::io("run clickhouse-client (export)"))?;
        if !status.success() {
            return Err(BenchError::Process {
                program: "clickhouse-client (export)".into(),
                status: status.to_string(),
                detail: format!("SELECT * FROM {src_db}.{table}"),
            });
        }
        files.push((table, path));
    }
    ch.query(&format!("DROP DATABASE IF EXISTS {dst_db}"))?;
    ch.query(&format!("CREATE DATABASE {dst_db}"))?;
    for table in EVENT_TABLES {
        ch.query(&format!(
            "CREATE TABLE {dst_db}.{table} AS {src_db}.{table}"
        ))?;
    }
    let bytes = files
        .iter()
        .map(|(_, p)| std::fs::metadata(p).map_or(0, |m| m.len()))
        .sum();

    let cpu0 = ch.pid().and_then(|p| sys::cpu_s(p).ok());
    let started = Instant::now();
    let mut children = Vec::new();
    for (table, path) in &files {
        let input = std::fs::File::open(path)
            .map_err(BenchError::io(format!("open {}", path.display())))?;
        let mut cmd = client(ch);
        cmd.arg("--query")
            .arg(format!("INSERT INTO {dst_db}.{table} FORMAT Native"))
            .stdin(input)
            .stdout(Stdio::null());
        children.push(sys::spawn(&mut cmd)?);
    }
    for child in &children {
        let r = sys::reap_blocking(child.id(), Duration::from_secs(600), "clickhouse-client")?;
        if !r.status.success() {
            return Err(BenchError::Process {
                program: "clickhouse-client (insert)".into(),
                status: r.status.to_string(),
                detail: format!("INSERT INTO {dst_db}"),
            });
        }
    }
    let elapsed_s = started.elapsed().as_secs_f64();
    let cpu1 = ch.pid().and_then(|p| sys::cpu_s(p).ok());
    let settled = settle(ch, dst_db, SETTLE_CAP)?;
    let cpu2 = ch.pid().and_then(|p| sys::cpu_s(p).ok());

    let mut rows = 0;
    for table in EVENT_TABLES {
        let (a, b) = (count(ch, src_db, table)?, count(ch, dst_db, table)?);
        if a != b {
            return Err(BenchError::Check(format!(
                "bulk load of {table}: {b} rows loaded, {a} exported"
            )));
        }
        rows += b;
    }
    // `dst_db` stays: the caller drops it (see `e2e::drop_databases`).
    for (_, path) in &files {
        let _ = std::fs::remove_file(path);
    }
    Ok(BulkRun {
        rows,
        bytes,
        elapsed_s,
        rows_per_s: rows as f64 / elapsed_s.max(1e-9),
        clickhouse_cpu_s: match (cpu0, cpu1) {
            (Some(a), Some(b)) => b - a,
            _ => f64::NAN,
        },
        clickhouse_cpu_settled_s: match (cpu0, cpu2, settled) {
            (Some(a), Some(b), true) => b - a,
            _ => f64::NAN,
        },
    })
}
