//! Import + analysis of a multi-rank job, side by side with Holistic Trace
//! Analysis 0.5.0 (issue 15, goal 4).
//!
//! In: a folder of one Kineto trace per rank ([`synth::write_job`]), the
//! release binaries, a running collector. Out: a [`SideBySide`]: HTA's wall
//! time to load the traces and answer the temporal breakdown, the comm/comp
//! overlap and the potential stragglers (`bench/hta/side_by_side.py`, in a
//! venv this module makes from `bench/hta/requirements.txt`), and ours for
//! `rankscope import` (which returns once the job's analytics are final)
//! plus the same three answers from the API (`GET .../ranks`: per-rank
//! temporal breakdown with overlap; `GET .../stragglers`).
//! `import_vs_hta_speedup` = HTA's seconds / ours, both from the start of
//! the work to the last answer (HTA's interpreter start and module imports
//! are left out of its figure; our process start is in ours).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::http::HttpClient;
use crate::stack::Binaries;
use crate::{synth, sys, BenchError};

/// Ranks, steps and size of the side-by-side job (the issue's 32 x 40).
pub const RANKS: u32 = 32;
pub const STEPS: u64 = 40;
/// The compute straggler both tools should name.
pub const SLOW_RANK: u32 = 13;

/// HTA's run, as `side_by_side.py` reports it.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct HtaRun {
    pub hta_version: String,
    pub pandas_version: String,
    pub load_s: f64,
    pub temporal_breakdown_s: f64,
    pub comm_comp_overlap_s: f64,
    pub stragglers_s: f64,
    /// Load + the three analyses, HTA's own clock.
    pub total_s: f64,
    /// The python process, interpreter start included.
    #[serde(default)]
    pub process_wall_s: f64,
    #[serde(default)]
    pub process_cpu_s: f64,
    #[serde(default)]
    pub process_peak_rss_mib: f64,
    /// Ranks HTA names as potential stragglers.
    #[serde(default)]
    pub stragglers: Vec<u32>,
}

/// Ours: `rankscope import` (until analytics are final) and the answers.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct OursRun {
    /// Spawn -> the import command exited (its analytics final).
    pub import_s: f64,
    pub import_cpu_s: f64,
    /// The two API requests after it.
    pub answers_s: f64,
    pub total_s: f64,
    /// CPU seconds the collector and the ClickHouse server used meanwhile
    /// (`/proc/<pid>/stat` before and after).
    pub collector_cpu_s: f64,
    pub clickhouse_cpu_s: f64,
    /// Ranks with an active straggler verdict.
    pub stragglers: Vec<u32>,
    /// Per rank `overlap_pct` from `GET .../ranks` (for the report).
    pub ranks_answered: usize,
}

/// One side-by-side measurement.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct SideBySide {
    pub ranks: u32,
    pub steps: u64,
    pub json_bytes: u64,
    pub hta: Vec<HtaRun>,
    pub ours: Vec<OursRun>,
}

impl SideBySide {
    /// Median HTA seconds / median of ours.
    pub fn speedup(&self) -> f64 {
        let h: Vec<f64> = self.hta.iter().map(|r| r.total_s).collect();
        let o: Vec<f64> = self.ours.iter().map(|r| r.total_s).collect();
        crate::stats::median(&h) / crate::stats::median(&o)
    }
}

/// The venv's python, made on first use: `python3 -m venv <venv>` and
/// `pip install --no-deps -r bench/hta/requirements.txt` (the pinned
/// closure; PyPI must be reachable).
pub fn ensure_venv(repo: &Path, venv: &Path) -> Result<PathBuf, BenchError> {
    let python = venv.join("bin/python");
    let stamp = venv.join(".requirements");
    let req_path = repo.join("bench/hta/requirements.txt");
    let req = std::fs::read_to_string(&req_path)
        .map_err(BenchError::io(format!("read {}", req_path.display())))?;
    if python.exists() && std::fs::read_to_string(&stamp).ok().as_deref() == Some(&req) {
        return Ok(python);
    }
    let run = |cmd: &mut Command, what: &str| -> Result<(), BenchError> {
        let out = cmd
            .stdin(Stdio::null())
            .output()
            .map_err(BenchError::io(what.to_owned()))?;
        if out.status.success() {
            return Ok(());
        }
        Err(BenchError::Process {
            program: what.to_owned(),
            status: out.status.to_string(),
            detail: String::from_utf8_lossy(&out.stderr).into_owned(),
        })
    };
    run(
        Command::new("python3").args(["-m", "venv"]).arg(venv),
        "python3 -m venv (for HTA)",
    )?;
    run(
        Command::new(&python)
            .args(["-m", "pip", "install", "--quiet", "--no-deps", "-r"])
            .arg(&req_path),
        "pip install -r bench/hta/requirements.txt",
    )?;
    std::fs::write(&stamp, req).map_err(BenchError::io("write the venv stamp"))?;
    Ok(python)
}

/// Runs `side_by_side.py <dir>` and reads its JSON.
pub fn run_hta(python: &Path, repo: &Path, dir: &Path, log: &Path) -> Result<HtaRun, BenchError> {
    let out_path = log.with_extension("json");
    let out = std::fs::File::create(&out_path)
        .map_err(BenchError::io(format!("create {}", out_path.display())))?;
    let err =
        std::fs::File::create(log).map_err(BenchError::io(format!("create {}", log.display())))?;
    let mut cmd = Command::new(python);
    cmd.arg(repo.join("bench/hta/side_by_side.py"))
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err);
    let started = Instant::now();
    let child = sys::spawn(&mut cmd)?;
    let r = sys::reap_blocking(child.id(), Duration::from_secs(3600), "HTA side_by_side.py")?;
    let wall = started.elapsed().as_secs_f64();
    if !r.status.success() {
        return Err(BenchError::Process {
            program: "bench/hta/side_by_side.py".into(),
            status: r.status.to_string(),
            detail: std::fs::read_to_string(log).unwrap_or_default(),
        });
    }
    let text = std::fs::read_to_string(&out_path)
        .map_err(BenchError::io(format!("read {}", out_path.display())))?;
    let mut run: HtaRun = serde_json::from_str(&text)
        .map_err(|e| BenchError::Check(format!("HTA's output is not the expected JSON: {e}")))?;
    run.process_wall_s = wall;
    run.process_cpu_s = r.cpu_s;
    run.process_peak_rss_mib = r.max_rss_mib;
    Ok(run)
}

/// `rankscope import` of every file of `dir` as `job` (it returns once the
/// analytics are final), then the per-rank breakdown and the stragglers.
#[allow(clippy::too_many_arguments)]
pub async fn run_ours(
    bins: &Binaries,
    http: &HttpClient,
    grpc_url: &str,
    http_url: &str,
    job: &str,
    dir: &Path,
    log: &Path,
    pids: (u32, Option<u32>),
) -> Result<OursRun, BenchError> {
    let cpu = |pid: Option<u32>| pid.and_then(|p| sys::cpu_s(p).ok()).unwrap_or(f64::NAN);
    let (collector0, clickhouse0) = (cpu(Some(pids.0)), cpu(pids.1));
    let (import_s, r) = crate::import::run_import(
        bins,
        (grpc_url, http_url),
        job,
        &[dir.to_path_buf()],
        true,
        log,
        "side by side with HTA",
    )?;
    let asked = Instant::now();
    let ranks = http
        .get_ok(&format!("{http_url}/api/v1/jobs/{job}/ranks"))
        .await?
        .json()?;
    let stragglers = http
        .get_ok(&format!("{http_url}/api/v1/jobs/{job}/stragglers"))
        .await?
        .json()?;
    let answers_s = asked.elapsed().as_secs_f64();
    let total_s = import_s + answers_s;
    let (collector1, clickhouse1) = (cpu(Some(pids.0)), cpu(pids.1));
    let ranks_answered = ranks["ranks"].as_array().map_or(0, Vec::len);
    let mut active: Vec<u32> = stragglers["stragglers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|s| s["active"] == true)
        .filter_map(|s| s["rank"].as_u64().map(|r| r as u32))
        .collect();
    active.sort_unstable();
    active.dedup();
    Ok(OursRun {
        import_s,
        import_cpu_s: r.cpu_s,
        answers_s,
        total_s,
        collector_cpu_s: collector1 - collector0,
        clickhouse_cpu_s: clickhouse1 - clickhouse0,
        stragglers: active,
        ranks_answered,
    })
}

/// Writes the job, then `runs` alternating HTA / ours measurements.
#[allow(clippy::too_many_arguments)]
pub async fn run(
    bins: &Binaries,
    http: &HttpClient,
    repo: &Path,
    scratch: &Path,
    venv: &Path,
    grpc_url: &str,
    http_url: &str,
    pids: (u32, Option<u32>),
    total_mb: u64,
    runs: usize,
) -> Result<SideBySide, BenchError> {
    let python = ensure_venv(repo, venv)?;
    let dir = scratch.join("hta-job");
    let traces = synth::write_job(&dir, RANKS, STEPS, total_mb * 1_000_000, SLOW_RANK)?;
    let mut sbs = SideBySide {
        ranks: RANKS,
        steps: STEPS,
        json_bytes: traces.iter().map(|t| t.bytes).sum(),
        ..SideBySide::default()
    };
    for i in 0..runs {
        let hta = run_hta(&python, repo, &dir, &scratch.join(format!("hta-{i}.log")))?;
        let job = format!("bench-hta-{i}");
        let ours = run_ours(
            bins,
            http,
            grpc_url,
            http_url,
            &job,
            &dir,
            &scratch.join(format!("hta-ours-{i}.log")),
            pids,
        )
        .await?;
        if ours.ranks_answered != RANKS as usize {
            return Err(BenchError::Check(format!(
                "{job}: the ranks route answered {} ranks, wanted {RANKS}",
                ours.ranks_answered
            )));
        }
        if !ours.stragglers.contains(&SLOW_RANK) {
            return Err(BenchError::Check(format!(
                "{job}: rank {SLOW_RANK} is not an active straggler (active: {:?})",
                ours.stragglers
            )));
        }
        sbs.hta.push(hta);
        sbs.ours.push(ours);
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(sbs)
}
