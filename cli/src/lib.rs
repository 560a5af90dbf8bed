//! `rankscope` command-line tool: a realistic training-job simulator and the
//! query commands.
//!
//! In: command-line options (parsed in `main.rs`), the agent's rank ingest
//! gRPC service (for [`simulate`]) and the collector's HTTP JSON API (for
//! [`query`]). Out: gRPC rank streams that look like a real trainer's, and
//! tables / JSON / CSV on stdout.
//!
//! Invariants: the simulator's plan is a pure function of its
//! [`simulate::SimConfig`] (same seed, same events); formatting is pure and
//! separate from I/O; no panics on network or user input.

pub mod query;
pub mod simulate;
