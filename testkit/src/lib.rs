//! Test support for rankscope: private ClickHouse servers and clusters, free ports.
//!
//! In: the environment (`RANKSCOPE_CLICKHOUSE_URL`, a ClickHouse binary on `PATH` or in
//! `/usr/bin`, `/usr/sbin`; Debian's `zookeeper` for clusters). Out: a [`ClickHouse`]
//! handle with an HTTP URL that answers `/ping`, uniquely named databases
//! ([`ClickHouse::fresh_database`]) and a plain-text [`ClickHouse::query`] helper for
//! assertions; a [`ClickHouseCluster`] of such servers (N shards over a private
//! [`ZooKeeper`]) for the collector's cluster mode.
//!
//! Invariants:
//! - A private server listens on 127.0.0.1 only, keeps everything in its own temp dir and
//!   dies with its handle (and, through `PR_SET_PDEATHSIG`, with the test process).
//! - With `RANKSCOPE_CLICKHOUSE_URL` set no process is started; tests stay isolated by
//!   working in fresh databases.
//! - Depends only on std, `tempfile` and `libc`, so every crate can use it cheaply.
//!
//! End-to-end tests of the whole system live in `testkit/tests/`.

mod clickhouse;
mod cluster;
mod http;
pub mod objstore;

use std::fmt;
use std::net::TcpListener;

pub use clickhouse::chdb::{chdb_python, VENV_ENV as CHDB_VENV_ENV};
pub use clickhouse::ClickHouse;
pub use cluster::{ClickHouseCluster, ZooKeeper};

/// Errors of the test kit. Messages are written for a person reading a failed test.
#[derive(Debug)]
pub enum TestkitError {
    /// No ClickHouse binary: the message names the install command.
    NotInstalled(String),
    /// No ZooKeeper (for [`ClickHouseCluster`]): the message names the install command.
    ZooKeeperNotInstalled(String),
    /// No chDB venv (for [`ClickHouse::start_chdb`]): the message names the step making it.
    ChdbNotInstalled(String),
    /// The server did not come up; `log_tail` holds the end of its error log.
    StartFailed { reason: String, log_tail: String },
    /// A file or process operation failed.
    Io {
        context: String,
        source: std::io::Error,
    },
    /// An HTTP exchange failed (connect, read, malformed response).
    Http(String),
    /// ClickHouse answered a query with an error.
    Query {
        sql: String,
        status: u16,
        body: String,
    },
    /// The operation needs a private server but this handle uses an external one.
    NotPrivate(&'static str),
    /// An object storage test server (moto, azurite) is missing or did not
    /// start: the message names the server and `make objstore-servers`.
    Objstore(String),
}

impl TestkitError {
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> TestkitError {
        TestkitError::Io {
            context: context.into(),
            source,
        }
    }
}

impl fmt::Display for TestkitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TestkitError::NotInstalled(msg) => write!(f, "ClickHouse is not installed: {msg}"),
            TestkitError::ZooKeeperNotInstalled(msg) => {
                write!(f, "ZooKeeper is not installed: {msg}")
            }
            TestkitError::ChdbNotInstalled(msg) => write!(f, "chDB is not installed: {msg}"),
            TestkitError::StartFailed { reason, log_tail } => {
                write!(f, "ClickHouse did not start: {reason}\n{log_tail}")
            }
            TestkitError::Io { context, source } => write!(f, "{context}: {source}"),
            TestkitError::Http(msg) => write!(f, "HTTP: {msg}"),
            TestkitError::Query { sql, status, body } => {
                write!(
                    f,
                    "query failed with HTTP {status}: {}\nquery: {sql}",
                    body.trim()
                )
            }
            TestkitError::Objstore(msg) => write!(f, "object storage test server: {msg}"),
            TestkitError::NotPrivate(op) => {
                write!(
                    f,
                    "{op} needs a private server, but RANKSCOPE_CLICKHOUSE_URL is in use"
                )
            }
        }
    }
}

impl std::error::Error for TestkitError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TestkitError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// A TCP port on 127.0.0.1 that was free a moment ago, from below the kernel's ephemeral
/// range (see [`try_free_port`]).
///
/// Another listener may still take it before the caller binds it; callers that start
/// servers on it should retry on "address in use".
///
/// # Panics
/// If the loopback interface cannot be bound at all (the test environment is broken).
pub fn free_port() -> u16 {
    try_free_port().unwrap_or_else(|e| panic!("cannot bind 127.0.0.1:0 to find a free port: {e}"))
}

/// The workspace root (the parent of `testkit/`).
pub fn workspace_root() -> std::path::PathBuf {
    let here = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    here.parent().unwrap_or(here).to_owned()
}

/// A binary of this build (`rankscope`, `rankscope-agent`, ...): the one in
/// the target dir above the running test binary's `deps/`.
///
/// # Panics
/// When it was not built (`cargo test` builds the workspace's binaries for
/// the testkit's integration tests).
pub fn bin_path(name: &str) -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let bin = exe
        .parent()
        .and_then(std::path::Path::parent)
        .expect("the target dir")
        .join(name);
    assert!(bin.exists(), "{} was not built", bin.display());
    bin
}

/// Variables of the test's own environment that would name a job (removed
/// from the environment of the launches the multi-node tests start).
pub const SCHEDULER_VARS: &[&str] = &[
    "RANKSCOPE_JOB_ID",
    "RANKSCOPE_LAUNCH_ID",
    "SLURM_JOB_ID",
    "TORCHELASTIC_RUN_ID",
    "JOBSET_NAME",
    "POD_NAME",
    "MASTER_ADDR",
    "MASTER_PORT",
    "WORLD_SIZE",
    "RANK",
];

/// The command after `rankscope run ... --` for one node group of a 2-node
/// torchrun launch on this machine: the venv's Python running
/// `torch.distributed.run --nnodes 2 --node-rank <node_rank> --nproc-per-node
/// 2` with the c10d rendezvous on `127.0.0.1:<rdzv_port>` and `--rdzv-id`,
/// then `python/tests/workloads/<script>` with `--steps <steps>`.
pub fn torchrun_node_group(
    node_rank: u32,
    rdzv_port: u16,
    rdzv_id: &str,
    script: &str,
    steps: u64,
) -> Vec<std::ffi::OsString> {
    let mut v: Vec<std::ffi::OsString> = vec![venv_python().into()];
    for a in [
        "-m",
        "torch.distributed.run",
        "--nnodes",
        "2",
        "--node-rank",
    ] {
        v.push(a.into());
    }
    v.push(node_rank.to_string().into());
    for a in [
        "--nproc-per-node",
        "2",
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
    ] {
        v.push(a.into());
    }
    v.push(format!("127.0.0.1:{rdzv_port}").into());
    v.push("--rdzv-id".into());
    v.push(rdzv_id.into());
    v.push(
        workspace_root()
            .join("python/tests/workloads")
            .join(script)
            .into(),
    );
    v.push("--steps".into());
    v.push(steps.to_string().into());
    v
}

/// The Python of the rank SDK's venv (`RANKSCOPE_VENV`, else `.venv/` in the
/// workspace), which `make py` builds with torch and the `rankscope` package.
///
/// # Panics
/// When it is missing, naming the command that builds it: tests that need
/// real PyTorch fail rather than skip.
pub fn venv_python() -> std::path::PathBuf {
    let venv = std::env::var_os("RANKSCOPE_VENV")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| workspace_root().join(".venv"));
    let py = venv.join("bin/python");
    assert!(
        py.exists(),
        "{} is missing: run `make py` (make test does) to build the Python environment",
        py.display()
    );
    py
}

/// Ports are picked below the kernel's ephemeral range (`net.ipv4.ip_local_port_range`,
/// 32768-60999 by default), not by binding port 0: a port from inside that range, free a
/// moment ago, can become the local end of any process's outgoing connection (a ClickHouse
/// client, a gRPC channel) before the server it was picked for binds it, and that server
/// then fails with "address in use" (CI, stop 43: the dev stack's collector). Below the
/// range only listeners take ports, and the bind check here sees those. Each process starts
/// at its own offset and never hands out the same port twice while candidates last.
pub(crate) fn try_free_port() -> std::io::Result<u16> {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    static SEED: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    if let Some((lo, hi)) = listener_port_range() {
        let span = u32::from(hi - lo);
        let seed = *SEED.get_or_init(|| {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos());
            std::process::id().wrapping_mul(7919).wrapping_add(nanos)
        });
        let next = || lo + (seed.wrapping_add(NEXT.fetch_add(1, Ordering::Relaxed)) % span) as u16;
        if let Some(port) = first_bindable(next, span) {
            return Ok(port);
        }
    }
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// The first of `tries` candidates from `next` that 127.0.0.1 can bind now.
fn first_bindable(mut next: impl FnMut() -> u16, tries: u32) -> Option<u16> {
    (0..tries)
        .map(|_| next())
        .find(|&port| TcpListener::bind(("127.0.0.1", port)).is_ok())
}

/// `[20000, start of the ephemeral range)`, capped at 32768; `None` when the ephemeral
/// range starts too low to leave a useful span (then port 0 it is).
fn listener_port_range() -> Option<(u16, u16)> {
    let ephemeral_lo = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    let hi = ephemeral_lo.min(32768);
    (hi >= 21000).then_some((20000, hi))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_ports_are_bindable() {
        let port = free_port();
        assert_ne!(port, 0);
        TcpListener::bind(("127.0.0.1", port)).unwrap();
    }

    #[test]
    fn free_ports_are_distinct_and_outside_the_ephemeral_range() {
        let Some((lo, hi)) = listener_port_range() else {
            panic!("this machine's ephemeral range leaves no listener ports below it");
        };
        let ports: Vec<u16> = (0..50).map(|_| free_port()).collect();
        for p in &ports {
            assert!((lo..hi).contains(p), "{p} not in {lo}..{hi}");
        }
        let distinct: std::collections::HashSet<_> = ports.iter().collect();
        assert_eq!(distinct.len(), ports.len(), "{ports:?}");
    }

    #[test]
    fn a_port_someone_listens_on_is_skipped() {
        let held = TcpListener::bind(("127.0.0.1", free_port())).unwrap();
        let held_port = held.local_addr().unwrap().port();
        let free = free_port();
        let mut candidates = [held_port, held_port, free].into_iter();
        assert_eq!(first_bindable(|| candidates.next().unwrap(), 3), Some(free));
        let mut only_held = std::iter::repeat(held_port);
        assert_eq!(first_bindable(|| only_held.next().unwrap(), 5), None);
    }

    #[test]
    fn not_installed_message_names_the_install_command() {
        let msg = TestkitError::NotInstalled(clickhouse::install_hint().into()).to_string();
        assert!(
            msg.contains("apt-get install -y clickhouse-server"),
            "{msg}"
        );
        assert!(msg.contains("make test"), "{msg}");
        let msg = TestkitError::ZooKeeperNotInstalled(cluster::INSTALL_HINT.into()).to_string();
        assert!(msg.contains("apt-get install -y zookeeper"), "{msg}");
        assert!(msg.contains("make test"), "{msg}");
    }
}
