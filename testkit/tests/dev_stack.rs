//! The README's path for a newcomer: `make up` (deploy/dev/stack.sh), then
//! `rankscope run -- torchrun ... train.py` with no flags is recorded,
//! because the stack's agent listens where the rank SDK looks by default;
//! with no agent, each rank says so once on stderr and trains on.
//!
//! The stack script runs for real (its own ClickHouse, collector and agent,
//! this build's debug binaries) on free ports, with a private state dir and
//! `XDG_RUNTIME_DIR`, so a `make up` stack of the machine is left alone.
//! Real PyTorch (2 gloo ranks under torchrun, the venv of `make py`).

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn repo() -> PathBuf {
    rankscope_testkit::workspace_root()
}

/// target/debug, where this build's binaries are.
fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test exe");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target dir")
        .to_owned();
    for b in ["rankscope", "rankscope-agent", "rankscope-collector"] {
        assert!(
            dir.join(b).exists(),
            "{} was not built",
            dir.join(b).display()
        );
    }
    dir
}

/// A `deploy/dev/stack.sh` stack on free ports; `down` on drop.
struct DevStack {
    env: Vec<(String, String)>,
    http_port: u16,
    _dir: tempfile::TempDir,
}

impl DevStack {
    fn up(dir: tempfile::TempDir, xdg: &Path) -> Self {
        let port = || rankscope_testkit::free_port().to_string();
        let http_port = rankscope_testkit::free_port();
        let env = vec![
            (
                "RANKSCOPE_STATE_DIR".into(),
                dir.path().join("state").display().to_string(),
            ),
            ("RANKSCOPE_BIN_DIR".into(), bin_dir().display().to_string()),
            ("XDG_RUNTIME_DIR".into(), xdg.display().to_string()),
            ("RANKSCOPE_DEV_GRPC_PORT".into(), port()),
            ("RANKSCOPE_DEV_HTTP_PORT".into(), http_port.to_string()),
            ("RANKSCOPE_DEV_AGENT_PORT".into(), port()),
            ("RANKSCOPE_DEV_AGENT_METRICS_PORT".into(), port()),
            ("RANKSCOPE_DEV_CLICKHOUSE_HTTP_PORT".into(), port()),
            ("RANKSCOPE_DEV_CLICKHOUSE_TCP_PORT".into(), port()),
        ];
        let stack = Self {
            env,
            http_port,
            _dir: dir,
        };
        let out = stack.script("up");
        assert!(out.status.success(), "stack.sh up failed:\n{}", text(&out));
        stack
    }

    fn script(&self, verb: &str) -> Output {
        Command::new("bash")
            .arg(repo().join("deploy/dev/stack.sh"))
            .arg(verb)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .env_remove("RANKSCOPE_CLICKHOUSE_URL")
            .stdin(Stdio::null())
            .output()
            .expect("stack.sh runs")
    }

    /// The jobs the stack's collector lists (JSON).
    fn jobs(&self) -> Vec<serde_json::Value> {
        let out = Command::new(bin_dir().join("rankscope"))
            .args([
                "--collector",
                &format!("http://127.0.0.1:{}", self.http_port),
            ])
            .args(["jobs", "--format", "json"])
            .output()
            .expect("rankscope jobs runs");
        assert!(out.status.success(), "rankscope jobs:\n{}", text(&out));
        serde_json::from_slice(&out.stdout).expect("jobs JSON")
    }
}

impl Drop for DevStack {
    fn drop(&mut self) {
        let _ = self.script("down");
    }
}

fn text(out: &Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `rankscope run -- python -m torch.distributed.run --nproc-per-node 2
/// ddp_train.py --steps 4`, with no --agent, no --job and no
/// RANKSCOPE_AGENT: the ranks look where the SDK looks by default.
fn run_with_no_flags(xdg: &Path, cache: &Path) -> Output {
    Command::new(bin_dir().join("rankscope"))
        .arg("run")
        .arg("--")
        .arg(rankscope_testkit::venv_python())
        .args(["-m", "torch.distributed.run", "--nproc-per-node", "2"])
        .arg("--master-port")
        .arg(rankscope_testkit::free_port().to_string())
        .arg(repo().join("python/tests/workloads/ddp_train.py"))
        .args(["--steps", "4"])
        .env("XDG_RUNTIME_DIR", xdg)
        .env("XDG_CACHE_HOME", cache)
        .env("OMP_NUM_THREADS", "1")
        .env_remove("RANKSCOPE_AGENT")
        .env_remove("RANKSCOPE_JOB_ID")
        .stdin(Stdio::null())
        .output()
        .expect("rankscope run starts")
}

fn private_dirs() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("temp dir");
    let xdg = dir.path().join("xdg");
    std::fs::create_dir(&xdg).expect("xdg dir");
    (dir, xdg)
}

#[test]
fn after_make_up_a_torchrun_job_under_rankscope_run_with_no_flags_is_recorded() {
    let _serial = crate::common::SERIAL.blocking_lock();
    let (dir, xdg) = private_dirs();
    let cache = dir.path().join("cache");
    let stack = DevStack::up(dir, &xdg);
    let out = run_with_no_flags(&xdg, &cache);
    assert!(out.status.success(), "training failed:\n{}", text(&out));
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("no agent at"),
        "a rank found no agent:\n{}",
        text(&out)
    );
    // The stack is this test's own: the one job it lists is the launch's.
    // The ranks flushed on exit; the collector stores within its flush interval.
    let deadline = Instant::now() + Duration::from_secs(60);
    let found = loop {
        let jobs = stack.jobs();
        assert!(jobs.len() <= 1, "one launch, one job: {jobs:?}");
        let row = jobs.into_iter().next();
        if let Some(row) = row.filter(|r| r["ranks_seen"] == 2 && r["last_step"].is_u64()) {
            break row;
        }
        assert!(
            Instant::now() < deadline,
            "the job was not recorded: {:?}",
            stack.jobs()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(
        found["job"]
            .as_str()
            .is_some_and(|j| j.starts_with("ddp_train-")),
        "rankscope run's launch id names a single-node job: {found}"
    );
    assert_eq!(found["world_size"], 2, "{found}");
}

#[test]
fn with_no_agent_each_rank_says_once_where_it_looked_and_trains_on() {
    let _serial = crate::common::SERIAL.blocking_lock();
    let (dir, xdg) = private_dirs();
    let out = run_with_no_flags(&xdg, &dir.path().join("cache"));
    assert!(
        out.status.success(),
        "training did not go on:\n{}",
        text(&out)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    let expected = format!(
        "no agent at unix:{}",
        xdg.join("rankscope/agent.sock").display()
    );
    // The ranks (and torch's C++ logging) share stderr: a notice is one
    // write but may start mid-line, so count it in the whole text.
    assert_eq!(
        err.matches("no agent at").count(),
        2,
        "one per rank:\n{err}"
    );
    for rank in 0..2 {
        assert_eq!(
            err.matches(&format!("rankscope: rank {rank} of job"))
                .count(),
            1,
            "rank {rank}:\n{err}"
        );
    }
    assert_eq!(
        err.matches(expected.as_str()).count(),
        2,
        "{expected}:\n{err}"
    );
}
