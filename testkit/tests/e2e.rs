//! The end-to-end tests, one test binary (`cargo test -p rankscope-testkit
//! --test e2e`), one module per area (`tests/<module>.rs`).
//!
//! One binary, not one per file: each links every crate of the workspace
//! (~85 MB unoptimised), and 52 of them filled a CI machine's disk. `make
//! test` (deploy/dev/test.sh) still runs each module in its own process, one
//! after the other, as cargo ran the separate binaries: tests that time real
//! work or serve libkineto's fixed `@dynolog` name never share a process or
//! the machine with another module's tests. One module by hand:
//! `cargo test -p rankscope-testkit --test e2e -- what_if::`. The whole
//! binary in one process also works (modules that need the machine or
//! `@dynolog` to themselves take `common::SERIAL`), only noisier.

mod common;

// Shared by several modules: the browser tests' DevTools client and the
// NVML stand-in's configuration writer.
#[path = "ui/cdp.rs"]
mod cdp;
#[path = "../../agent/tests/nvml_stub/stub.rs"]
mod stub;

mod alert_sinks;
mod alerts;
mod analytics;
mod auth;
mod clickhouse_kill;
mod clock_jump;
mod clocks;
mod clocks_torch;
mod clocks_traces;
mod cluster;
mod control_stream;
mod counters;
mod deploy;
mod dev_stack;
mod export;
mod failures;
mod fleet;
mod gpu_kit;
mod gpu_replay;
mod grafana;
mod hta_views;
mod import;
mod import_formats;
mod kineto_daemon;
mod live_memory;
mod memory_bounded;
mod modern_clickhouse;
mod multinode;
mod objstore;
mod overview_kept;
mod partition;
mod pipeline;
mod plugin_views;
mod restart;
mod routing;
mod routing_resend;
mod routing_torch;
mod spool;
mod spool_shipped;
mod telemetry;
mod tls;
mod torch;
mod torch_memory;
mod torch_other;
mod torch_other_trace;
mod trace_views;
mod traces;
mod ui;
mod ui_other;
mod ui_profile;
mod ui_views;
mod what_if;
