//! An optional CPU profile of running processes with Linux `perf`.
//!
//! In: pids. Out: for each pid a [`ProcessProfile`]: the symbols above
//! 0.5 % of its samples (`perf report --sort dso,symbol`, flat, no call
//! graphs: release builds have no frame pointers), and shares by category
//! ([`ProcessProfile::share`]). When `perf` is missing or cannot sample, the
//! profile is absent: the benchmark never depends on it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::sys;

/// Sampling frequency, Hz.
const FREQ_HZ: u32 = 499;
/// Symbols kept per process.
const KEEP: usize = 60;

/// One symbol's share of a process's samples.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Sample {
    pub pct: f64,
    pub dso: String,
    pub symbol: String,
}

/// The flat profile of one process.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ProcessProfile {
    /// `comm` of the process (e.g. `rankscope-colle`, 15 characters).
    pub name: String,
    pub pid: u32,
    /// Symbols by descending share.
    pub samples: Vec<Sample>,
}

impl ProcessProfile {
    /// Summed share of the symbols (or DSOs) containing any of `needles`.
    pub fn share(&self, needles: &[&str]) -> f64 {
        self.samples
            .iter()
            .filter(|s| {
                needles
                    .iter()
                    .any(|n| s.symbol.contains(n) || s.dso.contains(n))
            })
            .map(|s| s.pct)
            .sum::<f64>()
            + 0.0 // an empty sum is -0.0
    }

    /// The first `n` symbols as text lines.
    pub fn top(&self, n: usize) -> Vec<String> {
        self.samples
            .iter()
            .take(n)
            .map(|s| {
                let sym: String = s.symbol.chars().take(110).collect();
                let cut = if sym.len() < s.symbol.len() {
                    "..."
                } else {
                    ""
                };
                format!("{:6.2}%  {}  {sym}{cut}", s.pct, s.dso)
            })
            .collect()
    }
}

/// `perf record` processes attached to pids.
pub struct Profiler {
    runs: Vec<(u32, String, PathBuf, Child)>,
}

/// Whether `perf` is installed.
pub fn available() -> bool {
    Command::new("perf")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn comm(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| pid.to_string())
}

impl Profiler {
    /// Starts one `perf record` per pid writing next to `base`; `None` when
    /// perf is unavailable or could not start.
    pub fn start(pids: &[u32], base: &Path) -> Option<Profiler> {
        if !available() {
            return None;
        }
        let mut runs = Vec::new();
        for &pid in pids {
            let out = base.with_extension(format!("{pid}.data"));
            let mut cmd = Command::new("perf");
            cmd.args(["record", "-q", "-F", &FREQ_HZ.to_string(), "-p"])
                .arg(pid.to_string())
                .arg("-o")
                .arg(&out)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            if let Ok(child) = sys::spawn(&mut cmd) {
                runs.push((pid, comm(pid), out, child));
            }
        }
        // perf needs a moment to attach.
        std::thread::sleep(Duration::from_millis(300));
        (!runs.is_empty()).then_some(Profiler { runs })
    }

    /// Stops recording and parses each profile.
    pub fn finish(&mut self) -> Vec<ProcessProfile> {
        let mut out = Vec::new();
        for (pid, name, file, child) in &mut self.runs {
            sys::signal(child.id(), libc::SIGINT);
            let _ = sys::reap_blocking(child.id(), Duration::from_secs(60), "perf record");
            let report = Command::new("perf")
                .args(["report", "--stdio", "--no-children", "--sort", "dso,symbol"])
                .args(["--percent-limit", "0.5", "-i"])
                .arg(&*file)
                .stderr(Stdio::null())
                .output();
            let _ = std::fs::remove_file(&*file);
            let Ok(report) = report else { continue };
            let samples = parse_report(&String::from_utf8_lossy(&report.stdout), KEEP);
            if !samples.is_empty() {
                out.push(ProcessProfile {
                    name: name.clone(),
                    pid: *pid,
                    samples,
                });
            }
        }
        out
    }
}

/// The first `n` sample lines of `perf report --stdio --sort dso,symbol`
/// (`  12.34%  dso  [.] symbol`).
pub fn parse_report(report: &str, n: usize) -> Vec<Sample> {
    report
        .lines()
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            let pct = words.next()?.strip_suffix('%')?.parse::<f64>().ok()?;
            let dso = words.next()?.to_owned();
            let _kind = words.next()?;
            let rest: Vec<&str> = words.collect();
            // perf pads missing sort keys with "-".
            let end = rest.iter().rposition(|w| *w != "-").map_or(0, |i| i + 1);
            Some(Sample {
                pct,
                dso,
                symbol: rest[..end].join(" "),
            })
        })
        .take(n)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sample_lines_are_parsed_and_shortened() {
        let report = "# comment\n\n    41.20%  rankscope-collector  [.] prost::encoding::decode - -\n     3.00%  [kernel.kallsyms]  [k] copy_user\n#\n";
        let samples = parse_report(report, 5);
        assert_eq!(samples.len(), 2);
        assert_eq!(samples[0].pct, 41.2);
        assert_eq!(samples[0].dso, "rankscope-collector");
        assert_eq!(samples[0].symbol, "prost::encoding::decode");
        let p = ProcessProfile {
            name: "c".into(),
            pid: 1,
            samples,
        };
        assert_eq!(p.share(&["prost"]), 41.2);
        assert_eq!(p.share(&["kallsyms"]), 3.0);
        let long = format!("  1.00%  x  [.] {}", "a".repeat(300));
        let p = ProcessProfile {
            name: "c".into(),
            pid: 1,
            samples: parse_report(&long, 1),
        };
        assert!(p.top(1)[0].ends_with("..."));
    }
}
