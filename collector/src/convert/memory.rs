//! The memory observations of an `AgentBatch` for the `memory_headroom`
//! alert rule (`alert::rules::memory`).
//!
//! In: a validated batch. Out: one [`MemoryObs`] per per-step device peak
//! the rank SDK sent (`MemoryPeak` with `per_step`, against its
//! `device_total_bytes`) and one per rank process in a host sample with both
//! an RSS and the host's total memory (a CPU rank's "device" is its host).
//! Traced peaks (`per_step` false) come from imported traces, not from a
//! live job, and are left out.

use rankscope_proto::v1 as proto;

use crate::alert::rules::{MemoryObs, MemorySource};

/// The memory observations of `batch`.
pub fn memory_obs(batch: &proto::AgentBatch) -> Vec<MemoryObs> {
    use proto::event::Kind;
    let mut out = Vec::new();
    for group in &batch.ranks {
        let Some(id) = group.identity.as_ref() else {
            continue;
        };
        for ev in &group.events {
            let Some(Kind::MemoryPeak(p)) = &ev.kind else {
                continue;
            };
            if !p.per_step {
                continue;
            }
            out.push(MemoryObs {
                job: id.job_id.clone(),
                rank: id.rank,
                node: if id.node.is_empty() {
                    batch.node.clone()
                } else {
                    id.node.clone()
                },
                step: Some(p.step),
                device: p.device,
                peak_bytes: p.peak_allocated_bytes.max(0) as u64,
                total_bytes: p.device_total_bytes,
                source: if p.device < 0 {
                    MemorySource::Rss
                } else {
                    MemorySource::Cuda
                },
            });
        }
    }
    for h in &batch.host_samples {
        let Some(total) = h.mem_total_bytes else {
            continue;
        };
        for p in &h.processes {
            let Some(rss) = p.rss_bytes else { continue };
            out.push(MemoryObs {
                job: p.job_id.clone(),
                rank: p.rank,
                node: batch.node.clone(),
                step: None,
                device: -1,
                peak_bytes: rss,
                total_bytes: total,
                source: MemorySource::Rss,
            });
        }
    }
    out
}
