//! Trace import speed: `rankscope import` on the real trace sets and on a
//! large synthetic trace, into a running collector.
//!
//! In: the trace-set folders (each imported as one job, one invocation per
//! set), a synthetic trace from [`synth`](crate::synth), a collector's gRPC
//! ingest URL. Out: per invocation an [`ImportRun`]: uncompressed JSON bytes,
//! wall time (process start to exit, i.e. including storage: the command
//! ends after the collector acknowledged every batch) and the import
//! process's own CPU seconds (`wait4` rusage). "Per core" = JSON MB per CPU
//! second of the import process; the collector's and ClickHouse's work is
//! reported by the end-to-end section.

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

/// Runs `rankscope import --job <job> --ingest <url> <paths>`.
pub fn import(
    bins: &Binaries,
    ingest_url: &str,
    job: &str,
    name: &str,
    paths: &[PathBuf],
    json_bytes: u64,
    log: &Path,
) -> Result<ImportRun, BenchError> {
    let log_file =
        std::fs::File::create(log).map_err(BenchError::io(format!("create {}", log.display())))?;
    let mut cmd = Command::new(bins.rankscope());
    cmd.args(["import", "--job", job, "--ingest", ingest_url])
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
            program: format!("rankscope import ({name})"),
            status: r.status.to_string(),
            detail: std::fs::read_to_string(log).unwrap_or_default(),
        });
    }
    Ok(ImportRun {
        name: name.to_owned(),
        files: paths.len(),
        json_bytes,
        elapsed_s,
        cpu_s: r.cpu_s,
    })
}
