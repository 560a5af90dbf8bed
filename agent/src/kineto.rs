//! The Kineto daemon endpoint: the agent speaks libkineto's IPC fabric
//! protocol (what Dynolog serves), so any PyTorch process started with
//! `KINETO_USE_DAEMON=1` can be traced on demand with no code change.
//!
//! In: datagrams on the abstract Unix socket `@<kineto_daemon_name>`
//! (default `dynolog`, libkineto's fixed name; per network namespace), trace
//! requests ([`KinetoDaemon::request`], from the collector's control
//! channel), the file system (trace files libkineto writes) and `/proc`.
//! Out: replies to the polling processes, and [`TraceUpdate`]s — delivered,
//! captured, failed with the reason — for the collector.
//!
//! Threads: one blocking thread owns the socket, answers each datagram at
//! once (libkineto waits about 90 ms for a reply) and, while a request is
//! open or a delivered trace unfinished, looks at delivered traces' files
//! every 250 ms (a file must keep its size for 1 s and parse as JSON before
//! it counts as captured; reading a large one delays replies, and libkineto
//! simply polls again): its receive timeout. With nothing to look at it
//! wakes for datagrams only, and every 5 s for the trace directory's
//! budget (an idle agent's thread no longer wakes 4 times a second);
//! [`KinetoDaemon::stop`] wakes it with an empty datagram. It shares the
//! [`Registry`] with the agent (requests in, states out) behind a mutex
//! held only for in-memory work; the registry's [`Registry::changed`]
//! wakes the control stream when there is something to report.
//!
//! Requests arrive over the collector's control channel and captured
//! traces are imported on the node by [`crate::control`]
//! (`rankscope_kineto::parse_trace_file`, then the acknowledged uplink);
//! [`KinetoDaemon::finish`] records the outcome.
//!
//! Attribution of a polling process (job and rank): an open SDK stream of
//! one of its pids (the process or an ancestor), else its (or an
//! ancestor's) `/proc/<pid>/environ` through `rankscope_proto::attribution`
//! and pod labels (`rankscope_proto::attribution::job_id`, the rule the
//! SDK uses too: `RANKSCOPE_JOB_ID`, torchrun's run id, Slurm, Kubernetes,
//! `rankscope run`'s launch id, the rendezvous). libkineto's own job id (Slurm's,
//! or 0) is ignored. When the name is taken (another daemon), the agent logs
//! it once and runs without the endpoint.

pub mod local;
pub mod registry;
pub mod wire;

use std::collections::HashMap;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rankscope_proto::attribution;

pub use registry::{
    ProcessIdentity, RankTrace, Registry, TraceMode, TraceRequest, TraceState, TraceUpdate,
};

use crate::sample::ranks::RankRegistry;

/// How the endpoint runs.
#[derive(Debug, Clone)]
pub struct DaemonConfig {
    /// Abstract socket name; empty disables the endpoint.
    pub name: String,
    /// Where traced processes write their trace files.
    pub trace_dir: PathBuf,
    /// Larger trace files are not imported (failed, reason given).
    pub max_trace_bytes: u64,
    /// Size budget of the trace directory.
    pub max_dir_bytes: u64,
    /// Keep trace files after import.
    pub keep_traces: bool,
    /// A request is offered to polling processes this long.
    pub request_ttl_ms: u64,
}

/// The running endpoint (or, when the name could not be bound, just the
/// request bookkeeping).
pub struct KinetoDaemon {
    registry: Arc<Mutex<Registry>>,
    stop: Arc<AtomicBool>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    config: DaemonConfig,
    bound: bool,
}

/// Looks at delivered traces' files (on the socket thread, every
/// [`WATCH_INTERVAL`] while there are any) and at the directory's budget.
struct Watcher {
    config: DaemonConfig,
    /// Size seen at the previous look and since when, per trace file.
    sizes: HashMap<PathBuf, (u64, u64)>,
    /// When the directory's size was last checked (none yet: at the first
    /// look).
    last_budget: Option<std::time::Instant>,
}

/// How often the trace directory's size is checked.
const BUDGET_INTERVAL: Duration = Duration::from_secs(5);

/// How often delivered traces' files are looked at (the socket's receive
/// timeout while the registry [needs a watch](Registry::needs_watch)).
const WATCH_INTERVAL: Duration = Duration::from_millis(250);
/// The receive timeout otherwise: a look for the directory's budget.
const IDLE_WATCH_INTERVAL: Duration = BUDGET_INTERVAL;

fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// libkineto's address for `name`: the name plus its terminating NUL
/// (`sizeof(sa_family_t) + name.size() + 2` in Dynolog's Endpoint.h).
fn abstract_addr(name: &str) -> std::io::Result<SocketAddr> {
    let mut abstract_name = name.as_bytes().to_vec();
    abstract_name.push(0);
    SocketAddr::from_abstract_name(&abstract_name)
}

fn lock(r: &Mutex<Registry>) -> std::sync::MutexGuard<'_, Registry> {
    r.lock().unwrap_or_else(|e| e.into_inner())
}

impl KinetoDaemon {
    /// Binds the socket and starts answering. Never fails: a name in use or
    /// an unusable trace directory is logged and the endpoint stays off.
    pub(crate) fn start(config: DaemonConfig, ranks: Arc<RankRegistry>) -> Self {
        let registry = Arc::new(Mutex::new(Registry::new(config.trace_dir.clone())));
        let stop = Arc::new(AtomicBool::new(false));
        let mut daemon = Self {
            registry: Arc::clone(&registry),
            stop: Arc::clone(&stop),
            thread: Mutex::new(None),
            config: config.clone(),
            bound: false,
        };
        if config.name.is_empty() {
            return daemon;
        }
        if let Err(e) = std::fs::create_dir_all(&config.trace_dir) {
            tracing::warn!(dir = %config.trace_dir.display(), error = %e, "kineto daemon endpoint off: cannot create the trace directory");
            return daemon;
        }
        let socket = abstract_addr(&config.name).and_then(|addr| UnixDatagram::bind_addr(&addr));
        let socket = match socket {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(name = %config.name, error = %e, "kineto daemon endpoint off: cannot bind the abstract socket (another daemon such as dynolog may hold it)");
                return daemon;
            }
        };
        if let Err(e) = socket.set_read_timeout(Some(WATCH_INTERVAL)) {
            tracing::warn!(error = %e, "kineto daemon endpoint off: cannot set a receive timeout");
            return daemon;
        }
        let watcher = Watcher {
            config: config.clone(),
            sizes: HashMap::new(),
            last_budget: None,
        };
        let thread = std::thread::Builder::new()
            .name("kineto-daemon".into())
            .spawn(move || serve(socket, registry, ranks, stop, watcher));
        match thread {
            Ok(t) => {
                tracing::info!(name = %config.name, dir = %config.trace_dir.display(), "kineto daemon endpoint listening");
                daemon.thread = Mutex::new(Some(t));
                daemon.bound = true;
            }
            Err(e) => {
                tracing::warn!(error = %e, "kineto daemon endpoint off: cannot start its thread")
            }
        }
        daemon
    }

    /// Whether the socket is bound and served.
    pub fn is_listening(&self) -> bool {
        self.bound
    }

    /// Offers a trace request to the matching processes' next polls.
    pub fn request(&self, req: TraceRequest) {
        lock(&self.registry).request(req);
    }

    /// Captured traces waiting for the node-side import.
    pub fn take_captured(&self) -> Vec<RankTrace> {
        lock(&self.registry).take_captured()
    }

    /// Attributed libkineto processes polling now.
    pub fn processes(&self) -> Vec<(i32, ProcessIdentity)> {
        lock(&self.registry).processes()
    }

    /// Notified when trace states, captured traces or the processes
    /// polling change ([`Registry::changed`]).
    pub fn changed(&self) -> Arc<tokio::sync::Notify> {
        lock(&self.registry).changed()
    }

    /// State changes since the last call.
    pub fn take_updates(&self) -> Vec<TraceUpdate> {
        lock(&self.registry).take_updates()
    }

    /// Every (rank, trace) this node knows.
    pub fn traces(&self) -> Vec<RankTrace> {
        lock(&self.registry).traces().cloned().collect()
    }

    /// Records the result of importing a captured trace; removes the file
    /// unless `keep_traces`.
    pub fn finish(&self, t: &RankTrace, result: Result<(), String>) {
        let state = match result {
            Ok(()) => TraceState::Imported,
            Err(reason) => TraceState::Failed(reason),
        };
        lock(&self.registry).transition(&t.trace_id, t.rank, state, now_ns());
        if !self.config.keep_traces {
            let _ = std::fs::remove_file(&t.path);
        }
    }

    /// Stops the socket thread and frees the name. Idempotent.
    pub fn stop(&self) {
        self.stop.store(true, Relaxed);
        let t = self.thread.lock().ok().and_then(|mut t| t.take());
        if let Some(t) = t {
            // Wake its receive now (else it notices at its timeout).
            let _ = abstract_addr(&self.config.name)
                .and_then(|addr| UnixDatagram::unbound().and_then(|s| s.send_to_addr(&[], &addr)));
            let _ = t.join();
        }
    }
}

impl Watcher {
    /// Looks at delivered traces: a complete file is `captured` (and its
    /// path returned for import); a process gone without a file, a file
    /// over the size cap, or one that stays unparseable is `failed`.
    fn watch(&mut self, registry: &Mutex<Registry>) -> Vec<RankTrace> {
        let now = now_ns();
        if self
            .last_budget
            .is_none_or(|t| t.elapsed() >= BUDGET_INTERVAL)
        {
            self.last_budget = Some(std::time::Instant::now());
            let open: Vec<PathBuf> = lock(registry)
                .open_traces()
                .into_iter()
                .flat_map(|t| [with_pid_suffix(&t.path, t.pid), t.path])
                .collect();
            let full = enforce_budget(&self.config.trace_dir, self.config.max_dir_bytes, &open);
            lock(registry).set_over_budget(full.map(|bytes| {
                format!(
                    "the trace directory {} holds {bytes} bytes of open traces, over trace_dir_max_bytes = {}",
                    self.config.trace_dir.display(),
                    self.config.max_dir_bytes
                )
            }));
        }
        let open = {
            let mut r = lock(registry);
            r.expire(now, self.config.request_ttl_ms.saturating_mul(1_000_000));
            r.open_traces()
        };
        let mut captured = Vec::new();
        for t in open {
            if t.state != TraceState::Delivered {
                continue;
            }
            match self.check_file(&t, now) {
                FileCheck::Complete(path) => {
                    let mut r = lock(registry);
                    r.set_path(&t.trace_id, t.rank, path.clone());
                    r.transition(&t.trace_id, t.rank, TraceState::Captured, now);
                    captured.push(RankTrace {
                        path,
                        state: TraceState::Captured,
                        ..t
                    });
                }
                FileCheck::Failed(reason) => {
                    lock(registry).transition(&t.trace_id, t.rank, TraceState::Failed(reason), now);
                }
                FileCheck::Pending => {}
            }
        }
        captured
    }

    fn check_file(&mut self, t: &RankTrace, now: u64) -> FileCheck {
        let candidates = [t.path.clone(), with_pid_suffix(&t.path, t.pid)];
        let Some((path, len)) = candidates
            .iter()
            .find_map(|p| std::fs::metadata(p).ok().map(|m| (p.clone(), m.len())))
        else {
            if !Path::new(&format!("/proc/{}", t.pid)).exists() {
                return FileCheck::Failed(format!(
                    "process {} exited before writing its trace",
                    t.pid
                ));
            }
            return FileCheck::Pending;
        };
        if len > self.config.max_trace_bytes {
            return FileCheck::Failed(format!(
                "trace file {} is {len} bytes, over trace_max_file_bytes = {}",
                path.display(),
                self.config.max_trace_bytes
            ));
        }
        let sizes = &mut self.sizes;
        let (prev_len, since) = sizes.get(&path).copied().unwrap_or((u64::MAX, now));
        if prev_len != len {
            sizes.insert(path, (len, now));
            return FileCheck::Pending; // still growing (or first look)
        }
        if now.saturating_sub(since) < STABLE_NS {
            return FileCheck::Pending;
        }
        // Read once: parsed as JSON, then searched for an iteration.
        let valid = std::fs::read(&path)
            .map_err(|e| e.to_string())
            .and_then(|b| {
                serde_json::from_slice::<serde::de::IgnoredAny>(&b)
                    .map(|_| has_iteration(&b))
                    .map_err(|e| e.to_string())
            });
        match valid {
            // libkineto writes a trace even when the process exits before
            // the requested iterations began: that one holds no iteration.
            // While the process lives, such a file may still be rewritten.
            Ok(false) if t.iterations > 0 => {
                if Path::new(&format!("/proc/{}", t.pid)).exists() {
                    return FileCheck::Pending;
                }
                sizes.remove(&path);
                FileCheck::Failed(format!(
                    "the trace holds no iteration: process {} ended before the requested {} iterations began",
                    t.pid, t.iterations
                ))
            }
            Ok(_) => {
                sizes.remove(&path);
                FileCheck::Complete(path)
            }
            // The same size for 5 s and still not JSON: truncated or garbage.
            Err(e) if now.saturating_sub(since) >= 5_000_000_000 => {
                let path = path.clone();
                sizes.remove(&path);
                FileCheck::Failed(format!(
                    "trace file {} is not valid JSON: {e}",
                    path.display()
                ))
            }
            Err(_) => FileCheck::Pending,
        }
    }
}

impl Drop for KinetoDaemon {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Removes the oldest trace files not in `open` until `dir` holds at most
/// `max_bytes`; returns the bytes still there when open traces alone exceed it.
fn enforce_budget(dir: &Path, max_bytes: u64, open: &[PathBuf]) -> Option<u64> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return None;
    };
    let mut files: Vec<(std::time::SystemTime, u64, PathBuf)> = entries
        .filter_map(|e| {
            let e = e.ok()?;
            let m = e.metadata().ok()?;
            m.is_file().then(|| {
                (
                    m.modified().unwrap_or(std::time::UNIX_EPOCH),
                    m.len(),
                    e.path(),
                )
            })
        })
        .collect();
    let mut total: u64 = files.iter().map(|f| f.1).sum();
    if total <= max_bytes {
        return None;
    }
    files.sort();
    for (_, len, path) in files {
        if total <= max_bytes {
            return None;
        }
        if open.contains(&path) {
            continue;
        }
        if std::fs::remove_file(&path).is_ok() {
            tracing::info!(file = %path.display(), "trace directory over its budget: removed the oldest trace file");
            total -= len;
        }
    }
    (total > max_bytes).then_some(total)
}

/// A trace file must keep its size this long before it is read.
const STABLE_NS: u64 = 1_000_000_000;

enum FileCheck {
    Complete(PathBuf),
    Failed(String),
    Pending,
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// Whether a trace holds a training iteration: a `ProfilerStep#N` (profiler
/// schedules) or an `Optimizer.step#` (what torch's optimizers record, the
/// iteration marker of a daemon-triggered trace of an unmodified script).
fn has_iteration(trace: &[u8]) -> bool {
    contains(trace, b"ProfilerStep#") || contains(trace, b"Optimizer.step#")
}

/// `a/b.json` -> `a/b_<pid>.json` (where libkineto may add the pid).
fn with_pid_suffix(path: &Path, pid: i32) -> PathBuf {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!("{stem}_{pid}.json"))
}

/// The socket thread.
fn serve(
    socket: UnixDatagram,
    registry: Arc<Mutex<Registry>>,
    ranks: Arc<RankRegistry>,
    stop: Arc<AtomicBool>,
    mut watcher: Watcher,
) {
    let mut buf = vec![0u8; wire::MAX_DATAGRAM_BYTES];
    let mut last_watch = std::time::Instant::now();
    let mut identities: HashMap<i32, Option<ProcessIdentity>> = HashMap::new();
    let mut bad_logged = false;
    let mut timeout = WATCH_INTERVAL;
    while !stop.load(Relaxed) {
        let want = if lock(&registry).needs_watch() {
            WATCH_INTERVAL
        } else {
            IDLE_WATCH_INTERVAL
        };
        if want != timeout && socket.set_read_timeout(Some(want)).is_ok() {
            timeout = want;
        }
        if last_watch.elapsed() >= timeout {
            last_watch = std::time::Instant::now();
            // Captured traces wait for the node-side import
            // (`crate::control`), which ends them through `finish`.
            let captured = watcher.watch(&registry);
            if !captured.is_empty() {
                lock(&registry).push_captured(captured);
            }
        }
        let (n, src) = match socket.recv_from(&mut buf) {
            // The wake-up of `stop` (or a datagram that came with it).
            Ok(_) if stop.load(Relaxed) => break,
            Ok(x) => x,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                continue
            }
            Err(e) => {
                tracing::debug!(error = %e, "kineto daemon: receive failed");
                continue;
            }
        };
        let msg = match wire::parse(&buf[..n]) {
            Ok(m) => m,
            Err(e) => {
                if !bad_logged {
                    tracing::warn!(error = %e, "kineto daemon: ignoring a datagram it does not understand (logged once)");
                    bad_logged = true;
                }
                continue;
            }
        };
        if identities.len() > registry::MAX_PROCESSES {
            identities.clear();
        }
        let now = now_ns();
        let reply = match msg {
            wire::Message::Context { pid, .. } => {
                let id = identity_of(&mut identities, &ranks, &[pid]);
                wire::context_reply(lock(&registry).register(pid, id, now))
            }
            wire::Message::Request { pids, .. } => {
                let leaf = pids[0];
                let id = identity_of(&mut identities, &ranks, &pids);
                let config = lock(&registry).poll(leaf, id, now);
                if !config.is_empty() {
                    tracing::info!(pid = leaf, "kineto daemon: trace config delivered");
                }
                wire::request_reply(&config)
            }
        };
        if let Err(e) = socket.send_to_addr(&reply, &src) {
            tracing::debug!(error = %e, "kineto daemon: reply failed");
        }
    }
}

/// Job and rank of the process `pids[0]` (cached per leaf pid).
fn identity_of(
    cache: &mut HashMap<i32, Option<ProcessIdentity>>,
    ranks: &RankRegistry,
    pids: &[i32],
) -> Option<ProcessIdentity> {
    let leaf = *pids.first()?;
    if let Some(Some(id)) = cache.get(&leaf) {
        return Some(id.clone());
    }
    let found = from_sdk(ranks, pids).or_else(|| from_environ(pids));
    cache.insert(leaf, found.clone());
    found
}

fn from_sdk(ranks: &RankRegistry, pids: &[i32]) -> Option<ProcessIdentity> {
    let open = ranks.ranks();
    pids.iter().find_map(|&pid| {
        open.iter()
            .find(|r| i64::from(r.pid) == i64::from(pid))
            .map(|r| ProcessIdentity {
                job_id: r.job_id.clone(),
                rank: r.rank,
                world_size: 0,
                sdk: true,
            })
    })
}

fn from_environ(pids: &[i32]) -> Option<ProcessIdentity> {
    pids.iter().find_map(|&pid| {
        let blob = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
        let env = attribution::parse_environ(&blob);
        let labels =
            std::fs::read_to_string(format!("/proc/{pid}/root{}", attribution::POD_LABELS_PATH))
                .ok();
        let a = attribution::from_env(|k| env.get(k).cloned(), labels.as_deref());
        Some(ProcessIdentity {
            job_id: a.job_id?,
            rank: a.rank?,
            world_size: a.world_size.unwrap_or(0),
            sdk: false,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_removes_the_oldest_finished_files_and_reports_open_excess() {
        let dir = tempfile::tempdir().unwrap();
        let file = |name: &str, age_s: u64| {
            let p = dir.path().join(name);
            std::fs::write(&p, [0u8; 10]).unwrap();
            let t = std::time::SystemTime::now() - Duration::from_secs(age_s);
            std::fs::File::options()
                .write(true)
                .open(&p)
                .unwrap()
                .set_modified(t)
                .unwrap();
            p
        };
        let (a, b, c) = (file("a.json", 30), file("b.json", 20), file("c.json", 10));
        let open = vec![a.clone()];
        // 30 bytes, budget 15: b (the oldest not open) goes, then c.
        assert_eq!(enforce_budget(dir.path(), 15, &open), None);
        assert!(a.exists() && !b.exists() && !c.exists());
        // The open trace alone is over a 5-byte budget: kept, reported.
        assert_eq!(enforce_budget(dir.path(), 5, &open), Some(10));
        assert!(a.exists());
        assert_eq!(enforce_budget(dir.path(), 100, &open), None);
    }
}
