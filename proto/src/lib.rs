//! `rankscope.v1`: the wire protocol between training ranks, the per-node
//! agent and the collector, generated from `proto/rankscope/v1/*.proto`.
//!
//! In: nothing (types only). Out: the generated messages and services under
//! [`v1`], and [`validate`], the one set of rules both the agent (per rank
//! stream) and the collector (per agent batch) apply to incoming events;
//! [`auth`] and [`tls`], the transport security both sides share.
//!
//! Use it qualified: `use rankscope_proto::v1 as proto;`.

pub mod attribution;
pub mod auth;
pub mod codec;
pub mod resend;
pub mod tls;
pub mod validate;

/// The generated messages' `prost` (the agent decodes a spooled batch's job).
pub use prost;

/// Where the agent's rank-facing Unix socket is unless configured:
/// `$XDG_RUNTIME_DIR/rankscope/agent.sock`, else `/tmp/rankscope-<uid>/agent.sock`.
/// The agent listens there and the rank SDK connects there by default.
pub fn default_agent_socket_path() -> std::path::PathBuf {
    use std::os::unix::fs::MetadataExt;
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(dir) if !dir.is_empty() => std::path::PathBuf::from(dir).join("rankscope/agent.sock"),
        _ => {
            // The owner of /proc/self is this process's real uid.
            let uid = std::fs::metadata("/proc/self").map_or(0, |m| m.uid());
            std::path::PathBuf::from(format!("/tmp/rankscope-{uid}/agent.sock"))
        }
    }
}

/// Generated `rankscope.v1` messages, clients and servers.
pub mod v1 {
    #![allow(clippy::all, missing_docs)]
    tonic::include_proto!("rankscope.v1");
}
