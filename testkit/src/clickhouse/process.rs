//! Finding, configuring and supervising a private `clickhouse-server` process.
//!
//! In: a state directory and two ports. Out: a [`Keeper`] owning the child process.
//! The config is rendered from the one template set in `deploy/dev/clickhouse/`
//! (shared with `deploy/dev/clickhouse.sh`).
//!
//! Lifetime invariants:
//! - The child is spawned by a dedicated keeper thread that lives exactly as long as the
//!   [`Keeper`]. The child gets `PR_SET_PDEATHSIG(SIGKILL)`, which Linux delivers when the
//!   *thread* that forked it exits, not the process. Forking from a test thread would kill
//!   the server as soon as that test's thread ended, even if another test still used it;
//!   forking from the keeper thread makes the signal fire only when the keeper stops
//!   (after it has killed the child itself) or when the whole test process dies (killed by
//!   a timeout, SIGKILL, a panic in `main`): the safety net we want.
//! - The keeper polls the child for an early exit and publishes its status, so start-up
//!   can fail fast instead of waiting for the deadline.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::TestkitError;

/// The config templates; `@ROOT@`, `@HTTP_PORT@` and `@TCP_PORT@` are placeholders.
const CONFIG_TEMPLATE: &str = include_str!("../../../deploy/dev/clickhouse/config.xml");
const USERS_TEMPLATE: &str = include_str!("../../../deploy/dev/clickhouse/users.xml");

/// How to install a server when none is found.
pub(crate) const INSTALL_HINT: &str = "install it with `sudo apt-get install -y clickhouse-server` \
     (or run `make test`, which installs it), or point RANKSCOPE_CLICKHOUSE_URL at a running server";

/// A ClickHouse executable and the arguments that make it run as a server.
#[derive(Debug, Clone)]
pub(crate) struct ServerBinary {
    pub path: PathBuf,
    /// `["server"]` for the single modern `clickhouse` binary, empty for `clickhouse-server`.
    pub leading_args: Vec<String>,
}

/// Looks for `clickhouse-server` and then a single `clickhouse` binary on `PATH` and in
/// the usual system directories (Debian puts the server in `/usr/sbin`).
pub(crate) fn find_server_binary() -> Result<ServerBinary, TestkitError> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    for extra in ["/usr/bin", "/usr/sbin", "/usr/local/bin"] {
        dirs.push(PathBuf::from(extra));
    }
    for (name, leading) in [
        ("clickhouse-server", &[][..]),
        ("clickhouse", &["server"][..]),
    ] {
        if let Some(path) = dirs.iter().map(|d| d.join(name)).find(|p| is_executable(p)) {
            return Ok(ServerBinary {
                path,
                leading_args: leading.iter().map(|s| s.to_string()).collect(),
            });
        }
    }
    Err(TestkitError::NotInstalled(format!(
        "no ClickHouse server binary (clickhouse-server or clickhouse) on PATH or in \
         /usr/bin, /usr/sbin, /usr/local/bin; {INSTALL_HINT}"
    )))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Writes `config.xml` and `users.xml` into `root` and creates the directories they name.
pub(crate) fn write_config(root: &Path, http_port: u16, tcp_port: u16) -> Result<(), TestkitError> {
    let root_text = xml_escape(&root.to_string_lossy());
    let render = |template: &str| {
        template
            .replace("@ROOT@", &root_text)
            .replace("@HTTP_PORT@", &http_port.to_string())
            .replace("@TCP_PORT@", &tcp_port.to_string())
    };
    for sub in ["data", "tmp", "user_files", "format_schemas", "log"] {
        let dir = root.join(sub);
        std::fs::create_dir_all(&dir)
            .map_err(|e| TestkitError::io(format!("create {dir:?}"), e))?;
    }
    for (name, template) in [
        ("config.xml", CONFIG_TEMPLATE),
        ("users.xml", USERS_TEMPLATE),
    ] {
        let path = root.join(name);
        std::fs::write(&path, render(template))
            .map_err(|e| TestkitError::io(format!("write {path:?}"), e))?;
    }
    Ok(())
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The last `lines` lines of the server's error log and captured stderr, for error messages.
pub(crate) fn log_tail(root: &Path, lines: usize) -> String {
    let mut out = String::new();
    for name in ["log/clickhouse-server.err.log", "stderr.log"] {
        let Ok(text) = std::fs::read_to_string(root.join(name)) else {
            continue;
        };
        let all: Vec<&str> = text.lines().collect();
        let tail = &all[all.len().saturating_sub(lines)..];
        if !tail.is_empty() {
            out.push_str(&format!("--- {name} (last {} lines) ---\n", tail.len()));
            out.push_str(&tail.join("\n"));
            out.push('\n');
        }
    }
    if out.is_empty() {
        out.push_str("(the server wrote no error log)");
    }
    out
}

/// Owns a running server process (ClickHouse, or ZooKeeper for
/// [`crate::ClickHouseCluster`]) through its keeper thread; dropping it kills the server.
pub(crate) struct Keeper {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
    exited: Arc<Mutex<Option<String>>>,
    pub pid: u32,
}

impl Keeper {
    /// Spawns the ClickHouse server of `root` (see the module docs for the thread).
    pub(crate) fn spawn(binary: &ServerBinary, root: &Path) -> Result<Keeper, TestkitError> {
        let mut command = Command::new(&binary.path);
        command.args(&binary.leading_args).arg(format!(
            "--config-file={}",
            root.join("config.xml").display()
        ));
        Self::spawn_command(command, root, "clickhouse")
    }

    /// Spawns `command` in `root` from a dedicated keeper thread, stderr to
    /// `root/stderr.log`, with `PR_SET_PDEATHSIG(SIGKILL)` (see the module docs).
    pub(crate) fn spawn_command(
        mut command: Command,
        root: &Path,
        what: &str,
    ) -> Result<Keeper, TestkitError> {
        let stderr = std::fs::File::create(root.join("stderr.log"))
            .map_err(|e| TestkitError::io("create stderr.log", e))?;
        let program = command.get_program().to_owned();
        command
            .current_dir(root)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr);
        let parent = std::process::id();
        // SAFETY: the closure runs in the forked child before exec and only calls the
        // async-signal-safe functions prctl, getppid and _exit.
        unsafe {
            command.pre_exec(move || {
                if libc::prctl(
                    libc::PR_SET_PDEATHSIG,
                    libc::SIGKILL as libc::c_ulong,
                    0,
                    0,
                    0,
                ) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                // The parent may have died between fork and prctl: then nobody would kill us.
                if libc::getppid() as u32 != parent {
                    libc::_exit(1);
                }
                Ok(())
            });
        }

        let (stop_tx, stop_rx) = mpsc::channel::<()>();
        let (pid_tx, pid_rx) = mpsc::channel::<std::io::Result<u32>>();
        let exited = Arc::new(Mutex::new(None));
        let exited_in_thread = Arc::clone(&exited);
        let thread = std::thread::Builder::new()
            .name(format!("{what}-keeper"))
            .spawn(move || keep(command, stop_rx, pid_tx, exited_in_thread))
            .map_err(|e| TestkitError::io(format!("spawn the {what} keeper thread"), e))?;
        let pid = match pid_rx.recv() {
            Ok(Ok(pid)) => pid,
            Ok(Err(e)) => {
                let _ = thread.join();
                return Err(TestkitError::io(format!("spawn {what} ({program:?})"), e));
            }
            Err(_) => {
                let _ = thread.join();
                return Err(TestkitError::StartFailed {
                    reason: "the keeper thread died before spawning the server".into(),
                    log_tail: String::new(),
                });
            }
        };
        Ok(Keeper {
            stop: Some(stop_tx),
            thread: Some(thread),
            exited,
            pid,
        })
    }

    /// `Some(status)` once the server process has exited on its own.
    pub(crate) fn exit_status(&self) -> Option<String> {
        self.exited
            .lock()
            .map(|g| g.clone())
            .unwrap_or_else(|p| p.into_inner().clone())
    }

    /// Kills the server (SIGKILL), reaps it and joins the keeper thread. Idempotent.
    pub(crate) fn stop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Keeper {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The keeper thread: spawn, report the pid, then wait for a stop request while
/// watching for an early exit.
fn keep(
    mut command: Command,
    stop: mpsc::Receiver<()>,
    pid_tx: mpsc::Sender<std::io::Result<u32>>,
    exited: Arc<Mutex<Option<String>>>,
) {
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            let _ = pid_tx.send(Err(e));
            return;
        }
    };
    let _ = pid_tx.send(Ok(child.id()));
    // Until a stop request (or the Keeper is dropped), watch for an early exit.
    while let Err(mpsc::RecvTimeoutError::Timeout) = stop.recv_timeout(Duration::from_millis(50)) {
        if let Ok(Some(status)) = child.try_wait() {
            if let Ok(mut slot) = exited.lock() {
                *slot = Some(status.to_string());
            }
            // Nothing left to watch: wait for the stop request, then reap (a no-op).
            let _ = stop.recv();
            break;
        }
    }
    // Kill is a no-op for a child already reaped by try_wait.
    let _ = child.kill();
    let _ = child.wait();
}
