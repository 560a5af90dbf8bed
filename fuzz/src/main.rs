//! `rankscope-fuzz [--target NAME|all] [--inputs N] [--seed S]
//! [--time-limit-ms MS] [--max-rss-mib MIB]`: runs the fuzz targets (see
//! the library doc) and prints, per target, inputs, time, inputs/s, peak
//! RSS and the outcomes; exits 1 on the first panic, hang or memory bound
//! exceeded (the input is saved under `fuzz/artifacts/<target>/`).

use std::process::ExitCode;
use std::time::Duration;

use rankscope_fuzz::{fuzz, targets, Options};

fn main() -> ExitCode {
    let mut opts = Options::default();
    let mut which = "all".to_owned();
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().unwrap_or_default();
        let num = || value.replace('_', "").parse::<u64>();
        let ok = match flag.as_str() {
            "--target" => {
                which.clone_from(&value);
                true
            }
            "--inputs" => num().map(|n| opts.inputs = n).is_ok(),
            "--seed" => num().map(|n| opts.seed = n).is_ok(),
            "--time-limit-ms" => num()
                .map(|n| opts.time_limit = Duration::from_millis(n))
                .is_ok(),
            "--max-rss-mib" => num().map(|n| opts.max_rss_bytes = n << 20).is_ok(),
            _ => false,
        };
        if !ok {
            eprintln!(
                "usage: rankscope-fuzz [--target kineto|ingest|rank|config|query|all] [--inputs N] \
                 [--seed S] [--time-limit-ms MS] [--max-rss-mib MIB]"
            );
            return ExitCode::from(2);
        }
    }
    let all = targets();
    let chosen: Vec<_> = all
        .iter()
        .filter(|t| which == "all" || t.name == which)
        .collect();
    if chosen.is_empty() {
        eprintln!("unknown target {which:?}");
        return ExitCode::from(2);
    }
    for t in chosen {
        eprintln!(
            "fuzzing {} ({} inputs, seed {}, corpus {})",
            t.name,
            opts.inputs,
            opts.seed,
            t.corpus.len()
        );
        match fuzz(t, &opts) {
            Ok(r) => {
                let secs = r.elapsed.as_secs_f64();
                println!(
                    "{}: {} inputs in {:.1} s ({:.0} inputs/s), slowest {:.1} ms, peak RSS {} MiB",
                    r.target,
                    r.inputs,
                    secs,
                    r.inputs as f64 / secs.max(1e-9),
                    r.slowest.as_secs_f64() * 1e3,
                    r.peak_rss >> 20
                );
                for (outcome, n) in &r.outcomes {
                    println!("  {outcome}: {n}");
                }
            }
            Err(f) => {
                eprintln!("FAILED: {f}");
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}
