//! `rankscope-fuzz`: a stable-toolchain fuzzer for rankscope's parsers
//! (`make fuzz`; issue 14).
//!
//! Each [`Target`] has a seed corpus of valid inputs, a generator that
//! mutates them (seeded `SmallRng`: a run is reproducible from its seed) and
//! a function that feeds one input to the code under test and names the
//! outcome (`ok` or the error kind). [`fuzz`] runs a target for N inputs,
//! each under `catch_unwind`, and fails on the first panic, on an input
//! slower than the time limit (a hang; a watchdog thread also ends the
//! process if one input never returns) and on a peak RSS above the memory
//! bound. The failing input is written to `fuzz/artifacts/<target>/`.
//!
//! Targets: `kineto` (trace importer), `ingest` (protobuf decode,
//! validation and conversion of an `AgentBatch`), `rank` (the agent's
//! decode and validation of a `RankMessage`, and the bytes it forwards),
//! `config` (collector and agent TOML), `query` (the HTTP API's query
//! strings).

pub mod config;
pub mod ingest;
pub mod kineto;
pub mod mutate;
pub mod query;
pub mod rank;

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::SeedableRng;

/// One fuzz target.
pub struct Target {
    pub name: &'static str,
    /// Valid inputs; each is run once before the mutated ones.
    pub corpus: Vec<Vec<u8>>,
    /// Makes one input from the corpus.
    pub generate: fn(&mut SmallRng, &[Vec<u8>]) -> Vec<u8>,
    /// Runs one input; returns the outcome's name (`ok`, or an error kind).
    pub run: fn(&[u8]) -> String,
}

/// Every target, in the order `--target all` runs them.
pub fn targets() -> Vec<Target> {
    vec![
        kineto::target(),
        ingest::target(),
        rank::target(),
        config::target(),
        query::target(),
    ]
}

/// How to fuzz.
#[derive(Debug, Clone)]
pub struct Options {
    /// Inputs per target (the corpus included).
    pub inputs: u64,
    pub seed: u64,
    /// An input taking longer fails the run (a hang).
    pub time_limit: Duration,
    /// A peak RSS above this fails the run (unbounded memory).
    pub max_rss_bytes: u64,
    /// Where failing inputs go (`<dir>/<target>/crash-<hash>`).
    pub artifacts: PathBuf,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            inputs: 1_000_000,
            seed: 1,
            time_limit: Duration::from_millis(1000),
            max_rss_bytes: 1 << 30,
            artifacts: PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("artifacts"),
        }
    }
}

/// What a target's run did.
#[derive(Debug, Clone)]
pub struct Report {
    pub target: &'static str,
    pub inputs: u64,
    pub elapsed: Duration,
    pub slowest: Duration,
    /// Inputs per outcome.
    pub outcomes: BTreeMap<String, u64>,
    /// The process's peak RSS after the run (VmHWM), bytes.
    pub peak_rss: u64,
}

/// Why a run failed.
#[derive(Debug)]
pub struct Failure {
    pub target: &'static str,
    pub iteration: u64,
    /// `panic: ...`, `slow: ...` or `memory: ...`.
    pub what: String,
    /// The saved input.
    pub artifact: Option<PathBuf>,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "target {} input {}: {}",
            self.target, self.iteration, self.what
        )?;
        if let Some(a) = &self.artifact {
            write!(f, " (input saved to {})", a.display())?;
        }
        Ok(())
    }
}

/// Runs `t` for `opts.inputs` inputs (see the module doc).
pub fn fuzz(t: &Target, opts: &Options) -> Result<Report, Failure> {
    let mut rng = SmallRng::seed_from_u64(opts.seed);
    let mut outcomes = BTreeMap::new();
    let mut slowest = Duration::ZERO;
    let watch = Watchdog::start(t.name, opts);
    let start = Instant::now();
    for i in 0..opts.inputs {
        let input = match t.corpus.get(i as usize) {
            Some(seed) => seed.clone(),
            None => (t.generate)(&mut rng, &t.corpus),
        };
        watch.begin(&input);
        let began = Instant::now();
        let result = catch_unwind(AssertUnwindSafe(|| (t.run)(&input)));
        let took = began.elapsed();
        watch.end();
        let fail = |what: String| Failure {
            target: t.name,
            iteration: i,
            what,
            artifact: save(&opts.artifacts, t.name, &input),
        };
        match result {
            Ok(outcome) => *outcomes.entry(outcome).or_insert(0) += 1,
            Err(p) => return Err(fail(format!("panic: {}", panic_message(&p)))),
        }
        slowest = slowest.max(took);
        if took > opts.time_limit {
            return Err(fail(format!(
                "slow: {took:?} > the {:?} limit",
                opts.time_limit
            )));
        }
        if i % 4096 == 0 && peak_rss() > opts.max_rss_bytes {
            return Err(fail(format!(
                "memory: peak RSS {} MiB > {} MiB",
                peak_rss() >> 20,
                opts.max_rss_bytes >> 20
            )));
        }
    }
    let peak = peak_rss();
    if peak > opts.max_rss_bytes {
        return Err(Failure {
            target: t.name,
            iteration: opts.inputs,
            what: format!("memory: peak RSS {} MiB", peak >> 20),
            artifact: None,
        });
    }
    Ok(Report {
        target: t.name,
        inputs: opts.inputs,
        elapsed: start.elapsed(),
        slowest,
        outcomes,
        peak_rss: peak,
    })
}

/// The name of an error value: its `Debug` text up to the first
/// `(`, `{` or space (an enum variant's name).
pub fn kind(e: &impl std::fmt::Debug) -> String {
    let text = format!("{e:?}");
    let end = text.find(['(', '{', ' ']).unwrap_or(text.len());
    text[..end].to_owned()
}

/// Writes `input` to `<dir>/<target>/crash-<hash>`.
fn save(dir: &std::path::Path, target: &str, input: &[u8]) -> Option<PathBuf> {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    input.hash(&mut h);
    let dir = dir.join(target);
    std::fs::create_dir_all(&dir).ok()?;
    let path = dir.join(format!("crash-{:016x}", h.finish()));
    std::fs::write(&path, input).ok()?;
    Some(path)
}

fn panic_message(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(non-string panic)".into())
}

/// Peak resident set size of this process (VmHWM), bytes; 0 if unknown.
pub fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// Ends the process when one input runs for 10x the time limit (an input
/// that never returns cannot be caught by timing it), saving the input.
struct Watchdog {
    current: Arc<Mutex<(Option<Instant>, Vec<u8>)>>,
    stop: Arc<AtomicBool>,
}

impl Watchdog {
    fn start(target: &'static str, opts: &Options) -> Self {
        let current = Arc::new(Mutex::new((None::<Instant>, Vec::new())));
        let stop = Arc::new(AtomicBool::new(false));
        let (c, s) = (current.clone(), stop.clone());
        let limit = opts.time_limit * 10;
        let dir = opts.artifacts.clone();
        std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(100));
                let guard = c.lock().unwrap_or_else(|e| e.into_inner());
                if let (Some(began), input) = &*guard {
                    if began.elapsed() > limit {
                        let saved = save(&dir, target, input);
                        eprintln!("HANG: target {target}: an input ran for over {limit:?}; saved to {saved:?}");
                        std::process::exit(1);
                    }
                }
            }
        });
        Self { current, stop }
    }

    fn begin(&self, input: &[u8]) {
        let mut g = self.current.lock().unwrap_or_else(|e| e.into_inner());
        g.0 = Some(Instant::now());
        g.1.clear();
        g.1.extend_from_slice(input);
    }

    fn end(&self) {
        self.current.lock().unwrap_or_else(|e| e.into_inner()).0 = None;
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}
