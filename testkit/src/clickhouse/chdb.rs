//! A current ClickHouse engine for tests: chDB (PyPI `chdb`, ClickHouse 26.x in-process)
//! behind `testkit/chdb_front.py`, a minimal HTTP front that speaks what the `clickhouse`
//! crate and the collector send (its module docstring lists what it does and does not).
//!
//! In: the venv of `make chdb` (`RANKSCOPE_CHDB_VENV`, default `.venv-chdb/` in the
//! workspace). Out: a [`ClickHouse`] handle like a private server's: free port, ready once
//! `/ping` answers, killed (its directory removed) on drop. [`Launcher`] is how a private
//! handle (re)starts its process: a `clickhouse-server` binary or the chDB front.

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use super::process::{Keeper, ServerBinary};
use super::{is_port_clash, pick_port, ClickHouse, Private, PORT_ATTEMPTS};
use crate::http::Endpoint;
use crate::TestkitError;

/// Environment variable naming the venv that holds the `chdb` package.
pub const VENV_ENV: &str = "RANKSCOPE_CHDB_VENV";

/// How to create the venv when it is missing.
pub(crate) const INSTALL_HINT: &str = "run `make chdb` (make test does; it runs \
     `python3 -m venv .venv-chdb && .venv-chdb/bin/pip install chdb` (4.4: ClickHouse 26.9)), or set \
     RANKSCOPE_CHDB_VENV to a venv holding the `chdb` package";

/// The front's source, beside this crate's Cargo.toml.
const FRONT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/chdb_front.py");

/// How a private handle starts its process.
#[derive(Debug, Clone)]
pub(crate) enum Launcher {
    /// `clickhouse-server --config-file=<root>/config.xml`.
    Server(ServerBinary),
    /// `python chdb_front.py --port <port> --path <root>/chdb`.
    Chdb { python: PathBuf, port: u16 },
}

impl Launcher {
    pub(crate) fn spawn(&self, root: &Path) -> Result<Keeper, TestkitError> {
        match self {
            Launcher::Server(binary) => Keeper::spawn(binary, root),
            Launcher::Chdb { python, port } => {
                let mut command = Command::new(python);
                command
                    .arg(FRONT)
                    .arg("--port")
                    .arg(port.to_string())
                    .arg("--path")
                    .arg(root.join("chdb"));
                Keeper::spawn_command(command, root, "chdb-front")
            }
        }
    }
}

impl fmt::Display for Launcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Launcher::Server(binary) => write!(f, "binary {:?}", binary.path),
            Launcher::Chdb { python, .. } => write!(f, "chdb front {FRONT} under {python:?}"),
        }
    }
}

/// The Python of the chDB venv, or an error naming the step that creates it.
pub fn chdb_python() -> Result<PathBuf, TestkitError> {
    let venv = std::env::var_os(VENV_ENV)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| crate::workspace_root().join(".venv-chdb"));
    python_in(&venv)
}

fn python_in(venv: &Path) -> Result<PathBuf, TestkitError> {
    let python = venv.join("bin/python");
    let has_chdb = std::fs::read_dir(venv.join("lib")).is_ok_and(|dirs| {
        dirs.flatten()
            .any(|d| d.path().join("site-packages/chdb").is_dir())
    });
    if python.exists() && has_chdb {
        Ok(python)
    } else {
        Err(TestkitError::ChdbNotInstalled(format!(
            "{} with the `chdb` package is missing: {INSTALL_HINT}",
            python.display()
        )))
    }
}

impl ClickHouse {
    /// Starts chDB (a current ClickHouse engine) behind the test front on a free port.
    /// Ignores `RANKSCOPE_CLICKHOUSE_URL`: this tier is about the engine version.
    pub fn start_chdb() -> Result<ClickHouse, TestkitError> {
        let python = chdb_python()?;
        let mut last_error = None;
        for _ in 0..PORT_ATTEMPTS {
            let port = pick_port("chdb front")?;
            let launcher = Launcher::Chdb {
                python: python.clone(),
                port,
            };
            match Self::start_launcher(launcher, port) {
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

    fn start_launcher(launcher: Launcher, http_port: u16) -> Result<ClickHouse, TestkitError> {
        let dir = tempfile::Builder::new()
            .prefix("rankscope-chdb-")
            .tempdir()
            .map_err(|e| TestkitError::io("create a temp dir for chDB", e))?;
        let http_url = format!("http://127.0.0.1:{http_port}");
        let ch = ClickHouse {
            endpoint: Endpoint::parse(&http_url)?,
            http_url,
            tcp_port: 0,
            private: Mutex::new(Some(Private {
                keeper: None,
                launcher,
                dir,
            })),
        };
        ch.spawn_and_wait()?;
        Ok(ch)
    }

    /// The server's `version()`, e.g. `18.16.1` or `26.9.2.1`.
    pub fn version(&self) -> Result<String, TestkitError> {
        Ok(self.query("SELECT version()")?.trim().to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_venv_names_the_make_step() {
        let empty = tempfile::tempdir().unwrap();
        let msg = python_in(empty.path()).unwrap_err().to_string();
        assert!(msg.starts_with("chDB is not installed"), "{msg}");
        assert!(
            msg.contains("make chdb") && msg.contains("RANKSCOPE_CHDB_VENV"),
            "{msg}"
        );
    }
}
