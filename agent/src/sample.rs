//! Telemetry: NVML GPU samples and host samples, tagged with the ranks they
//! serve, handed to the batcher to ride in the same `AgentBatch`es as the
//! rank events.
//!
//! In: `gpu_sample_interval_ms`, `host_sample_interval_ms`,
//! `nvml_library_path`; the [`ranks::RankRegistry`] filled by ingest. Out:
//! [`SampleSet`]s over a bounded channel to the batcher; counters and the
//! NVML state gauge in [`Metrics`].
//!
//! One OS thread ("rankscope-sampler") owns NVML and sysinfo and runs both
//! schedules; NVML calls block (some for milliseconds) and never touch the
//! async runtime. The samples of consecutive ticks are handed over together,
//! at most [`HANDOFF_EVERY`] after the oldest of them was taken (a GPU
//! sampled at 10 Hz wakes the agent's runtime once a second, not ten times;
//! the batcher cuts a samples-only batch by then, so a sample still reaches
//! the uplink about a second after it was taken, as when each tick was
//! handed over alone). Backpressure: the thread never waits on the batcher —
//! a handoff that finds the channel full is dropped and counted
//! (`dropped_samples{reason="queue_full"}`), exactly like rank events at the
//! ingest queue. Missed ticks are skipped, never bunched up.
//!
//! No GPU: when NVML cannot be loaded or initialised the thread logs one
//! warning with the reason, sets the gauge to `unavailable` and samples the
//! host only; it tries again every `nvml_retry_interval_ms` (a driver that
//! is installed or loaded after the agent started, e.g. by the GPU operator's
//! driver container, is picked up without a restart).

pub mod check;
pub mod gpu;
pub mod host;
pub(crate) mod ranks;

use std::collections::HashMap;
use std::ffi::OsStr;
use std::sync::mpsc::RecvTimeoutError;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use nvml_wrapper::error::NvmlError;
use nvml_wrapper::Nvml;
use rankscope_proto::v1 as proto;
use tokio::sync::mpsc;

use crate::metrics::{DropReason, Metrics, NvmlState};
use gpu::GpuSampler;
use host::HostSampler;
use ranks::{map_ranks, visible_devices, RankRegistry};

/// Capacity of the sampler -> batcher channel, in handoffs (sample sets).
pub(crate) const QUEUE_SETS: usize = 256;

/// Longest a sample waits in the sampler thread for the samples of the
/// next ticks: ticks are handed over together until the next one would be
/// this long after the oldest (each tick alone when the interval is longer).
pub(crate) const HANDOFF_EVERY: Duration = Duration::from_millis(1000);

/// The samples of one handoff: one or more ticks, in the order taken.
#[derive(Debug)]
pub(crate) struct SampleSet {
    /// One sample per GPU per GPU tick.
    pub(crate) gpu: Vec<proto::GpuSample>,
    /// One sample per host tick.
    pub(crate) host: Vec<proto::HostSample>,
    /// When the oldest of them was taken.
    pub(crate) oldest: Instant,
}

impl SampleSet {
    fn new(oldest: Instant) -> Self {
        Self {
            gpu: Vec::new(),
            host: Vec::new(),
            oldest,
        }
    }

    /// Samples in the set.
    pub(crate) fn len(&self) -> usize {
        self.gpu.len() + self.host.len()
    }
}

/// What the sampler thread needs from the configuration.
#[derive(Debug, Clone)]
pub(crate) struct SamplerConfig {
    pub(crate) gpu_interval_ms: u64,
    pub(crate) host_interval_ms: u64,
    pub(crate) nvml_library: String,
    /// How often a failed NVML initialisation is retried (0: never).
    pub(crate) nvml_retry_interval_ms: u64,
}

/// Loads and initialises NVML from `library`.
pub fn open_nvml(library: &str) -> Result<Nvml, NvmlError> {
    Nvml::builder().lib_path(OsStr::new(library)).init()
}

/// Why NVML is unavailable, in words an operator can act on.
pub fn describe_nvml_error(library: &str, e: &NvmlError) -> String {
    match e {
        NvmlError::LibloadingError(err) => format!(
            "cannot load {library} (no NVIDIA driver on this node, or set nvml_library_path / \
             --nvml-library / RANKSCOPE_NVML_LIBRARY): {err}"
        ),
        NvmlError::FailedToLoadSymbol(sym) => {
            format!("{library} is not a usable NVML library: missing {sym}")
        }
        NvmlError::DriverNotLoaded => "the NVIDIA kernel driver is not loaded".to_owned(),
        NvmlError::NoPermission => "no permission to talk to the NVIDIA driver".to_owned(),
        other => format!("NVML initialisation failed: {other}"),
    }
}

/// The running sampler thread.
pub(crate) struct Sampler {
    stop: std::sync::mpsc::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl Sampler {
    /// Starts the thread, unless both intervals are 0.
    pub(crate) fn spawn(
        cfg: SamplerConfig,
        registry: Arc<RankRegistry>,
        metrics: Arc<Metrics>,
        out: mpsc::Sender<SampleSet>,
    ) -> std::io::Result<Option<Sampler>> {
        if cfg.gpu_interval_ms == 0 {
            metrics.set_nvml_state(NvmlState::Disabled);
        }
        if cfg.gpu_interval_ms == 0 && cfg.host_interval_ms == 0 {
            return Ok(None);
        }
        let (stop, stop_rx) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("rankscope-sampler".into())
            .spawn(move || run(&cfg, &registry, &metrics, &out, &stop_rx))?;
        Ok(Some(Sampler { stop, thread }))
    }

    /// Stops the thread and waits for it (blocking: call off the runtime).
    pub(crate) fn stop(self) {
        let _ = self.stop.send(());
        if self.thread.join().is_err() {
            tracing::error!("sampler thread panicked");
        }
    }
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// Opens NVML for GPU sampling. `attempt` 0 is the first try (a failure is
/// a warning); later failures are logged at debug level only.
fn open_gpu(cfg: &SamplerConfig, metrics: &Metrics, attempt: u32) -> Option<Nvml> {
    if cfg.gpu_interval_ms == 0 {
        return None;
    }
    let library = cfg.nvml_library.as_str();
    match open_nvml(library) {
        Ok(nvml) => {
            metrics.set_nvml_state(NvmlState::Ok);
            tracing::info!(
                library,
                driver = nvml.sys_driver_version().ok(),
                gpus = nvml.device_count().ok(),
                interval_ms = cfg.gpu_interval_ms,
                retries = attempt,
                "NVML loaded, sampling GPUs"
            );
            Some(nvml)
        }
        Err(e) => {
            metrics.set_nvml_state(NvmlState::Unavailable);
            let reason = describe_nvml_error(library, &e);
            if attempt == 0 {
                tracing::warn!(library, %reason, retry_interval_ms = cfg.nvml_retry_interval_ms, "NVML unavailable; sampling the host only");
            } else {
                tracing::debug!(library, %reason, attempt, "NVML still unavailable");
            }
            None
        }
    }
}

/// The next tick after `due`, skipping ticks already missed at `now`.
fn advance(due: Instant, every: Duration, now: Instant) -> Instant {
    let next = due + every;
    if next <= now {
        now + every
    } else {
        next
    }
}

/// Whether `pending` is handed over now: its oldest sample would be
/// [`HANDOFF_EVERY`] old or more at the next tick (`next`; none: now).
fn handoff_due(pending: &SampleSet, next: Option<Instant>, now: Instant) -> bool {
    next.unwrap_or(now)
        .saturating_duration_since(pending.oldest)
        >= HANDOFF_EVERY
}

/// Hands `set` to the batcher; `false` once the batcher is gone.
fn send(out: &mpsc::Sender<SampleSet>, set: SampleSet, metrics: &Metrics) -> bool {
    if set.len() == 0 {
        return true;
    }
    let n = set.len() as u64;
    match out.try_send(set) {
        Ok(()) => true,
        Err(mpsc::error::TrySendError::Full(_)) => {
            metrics.samples_dropped(DropReason::QueueFull, n);
            true
        }
        Err(mpsc::error::TrySendError::Closed(_)) => false,
    }
}

fn run(
    cfg: &SamplerConfig,
    registry: &RankRegistry,
    metrics: &Metrics,
    out: &mpsc::Sender<SampleSet>,
    stop: &std::sync::mpsc::Receiver<()>,
) {
    // Set at most once; the GPU sampler borrows from it.
    let nvml = std::cell::OnceCell::new();
    let mut gpu = None;
    let mut nvml_attempts = 0;
    if let Some(n) = open_gpu(cfg, metrics, 0) {
        gpu = Some(GpuSampler::new(nvml.get_or_init(|| n), cfg.gpu_interval_ms));
    }
    let nvml_retry_every = Duration::from_millis(cfg.nvml_retry_interval_ms);
    let mut next_nvml_retry =
        (gpu.is_none() && cfg.gpu_interval_ms > 0 && cfg.nvml_retry_interval_ms > 0)
            .then(|| Instant::now() + nvml_retry_every);
    let mut host = if cfg.host_interval_ms == 0 {
        None
    } else {
        match HostSampler::new(now_ns()) {
            Ok(h) => Some(h),
            Err(e) => {
                tracing::warn!(error = %e, "host metrics unavailable");
                None
            }
        }
    };
    let gpu_every = Duration::from_millis(cfg.gpu_interval_ms);
    let host_every = Duration::from_millis(cfg.host_interval_ms);
    let start = Instant::now();
    // The first GPU tick is immediate (static facts early); the host's
    // first interval starts at `HostSampler::new`.
    let mut next_gpu = gpu.is_some().then_some(start);
    let mut next_host = host.is_some().then(|| start + host_every);
    let mut cvd: HashMap<u32, Option<String>> = HashMap::new();
    // Samples taken and not handed over yet.
    let mut pending: Option<SampleSet> = None;
    loop {
        let Some(next) = [next_gpu, next_host, next_nvml_retry]
            .into_iter()
            .flatten()
            .min()
        else {
            // Nothing can be sampled: wait for the stop.
            let _ = stop.recv();
            return;
        };
        match stop.recv_timeout(next.saturating_duration_since(Instant::now())) {
            Err(RecvTimeoutError::Timeout) => {}
            Ok(()) | Err(RecvTimeoutError::Disconnected) => {
                // What was taken still goes out (the batcher drains it).
                if let Some(set) = pending.take() {
                    send(out, set, metrics);
                }
                return;
            }
        }
        let now = Instant::now();
        if let Some(due) = next_nvml_retry.filter(|d| now >= *d) {
            nvml_attempts += 1;
            match open_gpu(cfg, metrics, nvml_attempts) {
                Some(n) => {
                    gpu = Some(GpuSampler::new(nvml.get_or_init(|| n), cfg.gpu_interval_ms));
                    next_gpu = Some(now);
                    next_nvml_retry = None;
                }
                None => next_nvml_retry = Some(advance(due, nvml_retry_every, now)),
            }
        }
        let ranks = registry.ranks();
        if let (Some(g), Some(due)) = (gpu.as_mut(), next_gpu) {
            if now >= due {
                let mut samples = g.sample(now_ns(), &metrics.gpu_read_errors);
                cvd.retain(|pid, _| ranks.iter().any(|r| r.pid == *pid));
                map_ranks(&mut samples, &ranks, |pid| {
                    cvd.entry(pid)
                        .or_insert_with(|| visible_devices(pid))
                        .clone()
                });
                metrics
                    .gpus
                    .store(samples.len() as u64, std::sync::atomic::Ordering::Relaxed);
                Metrics::add(&metrics.gpu_samples, samples.len() as u64);
                if !samples.is_empty() {
                    pending
                        .get_or_insert_with(|| SampleSet::new(now))
                        .gpu
                        .extend(samples);
                }
                next_gpu = Some(advance(due, gpu_every, now));
            }
        }
        if let (Some(h), Some(due)) = (host.as_mut(), next_host) {
            if now >= due {
                let sample = h.sample(now_ns(), &ranks);
                Metrics::inc(&metrics.host_samples);
                pending
                    .get_or_insert_with(|| SampleSet::new(now))
                    .host
                    .push(sample);
                next_host = Some(advance(due, host_every, now));
            }
        }
        let next_tick = [next_gpu, next_host].into_iter().flatten().min();
        if pending
            .as_ref()
            .is_some_and(|p| handoff_due(p, next_tick, now))
        {
            if let Some(set) = pending.take() {
                if !send(out, set, metrics) {
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missed_ticks_are_skipped() {
        let t = Instant::now();
        let every = Duration::from_millis(100);
        assert_eq!(advance(t, every, t), t + every);
        let late = t + Duration::from_millis(350);
        assert_eq!(advance(t, every, late), late + every);
    }

    #[test]
    fn ticks_are_handed_over_together_for_about_a_second() {
        let t = Instant::now();
        let tick = |ms| t + Duration::from_millis(ms);
        let set = SampleSet::new(t);
        // 10 Hz: the ticks at 0..=900 ms go together, before the 1 s one.
        assert!(!handoff_due(&set, Some(tick(800)), tick(700)));
        assert!(handoff_due(&set, Some(tick(1000)), tick(900)));
        // 1 Hz (or slower): every tick alone.
        assert!(handoff_due(&set, Some(tick(1000)), t));
        assert!(handoff_due(&set, Some(tick(5000)), t));
        // Nothing scheduled any more: now.
        assert!(!handoff_due(&set, None, tick(10)));
        assert!(handoff_due(&set, None, tick(1000)));
    }

    #[test]
    fn missing_library_is_explained() {
        let e = open_nvml("/nonexistent/libnvidia-ml.so.1").expect_err("no such library");
        let text = describe_nvml_error("/nonexistent/libnvidia-ml.so.1", &e);
        assert!(
            text.starts_with("cannot load /nonexistent/libnvidia-ml.so.1"),
            "{text}"
        );
    }
}
