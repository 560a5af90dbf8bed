//! The agent's TOML configuration.
//!
//! In: a TOML file (optional; every field has a default) and, applied by
//! `main.rs`, command-line flags. Out: a validated [`Config`].
//!
//! Precedence is defaults < file < flags; environment variables only act
//! through the flags (clap `env =`). Unknown keys are errors. Options carry
//! their unit in the name (`*_ms`, `*_events`, `*_batches`, `*_bytes`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::backoff::{Backoff, BackoffError};

/// Configuration errors.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {error}")]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("invalid config file {path}: {error}")]
    Parse {
        path: PathBuf,
        error: Box<toml::de::Error>,
    },
    #[error("config: {field} = {value}: {problem}")]
    Invalid {
        field: &'static str,
        value: String,
        problem: &'static str,
    },
    #[error("config: {field} = {value}: {problem}")]
    Url {
        field: &'static str,
        value: String,
        problem: String,
    },
    #[error(transparent)]
    Backoff(#[from] BackoffError),
    #[error(transparent)]
    Render(#[from] toml::ser::Error),
}

/// Configuration of `rankscope-agent`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// TCP address (`ip:port`) of the rank-facing gRPC service (port 0:
    /// pick a free one).
    pub listen_addr: String,
    /// TCP address of the HTTP `/metrics` (Prometheus) and `/healthz`
    /// endpoint; empty disables it.
    pub metrics_listen_addr: String,
    /// Unix socket of the rank-facing gRPC service; empty disables it.
    /// Default: `$XDG_RUNTIME_DIR/rankscope/agent.sock`, else
    /// `/tmp/rankscope-<uid>/agent.sock`.
    pub unix_socket_path: String,
    /// gRPC URL of the collector, or several separated by commas. Each
    /// host is resolved to every address it has (a Kubernetes headless
    /// Service: one per collector pod) at start and every
    /// `collector_resolve_interval_ms`; each job's batches go to one of
    /// them, its owner by rendezvous hashing of the job id (`route`).
    pub collector_url: String,
    /// How often `collector_url`'s host names are resolved again.
    pub collector_resolve_interval_ms: u64,
    /// A job's owner collector failing this long: the job moves to the
    /// next collector of its rendezvous order.
    pub collector_failover_after_ms: u64,
    /// Bearer token the collector requires (empty: none).
    pub collector_token: String,
    /// PEM CA that signed the collector's certificate; required for an
    /// `https://` collector_url.
    pub tls_ca_path: String,
    /// PEM client certificate presented to the collector (mutual TLS).
    pub tls_cert_path: String,
    /// PEM private key of `tls_cert_path`.
    pub tls_key_path: String,
    /// Name checked against the collector's certificate (empty: the host of
    /// `collector_url`).
    pub tls_server_name: String,
    /// How often the TLS files are checked for changes, in seconds (SIGHUP
    /// reloads at once).
    pub tls_reload_interval_secs: u64,
    /// Stable id of this agent in every batch (default: host name).
    pub agent_id: String,
    /// Node name filled into rank identities that leave it empty (default:
    /// host name).
    pub node: String,
    /// Capacity of the rank-facing queue, in events. When full, the newest
    /// message's events are dropped (never blocks a rank).
    pub queue_max_events: usize,
    /// A batch is cut when it holds this many events...
    pub batch_max_events: usize,
    /// ...or this long after its first event (default 1 s: with
    /// `flush_at_step_end` a step's events leave at its end anyway, so this
    /// only bounds how late events inside a long step arrive; every batch
    /// costs the agent and the collector a call: 200 ms cost the agent
    /// about a quarter more CPU at a node's realistic rate)...
    pub batch_max_delay_ms: u64,
    /// ...or as soon as every live rank stream of the node has ended a step
    /// (at most every 50 ms): the collector's per-step verdicts wait for the
    /// node's last StepEnd, not for `batch_max_delay_ms` after it.
    pub flush_at_step_end: bool,
    /// Batches held in memory while the collector is slow or unreachable
    /// (cut, not yet acknowledged, the calls in flight included)...
    pub backlog_max_batches: usize,
    /// ...and their encoded bytes at most. A full backlog (either bound)
    /// stops the batcher, the queue fills and drops the newest events.
    pub backlog_max_bytes: usize,
    /// Batches sent to the collector concurrently (unacknowledged: the
    /// collector answers after its writer's window committed them).
    /// Default 32: the collector fills its next window while one commits,
    /// so a catching-up agent needs about two windows' worth in flight;
    /// with 16 (50,000-event batches) the collector waited for
    /// acknowledgements while ClickHouse inserted (bench/RESULTS-alternations.md,
    /// session 28). In-flight batches count against the backlog bounds.
    pub max_in_flight_batches: usize,
    /// First retry delay after a transient collector failure.
    pub retry_initial_ms: u64,
    /// Upper bound of the retry delay.
    pub retry_max_ms: u64,
    /// Deadline of one call to the collector.
    pub request_timeout_ms: u64,
    /// Largest rank message accepted (larger: RESOURCE_EXHAUSTED).
    pub max_message_bytes: usize,
    /// At shutdown, how long the backlog may take to drain.
    pub shutdown_flush_timeout_ms: u64,
    /// How often every GPU is sampled through NVML (>= 100; 0 disables GPU
    /// sampling).
    pub gpu_sample_interval_ms: u64,
    /// How often the host (CPU, memory, network, rank processes) is sampled
    /// (>= 100; 0 disables host sampling).
    pub host_sample_interval_ms: u64,
    /// NVML library to load; empty: `libnvidia-ml.so.1` from the dynamic
    /// loader's search path.
    pub nvml_library_path: String,
    /// How often NVML initialisation is retried after it failed (a driver
    /// loaded after the agent started is picked up); 0: never, else >= 100.
    pub nvml_retry_interval_ms: u64,
    /// Threads of the agent's async runtime (the NVML sampler and the Kineto
    /// endpoint have their own). The default, 1, runs it on one thread: a
    /// multi-thread runtime hands its I/O driver to another worker at every
    /// rank message (a futex wake-up and two context switches each), which
    /// cost ~12 % more of the agent's CPU at a node's usual event rates
    /// (0.66 vs 0.59 % of a core in the bench's realtime case), and one thread
    /// still relays the bench's full-speed job (~1 M events/s) as fast as two
    /// (bench/RESULTS-alternations.md, 2026-11-27). More threads are for
    /// nodes whose ranks send far more than that.
    pub worker_threads: usize,
    /// Abstract Unix socket on which the agent serves libkineto's daemon
    /// protocol (what Dynolog serves; processes started with
    /// `KINETO_USE_DAEMON=1` poll it), for on-demand traces; empty disables.
    /// If another daemon holds the name, the agent logs it and goes on.
    pub kineto_daemon_name: String,
    /// Where traced processes write their trace files (default: `traces/`
    /// next to the default Unix socket).
    pub trace_dir: String,
    /// Trace files larger than this are not imported (reported failed).
    pub trace_max_file_bytes: u64,
    /// Keep trace files after they were imported.
    pub keep_traces: bool,
    /// Disk spool (see `spool`): every batch is written here before the
    /// ranks are acknowledged, and resent after a restart until the
    /// collector acknowledged it. Empty (default): no spool.
    pub spool_dir: String,
    /// Most bytes the spool holds; beyond, the newest events are dropped
    /// (counted as `spool_full`).
    pub spool_max_bytes: u64,
    /// fsync every spooled batch (and its directory) before acknowledging:
    /// survives power loss, not just a killed agent.
    pub spool_fsync: bool,
    /// Size budget of `trace_dir`: beyond it the oldest files of finished
    /// traces are removed, and while open traces alone exceed it new
    /// requests fail on this node (saying so) instead of being delivered.
    pub trace_dir_max_bytes: u64,
    /// A trace request is offered to polling processes this long, in ms.
    pub trace_request_ttl_ms: u64,
    /// Dump sink (see `dump`): instead of sending batches to the collector,
    /// write each one to this directory as a file in the spool's format; the
    /// write is the acknowledgement. For air-gapped nodes and the GPU kit;
    /// `rankscope-agent replay DIR` sends such a directory to a collector
    /// later. Empty (default): send to `collector_url`. Excludes `spool_dir`.
    pub dump_dir: String,
    /// Local trace trigger: when > 0, every job whose libkineto processes
    /// poll this agent is traced for this many iterations once, without a
    /// request from the collector (see `kineto::local`). 0 (default): off.
    pub trace_on_start_iterations: u64,
    /// `[traces]`: what becomes of the traces this agent captures (the
    /// archive; see `archive`).
    pub traces: crate::archive::TracesConfig,
}

impl Default for Config {
    fn default() -> Self {
        let host = host_name();
        Self {
            listen_addr: "127.0.0.1:7710".to_owned(),
            metrics_listen_addr: "127.0.0.1:7711".to_owned(),
            unix_socket_path: default_unix_socket_path().to_string_lossy().into_owned(),
            collector_url: "http://127.0.0.1:7700".to_owned(),
            collector_resolve_interval_ms: 10_000,
            collector_failover_after_ms: 15_000,
            collector_token: String::new(),
            tls_ca_path: String::new(),
            tls_cert_path: String::new(),
            tls_key_path: String::new(),
            tls_server_name: String::new(),
            tls_reload_interval_secs: 10,
            agent_id: host.clone(),
            node: host,
            queue_max_events: 100_000,
            batch_max_events: 50_000,
            batch_max_delay_ms: 1000,
            flush_at_step_end: true,
            backlog_max_batches: 256,
            backlog_max_bytes: 16 * 1024 * 1024,
            max_in_flight_batches: 32,
            retry_initial_ms: 100,
            retry_max_ms: 10_000,
            request_timeout_ms: 30_000,
            max_message_bytes: 16 * 1024 * 1024,
            shutdown_flush_timeout_ms: 10_000,
            gpu_sample_interval_ms: 1000,
            host_sample_interval_ms: 1000,
            nvml_library_path: String::new(),
            nvml_retry_interval_ms: 30_000,
            worker_threads: 1,
            kineto_daemon_name: "dynolog".to_owned(),
            trace_dir: default_unix_socket_path()
                .with_file_name("traces")
                .to_string_lossy()
                .into_owned(),
            trace_max_file_bytes: 512 * 1024 * 1024,
            keep_traces: false,
            trace_dir_max_bytes: 4 * 1024 * 1024 * 1024,
            spool_dir: String::new(),
            spool_max_bytes: 1024 * 1024 * 1024,
            spool_fsync: false,
            trace_request_ttl_ms: 600_000,
            dump_dir: String::new(),
            trace_on_start_iterations: 0,
            traces: crate::archive::TracesConfig::default(),
        }
    }
}

impl Config {
    /// Parses a TOML document; missing fields take their defaults.
    pub fn from_toml(text: &str, origin: &Path) -> Result<Self, ConfigError> {
        let config: Config = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: origin.to_owned(),
            error: Box::new(e),
        })?;
        config.validate()?;
        Ok(config)
    }

    /// Reads and parses a TOML file.
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|error| ConfigError::Read {
            path: path.to_owned(),
            error,
        })?;
        Self::from_toml(&text, path)
    }

    /// The configuration as TOML (what `gen-config` prints).
    pub fn to_toml(&self) -> Result<String, ConfigError> {
        Ok(toml::to_string(self)?)
    }

    /// The Unix socket path, or `None` when disabled.
    pub fn unix_socket(&self) -> Option<&Path> {
        (!self.unix_socket_path.is_empty()).then(|| Path::new(&self.unix_socket_path))
    }

    /// `listen_addr` parsed.
    pub fn listen_socket_addr(&self) -> Result<SocketAddr, ConfigError> {
        self.listen_addr.parse().map_err(|_| ConfigError::Invalid {
            field: "listen_addr",
            value: self.listen_addr.clone(),
            problem: "must be ip:port, e.g. 127.0.0.1:7710",
        })
    }

    /// The uplink's retry policy: doubling from `retry_initial_ms` up to
    /// `retry_max_ms`, equal jitter (see [`Backoff`]).
    pub fn backoff(&self) -> Result<Backoff, BackoffError> {
        Backoff::try_new(self.retry_initial_ms, self.retry_max_ms, 2.0, 0.5)
    }

    /// Checks value ranges (called by the parsers and by `start`).
    pub fn validate(&self) -> Result<(), ConfigError> {
        let positive: [(&'static str, u64); 11] = [
            (
                "collector_resolve_interval_ms",
                self.collector_resolve_interval_ms,
            ),
            (
                "collector_failover_after_ms",
                self.collector_failover_after_ms,
            ),
            ("queue_max_events", self.queue_max_events as u64),
            ("batch_max_events", self.batch_max_events as u64),
            ("batch_max_delay_ms", self.batch_max_delay_ms),
            ("backlog_max_batches", self.backlog_max_batches as u64),
            ("backlog_max_bytes", self.backlog_max_bytes as u64),
            ("max_in_flight_batches", self.max_in_flight_batches as u64),
            ("request_timeout_ms", self.request_timeout_ms),
            ("max_message_bytes", self.max_message_bytes as u64),
            ("retry_initial_ms", self.retry_initial_ms),
        ];
        for (field, value) in positive {
            if value == 0 {
                return Err(ConfigError::Invalid {
                    field,
                    value: "0".to_owned(),
                    problem: "must be >= 1",
                });
            }
        }
        for (field, value) in [
            ("queue_max_events", self.queue_max_events),
            ("backlog_max_bytes", self.backlog_max_bytes),
        ] {
            if value > tokio::sync::Semaphore::MAX_PERMITS {
                return Err(ConfigError::Invalid {
                    field,
                    value: value.to_string(),
                    problem: "too large",
                });
            }
        }
        for (field, value) in [("agent_id", &self.agent_id), ("node", &self.node)] {
            if value.is_empty() {
                return Err(ConfigError::Invalid {
                    field,
                    value: "\"\"".to_owned(),
                    problem: "must not be empty",
                });
            }
        }
        if let Err(problem) = crate::route::resolve::parse_urls(&self.collector_url) {
            return Err(ConfigError::Url {
                field: "collector_url",
                value: self.collector_url.clone(),
                problem,
            });
        }
        self.validate_tls()?;
        if !(1..=256).contains(&self.worker_threads) {
            return Err(ConfigError::Invalid {
                field: "worker_threads",
                value: self.worker_threads.to_string(),
                problem: "must be between 1 and 256",
            });
        }
        for (field, value) in [
            ("gpu_sample_interval_ms", self.gpu_sample_interval_ms),
            ("host_sample_interval_ms", self.host_sample_interval_ms),
            ("nvml_retry_interval_ms", self.nvml_retry_interval_ms),
        ] {
            if value != 0 && value < MIN_SAMPLE_INTERVAL_MS {
                return Err(ConfigError::Invalid {
                    field,
                    value: value.to_string(),
                    problem: "must be 0 (disabled) or >= 100",
                });
            }
        }
        if !self.dump_dir.is_empty() && !self.spool_dir.is_empty() {
            return Err(ConfigError::Invalid {
                field: "dump_dir",
                value: self.dump_dir.clone(),
                problem:
                    "cannot be used with spool_dir (the dump already keeps every batch on disk)",
            });
        }
        self.listen_socket_addr()?;
        self.backoff()?;
        self.traces.validate()?;
        Ok(())
    }
}

impl Config {
    /// TLS options that fit `collector_url` and each other.
    fn validate_tls(&self) -> Result<(), ConfigError> {
        let https = self.collector_url.trim_start().starts_with("https://");
        let invalid = |field, value: &str, problem| {
            Err(ConfigError::Invalid {
                field,
                value: value.to_owned(),
                problem,
            })
        };
        if https && self.tls_ca_path.is_empty() {
            return invalid(
                "tls_ca_path",
                "\"\"",
                "is required for an https:// collector_url (the CA that signed the collector's certificate)",
            );
        }
        if !https {
            for (field, value) in [
                ("tls_ca_path", &self.tls_ca_path),
                ("tls_cert_path", &self.tls_cert_path),
                ("tls_key_path", &self.tls_key_path),
            ] {
                if !value.is_empty() {
                    return invalid(
                        field,
                        value,
                        "is set but collector_url is not https:// (TLS would not be used)",
                    );
                }
            }
        }
        if self.tls_cert_path.is_empty() != self.tls_key_path.is_empty() {
            return invalid(
                "tls_cert_path",
                &self.tls_cert_path,
                "must be set together with tls_key_path",
            );
        }
        if self.tls_reload_interval_secs == 0 {
            return invalid("tls_reload_interval_secs", "0", "must be >= 1");
        }
        Ok(())
    }
}

/// Shortest sampling interval accepted (10 Hz).
pub const MIN_SAMPLE_INTERVAL_MS: u64 = 100;

/// The NVML library loaded when `nvml_library_path` is empty.
pub const DEFAULT_NVML_LIBRARY: &str = "libnvidia-ml.so.1";

impl Config {
    /// The NVML library to load.
    pub fn nvml_library(&self) -> &str {
        if self.nvml_library_path.is_empty() {
            DEFAULT_NVML_LIBRARY
        } else {
            &self.nvml_library_path
        }
    }
}

/// `$XDG_RUNTIME_DIR/rankscope/agent.sock`, else `/tmp/rankscope-<uid>/agent.sock`
/// (the same path the rank SDK connects to by default).
pub fn default_unix_socket_path() -> PathBuf {
    rankscope_proto::default_agent_socket_path()
}

/// This machine's host name: /proc, else gethostname(2), else `$HOSTNAME`,
/// else "localhost".
pub fn host_name() -> String {
    if let Ok(s) = std::fs::read_to_string("/proc/sys/kernel/hostname") {
        let s = s.trim();
        if !s.is_empty() {
            return s.to_owned();
        }
    }
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for `buf.len()` bytes; gethostname writes at
    // most that many and we only read up to the first NUL inside it.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc == 0 {
        let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
        if let Ok(s) = std::str::from_utf8(&buf[..end]) {
            if !s.is_empty() {
                return s.to_owned();
            }
        }
    }
    match std::env::var("HOSTNAME") {
        Ok(s) if !s.is_empty() => s,
        _ => "localhost".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../deploy/agent.example.toml"
    ));

    #[test]
    fn example_config_parses_and_sets_what_it_says() {
        let c = Config::from_toml(EXAMPLE, Path::new("deploy/agent.example.toml")).unwrap();
        assert_eq!(
            c.listen_socket_addr().unwrap(),
            "127.0.0.1:7710".parse().unwrap()
        );
        assert_eq!(c.collector_url, "http://127.0.0.1:7700");
        assert_eq!(c.queue_max_events, 100_000);
        assert_eq!(c.batch_max_events, 50_000);
        assert_eq!(c.backlog_max_bytes, 16 * 1024 * 1024);
        assert_eq!(c.max_message_bytes, 16 * 1024 * 1024);
        assert_eq!(c.gpu_sample_interval_ms, 1000);
        assert_eq!(c.host_sample_interval_ms, 1000);
        assert_eq!(c.nvml_library(), "libnvidia-ml.so.1");
        // The example says the default: one runtime thread.
        assert_eq!(c.worker_threads, 1);
        assert_eq!(c.worker_threads, Config::default().worker_threads);
    }

    #[test]
    fn generated_config_round_trips() {
        let d = Config::default();
        let text = d.to_toml().unwrap();
        let back = Config::from_toml(&text, Path::new("gen")).unwrap();
        assert_eq!(back, d);
        assert!(!d.agent_id.is_empty());
    }

    #[test]
    fn missing_fields_take_defaults_and_unknown_fields_are_errors() {
        let c = Config::from_toml("batch_max_events = 7\n", Path::new("x")).unwrap();
        assert_eq!(c.batch_max_events, 7);
        assert_eq!(c.batch_max_delay_ms, 1000);
        let err = Config::from_toml("batch_max_rows = 7\n", Path::new("x")).unwrap_err();
        assert!(err.to_string().contains("batch_max_rows"), "{err}");
    }

    #[test]
    fn invalid_values_are_named() {
        let err = Config::from_toml("max_in_flight_batches = 0\n", Path::new("x")).unwrap_err();
        assert!(err.to_string().contains("max_in_flight_batches"), "{err}");
        let err = Config::from_toml("retry_max_ms = 5\n", Path::new("x")).unwrap_err();
        assert!(err.to_string().contains("5 ms"), "{err}");
        let err =
            Config::from_toml("collector_url = \"127.0.0.1:1\"\n", Path::new("x")).unwrap_err();
        assert!(err.to_string().contains("collector_url"), "{err}");
        let err = Config::from_toml("listen_addr = \"localhost\"\n", Path::new("x")).unwrap_err();
        assert!(err.to_string().contains("listen_addr = localhost"), "{err}");
        for (toml, field) in [
            ("worker_threads = 0\n", "worker_threads"),
            ("worker_threads = 1000\n", "worker_threads"),
            ("nvml_retry_interval_ms = 50\n", "nvml_retry_interval_ms"),
            ("tls_reload_interval_secs = 0\n", "tls_reload_interval_secs"),
        ] {
            let err = Config::from_toml(toml, Path::new("x")).unwrap_err();
            assert!(err.to_string().contains(field), "{toml}: {err}");
        }
    }

    #[test]
    fn tls_options_must_fit_the_collector_url() {
        let https = "collector_url = \"https://c:7700\"\n";
        let err = Config::from_toml(https, Path::new("x")).unwrap_err();
        assert!(err.to_string().contains("tls_ca_path"), "{err}");
        let err = Config::from_toml("tls_ca_path = \"ca.pem\"\n", Path::new("x")).unwrap_err();
        assert!(err.to_string().contains("not https://"), "{err}");
        let half = format!("{https}tls_ca_path = \"ca.pem\"\ntls_cert_path = \"a.pem\"\n");
        let err = Config::from_toml(&half, Path::new("x")).unwrap_err();
        assert!(err.to_string().contains("tls_key_path"), "{err}");
        let ok = format!("{https}tls_ca_path = \"ca.pem\"\n");
        assert!(Config::from_toml(&ok, Path::new("x")).is_ok());
    }

    #[test]
    fn sample_intervals_are_bounded_and_zero_disables() {
        let c = Config::default();
        assert_eq!(
            (c.gpu_sample_interval_ms, c.host_sample_interval_ms),
            (1000, 1000)
        );
        assert_eq!(c.nvml_library(), "libnvidia-ml.so.1");
        let c = Config::from_toml(
            "gpu_sample_interval_ms = 100\nhost_sample_interval_ms = 0\nnvml_library_path = \"/x/libnvidia-ml.so.1\"\n",
            Path::new("x"),
        )
        .unwrap();
        assert_eq!(c.gpu_sample_interval_ms, 100);
        assert_eq!(c.nvml_library(), "/x/libnvidia-ml.so.1");
        let err = Config::from_toml("gpu_sample_interval_ms = 99\n", Path::new("x")).unwrap_err();
        assert!(
            err.to_string().contains("gpu_sample_interval_ms = 99"),
            "{err}"
        );
        let err = Config::from_toml("host_sample_interval_ms = 5\n", Path::new("x")).unwrap_err();
        assert!(err.to_string().contains("host_sample_interval_ms"), "{err}");
    }

    #[test]
    fn empty_unix_socket_path_disables_the_socket() {
        let c = Config::from_toml("unix_socket_path = \"\"\n", Path::new("x")).unwrap();
        assert_eq!(c.unix_socket(), None);
        assert!(Config::default().unix_socket().is_some());
    }
}
