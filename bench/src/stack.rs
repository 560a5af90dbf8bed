//! The processes under test: `rankscope-collector` and `rankscope-agent`
//! started from the release binaries on free loopback ports.
//!
//! In: [`Binaries`], a ClickHouse URL and database, config overrides. Out:
//! running [`CollectorProc`] / [`AgentProc`] handles (pid, URLs) that stop
//! the process (SIGTERM, then SIGKILL) when asked or dropped.
//!
//! Configs start from the binary's own `gen-config` output (so new options
//! keep their defaults) with only addresses, database and the overrides
//! replaced; the product runs with its default tuning unless a section says
//! otherwise. Logs go to `<dir>/<name>.log` at `warn` level (`$RANKSCOPE_BENCH_LOG` sets another filter, and the scratch directory is then kept).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::http::HttpClient;
use crate::{sys, BenchError};

/// Where the release binaries are.
#[derive(Debug, Clone)]
pub struct Binaries {
    pub dir: PathBuf,
}

impl Binaries {
    /// Checks that the three binaries exist in `dir`.
    pub fn in_dir(dir: &Path) -> Result<Binaries, BenchError> {
        let b = Binaries {
            dir: dir.to_path_buf(),
        };
        for p in [b.rankscope(), b.agent(), b.collector()] {
            if !p.is_file() {
                return Err(BenchError::Missing {
                    what: "release binary (run `cargo build --release --bins`)".into(),
                    path: p,
                });
            }
        }
        Ok(b)
    }

    pub fn rankscope(&self) -> PathBuf {
        self.dir.join("rankscope")
    }

    pub fn agent(&self) -> PathBuf {
        self.dir.join("rankscope-agent")
    }

    pub fn collector(&self) -> PathBuf {
        self.dir.join("rankscope-collector")
    }
}

/// A `key = value` override of a generated TOML config; `path` is dotted
/// (`writer.flush_interval_ms`).
#[derive(Debug, Clone)]
pub struct Override {
    pub path: String,
    pub value: toml::Value,
}

impl Override {
    pub fn new(path: &str, value: impl Into<toml::Value>) -> Override {
        Override {
            path: path.to_owned(),
            value: value.into(),
        }
    }
}

/// Runs `<binary> gen-config`, moves every other top-level `*listen_addr`
/// (e.g. a metrics endpoint) to a free loopback port so several instances
/// can run at once, and applies `overrides`.
pub fn generated_config(binary: &Path, overrides: &[Override]) -> Result<String, BenchError> {
    let out = Command::new(binary)
        .arg("gen-config")
        .output()
        .map_err(BenchError::io(format!(
            "run {} gen-config",
            binary.display()
        )))?;
    if !out.status.success() {
        return Err(BenchError::Process {
            program: format!("{} gen-config", binary.display()),
            status: out.status.to_string(),
            detail: String::from_utf8_lossy(&out.stderr).into_owned(),
        });
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let mut table: toml::Table =
        toml::from_str(&text).map_err(|e| BenchError::parse("gen-config output", e))?;
    let listeners: Vec<String> = table
        .iter()
        .filter(|(k, v)| k.ends_with("listen_addr") && v.as_str().is_some_and(|a| !a.is_empty()))
        .map(|(k, _)| k.clone())
        .collect();
    for key in listeners {
        let addr = format!("127.0.0.1:{}", sys::free_port()?);
        table.insert(key, toml::Value::String(addr));
    }
    for o in overrides {
        set_path(&mut table, &o.path, o.value.clone());
    }
    toml::to_string(&table).map_err(|e| BenchError::parse("config", e))
}

fn set_path(table: &mut toml::Table, path: &str, value: toml::Value) {
    match path.split_once('.') {
        None => {
            table.insert(path.to_owned(), value);
        }
        Some((head, rest)) => {
            let entry = table
                .entry(head.to_owned())
                .or_insert_with(|| toml::Value::Table(toml::Table::new()));
            if !entry.is_table() {
                *entry = toml::Value::Table(toml::Table::new());
            }
            if let toml::Value::Table(t) = entry {
                set_path(t, rest, value);
            }
        }
    }
}

fn spawn_logged(
    binary: &Path,
    config: &Path,
    log: &Path,
    env: &[(String, String)],
) -> Result<Child, BenchError> {
    let log_file =
        std::fs::File::create(log).map_err(BenchError::io(format!("create {}", log.display())))?;
    let mut cmd = Command::new(binary);
    cmd.arg("--config")
        .arg(config)
        // RANKSCOPE_BENCH_LOG: another filter for the stack's logs (to
        // look into a run; the record uses the default, `warn`).
        .env(
            "RUST_LOG",
            std::env::var("RANKSCOPE_BENCH_LOG").unwrap_or_else(|_| "warn".to_owned()),
        )
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log_file);
    for (k, v) in env {
        cmd.env(k, v);
    }
    sys::spawn(&mut cmd)
}

/// The end of a log, from its `Error:` line when there is one.
fn log_tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let from = lines
        .iter()
        .rposition(|l| l.starts_with("Error:"))
        .unwrap_or(lines.len().saturating_sub(15));
    lines[from..(from + 15).min(lines.len())].join("\n")
}

/// A running collector.
pub struct CollectorProc {
    child: Child,
    pub pid: u32,
    /// gRPC ingest, `http://127.0.0.1:<port>`.
    pub grpc_url: String,
    /// HTTP API base, `http://127.0.0.1:<port>`.
    pub http_url: String,
    pub log: PathBuf,
}

impl CollectorProc {
    /// Starts a collector storing into `database` of `clickhouse_url` and
    /// waits until `/healthz` answers 200.
    pub async fn start(
        bins: &Binaries,
        clickhouse_url: &str,
        database: &str,
        dir: &Path,
        overrides: &[Override],
    ) -> Result<CollectorProc, BenchError> {
        let (grpc, http) = (sys::free_port()?, sys::free_port()?);
        let mut all = vec![
            Override::new("grpc_listen_addr", format!("127.0.0.1:{grpc}")),
            Override::new("http_listen_addr", format!("127.0.0.1:{http}")),
            Override::new("retention_days", 0),
            Override::new("clickhouse.url", clickhouse_url),
            Override::new("clickhouse.database", database),
        ];
        all.extend_from_slice(overrides);
        let text = generated_config(&bins.collector(), &all)?;
        let config = dir.join(format!("collector-{database}.toml"));
        let log = dir.join(format!("collector-{database}.log"));
        std::fs::write(&config, text).map_err(BenchError::io("write collector config"))?;
        let child = spawn_logged(&bins.collector(), &config, &log, &[])?;
        let mut c = CollectorProc {
            pid: child.id(),
            child,
            grpc_url: format!("http://127.0.0.1:{grpc}"),
            http_url: format!("http://127.0.0.1:{http}"),
            log,
        };
        let http_client = HttpClient::new(Duration::from_secs(2));
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(Some(st)) = c.child.try_wait() {
                return Err(BenchError::Process {
                    program: "rankscope-collector".into(),
                    status: st.to_string(),
                    detail: log_tail(&c.log),
                });
            }
            let url = format!("{}/healthz", c.http_url);
            if matches!(http_client.get(&url).await, Ok(r) if r.status == 200) {
                return Ok(c);
            }
            if Instant::now() >= deadline {
                c.stop();
                return Err(BenchError::Timeout {
                    what: format!("collector /healthz ({})", log_tail(&c.log)),
                    secs: 60,
                });
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// `GET /metrics` parsed for one counter.
    pub async fn counter(&self, http: &HttpClient, name: &str) -> Result<u64, BenchError> {
        let r = http.get_ok(&format!("{}/metrics", self.http_url)).await?;
        let text = String::from_utf8_lossy(&r.body);
        crate::http::prometheus_counter(&text, name)
            .ok_or_else(|| BenchError::parse("collector /metrics", format!("no counter {name}")))
    }

    /// Every series of a labelled counter family with one label, as
    /// (label value, count), e.g. the INSERTs by `table`.
    pub async fn counters_by_label(
        &self,
        http: &HttpClient,
        name: &str,
    ) -> Result<Vec<(String, u64)>, BenchError> {
        let r = http.get_ok(&format!("{}/metrics", self.http_url)).await?;
        let text = String::from_utf8_lossy(&r.body);
        Ok(crate::http::prometheus_labelled(&text, name))
    }

    /// Stops the process (SIGTERM, 20 s grace).
    pub fn stop(&mut self) {
        let _ = sys::terminate(&mut self.child, Duration::from_secs(20));
    }
}

impl Drop for CollectorProc {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            self.stop();
        }
    }
}

/// A running agent.
pub struct AgentProc {
    child: Child,
    pub pid: u32,
    /// Rank-facing gRPC, `http://127.0.0.1:<port>`.
    pub url: String,
    pub log: PathBuf,
}

impl AgentProc {
    /// Starts an agent forwarding to `collector_grpc_url` (TCP only, no Unix
    /// socket) and waits until its port accepts connections.
    pub async fn start(
        bins: &Binaries,
        collector_grpc_url: &str,
        dir: &Path,
        name: &str,
        overrides: &[Override],
        env: &[(String, String)],
    ) -> Result<AgentProc, BenchError> {
        let port = sys::free_port()?;
        let mut all = vec![
            Override::new("listen_addr", format!("127.0.0.1:{port}")),
            Override::new("unix_socket_path", ""),
            Override::new("collector_url", collector_grpc_url),
            Override::new("agent_id", format!("bench-{name}")),
            Override::new("node", format!("bench-{name}")),
        ];
        all.extend_from_slice(overrides);
        let text = generated_config(&bins.agent(), &all)?;
        let config = dir.join(format!("agent-{name}.toml"));
        let log = dir.join(format!("agent-{name}.log"));
        std::fs::write(&config, text).map_err(BenchError::io("write agent config"))?;
        let child = spawn_logged(&bins.agent(), &config, &log, env)?;
        let mut a = AgentProc {
            pid: child.id(),
            child,
            url: format!("http://127.0.0.1:{port}"),
            log,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(Some(st)) = a.child.try_wait() {
                return Err(BenchError::Process {
                    program: "rankscope-agent".into(),
                    status: st.to_string(),
                    detail: log_tail(&a.log),
                });
            }
            if tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
            {
                return Ok(a);
            }
            if Instant::now() >= deadline {
                a.stop();
                return Err(BenchError::Timeout {
                    what: format!("agent port {port}"),
                    secs: 30,
                });
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Stops the process (SIGTERM lets it flush its backlog, 20 s grace).
    pub fn stop(&mut self) {
        let _ = sys::terminate(&mut self.child, Duration::from_secs(20));
    }
}

impl Drop for AgentProc {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            self.stop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_create_nested_tables() {
        let mut t: toml::Table = toml::from_str("a = 1\n[writer]\nx = 2\n").unwrap();
        set_path(&mut t, "writer.flush_interval_ms", 100.into());
        set_path(&mut t, "new.deep.key", "v".into());
        set_path(&mut t, "a", 3.into());
        let text = toml::to_string(&t).unwrap();
        let back: toml::Table = toml::from_str(&text).unwrap();
        assert_eq!(back["a"].as_integer(), Some(3));
        assert_eq!(back["writer"]["x"].as_integer(), Some(2));
        assert_eq!(back["writer"]["flush_interval_ms"].as_integer(), Some(100));
        assert_eq!(back["new"]["deep"]["key"].as_str(), Some("v"));
    }
}
