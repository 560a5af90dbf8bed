//! Object storage servers for tests: a moto S3 server (PyPI `moto[server]`)
//! and azurite's Blob service (npm `azurite`), each on a free port of 127.0.0.1, in its own temp
//! dir, killed with its handle (and, through `PR_SET_PDEATHSIG`, with the
//! test process).
//!
//! In: the venv and the npm folder `make objstore-servers` fills
//! (`RANKSCOPE_OBJSTORE_VENV`, default `.venv-objstore/`;
//! `RANKSCOPE_AZURITE`, default `.tools/azurite/`). Out: an
//! [`ObjstoreServer`] with its endpoint URL, or [`TestkitError::Objstore`]
//! naming `make objstore-servers`. A server is ready when its port accepts
//! connections (bounded wait; the child's exit or the deadline is an error
//! with its log's tail).

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::TestkitError;

/// Environment variable naming the venv with moto (and the seeding clients).
pub const VENV_ENV: &str = "RANKSCOPE_OBJSTORE_VENV";
/// Environment variable naming the npm folder holding azurite.
pub const AZURITE_ENV: &str = "RANKSCOPE_AZURITE";
const INSTALL_HINT: &str = "run `make objstore-servers` (make test does) to install moto, \
     azure-storage-blob and azurite, or point RANKSCOPE_OBJSTORE_VENV / RANKSCOPE_AZURITE \
     at them";
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// The venv of `make objstore-servers`.
pub fn objstore_venv() -> PathBuf {
    std::env::var_os(VENV_ENV)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| crate::workspace_root().join(".venv-objstore"))
}

/// A program of that venv, or an error naming the target that installs it.
pub fn objstore_venv_bin(name: &str) -> Result<PathBuf, TestkitError> {
    let bin = objstore_venv().join("bin").join(name);
    if bin.exists() {
        Ok(bin)
    } else {
        Err(TestkitError::Objstore(format!(
            "{} is missing: {INSTALL_HINT}",
            bin.display()
        )))
    }
}

fn azurite_blob() -> Result<PathBuf, TestkitError> {
    let dir = std::env::var_os(AZURITE_ENV)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| crate::workspace_root().join(".tools/azurite"));
    let bin = dir.join("node_modules/.bin/azurite-blob");
    if bin.exists() {
        Ok(bin)
    } else {
        Err(TestkitError::Objstore(format!(
            "{} is missing: {INSTALL_HINT}",
            bin.display()
        )))
    }
}

/// A running server; killed on drop.
pub struct ObjstoreServer {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub endpoint: String,
    pub port: u16,
    dir: tempfile::TempDir,
}

impl ObjstoreServer {
    /// `moto_server` (S3, IAM, ...). With `auth_after` = N, moto checks
    /// credentials from the (N+1)th request on (`INITIAL_NO_AUTH_ACTION_COUNT`):
    /// the first N create the IAM user whose keys the test then uses.
    pub fn moto(auth_after: Option<u32>) -> Result<Self, TestkitError> {
        let bin = objstore_venv_bin("moto_server")?;
        Self::spawn("moto", |port, _dir| {
            let mut c = Command::new(&bin);
            c.args(["-H", "127.0.0.1", "-p", &port.to_string()]);
            if let Some(n) = auth_after {
                c.env("INITIAL_NO_AUTH_ACTION_COUNT", n.to_string());
            }
            c
        })
    }

    /// azurite's Blob service (the well-known development account
    /// `devstoreaccount1`), in memory.
    pub fn azurite() -> Result<Self, TestkitError> {
        let bin = azurite_blob()?;
        Self::spawn("azurite", |port, _dir| {
            let mut c = Command::new(&bin);
            c.args(["--blobHost", "127.0.0.1", "--blobPort", &port.to_string()])
                .args(["--inMemoryPersistence", "--skipApiVersionCheck", "--loose"]);
            c
        })
    }

    fn spawn(what: &str, command: impl Fn(u16, &Path) -> Command) -> Result<Self, TestkitError> {
        let dir = tempfile::Builder::new()
            .prefix(&format!("rankscope-{what}-"))
            .tempdir()
            .map_err(|e| TestkitError::io(format!("create a temp dir for {what}"), e))?;
        let port = crate::try_free_port()
            .map_err(|e| TestkitError::io(format!("pick a free port for {what}"), e))?;
        let log = dir.path().join("server.log");
        let log_file = std::fs::File::create(&log)
            .map_err(|e| TestkitError::io(format!("create {}", log.display()), e))?;
        let err_file = log_file
            .try_clone()
            .map_err(|e| TestkitError::io("clone the log file", e))?;
        let mut cmd = command(port, dir.path());
        cmd.stdin(Stdio::null())
            .stdout(log_file)
            .stderr(err_file)
            .current_dir(dir.path());
        die_with_parent(&mut cmd);
        let child = cmd
            .spawn()
            .map_err(|e| TestkitError::io(format!("start {what}"), e))?;
        let mut server = ObjstoreServer {
            child,
            endpoint: format!("http://127.0.0.1:{port}"),
            port,
            dir,
        };
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Ok(server);
            }
            let exited = server.child.try_wait().ok().flatten();
            if exited.is_some() || Instant::now() > deadline {
                return Err(TestkitError::Objstore(format!(
                    "{what} did not listen on port {port} ({exited:?}); its output:\n{}",
                    server.log_tail()
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The end of the server's output.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default();
        let start = text.len().saturating_sub(4000);
        text.get(start..).unwrap_or_default().to_owned()
    }

    /// Kills the server now (a store that is down).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ObjstoreServer {
    fn drop(&mut self) {
        self.kill();
    }
}

fn die_with_parent(command: &mut Command) {
    use std::os::unix::process::CommandExt;
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
            if libc::getppid() as u32 != parent {
                libc::_exit(1);
            }
            Ok(())
        });
    }
}
