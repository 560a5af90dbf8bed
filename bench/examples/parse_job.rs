//! The importer's own work, without a collector: parses (both passes),
//! orders and converts every trace of the side-by-side job (32 ranks x 40
//! steps, `synth::write_job`) into chunks that are dropped, one file after
//! the other on one thread, and prints MB of JSON per CPU second.
//!
//! `cargo run --release -p rankscope-bench --example parse_job -- DIR [MB]`
//! (writes the job into DIR first when DIR has no rank0.json).

use std::path::PathBuf;
use std::time::Instant;

use rankscope_bench::{hta, synth};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(args.next().ok_or("usage: parse_job DIR [MB]")?);
    let mb: u64 = args.next().map(|s| s.parse()).transpose()?.unwrap_or(330);
    if !dir.join("rank0.json").exists() {
        synth::write_job(&dir, hta::RANKS, hta::STEPS, mb * 1_000_000, hta::SLOW_RANK)?;
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    files.sort();
    let (mut bytes, mut events) = (0u64, 0u64);
    let start = Instant::now();
    for f in &files {
        let opts = rankscope_kineto::ImportOptions::new("parse-job");
        let s = rankscope_kineto::import_file(f, &opts, |c| {
            events += c.events.len() as u64;
            Ok::<(), std::convert::Infallible>(())
        })?;
        bytes += s.stats.json_bytes;
    }
    let s = start.elapsed().as_secs_f64();
    println!(
        "{} files, {:.1} MB, {} events in {:.2} s: {:.1} MB/s on one thread",
        files.len(),
        bytes as f64 / 1e6,
        events,
        s,
        bytes as f64 / 1e6 / s
    );
    Ok(())
}
