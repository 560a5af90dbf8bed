//! Agent idle cost: an agent with no rank connected, sampling 8 GPUs at
//! 10 Hz through the NVML stand-in, forwarding the samples to a collector.
//!
//! In: the repository (for `agent/tests/nvml_stub/nvml_stub.c`), a C
//! compiler (`$CC` or `cc`), a running collector. Out: an [`IdleRun`]: CPU %
//! of one core (CPU seconds / wall seconds x 100) over [`WINDOWS`] windows of
//! [`WINDOW`] after a warm-up, and the agent's RSS; or, when the stand-in or
//! the agent's sampling options are absent, the reason it was not measured.
//!
//! The stand-in is the same C library the agent's tests build (`cc -shared
//! -fPIC`); it is configured with 8 H100-like GPUs with GPM metrics, and the
//! agent loads it through `nvml_library_path` with `gpu_sample_interval_ms`
//! and `host_sample_interval_ms` = 100. A baseline with sampling disabled
//! is measured the same way.
//!
//! Realtime ([`REALTIME_EVENTS_PER_S`]): `rankscope simulate` streams 8
//! ranks into a sampling agent, paced (`--rate`) at the per-node rate of the
//! scale model in RESULTS.md (2.7 M events/s over 2,048 nodes of 8 ranks:
//! about 1,318 events/s, 165 per rank), CPU % over the same windows. The
//! figure, `agent_cpu_pct_8_ranks_realtime` (issue 15, goal 3: "8 ranks at a
//! realistic rate + 8 GPUs at 10 Hz"), is a fresh agent sampling the GPUs at
//! 10 Hz and the host at its default interval (1 s); the idle agent above
//! (host also at 10 Hz) is measured the same way as detail.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::stack::{generated_config, AgentProc, Binaries, Override};
use crate::stats::median;
use crate::{sys, BenchError};

/// Measured windows.
pub const WINDOWS: usize = 3;
/// Length of one window.
pub const WINDOW: Duration = Duration::from_secs(5);
/// Stand-in GPUs.
pub const GPUS: u32 = 8;
/// Sampling interval, ms (10 Hz).
pub const INTERVAL_MS: i64 = 100;
/// Ranks of the realtime measurement (one node).
pub const REALTIME_RANKS: u32 = 8;
/// Their events per second together: the scale model's per-node rate.
pub const REALTIME_EVENTS_PER_S: f64 = 2.7e6 / 2048.0;
/// Layers of the simulated model (336 events per rank-step at 12).
const REALTIME_LAYERS: u32 = 12;
/// Events of one step of all ranks at [`REALTIME_LAYERS`].
const REALTIME_EVENTS_PER_STEP: f64 = 336.0 * REALTIME_RANKS as f64;
/// The simulated job lasts this long (warm-up, the windows, a margin).
const REALTIME_RUN: Duration = Duration::from_secs(30);

/// Result of the idle measurement.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct IdleRun {
    /// CPU % of one core per window, sampling 8 GPUs + host at 10 Hz.
    pub cpu_pct: Vec<f64>,
    /// CPU % of one core with sampling disabled (one window).
    pub baseline_cpu_pct: f64,
    pub rss_mib: f64,
    /// CPU % of one core per window while 8 simulated ranks stream
    /// [`REALTIME_EVENTS_PER_S`] into an agent sampling 8 GPUs at 10 Hz and
    /// the host at the default interval.
    #[serde(default)]
    pub realtime_cpu_pct: Vec<f64>,
    /// The same with the host also sampled at 10 Hz (the idle agent).
    #[serde(default)]
    pub realtime_host_10hz_cpu_pct: Vec<f64>,
    /// Events the simulated ranks sent per second over their whole run
    /// (accepted / wall time), and how many the agent dropped.
    #[serde(default)]
    pub realtime_events_per_s: f64,
    #[serde(default)]
    pub realtime_dropped: u64,
    /// Why it was not measured, when it was not.
    pub not_measured: Option<String>,
}

/// The stand-in's C source, when present.
pub fn stub_source(repo: &Path) -> Option<PathBuf> {
    let p = repo.join("agent/tests/nvml_stub/nvml_stub.c");
    p.is_file().then_some(p)
}

/// Builds the stand-in into `dir` and writes its config for 8 GPUs.
fn build_stub(source: &Path, dir: &Path) -> Result<PathBuf, BenchError> {
    std::fs::create_dir_all(dir).map_err(BenchError::io("create stub dir"))?;
    let lib = dir.join("libnvidia-ml.so.1");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&cc)
        .args(["-shared", "-fPIC", "-O2", "-o"])
        .arg(&lib)
        .arg(source)
        .args(["-lpthread", "-ldl"])
        .output()
        .map_err(BenchError::io(format!("run {cc}")))?;
    if !out.status.success() {
        return Err(BenchError::Process {
            program: format!("{cc} (NVML stand-in)"),
            status: out.status.to_string(),
            detail: String::from_utf8_lossy(&out.stderr).into_owned(),
        });
    }
    let mut conf = format!("device_count {GPUS}\n");
    for i in 0..GPUS {
        conf.push_str(&format!(
            "gpu {i} gpm 1\ngpu {i} gpm_sm_active 80\ngpu {i} gpm_sm_occupancy 40\ngpu {i} gpm_tensor 60\n"
        ));
    }
    std::fs::write(dir.join("nvml-stub.conf"), conf)
        .map_err(BenchError::io("write stub config"))?;
    Ok(lib)
}

/// CPU % of one core used by `pid` over `window` (schedstat: the 10 ms
/// ticks of `/proc/<pid>/stat` are too coarse for an idle process).
async fn cpu_pct(pid: u32, window: Duration) -> Result<f64, BenchError> {
    let c0 = sys::cpu_s_precise(pid)?;
    let t0 = Instant::now();
    tokio::time::sleep(window).await;
    let c1 = sys::cpu_s_precise(pid)?;
    Ok((c1 - c0) / t0.elapsed().as_secs_f64() * 100.0)
}

/// Measures the idle agent; `collector_grpc_url` receives its samples.
pub async fn run(
    bins: &Binaries,
    repo: &Path,
    dir: &Path,
    collector_grpc_url: &str,
) -> Result<IdleRun, BenchError> {
    let Some(source) = stub_source(repo) else {
        return Ok(IdleRun {
            not_measured: Some(format!(
                "the NVML stand-in {} does not exist",
                repo.join("agent/tests/nvml_stub/nvml_stub.c").display()
            )),
            ..IdleRun::default()
        });
    };
    let defaults: toml::Table = toml::from_str(&generated_config(&bins.agent(), &[])?)
        .map_err(|e| BenchError::parse("agent gen-config", e))?;
    for key in [
        "gpu_sample_interval_ms",
        "host_sample_interval_ms",
        "nvml_library_path",
    ] {
        if !defaults.contains_key(key) {
            return Ok(IdleRun {
                not_measured: Some(format!("the agent has no `{key}` option")),
                ..IdleRun::default()
            });
        }
    }
    let lib = build_stub(&source, &dir.join("nvml-stub"))?;

    let off = [
        Override::new("gpu_sample_interval_ms", 0),
        Override::new("host_sample_interval_ms", 0),
    ];
    let mut base = AgentProc::start(bins, collector_grpc_url, dir, "idle-off", &off, &[]).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let baseline_cpu_pct = cpu_pct(base.pid, WINDOW).await?;
    base.stop();

    let on = [
        Override::new("gpu_sample_interval_ms", INTERVAL_MS),
        Override::new("host_sample_interval_ms", INTERVAL_MS),
        Override::new("nvml_library_path", lib.to_string_lossy().into_owned()),
    ];
    let env = [("RUST_LOG".to_owned(), "info".to_owned())];
    let mut agent = AgentProc::start(bins, collector_grpc_url, dir, "idle", &on, &env).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mut pcts = Vec::new();
    for _ in 0..WINDOWS {
        pcts.push(cpu_pct(agent.pid, WINDOW).await?);
    }
    let rss_mib = sys::status_mib(agent.pid, "VmRSS")?;
    let realtime_host_10hz = realtime(bins, dir, &agent, "host-10hz").await;
    agent.stop();
    let log = std::fs::read_to_string(&agent.log).unwrap_or_default();
    let sampled = log.matches("GPU sampled").count();
    if log.contains("NVML unavailable") || sampled < GPUS as usize {
        let reason = log
            .lines()
            .find(|l| l.contains("NVML"))
            .unwrap_or("no \"GPU sampled\" lines in the agent log")
            .to_owned();
        return Ok(IdleRun {
            not_measured: Some(format!(
                "the agent did not sample the {GPUS} stand-in GPUs ({sampled} seen): {reason}"
            )),
            baseline_cpu_pct,
            ..IdleRun::default()
        });
    }
    let (realtime_host_10hz_cpu_pct, _, _) = realtime_host_10hz?;
    // The goal's configuration: GPUs at 10 Hz, the host at its default.
    let gpus_only = [
        Override::new("gpu_sample_interval_ms", INTERVAL_MS),
        Override::new("nvml_library_path", lib.to_string_lossy().into_owned()),
    ];
    let mut agent =
        AgentProc::start(bins, collector_grpc_url, dir, "realtime", &gpus_only, &env).await?;
    let realtime = realtime(bins, dir, &agent, "gpus-10hz").await;
    agent.stop();
    let (realtime_cpu_pct, realtime_events_per_s, realtime_dropped) = realtime?;
    Ok(IdleRun {
        baseline_cpu_pct,
        rss_mib,
        realtime_cpu_pct,
        realtime_host_10hz_cpu_pct,
        realtime_events_per_s,
        realtime_dropped,
        not_measured: None,
        cpu_pct: pcts,
    })
}

/// CPU % windows of `agent` while 8 simulated ranks stream into it at
/// [`REALTIME_EVENTS_PER_S`]; with the rate achieved and the drops.
async fn realtime(
    bins: &Binaries,
    dir: &Path,
    agent: &AgentProc,
    name: &str,
) -> Result<(Vec<f64>, f64, u64), BenchError> {
    let steps = (REALTIME_EVENTS_PER_S * REALTIME_RUN.as_secs_f64() / REALTIME_EVENTS_PER_STEP)
        .ceil() as u64;
    let summary = dir.join(format!("simulate-realtime-{name}.json"));
    let out = std::fs::File::create(&summary).map_err(BenchError::io("create summary file"))?;
    let mut cmd = Command::new(bins.rankscope());
    cmd.args(["simulate", "--format", "json", "--agent", &agent.url])
        .args(["--job", &format!("bench-agent-realtime-{name}")])
        .args(["--ranks", &REALTIME_RANKS.to_string()])
        .args(["--layers", &REALTIME_LAYERS.to_string()])
        .args(["--steps", &steps.to_string()])
        .args(["--rate", &format!("{REALTIME_EVENTS_PER_S:.1}")])
        .env("RUST_BACKTRACE", "0")
        .stdin(std::process::Stdio::null())
        .stdout(out);
    let started = Instant::now();
    let sim = sys::spawn(&mut cmd)?;
    // Warm-up: the ranks connect and the pacing settles.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mut pcts = Vec::new();
    for _ in 0..WINDOWS {
        pcts.push(cpu_pct(agent.pid, WINDOW).await?);
    }
    let deadline = started + REALTIME_RUN * 3;
    let reaped = loop {
        if let Some(r) = sys::try_reap(sim.id())? {
            break r;
        }
        if Instant::now() > deadline {
            return Err(BenchError::Timeout {
                what: "the realtime simulation to end".into(),
                secs: (REALTIME_RUN * 3).as_secs(),
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let elapsed = started.elapsed().as_secs_f64();
    if !reaped.status.success() {
        return Err(BenchError::Process {
            program: "rankscope simulate (realtime)".into(),
            status: reaped.status.to_string(),
            detail: std::fs::read_to_string(&summary).unwrap_or_default(),
        });
    }
    let (accepted, dropped) = crate::e2e::summary_counts(&summary)?;
    Ok((pcts, accepted as f64 / elapsed, dropped))
}

/// Median CPU % of the realtime windows (NaN when not measured).
pub fn median_realtime_pct(r: &IdleRun) -> f64 {
    median(&r.realtime_cpu_pct)
}

/// Median CPU % of the sampling windows (NaN when not measured).
pub fn median_pct(r: &IdleRun) -> f64 {
    median(&r.cpu_pct)
}
