//! Trace import speed: `rankscope import` on the real trace sets and on a
//! large synthetic trace, into a running collector.
//!
//! In: the trace-set folders (each imported as one job, one invocation per
//! set), a synthetic trace from [`synth`](crate::synth), a collector's gRPC
//! ingest URL. Out: per invocation an [`ImportRun`]: uncompressed JSON bytes,
//! wall time (process start to exit, i.e. including storage: the command
//! ends after the collector acknowledged every batch) and the import
//! process's own CPU seconds (`wait4` rusage), and the wall time until the
//! job's analytics are final ([`wait_final`]), the headline. "Per core" =
//! JSON MB per CPU second of the import process; the collector's and
//! ClickHouse's work is reported by the end-to-end section.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::stack::Binaries;
use crate::{sys, BenchError};

/// One `rankscope import` invocation.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ImportRun {
    pub name: String,
    pub files: usize,
    /// Uncompressed JSON bytes.
    pub json_bytes: u64,
    pub elapsed_s: f64,
    pub cpu_s: f64,
    /// Start -> the job's analytics are final (the breakdown of its last
    /// step covers every rank that reached it), wall seconds.
    pub final_s: f64,
}

impl ImportRun {
    /// Wall-clock JSON MB/s (10^6 bytes).
    pub fn mb_per_s(&self) -> f64 {
        self.json_bytes as f64 / 1e6 / self.elapsed_s
    }

    /// JSON MB per CPU second of the import process.
    pub fn mb_per_cpu_s(&self) -> f64 {
        self.json_bytes as f64 / 1e6 / self.cpu_s
    }

    /// Wall-clock JSON MB/s until the job's analytics are final.
    pub fn mb_per_final_s(&self) -> f64 {
        self.json_bytes as f64 / 1e6 / self.final_s
    }
}

/// A folder of trace files to import as one job.
#[derive(Debug, Clone)]
pub struct TraceSet {
    pub name: String,
    pub dir: PathBuf,
    pub files: Vec<PathBuf>,
    pub json_bytes: u64,
}

fn is_trace(p: &Path) -> bool {
    let n = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
    (n.ends_with(".json.gz") || n.ends_with(".json")) && !n.starts_with("expected")
}

/// Uncompressed size of a `.json` or `.json.gz` file.
pub fn json_bytes(path: &Path) -> Result<u64, BenchError> {
    let f =
        std::fs::File::open(path).map_err(BenchError::io(format!("open {}", path.display())))?;
    if path.extension().is_some_and(|e| e == "gz") {
        let mut d = flate2::read::MultiGzDecoder::new(std::io::BufReader::new(f));
        let mut buf = vec![0u8; 1 << 20];
        let mut n = 0u64;
        loop {
            let k = d
                .read(&mut buf)
                .map_err(BenchError::io(format!("gunzip {}", path.display())))?;
            if k == 0 {
                return Ok(n);
            }
            n += k as u64;
        }
    }
    Ok(f.metadata().map_err(BenchError::io("stat"))?.len())
}

/// The trace sets under `root` (sorted by name).
pub fn trace_sets(root: &Path) -> Result<Vec<TraceSet>, BenchError> {
    let mut sets = Vec::new();
    let entries =
        std::fs::read_dir(root).map_err(BenchError::io(format!("read {}", root.display())))?;
    for e in entries {
        let dir = e.map_err(BenchError::io("read dir entry"))?.path();
        if !dir.is_dir() {
            continue;
        }
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .map_err(BenchError::io(format!("read {}", dir.display())))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_file() && is_trace(p))
            .collect();
        if files.is_empty() {
            continue;
        }
        files.sort();
        let mut json = 0;
        for f in &files {
            json += json_bytes(f)?;
        }
        sets.push(TraceSet {
            name: dir
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            dir,
            files,
            json_bytes: json,
        });
    }
    sets.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(sets)
}

/// Runs `rankscope --collector <http> import [--wait-secs 0] --job <job>
/// --ingest <grpc> <paths>` (with `wait`, it returns once the job's
/// analytics are final); the wall seconds and rusage of the process, or its
/// log as the error.
pub fn run_import(
    bins: &Binaries,
    (ingest_url, http_url): (&str, &str),
    job: &str,
    paths: &[PathBuf],
    wait: bool,
    log: &Path,
    what: &str,
) -> Result<(f64, sys::Reaped), BenchError> {
    let log_file =
        std::fs::File::create(log).map_err(BenchError::io(format!("create {}", log.display())))?;
    let mut cmd = Command::new(bins.rankscope());
    cmd.args(["--collector", http_url, "import"]);
    if !wait {
        cmd.args(["--wait-secs", "0"]);
    }
    cmd.args(["--job", job, "--ingest", ingest_url])
        .args(paths)
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log_file);
    let started = Instant::now();
    let child = sys::spawn(&mut cmd)?;
    let r = sys::reap_blocking(child.id(), Duration::from_secs(900), "rankscope import")?;
    let elapsed_s = started.elapsed().as_secs_f64();
    if !r.status.success() {
        return Err(BenchError::Process {
            program: format!("rankscope import ({what})"),
            status: r.status.to_string(),
            detail: std::fs::read_to_string(log).unwrap_or_default(),
        });
    }
    Ok((elapsed_s, r))
}

/// Runs `rankscope import` of one trace set without its own wait.
#[allow(clippy::too_many_arguments)]
pub fn import(
    bins: &Binaries,
    ingest_url: &str,
    http_url: &str,
    job: &str,
    name: &str,
    paths: &[PathBuf],
    json_bytes: u64,
    log: &Path,
) -> Result<ImportRun, BenchError> {
    // The bench waits for the analytics itself (`wait_final`: the last
    // step's breakdown of every rank), as the record always did: with its
    // own wait, `rankscope import` of the 500 MB synthetic trace saw 207 of
    // its 216 (step, rank) breakdowns final and timed out (open question).
    let (elapsed_s, r) = run_import(bins, (ingest_url, http_url), job, paths, false, log, name)?;
    Ok(ImportRun {
        name: name.to_owned(),
        files: paths.len(),
        json_bytes,
        elapsed_s,
        cpu_s: r.cpu_s,
        final_s: f64::NAN,
    })
}

/// Waits until `job`'s analytics are final: the breakdown of its last step
/// (`GET /api/v1/jobs/{job}/steps?last=1`) has a row for every rank that
/// ended that step. A step is final when all ranks of the job ended it or
/// `stream.step_timeout_ms` after the first did (a trace set holding only
/// some ranks of its job waits for the timeout). Returns `started` -> then.
pub async fn wait_final(
    http: &crate::http::HttpClient,
    http_url: &str,
    job: &str,
    started: Instant,
) -> Result<f64, BenchError> {
    let last = http
        .get_ok(&format!("{http_url}/api/v1/jobs/{job}/steps?last=1"))
        .await?
        .json()?;
    let rows = last["steps"].as_array().cloned().unwrap_or_default();
    let step = rows
        .iter()
        .filter_map(|r| r["step"].as_u64())
        .max()
        .ok_or_else(|| BenchError::Check(format!("{job}: no steps stored")))?;
    let ranks = rows
        .iter()
        .filter(|r| r["step"].as_u64() == Some(step))
        .count();
    let url = format!("{http_url}/api/v1/jobs/{job}/breakdown?step={step}");
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let r = http.get(&url).await?;
        if r.status == 200 && r.json()?["breakdown"].as_array().map_or(0, Vec::len) >= ranks {
            return Ok(started.elapsed().as_secs_f64());
        }
        if Instant::now() >= deadline {
            return Err(BenchError::Timeout {
                what: format!("the breakdown of step {step} of {job}"),
                secs: 300,
            });
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
