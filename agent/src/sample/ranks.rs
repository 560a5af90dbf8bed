//! Which training ranks run on this node, and on which GPU.
//!
//! In: rank identities from the ingest streams ([`RankRegistry::insert`] when a
//! stream's identity is established, [`RankRegistry::remove`] when it ends);
//! GPU samples with their NVML process lists. Out: the `ranks` of every GPU
//! sample ([`map_ranks`]) and the rank processes to sample on the host.
//!
//! Mapping, in order of trust:
//! 1. **pid**: a rank whose `identity.pid` appears in a GPU's compute process
//!    list runs on that GPU (a rank may use several GPUs, a GPU may host
//!    several ranks);
//! 2. **fallback** for a rank matched by no GPU (pid namespaces in
//!    containers, NVML without process lists): the rank's
//!    `CUDA_VISIBLE_DEVICES` read from `/proc/<pid>/environ` (entry
//!    `local_rank`, or the only entry; an index or a `GPU-` UUID), else GPU
//!    index = `local_rank`. This assumes `CUDA_DEVICE_ORDER=PCI_BUS_ID` /
//!    one GPU per local rank, the torchrun convention.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use rankscope_proto::v1 as proto;

/// A rank known from its event stream.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct RankInfo {
    pub(crate) job_id: String,
    pub(crate) rank: u32,
    pub(crate) local_rank: u32,
    pub(crate) pid: u32,
}

/// Ranks with an open stream, shared by ingest and the sampler.
#[derive(Debug, Default)]
pub(crate) struct RankRegistry {
    streams: Mutex<HashMap<u64, RankInfo>>,
}

impl RankRegistry {
    /// Stream `stream` now carries `info`.
    pub(crate) fn insert(&self, stream: u64, info: RankInfo) {
        self.lock().insert(stream, info);
    }

    /// Stream `stream` ended.
    pub(crate) fn remove(&self, stream: u64) {
        self.lock().remove(&stream);
    }

    /// The distinct ranks of the open streams, sorted.
    pub(crate) fn ranks(&self) -> Vec<RankInfo> {
        let set: HashSet<RankInfo> = self.lock().values().cloned().collect();
        let mut v: Vec<RankInfo> = set.into_iter().collect();
        v.sort_by(|a, b| (&a.job_id, a.rank, a.pid).cmp(&(&b.job_id, b.rank, b.pid)));
        v
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, RankInfo>> {
        // A panic while holding the lock cannot leave the map inconsistent.
        self.streams.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Reads `CUDA_VISIBLE_DEVICES` of a process (None when unreadable or unset).
pub(crate) fn visible_devices(pid: u32) -> Option<String> {
    let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    env.split(|b| *b == 0).find_map(|kv| {
        kv.strip_prefix(b"CUDA_VISIBLE_DEVICES=")
            .map(|v| String::from_utf8_lossy(v).into_owned())
    })
}

/// The GPU a rank falls back to: (index, uuid) to match, either may be unset.
fn fallback_target(rank: &RankInfo, cvd: Option<&str>) -> (Option<u32>, Option<String>) {
    let Some(cvd) = cvd.map(str::trim).filter(|s| !s.is_empty()) else {
        return (Some(rank.local_rank), None);
    };
    let entries: Vec<&str> = cvd.split(',').map(str::trim).collect();
    let entry = if entries.len() == 1 {
        entries[0]
    } else {
        match entries.get(rank.local_rank as usize) {
            Some(e) => e,
            None => return (None, None),
        }
    };
    match entry.parse::<u32>() {
        Ok(i) => (Some(i), None),
        Err(_) if entry.starts_with("GPU-") => (None, Some(entry.to_owned())),
        Err(_) => (None, None),
    }
}

/// Fills the `ranks` of each GPU sample from `ranks` (see the module docs);
/// `cvd(pid)` yields a rank's `CUDA_VISIBLE_DEVICES`.
pub(crate) fn map_ranks(
    samples: &mut [proto::GpuSample],
    ranks: &[RankInfo],
    mut cvd: impl FnMut(u32) -> Option<String>,
) {
    let mut by_pid: HashMap<u32, Vec<&RankInfo>> = HashMap::new();
    for r in ranks.iter().filter(|r| r.pid != 0) {
        by_pid.entry(r.pid).or_default().push(r);
    }
    let mut matched: HashSet<&RankInfo> = HashSet::new();
    for s in samples.iter_mut() {
        s.ranks.clear();
        let pids: Vec<u32> = s.processes.iter().map(|p| p.pid).collect();
        for pid in pids {
            for r in by_pid.get(&pid).into_iter().flatten() {
                push_rank(s, r);
                matched.insert(r);
            }
        }
    }
    for r in ranks.iter().filter(|r| !matched.contains(r)) {
        let env = if r.pid != 0 { cvd(r.pid) } else { None };
        let (index, uuid) = fallback_target(r, env.as_deref());
        let target = samples.iter_mut().find(|s| {
            index.is_some_and(|i| s.gpu_index == i) || uuid.as_deref().is_some_and(|u| s.uuid == u)
        });
        if let Some(s) = target {
            push_rank(s, r);
        }
    }
}

fn push_rank(s: &mut proto::GpuSample, r: &RankInfo) {
    let already = s
        .ranks
        .iter()
        .any(|x| x.job_id == r.job_id && x.rank == r.rank);
    if !already {
        s.ranks.push(proto::RankRef {
            job_id: r.job_id.clone(),
            rank: r.rank,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rank(rank: u32, local_rank: u32, pid: u32) -> RankInfo {
        RankInfo {
            job_id: "j".into(),
            rank,
            local_rank,
            pid,
        }
    }

    fn gpu(index: u32, pids: &[u32]) -> proto::GpuSample {
        proto::GpuSample {
            gpu_index: index,
            uuid: format!("GPU-{index}"),
            processes: pids
                .iter()
                .map(|p| proto::GpuProcess {
                    pid: *p,
                    used_memory_bytes: None,
                })
                .collect(),
            ..Default::default()
        }
    }

    fn ranks_of(s: &proto::GpuSample) -> Vec<u32> {
        s.ranks.iter().map(|r| r.rank).collect()
    }

    #[test]
    fn pid_match_wins_over_local_rank() {
        // Rank 0 (local 0) runs on GPU 1 by pid; rank 1 has no process entry
        // and falls back to its local rank 1.
        let mut s = vec![gpu(0, &[]), gpu(1, &[100]), gpu(2, &[])];
        map_ranks(&mut s, &[rank(0, 0, 100), rank(1, 1, 101)], |_| None);
        assert_eq!(ranks_of(&s[0]), Vec::<u32>::new());
        assert_eq!(ranks_of(&s[1]), [0, 1]);
        assert_eq!(ranks_of(&s[2]), Vec::<u32>::new());
    }

    #[test]
    fn cuda_visible_devices_by_index_or_uuid() {
        let mut s = vec![gpu(0, &[]), gpu(1, &[]), gpu(2, &[]), gpu(3, &[])];
        let env = |pid: u32| match pid {
            7 => Some("3".to_string()),
            8 => Some("0,2".to_string()),
            9 => Some("GPU-1".to_string()),
            _ => None,
        };
        map_ranks(
            &mut s,
            &[rank(0, 0, 7), rank(1, 1, 8), rank(2, 0, 9), rank(3, 5, 0)],
            env,
        );
        assert_eq!(ranks_of(&s[3]), [0]);
        assert_eq!(ranks_of(&s[2]), [1]);
        assert_eq!(ranks_of(&s[1]), [2]);
        // Local rank 5 has no GPU 5: unmapped.
        assert!(s.iter().all(|g| !ranks_of(g).contains(&3)));
    }

    #[test]
    fn registry_dedupes_reconnected_streams() {
        let r = RankRegistry::default();
        r.insert(1, rank(0, 0, 5));
        r.insert(2, rank(0, 0, 5));
        r.insert(3, rank(1, 1, 6));
        assert_eq!(r.ranks().len(), 2);
        r.remove(3);
        assert_eq!(r.ranks(), vec![rank(0, 0, 5)]);
    }

    #[test]
    fn own_environment_is_readable() {
        // The test process may or may not have the variable; reading it must
        // not fail either way and must match std's view.
        let ours = visible_devices(std::process::id());
        assert_eq!(ours, std::env::var("CUDA_VISIBLE_DEVICES").ok());
    }
}
