//! [`ZooKeeper`]: a private single-node ZooKeeper for a test ClickHouse cluster
//! (replicated tables and `ON CLUSTER` DDL need one on ClickHouse 18.16).
//!
//! In: Debian's `zookeeper` package (`/usr/share/java/zookeeper.jar`, whose manifest
//! names its dependencies) and `java`. Out: a server on a free 127.0.0.1 port that
//! serves requests (its `srvr` four-letter command reports a `Mode:`).
//!
//! Invariants: runs `ZooKeeperServerMain` directly from a `zoo.cfg` in its own temp dir
//! (no admin server, no fsync: test data needs no durability); started through the same
//! keeper thread as ClickHouse, so it dies with its handle or the test process;
//! `start` returns only once the server serves requests: `ruok` answers `imok` as soon
//! as the process runs, before it accepts sessions, and a ClickHouse whose first
//! ZooKeeper handshake fails that way can crash (18.16's DDL worker), so readiness is
//! `srvr` reporting `Mode: standalone`.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::clickhouse::process::Keeper;
use crate::clickhouse::{pick_port, PORT_ATTEMPTS, START_DEADLINE};
use crate::TestkitError;

/// How to install ZooKeeper when it is missing.
pub(crate) const INSTALL_HINT: &str = "install it with `sudo apt-get install -y zookeeper` \
     (or run `make test`, which installs it through `deploy/dev/clickhouse.sh install-zookeeper`)";

/// Where Debian puts the server jar.
const JARS: &[&str] = &["/usr/share/java/zookeeper.jar"];

/// A running private ZooKeeper.
pub struct ZooKeeper {
    /// Client port on 127.0.0.1.
    pub port: u16,
    keeper: Keeper,
    /// Dropped after the keeper, so the directory is removed once the server is dead.
    dir: tempfile::TempDir,
}

impl ZooKeeper {
    /// Starts a private server on a free port and waits until it serves requests.
    pub fn start() -> Result<ZooKeeper, TestkitError> {
        let (java, jar) = find_installation()?;
        let mut last = None;
        for _ in 0..PORT_ATTEMPTS {
            match Self::try_start(&java, &jar) {
                Ok(zk) => return Ok(zk),
                // A port taken meanwhile makes the server exit at once: try new ports.
                Err(e @ TestkitError::StartFailed { .. }) => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| TestkitError::StartFailed {
            reason: "ZooKeeper: no attempt was made".into(),
            log_tail: String::new(),
        }))
    }

    fn try_start(java: &Path, jar: &Path) -> Result<ZooKeeper, TestkitError> {
        let dir = tempfile::Builder::new()
            .prefix("rankscope-zookeeper-")
            .tempdir()
            .map_err(|e| TestkitError::io("create a temp dir for ZooKeeper", e))?;
        let port = pick_port("ZooKeeper client")?;
        let data = dir.path().join("data");
        std::fs::create_dir_all(&data)
            .map_err(|e| TestkitError::io(format!("create {data:?}"), e))?;
        let cfg = dir.path().join("zoo.cfg");
        let text = format!(
            "tickTime=2000\ninitLimit=10\nsyncLimit=5\ndataDir={}\nclientPort={port}\n\
             clientPortAddress=127.0.0.1\nmaxClientCnxns=0\nadmin.enableServer=false\n\
             4lw.commands.whitelist=srvr\nforceSync=no\n",
            data.display()
        );
        std::fs::write(&cfg, text).map_err(|e| TestkitError::io(format!("write {cfg:?}"), e))?;
        let mut command = Command::new(java);
        command
            .args(["-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"])
            .arg("-cp")
            .arg(jar)
            .arg("org.apache.zookeeper.server.ZooKeeperServerMain")
            .arg(&cfg);
        let keeper = Keeper::spawn_command(command, dir.path(), "zookeeper")?;
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let deadline = Instant::now() + START_DEADLINE;
        loop {
            if let Some(status) = keeper.exit_status() {
                return Err(start_failed(
                    format!("the ZooKeeper process exited early ({status})"),
                    dir.path(),
                ));
            }
            match serving(addr) {
                Ok(()) => break,
                Err(e) if Instant::now() >= deadline => {
                    drop(keeper);
                    return Err(start_failed(
                        format!("not serving on {addr} within {START_DEADLINE:?}: {e}"),
                        dir.path(),
                    ));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(25)),
            }
        }
        Ok(ZooKeeper { port, keeper, dir })
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.keeper.pid
    }

    /// The server's state directory.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl std::fmt::Debug for ZooKeeper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZooKeeper")
            .field("port", &self.port)
            .finish()
    }
}

/// Sends `srvr`; `Ok` when the server reports its mode (it serves requests).
fn serving(addr: SocketAddr) -> std::io::Result<()> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(1))?;
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    stream.write_all(b"srvr")?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    if answer.lines().any(|l| l.starts_with("Mode: ")) {
        Ok(())
    } else {
        Err(std::io::Error::other(format!(
            "srvr answered {:?}",
            answer.trim()
        )))
    }
}

fn start_failed(reason: String, dir: &Path) -> TestkitError {
    let log = std::fs::read_to_string(dir.join("stderr.log")).unwrap_or_default();
    let lines: Vec<&str> = log.lines().collect();
    TestkitError::StartFailed {
        reason,
        log_tail: lines[lines.len().saturating_sub(30)..].join("\n"),
    }
}

/// `java` and the ZooKeeper server jar, or an error naming the install command.
fn find_installation() -> Result<(PathBuf, PathBuf), TestkitError> {
    let jar = JARS.iter().map(PathBuf::from).find(|p| p.is_file());
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    dirs.push(PathBuf::from("/usr/bin"));
    let java = dirs.iter().map(|d| d.join("java")).find(|p| p.is_file());
    match (java, jar) {
        (Some(java), Some(jar)) => Ok((java, jar)),
        (java, jar) => Err(TestkitError::ZooKeeperNotInstalled(format!(
            "{}; {INSTALL_HINT}",
            match (java, jar) {
                (None, _) => "no `java` on PATH or in /usr/bin".to_string(),
                _ => format!("no ZooKeeper server jar at {}", JARS.join(", ")),
            }
        ))),
    }
}
