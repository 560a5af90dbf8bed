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
pub mod wire;

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

/// A collective's `group_ranks` as sent and stored: empty for the whole job
/// in rank order (a group of `world_size` ranks `0..world_size`;
/// events.proto allows the empty list for the world), else as given. The
/// world group's list is `world_size` numbers per rank stream: a
/// 16,384-rank job would send 268 M of them as it starts, and store 64 KiB
/// per collective row. The rank SDK sends it so and the collector stores
/// it so (for other senders).
pub fn group_ranks_or_world(ranks: &[u32], group_size: u32, world_size: u32) -> Vec<u32> {
    let whole_world = group_size == world_size
        && ranks.len() == world_size as usize
        && ranks.iter().enumerate().all(|(i, r)| *r as usize == i);
    if whole_world {
        Vec::new()
    } else {
        ranks.to_vec()
    }
}

/// Generated `rankscope.v1` messages, clients and servers.
pub mod v1 {
    #![allow(clippy::all, missing_docs)]
    tonic::include_proto!("rankscope.v1");
}

#[cfg(test)]
mod tests {
    use super::group_ranks_or_world;

    #[test]
    fn the_world_group_travels_as_the_empty_list_others_as_given() {
        let world: Vec<u32> = (0..16).collect();
        assert!(group_ranks_or_world(&world, 16, 16).is_empty(), "the world");
        // Not the world: a subgroup, the world's ranks in another order, a
        // list that disagrees with the group size, a job of another size.
        let cases: [(&[u32], u32, u32); 4] = [
            (&[0, 2, 4, 6], 4, 16),
            (&[1, 0, 2, 3], 4, 4),
            (&[0, 1, 2], 4, 3),
            (&[0, 1, 2, 3], 4, 8),
        ];
        for (ranks, size, world_size) in cases {
            assert_eq!(
                group_ranks_or_world(ranks, size, world_size),
                ranks,
                "{ranks:?} of size {size} in a world of {world_size}"
            );
        }
        assert!(
            group_ranks_or_world(&[], 16, 16).is_empty(),
            "already empty"
        );
    }
}
