//! Collective statistics grouped per (process group, op, dtype, size
//! bucket), job-wide or per rank.
//!
//! In: [`CollectiveObs`] of a job (any order). Out: [`CollectiveStats`] rows
//! sorted by `(process_group, op, dtype, size_bucket, rank)`.
//!
//! Definitions, per group of observations (one observation = one rank's view
//! of one call; duplicates removed by [`match_collectives`]):
//! - `calls` = observations; `collectives` = distinct `(process_group, seq)`
//!   (job-wide, an 8-rank all_reduce is 8 calls and 1 collective);
//! - `total_bytes` = Σ bytes, `avg_bytes` = total / calls (floor);
//! - `total_duration_ns` = Σ duration, `mean_duration_ns` = total / calls
//!   (floor), `p50_duration_ns` / `p99_duration_ns` = nearest-rank
//!   percentiles ([`percentile_nearest_rank`]) of the durations;
//! - `algbw_gbps` = total_bytes / total_duration_ns (nccl-tests algbw of the
//!   aggregate, i.e. the duration-weighted mean of the per-call algbw, which
//!   stays finite when single calls take 0 ns; GB = 1e9 bytes);
//! - `busbw_gbps` = Σ(bytes_i * factor(op, n_i)) / total_duration_ns, which
//!   is algbw x factor(op, n) (nccl-tests) when the group size is constant;
//!   `None` for barrier or a zero total duration;
//! - `wait_ns_total` = Σ per-call wait, `transfer_ns_total` = Σ per-call
//!   transfer (see [`match_collectives`]; PyTorch Profiler's synchronizing vs
//!   transfer time). Durations include waiting, so a straggler lowers the
//!   other ranks' algbw/busbw; `total_bytes / transfer_ns_total` is the
//!   bandwidth without it.
//!
//! Invariants: `wait_ns_total + transfer_ns_total == total_duration_ns`;
//! `p50 <= p99 <= max duration`; results do not depend on input order.

use super::matching::match_collectives;
use super::{algbw_gbps, busbw_factor, size_bucket, CollOp, CollectiveObs, SizeBucket};
use crate::stats::percentile_nearest_rank;

/// Statistics of one group of collective observations (module doc).
#[derive(Debug, Clone, PartialEq)]
pub struct CollectiveStats {
    /// Process group name.
    pub process_group: String,
    /// Operation.
    pub op: CollOp,
    /// Element type name.
    pub dtype: String,
    /// Message-size bucket of the calls.
    pub size_bucket: SizeBucket,
    /// The rank, for per-rank statistics; `None` job-wide.
    pub rank: Option<u32>,
    /// Observations (rank-level calls).
    pub calls: u64,
    /// Distinct `(process_group, seq)` collectives.
    pub collectives: u64,
    /// Σ nccl-tests size, bytes.
    pub total_bytes: u64,
    /// total_bytes / calls (floor).
    pub avg_bytes: u64,
    /// Σ duration, ns.
    pub total_duration_ns: u64,
    /// total_duration_ns / calls (floor).
    pub mean_duration_ns: u64,
    /// Nearest-rank median duration, ns.
    pub p50_duration_ns: u64,
    /// Nearest-rank 99th percentile duration, ns.
    pub p99_duration_ns: u64,
    /// total_bytes / total_duration_ns, GB/s.
    pub algbw_gbps: Option<f64>,
    /// Σ(bytes x busbw factor) / total_duration_ns, GB/s.
    pub busbw_gbps: Option<f64>,
    /// Σ time waiting for other ranks, ns.
    pub wait_ns_total: u64,
    /// Σ transfer time, ns.
    pub transfer_ns_total: u64,
}

type Key = (String, CollOp, String, SizeBucket, Option<u32>);
/// [`Key`] borrowed from the observations while grouping.
type KeyRef<'a> = (&'a str, CollOp, &'a str, SizeBucket, Option<u32>);

#[derive(Default)]
struct Acc {
    total_bytes: u64,
    bus_bytes: f64,
    durations: Vec<u64>,
    wait_ns: u64,
    transfer_ns: u64,
    collectives: u64,
    /// Index of the last match counted in `collectives`.
    last_match: Option<usize>,
}

/// Group `obs` (see the module doc); `per_rank` adds the rank to the key.
pub fn collective_stats(obs: &[CollectiveObs], per_rank: bool) -> Vec<CollectiveStats> {
    // Keys are borrowed while grouping (no string copied per observation)
    // and the participants of a call usually share the previous one's key.
    let mut slots: std::collections::HashMap<KeyRef<'_>, usize> = Default::default();
    let mut groups: Vec<(KeyRef<'_>, Acc)> = Vec::new();
    let mut last: Option<(KeyRef<'_>, usize)> = None;
    for (m_idx, m) in match_collectives(obs).iter().enumerate() {
        for p in &m.participants {
            let o = &obs[p.obs_index];
            let key: KeyRef<'_> = (
                &o.process_group,
                o.op,
                &o.dtype,
                size_bucket(o.bytes),
                per_rank.then_some(o.rank),
            );
            let slot = match last {
                Some((k, slot)) if k == key => slot,
                _ => {
                    let slot = *slots.entry(key).or_insert_with(|| {
                        groups.push((key, Acc::default()));
                        groups.len() - 1
                    });
                    last = Some((key, slot));
                    slot
                }
            };
            let acc = &mut groups[slot].1;
            acc.total_bytes += o.bytes;
            acc.bus_bytes += o.bytes as f64 * busbw_factor(o.op, o.group_size);
            acc.durations.push(p.duration_ns);
            acc.wait_ns += p.wait_ns;
            acc.transfer_ns += m.transfer_ns;
            if acc.last_match != Some(m_idx) {
                acc.last_match = Some(m_idx);
                acc.collectives += 1;
            }
        }
    }
    groups.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    groups
        .into_iter()
        .map(|((pg, op, dtype, bucket, rank), acc)| {
            finish((pg.to_owned(), op, dtype.to_owned(), bucket, rank), acc)
        })
        .collect()
}

fn finish((process_group, op, dtype, size_bucket, rank): Key, mut acc: Acc) -> CollectiveStats {
    acc.durations.sort_unstable();
    let calls = acc.durations.len() as u64;
    let total_duration_ns: u64 = acc.durations.iter().sum();
    let per_call = |total: u64| total.checked_div(calls).unwrap_or(0);
    let busbw_gbps = (op != CollOp::Barrier && total_duration_ns > 0)
        .then(|| acc.bus_bytes / total_duration_ns as f64);
    CollectiveStats {
        process_group,
        op,
        dtype,
        size_bucket,
        rank,
        calls,
        collectives: acc.collectives,
        total_bytes: acc.total_bytes,
        avg_bytes: per_call(acc.total_bytes),
        total_duration_ns,
        mean_duration_ns: per_call(total_duration_ns),
        p50_duration_ns: percentile_nearest_rank(&acc.durations, 50.0).unwrap_or(0),
        p99_duration_ns: percentile_nearest_rank(&acc.durations, 99.0).unwrap_or(0),
        algbw_gbps: if op == CollOp::Barrier {
            None
        } else {
            algbw_gbps(acc.total_bytes, total_duration_ns)
        },
        busbw_gbps,
        wait_ns_total: acc.wait_ns,
        transfer_ns_total: acc.transfer_ns,
    }
}
