//! `rankscope simulate --placement FILE`: which node, GPU (and link) each simulated
//! rank runs on, so fleet views (`rankscope fleet`) see named machines.
//!
//! In: a JSON list `[{"rank": 0, "node": "node-03", "gpu_uuid": "GPU-…"}, …]`
//! (optionally `"link"`, the rank's NIC / network link),
//! one entry per rank of the job. Out: [`Placement`]s; the rank's identity
//! then carries `node` and the label `gpu_uuid` (the collector's fleet query
//! reads it from the `ranks` table when the agent has no NVML samples for
//! the rank, as for every simulated rank).
//!
//! Invariant: a placement that passed [`check`] names every rank `0..ranks`
//! exactly once, with a non-empty node.

use serde::{Deserialize, Serialize};

/// Where one rank runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Placement {
    /// Global rank.
    pub rank: u32,
    /// Node (host) name the rank reports.
    pub node: String,
    /// UUID of the rank's GPU (empty: unknown).
    #[serde(default)]
    pub gpu_uuid: String,
    /// The rank's network link / NIC (empty: unknown).
    #[serde(default)]
    pub link: String,
}

/// The identity label that carries a rank's GPU UUID.
pub const GPU_UUID_LABEL: &str = "gpu_uuid";

/// The identity label that carries a rank's network link.
pub const LINK_LABEL: &str = "link";

/// Reads a placement file (errors name the file).
pub fn read(path: &std::path::Path) -> Result<Vec<Placement>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("--placement {}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| {
        format!(
            "--placement {}: not a JSON list of {{\"rank\", \"node\", \"gpu_uuid\"}}: {e}",
            path.display()
        )
    })
}

/// Checks that `placement` (when not empty) names each of `ranks` ranks once.
pub fn check(placement: &[Placement], ranks: u32) -> Result<(), String> {
    if placement.is_empty() {
        return Ok(());
    }
    let mut seen = vec![false; ranks as usize];
    for p in placement {
        let slot = seen.get_mut(p.rank as usize).ok_or_else(|| {
            format!(
                "placement: rank {} is out of range (the job has {ranks} ranks)",
                p.rank
            )
        })?;
        if std::mem::replace(slot, true) {
            return Err(format!(
                "placement: rank {} is given more than once",
                p.rank
            ));
        }
        if p.node.is_empty() {
            return Err(format!("placement: rank {} has an empty node", p.rank));
        }
    }
    match seen.iter().position(|s| !s) {
        Some(r) => Err(format!(
            "placement: rank {r} has no entry (every rank needs one)"
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(rank: u32, node: &str) -> Placement {
        Placement {
            rank,
            node: node.into(),
            gpu_uuid: format!("GPU-{rank}"),
            link: String::new(),
        }
    }

    #[test]
    fn every_rank_once_with_a_node() {
        assert_eq!(check(&[], 4), Ok(()));
        assert_eq!(check(&[p(1, "b"), p(0, "a")], 2), Ok(()));
        let err = |v: &[Placement]| check(v, 2).unwrap_err();
        assert!(err(&[p(0, "a")]).contains("rank 1 has no entry"));
        assert!(err(&[p(0, "a"), p(0, "a")]).contains("more than once"));
        assert!(err(&[p(0, "a"), p(2, "a")]).contains("out of range"));
        assert!(err(&[p(0, "a"), p(1, "")]).contains("empty node"));
    }

    #[test]
    fn the_file_format_is_a_json_list() {
        let v: Vec<Placement> =
            serde_json::from_str(r#"[{"rank": 0, "node": "n1", "gpu_uuid": "GPU-a"}]"#).unwrap();
        assert_eq!(v[0].node, "n1");
        assert!(serde_json::from_str::<Vec<Placement>>(r#"[{"rank": 0, "nod": "n1"}]"#).is_err());
    }
}
