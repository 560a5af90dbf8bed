//! Replay of GPU capture kit output (README "GPU capture kit"): each
//! capture's `dump/` goes through a real collector into a private
//! ClickHouse (`rankscope-agent replay`'s code path), its `traces/<job>/`
//! are imported as job `<job>.trace`, then what a run must show is checked
//! and reported line by line.
//!
//! In: every folder under `testkit/fixtures/gpu-capture/` (committed,
//! trimmed captures), or only `$RANKSCOPE_GPU_CAPTURE` when set (`make
//! gpu-replay DIR=...`). Whether a capture had a GPU comes from its
//! `versions.txt` (`cuda available: True`, written by capture.sh); the GPU
//! checks of a CPU capture are reported "not applicable", never passed
//! silently. Checks:
//! * the dump replays, and a second replay is stored once (all duplicates);
//! * every (rank, step) of the straggler job is stored;
//! * the planted slow rank (its `job-*.json`) is named with cause `compute`;
//! * GPU: samples with the GPU's name and `GPU-` UUID; GPM fields (SM
//!   active, tensor activity) on Hopper; compute spans timed by CUDA events
//!   (a device >= 0); traced kernels per HTA kernel type, with NCCL's
//!   (COMMUNICATION) in a job whose collectives ran on NCCL over 2 or more
//!   ranks (a 1-rank communicator runs no kernel: there the trace's NCCL
//!   collectives are checked);
//! * every captured trace imports with rows.

use crate::common;

use std::path::{Path, PathBuf};

use common::*;
use rankscope_cli::import::{self, send};
use serde_json::Value;

/// The captures to replay.
fn captures() -> Vec<PathBuf> {
    if let Some(dir) = std::env::var_os("RANKSCOPE_GPU_CAPTURE").filter(|d| !d.is_empty()) {
        return vec![PathBuf::from(dir)];
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/gpu-capture");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap_or_else(|e| panic!("{}: {e}", root.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.join("dump").is_dir())
        .collect();
    dirs.sort();
    assert!(!dirs.is_empty(), "no capture under {}", root.display());
    dirs
}

/// What capture.sh recorded about the machine and the jobs.
struct Capture {
    dir: PathBuf,
    gpu: bool,
    hopper: bool,
    /// (job, its job-*.json facts).
    jobs: Vec<(String, Value)>,
}

impl Capture {
    fn read(dir: &Path) -> Self {
        let versions = std::fs::read_to_string(dir.join("versions.txt"))
            .unwrap_or_else(|e| panic!("{}/versions.txt: {e}", dir.display()));
        let gpu = versions.lines().any(|l| l.trim() == "cuda available: True");
        let hopper = versions.lines().any(|l| {
            l.starts_with("gpu ")
                && ["H100", "H200", "H800", "H20", "GH200"]
                    .iter()
                    .any(|h| l.contains(h))
        });
        let mut jobs = Vec::new();
        for e in std::fs::read_dir(dir).expect("capture dir") {
            let p = e.expect("entry").path();
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            if let Some(job) = name
                .strip_suffix(".json")
                .filter(|n| n.starts_with("gpukit-"))
            {
                let v: Value = serde_json::from_slice(&std::fs::read(&p).expect("job json"))
                    .unwrap_or_else(|e| panic!("{}: {e}", p.display()));
                jobs.push((job.to_owned(), v));
            }
        }
        jobs.sort_by(|a, b| a.0.cmp(&b.0));
        Self {
            dir: dir.to_owned(),
            gpu,
            hopper,
            jobs,
        }
    }
}

/// The check report: printed as it goes, failures collected.
struct Report {
    failed: Vec<String>,
    started: std::time::Instant,
}

impl Report {
    fn check(&mut self, what: &str, ok: bool, detail: impl std::fmt::Display) {
        let t = self.started.elapsed().as_secs_f64();
        println!(
            "{} [{t:5.1}s] {what}: {detail}",
            if ok { "ok  " } else { "FAIL" }
        );
        if !ok {
            self.failed.push(format!("{what}: {detail}"));
        }
    }
    fn not_applicable(&self, what: &str, why: &str) {
        println!("n/a  {what}: {why}");
    }
}

fn num(stack: &Stack, sql: &str) -> u64 {
    let sql = sql.replace("{db}", &stack.database);
    let out = stack.clickhouse.query(&sql).expect("query");
    out.trim()
        .parse()
        .unwrap_or_else(|_| panic!("{sql}: not a number: {out:?}"))
}

async fn replay_dump(stack: &Stack, dir: &Path) -> rankscope_agent::dump::ReplayReport {
    let cfg = rankscope_agent::Config {
        collector_url: format!("http://{}", stack.grpc_addr()),
        ..Default::default()
    };
    rankscope_agent::dump::replay(&cfg, &dir.join("dump"))
        .await
        .unwrap_or_else(|e| panic!("replay {}: {e}", dir.display()))
}

/// Imports each trace file of `dir` as job `job`: (file, rows) per file
/// imported, and the files that hold no timed event at all.
/// A daemon-mode trace has no `distributedInfo`: the importer takes the
/// rank from the name the agent gave the file (`<trace>-r<rank>-<pid>...`),
/// the world size comes from the job's facts.
async fn import_traces(
    stack: &Stack,
    dir: &Path,
    job: &str,
    world_size: Option<u32>,
) -> (Vec<(PathBuf, u64)>, Vec<PathBuf>) {
    let files = import::discover(&[dir.to_owned()]).expect("trace files");
    let send = send::SendOptions {
        parallel_files: 1,
        parse_threads: 1,
        ..stack.send_options()
    };
    let (mut imported, mut empty) = (Vec::new(), Vec::new());
    for f in files {
        let mut opts = import::ImportOptions::new(job);
        opts.world_size_override = Some(world_size.unwrap_or(1));
        match send::import_and_send(vec![f.clone()], &opts, &send).await {
            Ok(reports) => imported.push((f, reports.iter().map(|r| r.rows).sum())),
            Err(e)
                if [
                    "no event has a usable ts and dur",
                    "the trace holds no activity",
                ]
                .iter()
                .any(|m| e.to_string().contains(m)) =>
            {
                empty.push(f)
            }
            Err(e) => panic!("import {}: {e}", f.display()),
        }
    }
    (imported, empty)
}

async fn check_capture(cap: &Capture, r: &mut Report) {
    println!(
        "== {} ({})",
        cap.dir.display(),
        if cap.gpu { "GPU" } else { "CPU variant" }
    );
    let stack = Stack::start_without_agent().await;
    let first = replay_dump(&stack, &cap.dir).await;
    r.check(
        "dump replayed",
        first.batches > 0 && first.duplicates == 0,
        format!("{first:?}"),
    );
    let again = replay_dump(&stack, &cap.dir).await;
    r.check(
        "a second replay is stored once",
        again.duplicates == again.batches,
        format!("{again:?}"),
    );

    let straggler_jobs: Vec<&(String, Value)> = cap
        .jobs
        .iter()
        .filter(|(_, v)| v["slow_rank"].as_i64().unwrap_or(-1) >= 0)
        .collect();
    r.check(
        "a job with a planted slow rank",
        !straggler_jobs.is_empty(),
        format!("{:?}", cap.jobs.iter().map(|j| &j.0).collect::<Vec<_>>()),
    );
    for (job, info) in &straggler_jobs {
        let (ranks, steps) = (
            info["world_size"].as_u64().unwrap(),
            info["steps"].as_u64().unwrap(),
        );
        let pairs = num(&stack, &format!("SELECT count() FROM (SELECT DISTINCT rank, step FROM {{db}}.steps WHERE job_id = '{job}' AND kind = 'end')"));
        r.check(
            &format!("{job}: every (rank, step) stored"),
            pairs == ranks * steps,
            format!("{pairs} of {ranks} x {steps}"),
        );
        let rows = stack
            .api_poll(
                &format!("/api/v1/jobs/{job}/stragglers"),
                "stragglers",
                |rows| !rows.is_empty(),
            )
            .await;
        let slow = info["slow_rank"].as_u64().unwrap();
        let named = rows
            .iter()
            .any(|s| s["rank"] == slow && s["cause"] == "compute");
        if cap.gpu {
            // Reported, not required: whether the hardware showed anything.
            let ev: Vec<&Value> = rows.iter().map(|s| &s["evidence"]).collect();
            println!("info {job}: the straggler's GPU evidence: {ev:?}");
        }
        r.check(
            &format!("{job}: slow rank {slow} named, cause compute"),
            named && rows.len() == 1,
            Value::Array(rows),
        );
    }

    let samples = num(&stack, "SELECT count() FROM {db}.gpu_samples");
    if cap.gpu {
        let named = num(
            &stack,
            "SELECT count() FROM {db}.gpu_samples WHERE name != '' AND startsWith(uuid, 'GPU-')",
        );
        r.check(
            "GPU samples with name and UUID",
            named > 0 && named == samples,
            format!("{named} of {samples}"),
        );
        // Reported, not required: what NVML read on this GPU (non-NULL
        // samples of each field, and its largest value).
        let fields = [
            "gpu_util_pct",
            "mem_util_pct",
            "sm_active_pct",
            "sm_occupancy_pct",
            "tensor_active_pct",
            "dram_active_pct",
            "power_w",
            "temp_c",
            "sm_clock_mhz",
            "mem_clock_mhz",
            "throttle_mask",
            "pcie_tx_bytes_per_s",
            "nvlink_tx_bytes_per_s",
            "ecc_corrected_total",
            "xid_errors",
        ];
        let sql = fields
            .iter()
            .map(|f| format!("concat('{f} ', toString(countIf(isNotNull({f}))), ' max ', toString(max({f})))"))
            .collect::<Vec<_>>()
            .join(", ");
        let read = stack
            .clickhouse
            .query(&format!("SELECT {sql} FROM {}.gpu_samples", stack.database))
            .expect("GPU fields");
        println!(
            "info GPU fields read (of {samples} samples): {}",
            read.trim().replace('\t', "; ")
        );
        if cap.hopper {
            let gpm = num(&stack, "SELECT count() FROM {db}.gpu_samples WHERE isNotNull(sm_active_pct) AND isNotNull(tensor_active_pct) AND isNotNull(dram_active_pct)");
            r.check(
                "GPM fields (Hopper)",
                gpm > 0,
                format!("{gpm} of {samples} samples"),
            );
        } else {
            r.not_applicable("GPM fields", "not a Hopper GPU");
        }
        for (job, _) in &cap.jobs {
            let cuda = num(
                &stack,
                &format!("SELECT count() FROM {{db}}.spans WHERE job_id = '{job}' AND device >= 0"),
            );
            r.check(
                &format!("{job}: spans timed by CUDA events"),
                cuda > 0,
                format!("{cuda} spans with a device"),
            );
        }
    } else {
        r.check("no GPU samples in a CPU capture", samples == 0, samples);
        r.not_applicable(
            "GPU samples, GPM fields, CUDA-event spans",
            "CPU capture (versions.txt: no CUDA device)",
        );
    }

    let traces = cap.dir.join("traces");
    let mut traced: Vec<PathBuf> = std::fs::read_dir(&traces)
        .map(|d| {
            d.map(|e| e.expect("entry").path())
                .filter(|p| p.is_dir())
                .collect()
        })
        .unwrap_or_default();
    traced.sort();
    r.check("captured traces", !traced.is_empty(), traces.display());
    for dir in traced {
        let job = format!("{}.trace", dir.file_name().unwrap().to_string_lossy());
        let base = dir.file_name().unwrap().to_string_lossy().into_owned();
        let world = cap
            .jobs
            .iter()
            .find(|(j, _)| *j == base)
            .and_then(|(_, v)| v["world_size"].as_u64())
            .map(|w| w as u32);
        let (imported, empty) = import_traces(&stack, &dir, &job, world).await;
        let rows: u64 = imported.iter().map(|f| f.1).sum();
        r.check(
            &format!("{job}: imported"),
            !imported.is_empty() && imported.iter().all(|f| f.1 > 0),
            format!("{} files, {rows} rows", imported.len()),
        );
        if cap.gpu || empty.is_empty() {
            r.check(
                &format!("{job}: no empty trace"),
                empty.is_empty(),
                format!("{empty:?}"),
            );
        } else {
            // libkineto's CPU build may ignore the iteration form and trace
            // a window in which the rank ran no op (seen on a loaded machine).
            r.not_applicable(
                &format!(
                    "{job}: {} of {} traces hold no event",
                    empty.len(),
                    empty.len() + imported.len()
                ),
                "CPU capture: libkineto traced an idle window",
            );
        }
        if !cap.gpu {
            r.not_applicable(
                &format!("{job}: kernels per HTA kernel type"),
                "CPU capture: no CUDA kernels",
            );
            continue;
        }
        let body = stack
            .api_get(&format!("/api/v1/jobs/{job}/kernel-types?exact=true"))
            .await;
        let types: Vec<String> = body["kernel-types"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|t| t["kernel_type"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        r.check(
            &format!("{job}: compute kernels"),
            types.iter().any(|t| t == "COMPUTATION"),
            format!("{types:?}"),
        );
        let base = job.trim_end_matches(".trace");
        let nccl = cap
            .jobs
            .iter()
            .any(|(j, v)| j == base && v["collectives"] == "nccl");
        if nccl && world.unwrap_or(1) == 1 {
            // NCCL runs no kernel for a 1-rank communicator: its all-reduce
            // is a device-to-device copy (seen on an H200, NCCL 2.28.9:
            // `nccl:all_reduce` ops, Memcpy DtoD, no ncclDevKernel). The
            // collectives must still be read from the trace's ops.
            let body = stack
                .api_get(&format!("/api/v1/jobs/{job}/collectives"))
                .await;
            let ops: Vec<String> = body["collectives"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|c| c["op"].as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default();
            r.check(
                &format!("{job}: NCCL collectives read from the trace"),
                ops.iter().any(|o| o == "all_reduce"),
                format!("{ops:?}"),
            );
            r.not_applicable(
                &format!("{job}: NCCL kernels (COMMUNICATION)"),
                "a 1-rank NCCL communicator runs none (its all-reduce is a device copy)",
            );
        } else if nccl {
            r.check(
                &format!("{job}: NCCL kernels (COMMUNICATION)"),
                types.iter().any(|t| t == "COMMUNICATION"),
                format!("{types:?}"),
            );
        } else {
            r.not_applicable(
                &format!("{job}: NCCL kernels"),
                "the job's collectives ran on gloo",
            );
        }
    }
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn captures_replay_and_show_what_a_run_must_show() {
    let mut report = Report {
        failed: Vec::new(),
        started: std::time::Instant::now(),
    };
    for dir in captures() {
        check_capture(&Capture::read(&dir), &mut report).await;
    }
    assert!(
        report.failed.is_empty(),
        "failed checks:\n{}",
        report.failed.join("\n")
    );
}
