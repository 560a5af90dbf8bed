//! `rankscope` command-line tool: a realistic training-job simulator, the
//! query commands and trace import.
//!
//! In: command-line options (parsed in `main.rs`), the agent's rank ingest
//! gRPC service (for [`simulate`]) and the collector's HTTP JSON API (for
//! [`query`]). Out: gRPC rank streams that look like a real trainer's, and
//! tables / JSON / CSV on stdout.
//!
//! Invariants: the simulator's plan is a pure function of its
//! [`simulate::SimConfig`] (same seed, same events); formatting is pure and
//! separate from I/O; no panics on network or user input.

/// Kineto trace import: the parser is `rankscope_kineto` (re-exported here
/// so `rankscope_cli::import::*` keeps working); this crate adds only the
/// `import` command's I/O, [`import::send`] (batches to the collector).
pub mod import {
    pub use rankscope_kineto::*;
    // Resolves to `src/import/send.rs` and `src/import/wait.rs`.
    pub mod remote;
    pub mod send;
    pub mod wait;
}
pub mod launch;
pub mod query;
pub mod simulate;

/// An error and its sources on one line ("a: b: c"); tonic's and hyper's
/// errors say little without their sources.
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut last = out.clone();
    let mut source = e.source();
    while let Some(s) = source {
        // Wrappers often repeat their source's text; say it once.
        let text = s.to_string();
        if text != last {
            out.push_str(": ");
            out.push_str(&text);
        }
        last = text;
        source = s.source();
    }
    out
}
