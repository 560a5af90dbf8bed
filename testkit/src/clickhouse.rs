//! [`ClickHouse`]: a ClickHouse server for tests, private or external.
//!
//! In: `RANKSCOPE_CLICKHOUSE_URL` (use that server) or a server binary (start a private
//! one on free ports from the shared config template). Out: a handle whose `http_url`
//! answers `/ping` with `Ok.`, helpers to create databases and run plain-text queries.
//!
//! Invariants: `start` returns only once `/ping` answers; a failed start reports the tail
//! of the server's error log; dropping the handle kills the private server and removes
//! its directory. [`ClickHouse::shared`] gives one server per test process, torn down at
//! process exit.

pub mod chdb;
pub(crate) mod process;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::http::{self, Endpoint};
use crate::TestkitError;
use chdb::Launcher;
use process::{Keeper, ServerBinary};

/// Environment variable naming an existing server to use instead of a private one.
pub const URL_ENV: &str = "RANKSCOPE_CLICKHOUSE_URL";
/// Environment variable choosing the private engine: `server` (default: the
/// `clickhouse-server` binary, Debian's 18.16) or `chdb` (ClickHouse 26.x, [`chdb`]).
pub const ENGINE_ENV: &str = "RANKSCOPE_CLICKHOUSE_ENGINE";

/// How long a private server may take to answer `/ping`.
pub(crate) const START_DEADLINE: Duration = Duration::from_secs(120);
/// How many times to retry with new ports when the chosen ones were taken meanwhile.
pub(crate) const PORT_ATTEMPTS: usize = 4;
/// Socket timeout of the helper HTTP client.
const HTTP_TIMEOUT: Duration = Duration::from_secs(60);

#[cfg(test)]
pub(crate) fn install_hint() -> &'static str {
    process::INSTALL_HINT
}

/// A running ClickHouse server for tests.
pub struct ClickHouse {
    /// Base HTTP URL without a trailing slash, e.g. `http://127.0.0.1:41234`.
    pub http_url: String,
    /// Native protocol port (9000 is assumed for an external server).
    pub tcp_port: u16,
    endpoint: Endpoint,
    private: Mutex<Option<Private>>,
}

/// The parts of a server this handle started itself.
struct Private {
    keeper: Option<Keeper>,
    launcher: Launcher,
    /// Dropped after the keeper, so the directory is removed once the server is dead.
    dir: tempfile::TempDir,
}

static SHARED: OnceLock<Result<ClickHouse, String>> = OnceLock::new();
static DATABASE_COUNTER: AtomicU64 = AtomicU64::new(0);

impl ClickHouse {
    /// Uses `RANKSCOPE_CLICKHOUSE_URL` when set, otherwise starts a private server
    /// (chDB when `RANKSCOPE_CLICKHOUSE_ENGINE=chdb`).
    pub fn start() -> Result<ClickHouse, TestkitError> {
        match std::env::var(URL_ENV) {
            Ok(url) if !url.trim().is_empty() => Self::external(url.trim()),
            _ => match std::env::var(ENGINE_ENV).unwrap_or_default().trim() {
                "" | "server" => Self::start_private(),
                "chdb" => Self::start_chdb(),
                other => Err(TestkitError::NotInstalled(format!(
                    "{ENGINE_ENV}={other:?}: the engines are `server` and `chdb`"
                ))),
            },
        }
    }

    /// One server for the whole test process, started on first use and killed (its
    /// directory removed) when the process exits. Tests sharing it should each work in
    /// their own [`fresh_database`](Self::fresh_database).
    pub fn shared() -> Result<&'static ClickHouse, TestkitError> {
        let slot = SHARED.get_or_init(|| {
            let started = ClickHouse::start().map_err(|e| e.to_string());
            if started.is_ok() {
                // SAFETY: registering a plain extern "C" function; it runs at normal exit.
                unsafe { libc::atexit(stop_shared) };
            }
            started
        });
        slot.as_ref().map_err(|msg| TestkitError::StartFailed {
            reason: "the shared server of this test process could not start".into(),
            log_tail: msg.clone(),
        })
    }

    fn external(url: &str) -> Result<ClickHouse, TestkitError> {
        let http_url = url.trim_end_matches('/').to_string();
        let endpoint = Endpoint::parse(&http_url)?;
        let ch = ClickHouse {
            http_url,
            tcp_port: 9000,
            endpoint,
            private: Mutex::new(None),
        };
        match ch.ping() {
            Ok(()) => Ok(ch),
            Err(e) => Err(TestkitError::StartFailed {
                reason: format!("{URL_ENV}={url} does not answer /ping: {e}"),
                log_tail: String::new(),
            }),
        }
    }

    fn start_private() -> Result<ClickHouse, TestkitError> {
        let binary = process::find_server_binary()?;
        let mut last_error = None;
        for _ in 0..PORT_ATTEMPTS {
            match Self::try_start_private(&binary) {
                Ok(ch) => return Ok(ch),
                Err(e @ TestkitError::StartFailed { .. }) if is_port_clash(&e) => {
                    last_error = Some(e)
                }
                Err(e) => return Err(e),
            }
        }
        Err(last_error.unwrap_or_else(|| TestkitError::StartFailed {
            reason: "no attempt was made".into(),
            log_tail: String::new(),
        }))
    }

    fn try_start_private(binary: &ServerBinary) -> Result<ClickHouse, TestkitError> {
        let (http_port, tcp_port) = (pick_port("http")?, pick_port("tcp")?);
        Self::start_private_on(binary, http_port, tcp_port, &[])
    }

    /// Starts a private server on the given ports from the shared config template plus
    /// `config_d`: `(file name, XML)` pairs written to its `config.d/` (ClickHouse merges
    /// them into `config.xml`), e.g. a cluster's `remote_servers` and `macros`.
    pub(crate) fn start_private_on(
        binary: &ServerBinary,
        http_port: u16,
        tcp_port: u16,
        config_d: &[(&str, String)],
    ) -> Result<ClickHouse, TestkitError> {
        let dir = tempfile::Builder::new()
            .prefix("rankscope-clickhouse-")
            .tempdir()
            .map_err(|e| TestkitError::io("create a temp dir for ClickHouse", e))?;
        process::write_config(dir.path(), http_port, tcp_port)?;
        if !config_d.is_empty() {
            let sub = dir.path().join("config.d");
            std::fs::create_dir_all(&sub)
                .map_err(|e| TestkitError::io(format!("create {sub:?}"), e))?;
            for (name, xml) in config_d {
                let path = sub.join(name);
                std::fs::write(&path, xml)
                    .map_err(|e| TestkitError::io(format!("write {path:?}"), e))?;
            }
        }
        let http_url = format!("http://127.0.0.1:{http_port}");
        let ch = ClickHouse {
            endpoint: Endpoint::parse(&http_url)?,
            http_url,
            tcp_port,
            private: Mutex::new(Some(Private {
                keeper: None,
                launcher: Launcher::Server(binary.clone()),
                dir,
            })),
        };
        ch.spawn_and_wait()?;
        Ok(ch)
    }

    /// Spawns the private server (again) from its existing config and waits for `/ping`.
    fn spawn_and_wait(&self) -> Result<(), TestkitError> {
        let mut guard = self.lock_private();
        let private = guard
            .as_mut()
            .ok_or(TestkitError::NotPrivate("starting a server"))?;
        let root = private.dir.path().to_path_buf();
        let keeper = private.launcher.spawn(&root)?;
        let deadline = Instant::now() + START_DEADLINE;
        let result = loop {
            if let Some(status) = keeper.exit_status() {
                break Err(format!("the server process exited early ({status})"));
            }
            match self.ping() {
                Ok(()) => break Ok(()),
                Err(e) if Instant::now() >= deadline => {
                    break Err(format!("no answer to /ping within {START_DEADLINE:?}: {e}"))
                }
                Err(_) => std::thread::sleep(Duration::from_millis(25)),
            }
        };
        match result {
            Ok(()) => {
                private.keeper = Some(keeper);
                Ok(())
            }
            Err(reason) => {
                drop(keeper); // kill it before reading the final log
                Err(TestkitError::StartFailed {
                    reason: format!("{reason}; {}, dir {root:?}", private.launcher),
                    log_tail: process::log_tail(&root, 30),
                })
            }
        }
    }

    /// Answers `Ok(())` when `GET /ping` returns `Ok.`.
    pub fn ping(&self) -> Result<(), TestkitError> {
        let (status, body) =
            http::request(&self.endpoint, "GET", "/ping", b"", Duration::from_secs(2))?;
        if status == 200 && body.trim() == "Ok." {
            Ok(())
        } else {
            Err(TestkitError::Http(format!(
                "/ping answered {status}: {}",
                body.trim()
            )))
        }
    }

    /// Runs `sql` and returns the plain-text (TabSeparated) result.
    pub fn query(&self, sql: &str) -> Result<String, TestkitError> {
        self.query_at("/", sql)
    }

    /// Runs `sql` with `database` as the current database.
    pub fn query_in(&self, database: &str, sql: &str) -> Result<String, TestkitError> {
        self.query_at(
            &format!("/?database={}", http::encode_query_value(database)),
            sql,
        )
    }

    fn query_at(&self, path: &str, sql: &str) -> Result<String, TestkitError> {
        let (status, body) =
            http::request(&self.endpoint, "POST", path, sql.as_bytes(), HTTP_TIMEOUT).map_err(
                |e| match e {
                    TestkitError::Http(msg) => {
                        let head: String = sql.chars().take(80).collect();
                        TestkitError::Http(format!("{msg} (query: {head})"))
                    }
                    other => other,
                },
            )?;
        if status == 200 {
            Ok(body)
        } else {
            Err(TestkitError::Query {
                sql: sql.to_string(),
                status,
                body,
            })
        }
    }

    /// Creates a database with a unique name starting with `prefix` (`[A-Za-z0-9_]+`)
    /// and returns the name, so tests sharing a server do not collide.
    pub fn fresh_database(&self, prefix: &str) -> Result<String, TestkitError> {
        if prefix.is_empty()
            || !prefix
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_')
        {
            return Err(TestkitError::Http(format!(
                "database prefix {prefix:?} must be [A-Za-z0-9_]+"
            )));
        }
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let n = DATABASE_COUNTER.fetch_add(1, Ordering::Relaxed);
        let name = format!("{prefix}_{}_{n}_{nanos}", std::process::id());
        self.query(&format!("CREATE DATABASE {name}"))?;
        Ok(name)
    }

    /// Whether this handle started (and owns) the server process.
    pub fn is_private(&self) -> bool {
        self.lock_private().is_some()
    }

    /// The private server's state directory (config, data, logs); `None` when external.
    pub fn dir(&self) -> Option<PathBuf> {
        self.lock_private()
            .as_ref()
            .map(|p| p.dir.path().to_path_buf())
    }

    /// The private server's process id while it runs; `None` when external or killed.
    pub fn pid(&self) -> Option<u32> {
        self.lock_private()
            .as_ref()
            .and_then(|p| p.keeper.as_ref().map(|k| k.pid))
    }

    /// Kills the private server but keeps its data and ports, for tests of the
    /// "ClickHouse is down" path; [`restart`](Self::restart) brings it back.
    pub fn kill(&self) -> Result<(), TestkitError> {
        let mut guard = self.lock_private();
        let private = guard.as_mut().ok_or(TestkitError::NotPrivate("kill"))?;
        if let Some(mut keeper) = private.keeper.take() {
            keeper.stop();
        }
        Ok(())
    }

    /// Starts a killed private server again on the same ports with the same data.
    pub fn restart(&self) -> Result<(), TestkitError> {
        self.kill()?;
        self.spawn_and_wait()
    }

    /// The tail of the private server's error log (empty for an external server).
    pub fn log_tail(&self) -> String {
        self.lock_private()
            .as_ref()
            .map(|p| process::log_tail(p.dir.path(), 30))
            .unwrap_or_default()
    }

    /// Kills the private server and removes its directory. Idempotent.
    fn shutdown(&self) {
        let private = self.lock_private().take();
        if let Some(mut private) = private {
            if let Some(mut keeper) = private.keeper.take() {
                keeper.stop();
            }
            drop(private.dir);
        }
    }

    fn lock_private(&self) -> MutexGuard<'_, Option<Private>> {
        self.private
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Drop for ClickHouse {
    fn drop(&mut self) {
        self.shutdown();
    }
}

impl std::fmt::Debug for ClickHouse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClickHouse")
            .field("http_url", &self.http_url)
            .field("tcp_port", &self.tcp_port)
            .field("private", &self.is_private())
            .finish()
    }
}

/// `atexit` hook of [`ClickHouse::shared`]: statics are never dropped, so kill the server
/// and remove its directory here (PDEATHSIG would kill it anyway, but not clean up).
extern "C" fn stop_shared() {
    if let Some(Ok(ch)) = SHARED.get() {
        ch.shutdown();
    }
}

/// A free port on 127.0.0.1 for a server's `what` listener.
pub(crate) fn pick_port(what: &str) -> Result<u16, TestkitError> {
    crate::try_free_port().map_err(|e| TestkitError::io(format!("pick a free {what} port"), e))
}

pub(crate) fn is_port_clash(e: &TestkitError) -> bool {
    match e {
        TestkitError::StartFailed { log_tail, .. } => {
            log_tail.contains("Address already in use") || log_tail.contains("already in use")
        }
        _ => false,
    }
}

#[cfg(test)]
pub(crate) mod tests;
