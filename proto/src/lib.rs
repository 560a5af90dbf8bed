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
pub mod tls;
pub mod validate;

/// Generated `rankscope.v1` messages, clients and servers.
pub mod v1 {
    #![allow(clippy::all, missing_docs)]
    tonic::include_proto!("rankscope.v1");
}
