//! rankscope-bench: the benchmark suite behind `make bench` (issue 6).
//!
//! In: the release binaries (`rankscope`, `rankscope-agent`,
//! `rankscope-collector`) next to this one, a ClickHouse server binary and
//! `clickhouse-client`, the Kineto trace sets (`cli/tests/fixtures/kineto`), and (when present) the
//! NVML stand-in under `agent/tests/nvml_stub`. Out: [`report::Results`]
//! (the 13 figures of `bench/results.json`), a human table and
//! `bench/RESULTS.md`.
//!
//! Every section starts the real processes (private ClickHouse, collector,
//! agent, `rankscope simulate` / `rankscope import`) on free loopback ports and
//! measures them from outside: wall time with the monotonic clock, CPU time
//! and RSS from `/proc/<pid>/stat` and `/proc/<pid>/status` (or `wait4`'s
//! rusage for short-lived children). Nothing inside the product is
//! instrumented for the benchmark; it reads only the collector's public
//! `/metrics` counters and HTTP API.
//!
//! Sections: [`e2e`] (pipeline throughput, collector and agent cost) with
//! [`bulk`] (the direct `clickhouse-client` baseline on the same rows),
//! [`straggler`] (verdict latency), [`query`] (API latency over generated
//! analytics rows), [`import`] with [`synth`] (trace import speed), [`hta`] (import +
//! analysis of a 32-rank job side by side with HTA 0.5.0),
//! [`idle`] (agent idle cost with 8 stand-in GPUs), [`profile`] (an optional
//! `perf` profile of the pipeline), [`report`] (JSON, table, RESULTS.md and the
//! scale model).
//!
//! Invariant: a child process is spawned only from the main thread (the
//! runtime is single-threaded) with `PR_SET_PDEATHSIG`, so nothing outlives
//! the benchmark.

pub mod bulk;
pub mod e2e;
pub mod error;
pub mod fleet;
pub mod hta;
pub mod http;
pub mod idle;
pub mod import;
pub mod profile;
pub mod query;
pub mod report;
pub mod soak;
pub mod stack;
pub mod stats;
pub mod straggler;
pub mod synth;
pub mod sys;
pub mod views;

pub use error::BenchError;
